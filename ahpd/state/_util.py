"""Small helpers that reproduce TypeScript spread semantics on JSON dicts.

On the wire an optional field set to `undefined` is simply absent, so every
helper here deletes a key instead of storing `None` for "no value".
"""

from __future__ import annotations

from typing import Any, Final


class _Absent:
    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final[Any] = _Absent()
"""Marks a field that must not appear in the result (TS `undefined`)."""


def present(value: Any) -> bool:
    """True when a value exists (neither absent nor JSON null)."""
    return value is not ABSENT and value is not None


def coalesce(*values: Any) -> Any:
    """The first present value, like TS `a ?? b`; ABSENT when none is."""
    for value in values:
        if present(value):
            return value
    return ABSENT


def compact(fields: dict[str, Any]) -> dict[str, Any]:
    """A new dict without the ABSENT entries."""
    return {k: v for k, v in fields.items() if v is not ABSENT}


def assign(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """`{...obj, ...fields}`, where an ABSENT field deletes the key."""
    out = dict(obj)
    for key, value in fields.items():
        if value is ABSENT:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def without(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    """A copy of `obj` without `keys`."""
    return {k: v for k, v in obj.items() if k not in keys}


def field(action: dict[str, Any], key: str) -> Any:
    """The action's value for `key`, or ABSENT when it is not carried."""
    return action.get(key, ABSENT)


def merge_config(state: dict[str, Any], action: dict[str, Any]) -> dict[str, Any]:
    """Shared `*/configChanged` rule: merge (or replace) `config.values`.

    A state without a `config` has no schema to validate against, so the
    action is ignored there.
    """
    config = state.get("config")
    if not config:
        return state
    if action.get("replace"):
        values = dict(action["config"])
    else:
        values = {**config.get("values", {}), **action["config"]}
    return {**state, "config": {**config, "values": values}}


def upsert(items: list[Any], item: Any, key: str) -> list[Any]:
    """Replace the entry whose `key` matches `item[key]`, or append `item`."""
    for i, existing in enumerate(items):
        if existing.get(key) == item.get(key):
            out = list(items)
            out[i] = item
            return out
    return [*items, item]


def index_of(items: list[Any], key: str, value: Any) -> int:
    """Index of the first entry whose `key` equals `value`, or -1."""
    for i, existing in enumerate(items):
        if existing.get(key) == value:
            return i
    return -1


def add_directory(state: dict[str, Any], directory: str) -> dict[str, Any]:
    """Append a working directory once; the same state when it is there."""
    dirs = state.get("workingDirectories") or []
    if directory in dirs:
        return state
    return {**state, "workingDirectories": [*dirs, directory]}


def remove_directory(state: dict[str, Any], directory: str) -> dict[str, Any]:
    """Drop a working directory; the same state when it is not there."""
    dirs = state.get("workingDirectories")
    if not dirs or directory not in dirs:
        return state
    return {**state, "workingDirectories": [d for d in dirs if d != directory]}
