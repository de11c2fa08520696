"""What the Claude Code CLI says about itself when it starts: the models it
offers and the slash commands and skills it has, in the protocol's words.
Read at the boot probe and by every conversation's CLI; apart from the
stream translation (``wire``), which a turn runs through.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ahpd.backends.port import SKILL_META

_EFFORTS = ("low", "medium", "high", "xhigh", "max")


def models_from_init(provider: str, models: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """``initialize``'s ``models`` -> ``SessionModelInfo``; a model's
    ``configSchema.thinkingLevel`` from its own supported effort levels."""
    out = []
    for model in models or []:
        value = model.get("value")
        if not isinstance(value, str) or not value:
            continue
        info: dict[str, Any] = {"id": value, "provider": provider, "name": model.get("displayName") or value}
        levels = [lvl for lvl in (model.get("supportedEffortLevels") or []) if isinstance(lvl, str)]
        if model.get("supportsEffort") and levels:
            info["configSchema"] = {
                "type": "object",
                "properties": {
                    "thinkingLevel": {
                        "type": "string",
                        "title": "Thinking",
                        "enum": levels,
                        "enumLabels": [lvl.capitalize() if lvl != "xhigh" else "Extra high" for lvl in levels],
                    }
                },
            }
        meta = {k: model[k] for k in ("resolvedModel", "description") if isinstance(model.get(k), str)}
        if meta:
            info["_meta"] = {f"ahpd.{k}": v for k, v in meta.items()}
        out.append(info)
    return out


def available_commands(
    commands: Iterable[Mapping[str, Any]] | None,
    skills: Iterable[str] | None = None,
) -> list[dict[str, Any]]:
    """``initialize``'s ``commands`` -> ACP ``AvailableCommand`` wire JSON.

    ``initialize`` does not say which commands are skills; the ``init``
    system message of a turn does (its ``skills``). A command named there is
    marked ``_meta["ahpd.skill"]``."""
    skill_names = set(skills or ())
    out = []
    for command in commands or []:
        name = command.get("name")
        if not isinstance(name, str) or not name:
            continue
        entry: dict[str, Any] = {"name": name, "description": command.get("description") or ""}
        hint = command.get("argumentHint")
        if isinstance(hint, str) and hint:
            entry["input"] = {"hint": hint}
        if name in skill_names:
            entry["_meta"] = {SKILL_META: True}
        out.append(entry)
    return out
