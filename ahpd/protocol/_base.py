"""The few building blocks the generated model is written in.

Kept apart from the generated module so that what a field *is* (required,
optional, a constant) is decided once, here, and the codec and the strict
schema read the same metadata back.

The model's classes are plain slotted classes whose ``__init__`` is written
out by the generator, so importing the model is compiling nothing: a class
statement each. (They were attrs classes, whose methods are generated and
compiled at import; 414 of them made the model most of the daemon's
start-up.) Each class lists its fields in ``__fields__`` as
``(name, kind, extra)``: ``kind`` is :data:`REQUIRED`, :data:`OPTIONAL` or
:data:`CONST`, and ``extra`` the JSON Schema constraints of the first two
or the value of the third. The fields' Python types are the class's
annotations, resolved the first time :func:`fields` is asked for them.
"""

from __future__ import annotations

import typing
from typing import Any, ClassVar, NamedTuple, Union

#: A JSON number. Kept as int or float exactly as it arrived, so that a
#: ``serverSeq`` of 7 goes back out as ``7`` and not ``7.0``.
Number = Union[int, float]

#: Field metadata key for JSON Schema constraints (minimum, minLength, ...).
SCHEMA = "ahpd.schema"
#: Field metadata key marking a constant (discriminator) field.
CONST = "ahpd.const"

#: Field kinds in ``__fields__``.
REQUIRED, OPTIONAL, CONST_KIND = 0, 1, 2

_set = object.__setattr__


class Model:
    """An AHP object: immutable, keyword-only, compared by value."""

    __slots__: tuple[str, ...] = ()
    __fields__: ClassVar[tuple[tuple[str, int, Any], ...]] = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__ or not isinstance(other, Model):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((self.__class__, self._values()))

    def __repr__(self) -> str:
        inside = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({inside})"

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            _set(self, name, value)


class Field(NamedTuple):
    """One field of a model class, as the codec and the strict schema read it."""

    name: str
    alias: str  # the keyword ``__init__`` takes: ``_meta`` is ``meta``
    type: Any  # resolved
    default: Any  # None for an optional field, the value for a constant, NOTHING for a required one
    metadata: dict[str, Any]


class _Nothing:
    def __repr__(self) -> str:
        return "NOTHING"


#: The default of a required field.
NOTHING: Any = _Nothing()


def has(tp: Any) -> bool:
    """Whether ``tp`` is a model class."""
    return isinstance(tp, type) and issubclass(tp, Model) and tp is not Model


_FIELDS: dict[type, tuple[Field, ...]] = {}


def fields(cls: type) -> tuple[Field, ...]:
    """The fields of model class ``cls``, their annotations resolved (once, on first use)."""
    found = _FIELDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        made = []
        for name, kind, extra in cls.__fields__:  # type: ignore[attr-defined]
            if kind == CONST_KIND:
                made.append(Field(name, name.lstrip("_"), hints[name], extra, {CONST: True, SCHEMA: {}}))
            else:
                default = None if kind == OPTIONAL else NOTHING
                made.append(Field(name, name.lstrip("_"), hints[name], default, {SCHEMA: extra or {}}))
        found = _FIELDS[cls] = tuple(made)
    return found


def fields_dict(cls: type) -> dict[str, Field]:
    return {f.name: f for f in fields(cls)}
