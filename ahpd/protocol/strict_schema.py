"""A closed JSON Schema, generated from our own model.

The published schemas leave every object open, so a field under the wrong
name, or beside its object rather than inside it, validates there and is
still unreadable to a client. This schema is built by walking the
model, not by copying the published one, and closes every object
(``additionalProperties: false``) except the declared open bags such as
``_meta``. It is therefore also a check on the model: whatever the model
would send, this schema says.

Selection tables sit beside ``$defs``: ``actions`` by ``type``, ``commands``
and ``serverCommands`` by method (``params`` and ``result``), and
``notifications`` / ``clientNotifications`` by method.
"""

from __future__ import annotations

import enum
import functools
import json
import types
import typing
from typing import Any, Literal, Union


from ahpd.protocol import model
from ahpd.protocol._base import CONST, SCHEMA, fields, has

SCHEMA_ID = "urn:ahpd:ahp-strict"
_NONE = type(None)


def _union_names() -> dict[Any, str]:
    """Named unions of the model (``StateAction``...), so they stay named."""
    names: dict[Any, str] = {}
    for name, value in vars(model).items():
        if typing.get_origin(value) in (Union, types.UnionType) and value != model.Number:
            names.setdefault(value, name)
    return names


class _Builder:
    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}
        self.union_names = _union_names()

    def ref(self, name: str) -> dict[str, Any]:
        return {"$ref": f"#/$defs/{name}"}

    def of(self, tp: Any) -> dict[str, Any]:
        if tp is Any:
            return {}
        if tp is str:
            return {"type": "string"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float or tp == model.Number:
            return {"type": "number"}
        if tp is _NONE:
            return {"type": "null"}
        origin = typing.get_origin(tp)
        if origin is Literal:
            values = list(typing.get_args(tp))
            return {"const": values[0]} if len(values) == 1 else {"enum": values}
        if origin is list:
            (item,) = typing.get_args(tp)
            return {"type": "array", "items": self.of(item)}
        if origin is dict:
            _, item = typing.get_args(tp)
            if item is Any:
                return {"type": "object"}  # an open bag
            return {"type": "object", "additionalProperties": self.of(item)}
        if origin in (Union, types.UnionType):
            return self.union(tp)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return self.enum(tp)
        if has(tp):
            return self.cls(tp)
        raise TypeError(f"no schema for {tp!r}")

    def union(self, tp: Any) -> dict[str, Any]:
        name = self.union_names.get(tp)
        if name and name not in self.defs:
            self.defs[name] = {}  # reserve against recursion
            self.defs[name] = self.members(tp)
        return self.ref(name) if name else self.members(tp)

    def members(self, tp: Any) -> dict[str, Any]:
        args = list(typing.get_args(tp))
        if int in args and float in args:  # a flattened Number
            args.remove(float)
            args[args.index(int)] = model.Number
        return {"anyOf": [self.of(a) for a in args]}

    def enum(self, tp: type[enum.Enum]) -> dict[str, Any]:
        name = tp.__name__
        if name not in self.defs:
            if issubclass(tp, enum.IntFlag):
                # A set of bits: any combination of the members is a value.
                self.defs[name] = {"type": "integer", "minimum": 0}
            elif issubclass(tp, enum.IntEnum):
                self.defs[name] = {"type": "integer", "enum": [m.value for m in tp]}
            else:
                self.defs[name] = {"type": "string", "enum": [m.value for m in tp]}
        return self.ref(name)

    def cls(self, tp: type) -> dict[str, Any]:
        name = tp.__name__
        if name not in self.defs:
            self.defs[name] = {}  # reserve against recursion
            properties = {}
            required = []
            for f in fields(tp):
                ftype = f.type
                optional = f.default is None and not f.metadata.get(CONST)
                if optional and typing.get_origin(ftype) in (Union, types.UnionType):
                    rest = [a for a in typing.get_args(ftype) if a is not _NONE]
                    ftype = rest[0] if len(rest) == 1 else Union[tuple(rest)]
                prop = {**self.of(ftype), **f.metadata.get(SCHEMA, {})}
                properties[f.name] = prop
                if not optional:
                    required.append(f.name)
            schema: dict[str, Any] = {
                "type": "object",
                "properties": properties,
                "additionalProperties": False,
            }
            if required:
                schema["required"] = required
            self.defs[name] = schema
        return self.ref(name)


@functools.cache
def strict_schema() -> dict[str, Any]:
    """The whole strict schema (cached; treat it as read-only)."""
    b = _Builder()

    def result(cls: Any) -> dict[str, Any]:
        return b.of(cls) if cls is not None else {"type": "null"}

    actions = {t: b.of(cls) for t, cls in model.ACTIONS.items()}
    commands = {m: {"params": b.of(p), "result": result(r)} for m, (p, r) in model.COMMANDS.items()}
    server_commands = {m: commands[m] for m in model.SERVER_COMMANDS}
    client_notifications = {m: b.of(p) for m, p in model.CLIENT_NOTIFICATIONS.items()}
    notifications = {m: b.of(p) for m, p in model.SERVER_NOTIFICATIONS.items()}
    # Every other definition of the model, so every state type is named.
    for value in vars(model).values():
        if isinstance(value, type) and (has(value) or issubclass(value, enum.Enum)):
            b.of(value)
    for union in b.union_names:
        b.of(union)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "AHP wire shapes, closed (generated by ahpd from its model)",
        "actions": actions,
        "commands": commands,
        "serverCommands": server_commands,
        "clientNotifications": client_notifications,
        "notifications": notifications,
        "experimental": sorted(model.EXPERIMENTAL),
        "$defs": dict(sorted(b.defs.items())),
    }


def render() -> str:
    """The schema as committed to ``conformance/schema/ahp-strict.schema.json``."""
    return json.dumps(strict_schema(), indent=2, ensure_ascii=False) + "\n"


@functools.cache
def validator(pointer: str) -> Any:
    """A jsonschema validator for one entry, e.g. ``/actions/chat~1delta``
    or ``/commands/initialize/params`` or ``/$defs/RootState``."""
    import jsonschema

    doc = strict_schema()
    return jsonschema.Draft202012Validator(
        {
            "$ref": "#" + pointer,
            **{"$defs": doc["$defs"]},
            **{k: doc[k] for k in ("actions", "commands", "serverCommands", "clientNotifications", "notifications")},
        }
    )
