"""Hypothesis strategies that build any model object from its annotations.

Walking the model itself (rather than hand-writing strategies) is the point:
a class added by the generator is covered by the round-trip tests at once.
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from typing import Any, Literal, Union

from hypothesis import strategies as st

from ahpd.protocol import model
from ahpd.protocol._base import CONST, SCHEMA, fields, has

MAX_DEPTH = 3
_NONE = type(None)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1000, 1000),
    st.text(max_size=6),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=4,
)


def _int(schema: dict[str, Any]) -> st.SearchStrategy[int]:
    return st.integers(schema.get("minimum", -(2**31)), schema.get("maximum", 2**31))


def for_type(tp: Any, depth: int = 0, schema: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    schema = schema or {}
    if tp is Any:
        return json_values
    if tp is str:
        return st.text(min_size=schema.get("minLength", 0), max_size=8)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return _int(schema)
    if tp == model.Number:
        if "minimum" in schema or "maximum" in schema:
            return _int(schema)
        return st.integers(-(2**40), 2**40) | st.floats(allow_nan=False, allow_infinity=False, width=32)
    if tp is _NONE:
        return st.none()
    origin = typing.get_origin(tp)
    if origin is Literal:
        return st.sampled_from(typing.get_args(tp))
    if origin is list:
        (item,) = typing.get_args(tp)
        if depth >= MAX_DEPTH:
            return st.just([])
        return st.lists(for_type(item, depth + 1), min_size=schema.get("minItems", 0), max_size=2)
    if origin is dict:
        _, item = typing.get_args(tp)
        if depth >= MAX_DEPTH:
            return st.just({})
        return st.dictionaries(st.text(max_size=4), for_type(item, depth + 1), max_size=2)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if int in args and float in args:
            args = tuple(a for a in args if a not in (int, float)) + (model.Number,)
        return st.one_of([for_type(a, depth) for a in args])
    if isinstance(tp, type) and issubclass(tp, enum.IntFlag):
        members = list(tp)
        return st.sets(st.sampled_from(members), min_size=1, max_size=2).map(
            lambda s: functools.reduce(lambda a, b: a | b, s)
        )
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if has(tp):
        return for_class(tp, depth)
    raise TypeError(f"no strategy for {tp!r}")


def for_class(cls: type, depth: int = 0) -> st.SearchStrategy[Any]:
    kwargs = {}
    for f in fields(cls):
        if f.metadata.get(CONST):
            continue
        meta = f.metadata.get(SCHEMA, {})
        if f.default is None:  # optional: absent or a value
            inner = _strip_none(f.type)
            if depth >= MAX_DEPTH:
                kwargs[f.alias] = st.none()
            else:
                kwargs[f.alias] = st.none() | for_type(inner, depth + 1, meta)
        else:
            kwargs[f.alias] = for_type(f.type, depth + 1, meta)
    return st.builds(cls, **kwargs)


def _strip_none(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not _NONE]
    return args[0] if len(args) == 1 else Union[tuple(args)]


def model_classes() -> list[type]:
    return [v for v in vars(model).values() if isinstance(v, type) and has(v)]
