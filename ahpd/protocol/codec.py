"""Wire JSON <-> model objects, through cattrs.

Two rules shape this module. What is absent stays absent: an optional field
left unset is omitted, never sent as ``null`` (no AHP field admits null),
while a constant such as an action's ``type`` is always sent. And a strict
decode names what was wrong: an undeclared key, a missing field or a value
of the wrong type is reported with its JSON path (``$.action.part.kind``),
because a host that quietly drops what it did not expect makes a client look
correct until the first conformant host refuses it.

Open bags (``_meta``, ``config.values``) are ``dict[str, Any]`` in the model
and are passed through whole.
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from typing import Any, Literal, Union

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.preconf.json import make_converter

from ahpd.protocol import model
from ahpd.protocol._base import CONST

_NONE = type(None)


class DecodeError(ValueError):
    """A value that does not fit the model; ``path`` says where (``$`` is the top)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{reason} at {path}")
        self.path = path
        self.reason = reason


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _fail(expected: str, value: Any) -> typing.NoReturn:
    raise ValueError(f"expected {expected}, got {type(value).__name__} {_short(value)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- primitives: JSON types only, no coercion ----------------------------------


def _str(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        _fail("a string", value)
    return value


def _bool(value: Any, _: Any) -> bool:
    if not isinstance(value, bool):
        _fail("a boolean", value)
    return value


def _int(value: Any, _: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail("an integer", value)
    if isinstance(value, float):
        if not value.is_integer():
            _fail("an integer", value)
        return int(value)
    return value


def _number(value: Any, _: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail("a number", value)
    return value


def _any(value: Any, _: Any) -> Any:
    return value


class _Converter:
    """One cattrs converter, strict (undeclared keys refused) or lenient."""

    def __init__(self, *, strict: bool) -> None:
        self.strict = strict
        c = self.c = make_converter(forbid_extra_keys=strict, prefer_attrib_converters=False)
        # By class (most specific wins): an IntFlag is an int as well, and
        # a bool is an int to Python but never to JSON.
        c.register_structure_hook(str, _str)
        c.register_structure_hook(bool, _bool)
        c.register_structure_hook(int, _int)
        for base in (enum.Enum, enum.StrEnum, enum.IntEnum, enum.IntFlag):
            c.register_structure_hook(base, self._structure_enum)
        c.register_structure_hook_func(lambda t: t == model.Number, _number)
        c.register_structure_hook_func(lambda t: t is Any, _any)
        c.register_structure_hook_func(self._is_list, self._structure_list)
        c.register_structure_hook_func(self._is_dict, self._structure_dict)
        c.register_structure_hook_factory(lambda t: _is_union(t) and t != model.Number, self._union_hook)
        c.register_structure_hook_factory(attrs.has, self._class_hook)
        c.register_unstructure_hook_factory(attrs.has, self._unstructure_hook)

    # -- containers ----------------------------------------------------------

    @staticmethod
    def _is_list(tp: Any) -> bool:
        return typing.get_origin(tp) is list

    def _structure_list(self, value: Any, tp: Any) -> list[Any]:
        if not isinstance(value, list):
            _fail("an array", value)
        (item,) = typing.get_args(tp) or (Any,)
        out = []
        for index, element in enumerate(value):
            try:
                out.append(self.c.structure(element, item))
            except Exception as exc:  # noqa: BLE001 - re-raised with its index
                raise _Located(f"[{index}]", exc) from None
        return out

    @staticmethod
    def _is_dict(tp: Any) -> bool:
        return typing.get_origin(tp) is dict

    def _structure_dict(self, value: Any, tp: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            _fail("an object", value)
        _, item = typing.get_args(tp) or (str, Any)
        if item is Any:
            return value
        out = {}
        for key, element in value.items():
            try:
                out[key] = self.c.structure(element, item)
            except Exception as exc:  # noqa: BLE001 - re-raised with its key
                raise _Located(_key_path(key), exc) from None
        return out

    @staticmethod
    def _structure_enum(value: Any, tp: type[enum.Enum]) -> enum.Enum:
        if issubclass(tp, enum.IntFlag):
            return tp(_int(value, None))
        try:
            return tp(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in tp)
            raise ValueError(f"expected one of {allowed}, got {_short(value)}") from None

    # -- classes -------------------------------------------------------------

    def _class_hook(self, cls: type) -> Any:
        fields = attrs.fields(cls)
        required = [f.name for f in fields if f.default is attrs.NOTHING]
        by_name = {f.name: f for f in fields}
        # A null is only a value where the schema's type admits anything.
        nullable = {f.name for f in fields if _admits_null(f.type)}
        name = cls.__name__
        strict = self.strict
        # Each field's hook, found once (at its first use: a class may hold
        # itself) instead of dispatched on the field's type at every value.
        hooks: dict[str, Any] = {}
        get_hook = self.c.get_structure_hook

        def structure(value: Any, _: Any) -> Any:
            if not isinstance(value, dict):
                _fail(f"an object ({name})", value)
            for key in required:
                if key not in value:
                    raise _Located(_key_path(key), ValueError(f"missing required field of {name}"))
            kwargs = {}
            for key, element in value.items():
                f = by_name.get(key)
                if f is None:
                    if strict:
                        raise _Located(_key_path(key), ValueError(f"undeclared key in {name}"))
                    continue
                if element is None and key not in nullable:
                    if strict or key in required:
                        raise _Located(_key_path(key), ValueError("null is not allowed here; omit the key"))
                    continue
                hook = hooks.get(key)
                if hook is None:
                    hook = hooks[key] = get_hook(f.type)
                try:
                    kwargs[f.alias] = hook(element, f.type)
                except Exception as exc:  # noqa: BLE001 - re-raised with its key
                    raise _Located(_key_path(key), exc) from None
            return cls(**kwargs)

        return structure

    def _unstructure_hook(self, cls: type) -> Any:
        consts = {f.name: override(omit_if_default=False) for f in attrs.fields(cls) if f.metadata.get(CONST)}
        # mypy checks a spread dict against every keyword, the bool flags too; the keys here are
        # field names, which cattrs takes as AttributeOverrides.
        return make_dict_unstructure_fn(cls, self.c, _cattrs_omit_if_default=True, **consts)  # type: ignore[arg-type]

    # -- unions --------------------------------------------------------------

    def _union_hook(self, tp: Any) -> Any:
        args = typing.get_args(tp)
        classes = [a for a in args if attrs.has(a)]
        others = [a for a in args if not attrs.has(a) and a is not _NONE]
        tag, by_tag = _discriminator(classes)
        nullable = _NONE in args

        def structure(value: Any, _: Any) -> Any:
            if value is None and nullable:
                return None
            if isinstance(value, dict) and classes:
                candidates = classes
                if tag is not None:
                    if tag not in value:
                        raise _Located(_key_path(tag), ValueError("missing discriminator"))
                    candidates = by_tag.get(value[tag], [])
                    if not candidates:
                        known = ", ".join(repr(k) for k in by_tag)
                        raise _Located(
                            _key_path(tag),
                            ValueError(f"unknown {tag} {_short(value[tag])}; expected one of {known}"),
                        )
                return self._first_fit(value, candidates)
            for other in others:
                try:
                    return self.c.structure(value, other)
                except Exception:  # noqa: BLE001 - try the next member
                    continue
            names = ", ".join(_type_name(a) for a in args)
            _fail(f"one of {names}", value)

        return structure

    def _first_fit(self, value: dict[str, Any], candidates: list[type]) -> Any:
        if len(candidates) == 1:
            return self.c.structure(value, candidates[0])
        errors = []
        for cls in candidates:
            try:
                return self.c.structure(value, cls)
            except Exception as exc:  # noqa: BLE001 - the candidate that got furthest is re-raised below
                errors.append((cls, exc))
        # Report the candidate that got furthest: the longest path wins.
        best = max(errors, key=lambda e: len(_path_of(e[1])))[1]
        raise best


class _Located(Exception):
    """An error on its way out, collecting the path segments it passed."""

    def __init__(self, segment: str, cause: BaseException) -> None:
        self.segments: list[str]
        if isinstance(cause, _Located):
            self.segments = [segment, *cause.segments]
            self.cause: BaseException = cause.cause
        else:
            self.segments = [segment]
            self.cause = cause
        super().__init__(str(self.cause))


def _path_of(exc: BaseException) -> str:
    return "$" + "".join(exc.segments) if isinstance(exc, _Located) else "$"


def _key_path(key: str) -> str:
    return f".{key}" if key.isidentifier() else f"[{key!r}]"


def _admits_null(tp: Any) -> bool:
    return tp is Any or (_is_union(tp) and Any in typing.get_args(tp))


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _discriminator(classes: list[type]) -> tuple[str | None, dict[Any, list[type]]]:
    """The constant field every class carries, and the classes per value."""
    if len(classes) < 2:
        return None, {}
    common = None
    for cls in classes:
        names = {f.name for f in attrs.fields(cls) if f.metadata.get(CONST)}
        common = names if common is None else common & names
    if not common:
        return None, {}
    tag = "type" if "type" in common else "kind" if "kind" in common else sorted(common)[0]
    by_tag: dict[Any, list[type]] = {}
    for cls in classes:
        by_tag.setdefault(attrs.fields_dict(cls)[tag].default, []).append(cls)
    return tag, by_tag


@functools.cache
def _converter(strict: bool) -> _Converter:
    return _Converter(strict=strict)


def decode(tp: Any, data: Any, *, strict: bool = True) -> Any:
    """Structure wire JSON ``data`` as ``tp``; raise :class:`DecodeError`."""
    try:
        return _converter(strict).c.structure(data, tp)
    except _Located as exc:
        raise DecodeError(_path_of(exc), str(exc.cause)) from None
    except (ValueError, TypeError, KeyError, cattrs.BaseValidationError) as exc:
        raise DecodeError("$", str(exc)) from None


def encode(obj: Any) -> Any:
    """Unstructure a model object (or a list/dict of them) into wire JSON."""
    return _converter(True).c.unstructure(obj)


def decode_action(data: Any, *, strict: bool = True) -> Any:
    """A state action, selected by its ``type``."""
    if not isinstance(data, dict):
        raise DecodeError("$", f"expected an action object, got {_short(data)}")
    kind = data.get("type")
    cls = model.ACTIONS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise DecodeError("$.type", f"unknown action type {_short(kind)}")
    return decode(cls, data, strict=strict)


def decode_params(method: str, data: Any, *, strict: bool = True) -> Any:
    """The params of a command or client notification, selected by method."""
    if method in model.COMMANDS:
        cls = model.COMMANDS[method][0]
    elif method in model.CLIENT_NOTIFICATIONS:
        cls = model.CLIENT_NOTIFICATIONS[method]
    elif method in model.SERVER_NOTIFICATIONS:
        cls = model.SERVER_NOTIFICATIONS[method]
    else:
        raise KeyError(method)
    return decode(cls, {} if data is None else data, strict=strict)


def decode_result(method: str, data: Any, *, strict: bool = True) -> Any:
    """The result of a command, selected by method; ``null`` for void ones."""
    cls = model.COMMANDS[method][1]
    if cls is None:
        if data is not None:
            raise DecodeError("$", f"{method} has no result, got {_short(data)}")
        return None
    return decode(cls, data, strict=strict)
