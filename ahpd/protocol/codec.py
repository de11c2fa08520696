"""Wire JSON <-> model objects.

Two rules shape this module. What is absent stays absent: an optional field
left unset is omitted, never sent as ``null`` (no AHP field admits null),
while a constant such as an action's ``type`` is always sent. And a strict
decode names what was wrong: an undeclared key, a missing field or a value
of the wrong type is reported with its JSON path (``$.action.part.kind``),
because a host that quietly drops what it did not expect makes a client look
correct until the first conformant host refuses it.

Open bags (``_meta``, ``config.values``) are ``dict[str, Any]`` in the model
and are passed through whole.

Each type gets one decoding function, made the first time a value of it is
decoded (from the class's fields and annotations, see ``_base``) and kept:
nothing is built at import, and a type never used costs nothing. The same
functions run in a checking mode (:func:`check`) that builds no objects,
which is what ``ahpd wire-check`` asks of every frame of a capture.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

from ahpd.protocol import model
from ahpd.protocol._base import CONST, NOTHING, Model, fields, has

_NONE = type(None)
Decoder = Callable[[Any], Any]


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


def _str(value: Any) -> str:
    if value.__class__ is not str and not isinstance(value, str):
        _fail("a string", value)
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        _fail("a boolean", value)
    return value


def _int(value: Any) -> int:
    if value.__class__ is int:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail("an integer", value)
    if isinstance(value, float):
        if not value.is_integer():
            _fail("an integer", value)
        return int(value)
    return value


def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail("a number", value)
    return value


def _any(value: Any) -> Any:
    return value


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
        names = {f.name for f in fields(cls) if f.metadata.get(CONST)}
        common = names if common is None else common & names
    if not common:
        return None, {}
    tag = "type" if "type" in common else "kind" if "kind" in common else sorted(common)[0]
    by_tag: dict[Any, list[type]] = {}
    for cls in classes:
        default = next(f.default for f in fields(cls) if f.name == tag)
        by_tag.setdefault(default, []).append(cls)
    return tag, by_tag


class _Decoders:
    """The decoding functions of one mode: strict or lenient, building objects or only checking."""

    def __init__(self, *, strict: bool, build: bool, wire: bool = False) -> None:
        self.strict = strict
        self.build = build
        #: Answer what ``encode(decode(value))`` would, without the objects in between.
        self.wire = wire
        self.made: dict[Any, Decoder] = {}

    def of(self, tp: Any) -> Decoder:
        found = self.made.get(tp)
        if found is None:
            found = self.made[tp] = self._make(tp)
        return found

    def _make(self, tp: Any) -> Decoder:
        if tp is str:
            return _str
        if tp is bool:
            return _bool
        if tp is int:
            return _int
        if tp is Any:
            return _any
        if tp == model.Number or tp is float:
            return _number
        if isinstance(tp, type):
            if issubclass(tp, enum.Enum):
                return self._enum(tp)
            if has(tp):
                return self._class(tp)
        origin = typing.get_origin(tp)
        if origin is Literal:
            return self._literal(tp, exact=self.wire)
        if origin is list:
            return self._list(tp)
        if origin is dict:
            return self._dict(tp)
        if origin in (Union, types.UnionType):
            return self._union(tp)
        raise TypeError(f"no decoder for {tp!r}")

    # -- values --------------------------------------------------------------

    def _enum(self, tp: type[enum.Enum]) -> Decoder:
        if issubclass(tp, enum.IntFlag):
            flags = tp
            if self.wire:
                return lambda value: flags(_int(value)).value
            return lambda value: flags(_int(value))
        allowed = ", ".join(repr(m.value) for m in tp)
        build = self.build

        def structure(value: Any) -> Any:
            try:
                member = tp(value)
            except ValueError:
                raise ValueError(f"expected one of {allowed}, got {_short(value)}") from None
            return member if build else value

        return structure

    @staticmethod
    def _literal(tp: Any, *, exact: bool = False) -> Decoder:
        allowed = typing.get_args(tp)
        if exact:
            # ``1 in (True,)``: where no object is built, whose constructor
            # would refuse it, the value's type is compared as well.
            typed = frozenset((type(a), a) for a in allowed)

            def exactly(value: Any) -> Any:
                if value not in allowed or (type(value), value) not in typed:
                    raise ValueError(f"{value} not in literal {tp}")
                return value

            return exactly

        def structure(value: Any) -> Any:
            if value not in allowed:
                raise ValueError(f"{value} not in literal {tp}")
            return value

        return structure

    def _list(self, tp: Any) -> Decoder:
        (item_type,) = typing.get_args(tp) or (Any,)
        if item_type is Any:
            return lambda value: value if isinstance(value, list) else _fail("an array", value)
        item = self._later(item_type)

        def structure(value: Any) -> list[Any]:
            if not isinstance(value, list):
                _fail("an array", value)
            out = []
            for index, element in enumerate(value):
                try:
                    out.append(item()(element))
                except Exception as exc:  # noqa: BLE001 - re-raised with its index
                    raise _Located(f"[{index}]", exc) from None
            return out

        return structure

    def _dict(self, tp: Any) -> Decoder:
        _, item_type = typing.get_args(tp) or (str, Any)
        if item_type is Any:
            return lambda value: value if isinstance(value, dict) else _fail("an object", value)
        item = self._later(item_type)

        def structure(value: Any) -> dict[str, Any]:
            if not isinstance(value, dict):
                _fail("an object", value)
            out = {}
            for key, element in value.items():
                try:
                    out[key] = item()(element)
                except Exception as exc:  # noqa: BLE001 - re-raised with its key
                    raise _Located(_key_path(key), exc) from None
            return out

        return structure

    def _later(self, tp: Any) -> Callable[[], Decoder]:
        """The decoder of ``tp``, looked up when first needed: the model is recursive."""
        cell: list[Decoder] = []

        def get() -> Decoder:
            if not cell:
                cell.append(self.of(tp))
            return cell[0]

        return get

    # -- classes -------------------------------------------------------------

    def _class(self, cls: type) -> Decoder:
        plan: dict[str, tuple[str, Callable[[], Decoder], bool]] = {}
        required: list[str] = []
        for f in fields(cls):
            # A null is only a value where the schema's type admits anything.
            plan[f.name] = (f.alias, self._later(f.type), _admits_null(f.type))
            if f.default is NOTHING:
                required.append(f.name)
        required_set = frozenset(required)
        name = cls.__name__
        strict, build, wire = self.strict, self.build, self.wire
        # What ``encode`` writes (wire mode): the fields in declared order,
        # a constant or a required one always, an optional one when set.
        order = [(f.name, f.default is not None, f.default) for f in fields(cls)]

        def structure(value: Any) -> Any:
            if not isinstance(value, dict):
                _fail(f"an object ({name})", value)
            for key in required:
                if key not in value:
                    raise _Located(_key_path(key), ValueError(f"missing required field of {name}"))
            kwargs = {}
            for key, element in value.items():
                step = plan.get(key)
                if step is None:
                    if strict:
                        raise _Located(_key_path(key), ValueError(f"undeclared key in {name}"))
                    continue
                alias, decoder, nullable = step
                if element is None and not nullable:
                    if strict or key in required_set:
                        raise _Located(_key_path(key), ValueError("null is not allowed here; omit the key"))
                    continue
                try:
                    kwargs[key if wire else alias] = decoder()(element)
                except Exception as exc:  # noqa: BLE001 - re-raised with its key
                    raise _Located(_key_path(key), exc) from None
            if build:
                return cls(**kwargs)
            if not wire:
                return value
            out = {}
            for key, always, default in order:
                element = kwargs.get(key, NOTHING)
                if element is NOTHING:
                    if not always or default is NOTHING:
                        continue
                    element = encode(default)
                elif element is None and not always:
                    continue
                out[key] = element
            return out

        if not wire:
            return structure
        # One pass over the declared fields, in the order ``encode`` writes
        # them; whatever is wrong (a key missing, undeclared or null, a value
        # that does not fit) is left to ``structure``, which names it as a
        # decode would.
        steps = [
            (f.name, self._later(f.type), _admits_null(f.type), f.default is NOTHING, f.default is not None, f.default)
            for f in fields(cls)
        ]
        missing = NOTHING

        def wire_structure(value: Any) -> Any:
            if value.__class__ is not dict:
                return structure(value)
            out = {}
            found = 0
            try:
                for key, decoder, nullable, needed, always, default in steps:
                    element = value.get(key, missing)
                    if element is missing:
                        if needed:
                            return structure(value)
                        if always:
                            out[key] = encode(default)
                        continue
                    found += 1
                    if element is None:
                        if not nullable:
                            return structure(value)
                        if always:
                            out[key] = decoder()(element)
                        continue
                    out[key] = decoder()(element)
            except Exception:  # noqa: BLE001 - named below, as a decode names it
                return structure(value)
            if found != len(value):  # an undeclared key
                return structure(value)
            return out

        return wire_structure

    # -- unions --------------------------------------------------------------

    def _union(self, tp: Any) -> Decoder:
        args = typing.get_args(tp)
        classes = [a for a in args if has(a)]
        others = [a for a in args if not has(a) and a is not _NONE]
        if int in others and float in others:  # a Number, optional: one JSON number, no strings
            others.remove(float)
            others[others.index(int)] = model.Number
        tag, by_tag = _discriminator(classes)
        nullable = _NONE in args
        names = ", ".join(_type_name(a) for a in args)
        other_decoders = [self._later(o) for o in others]
        first_fit = self._first_fit

        def structure(value: Any) -> Any:
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
                return first_fit(value, candidates)
            for other in other_decoders:
                try:
                    return other()(value)
                except Exception:  # noqa: BLE001 - try the next member
                    continue
            _fail(f"one of {names}", value)

        return structure

    def _first_fit(self, value: dict[str, Any], candidates: list[type]) -> Any:
        if len(candidates) == 1:
            return self.of(candidates[0])(value)
        errors = []
        for cls in candidates:
            try:
                return self.of(cls)(value)
            except Exception as exc:  # noqa: BLE001 - the candidate that got furthest is re-raised below
                errors.append((cls, exc))
        # Report the candidate that got furthest: the longest path wins.
        best = max(errors, key=lambda e: len(_path_of(e[1])))[1]
        raise best


_MODES = {(strict, build): _Decoders(strict=strict, build=build) for strict in (True, False) for build in (True, False)}
_WIRE = _Decoders(strict=True, build=False, wire=True)


def _run(decoders: _Decoders, tp: Any, data: Any) -> Any:
    try:
        return decoders.of(tp)(data)
    except _Located as exc:
        raise DecodeError(_path_of(exc), str(exc.cause)) from None
    except (ValueError, TypeError, KeyError) as exc:
        raise DecodeError("$", str(exc)) from None


def decode(tp: Any, data: Any, *, strict: bool = True) -> Any:
    """Structure wire JSON ``data`` as ``tp``; raise :class:`DecodeError`."""
    return _run(_MODES[strict, True], tp, data)


def normalize(tp: Any, data: Any) -> Any:
    """``encode(decode(tp, data))``, strictly, without building the objects:
    the wire JSON a host sends for what it was sent (a client's action)."""
    return _run(_WIRE, tp, data)


def check(tp: Any, data: Any) -> None:
    """Raise :class:`DecodeError` where a strict :func:`decode` would, building nothing."""
    _run(_MODES[True, False], tp, data)


# -- encoding --------------------------------------------------------------------


def _encoder(cls: type) -> Callable[[Any], dict[str, Any]]:
    # A constant or a required field is always sent; an optional one only when set.
    plan = [(f.name, f.default is not None) for f in fields(cls)]

    def unstructure(obj: Any) -> dict[str, Any]:
        out = {}
        for name, always in plan:
            value = getattr(obj, name)
            if value is None and not always:
                continue
            out[name] = encode(value)
        return out

    return unstructure


_ENCODERS: dict[type, Callable[[Any], dict[str, Any]]] = {}
_PLAIN = frozenset({str, int, float, bool, _NONE})


def encode(obj: Any) -> Any:
    """Unstructure a model object (or a list/dict of them) into wire JSON."""
    cls = obj.__class__
    if cls in _PLAIN:
        return obj
    if isinstance(obj, Model):
        encoder = _ENCODERS.get(cls)
        if encoder is None:
            encoder = _ENCODERS[cls] = _encoder(cls)
        return encoder(obj)
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    if isinstance(obj, dict):
        return {k: encode(v) for k, v in obj.items()}
    if isinstance(obj, enum.Enum):
        return obj.value
    return obj


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
