"""An ACP agent's session modes and config options, in the host's keys.

ACP offers two ways to set up a session: modes (``session/set_mode``) and
config options (``session/set_config_option``), each with a semantic
category. The host's session config has one key per thing a person picks,
the same for every backend: ``mode``, ``model``, ``effortLevel`` (the
thinking level); an option of no known category keeps its own id. Pure
functions over ACP wire JSON, so they are tested without a process.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

#: ACP config option category -> the host's key.
_CATEGORY_KEYS = {"mode": "mode", "model": "model", "thought_level": "effortLevel"}
_TITLES = {"mode": "Mode", "model": "Model", "effortLevel": "Thinking"}


def _key(option: Mapping[str, Any]) -> str:
    category = option.get("category")
    return _CATEGORY_KEYS.get(category, option.get("id", "")) if isinstance(category, str) else option.get("id", "")


def _choices(option: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for choice in option.get("options") or []:
        if isinstance(choice, Mapping) and isinstance(choice.get("options"), list):
            yield from (c for c in choice["options"] if isinstance(c, Mapping))  # a group
        elif isinstance(choice, Mapping):
            yield choice


def _options(options: Sequence[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    return {_key(o): o for o in options or [] if isinstance(o, Mapping) and o.get("id")}


def properties(
    modes: Mapping[str, Any] | None, options: Sequence[Mapping[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """``SessionConfigPropertySchema`` per key, every one changeable mid-session."""
    out: dict[str, dict[str, Any]] = {}
    if modes and modes.get("availableModes"):
        available = [m for m in modes["availableModes"] if isinstance(m, Mapping) and m.get("id")]
        out["mode"] = {
            "type": "string",
            "title": "Mode",
            "enum": [m["id"] for m in available],
            "enumLabels": [m.get("name") or m["id"] for m in available],
            "sessionMutable": True,
        }
        if all(m.get("description") for m in available):
            out["mode"]["enumDescriptions"] = [m["description"] for m in available]
        if modes.get("currentModeId"):
            out["mode"]["default"] = modes["currentModeId"]
    for key, option in _options(options).items():
        prop: dict[str, Any] = {"title": _TITLES.get(key, option.get("name") or key), "sessionMutable": True}
        if option.get("description"):
            prop["description"] = option["description"]
        if option.get("type") == "boolean":
            prop["type"] = "boolean"
        else:
            choices = list(_choices(option))
            prop.update(
                type="string",
                enum=[c.get("value") for c in choices],
                enumLabels=[c.get("name") or c.get("value") for c in choices],
            )
        if option.get("currentValue") is not None:
            prop["default"] = option["currentValue"]
        out[key] = prop
    return out


def values(modes: Mapping[str, Any] | None, options: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """What the agent runs with now, in the host's keys."""
    out: dict[str, Any] = {}
    if modes and modes.get("currentModeId"):
        out["mode"] = modes["currentModeId"]
    for key, option in _options(options).items():
        if option.get("currentValue") is not None:
            out[key] = option["currentValue"]
    return out


def request(
    key: str, value: Any, modes: Mapping[str, Any] | None, options: Sequence[Mapping[str, Any]] | None
) -> tuple[str, dict[str, Any]] | None:
    """The ACP request that sets ``key`` (method, params without the session id),
    or None when the agent offers no such setting."""
    option = _options(options).get(key)
    if option is not None:
        params: dict[str, Any] = {"configId": option["id"], "value": value}
        if option.get("type") == "boolean":
            params["type"] = "boolean"
        return "session/set_config_option", params
    if key == "mode" and modes:
        return "session/set_mode", {"modeId": value}
    return None
