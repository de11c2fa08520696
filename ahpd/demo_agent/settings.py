"""The demo agent's settings: a model, a thinking level, and where it works.

A real agent offers a model picker and a thinking level as ACP session
config options and reads more than one directory when its client grants
them; the demo agent does the same so that a host's way of reaching them can
be tested without a model. It keeps them per session, in memory: a host that
loads a conversation again sets what it wants again.

Trigger words (case-insensitive, anywhere in a prompt; handled before the
turn's script runs):

* ``mode <id>``: the agent switches its own session mode and says so with
  ``current_mode_update``, the way an agent leaves plan mode by itself;
* ``settings``: the reply opens with one line naming the model, thinking
  level, mode, working directory and additional directories the agent has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ahpd.demo_agent.shapes import Json, select_option

#: The models offered: id, name.
MODELS: tuple[tuple[str, str], ...] = (("demo-swift", "Demo Swift"), ("demo-deep", "Demo Deep"))
#: The thinking levels offered.
EFFORTS: tuple[str, ...] = ("low", "medium", "high")
MODEL_OPTION = "model"
EFFORT_OPTION = "thinking"

_MODE = re.compile(r"\bmode[ \t]+([A-Za-z][\w-]*)", re.IGNORECASE)
_SETTINGS = re.compile(r"\bsettings\b", re.IGNORECASE)


@dataclass
class Settings:
    model: str = MODELS[0][0]
    effort: str = "medium"
    additional: list[str] = field(default_factory=list)


def options(settings: Settings) -> list[Json]:
    """The session's config options as ACP says them, with their current values."""
    return [
        select_option(MODEL_OPTION, "Model", "model", settings.model, list(MODELS)),
        select_option(
            EFFORT_OPTION, "Thinking", "thought_level", settings.effort, [(v, v.capitalize()) for v in EFFORTS]
        ),
    ]


def set_option(settings: Settings, config_id: str, value: Any) -> str | None:
    """Apply one option; the reason it is refused, or None."""
    if config_id == MODEL_OPTION:
        if value not in {v for v, _ in MODELS}:
            return f"the demo agent has no model {value!r}; it has {', '.join(v for v, _ in MODELS)}"
        settings.model = value
        return None
    if config_id == EFFORT_OPTION:
        if value not in EFFORTS:
            return f"the demo agent has no thinking level {value!r}; it has {', '.join(EFFORTS)}"
        settings.effort = value
        return None
    return f"the demo agent has no setting {config_id!r}"


def mode_asked(prompt: str) -> str | None:
    """The mode a prompt's ``mode <id>`` asks for, if any."""
    found = _MODE.search(prompt)
    return found.group(1).lower() if found else None


def settings_asked(prompt: str) -> bool:
    return _SETTINGS.search(prompt) is not None


def describe(settings: Settings, mode: str, cwd: str) -> str:
    extra = ", ".join(settings.additional) or "none"
    return (
        f"Settings: model {settings.model}, thinking {settings.effort}, mode {mode}, "
        f"cwd {cwd}, additional directories {extra}.\n\n"
    )
