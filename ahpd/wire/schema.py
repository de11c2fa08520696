"""Validating one payload against the strict schema, fast.

The strict schema (``ahpd.protocol.strict_schema``) is the authority, but
jsonschema takes about a millisecond per action envelope, because the
envelope's action is an ``anyOf`` over every action type: far too slow for a
100 MB capture. Our strict codec is generated from the same model and says
the same thing in microseconds, with a precise path. So the codec answers
first; only a payload it refuses goes to the jsonschema validator, which
decides, and the problem is reported with the codec's path and reason (the
schema's own error under an ``anyOf`` names the union, not the field).
A test holds the two to agreeing over every frame of the conformance capture
and over mutations of them.

Before either, the generated yes-or-no functions of ``ahpd.protocol.fits``
(never more lenient than the codec) pass the frames that fit, which is
nearly all of them, in a fraction of the codec's time; the codec, which
builds nothing here (``codec.check``), is asked only about the rest.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ahpd.protocol import DecodeError, codec, fits, model
from ahpd.protocol.strict_schema import validator

#: Where a payload's type lives: (schema pointer, model class or None for "must be null").
Target = tuple[str, Any]


def _escape(method: str) -> str:
    return method.replace("~", "~0").replace("/", "~1")


@functools.cache
def target(table: str, method: str, part: str = "") -> Target | None:
    """The schema pointer and model class of ``table``'s ``method`` (``part`` is
    ``params`` or ``result`` for the two command tables); None if undeclared."""
    if table in ("commands", "serverCommands"):
        entry = (model.COMMANDS if table == "commands" else model.SERVER_COMMANDS).get(method)
        if entry is None:
            return None
        return f"/{table}/{_escape(method)}/{part}", entry[0 if part == "params" else 1]
    cls = (model.CLIENT_NOTIFICATIONS if table == "clientNotifications" else model.SERVER_NOTIFICATIONS).get(method)
    return None if cls is None else (f"/{table}/{_escape(method)}", cls)


def _is_null(value: Any) -> bool:
    return value is None


def quick(where: Target) -> Callable[[Any], bool] | None:
    """The generated yes-or-no function for ``where`` (True: it fits; False: ask
    ``problems``), for a caller that checks many payloads against one target;
    None where there is none."""
    cls = where[1]
    return _is_null if cls is None else fits.BY_CLASS.get(cls)


def problems(where: Target, value: Any) -> list[tuple[str, str]]:
    """``(json path below the value, reason)`` for each way ``value`` breaks the
    schema at ``where``; empty when it fits."""
    pointer, cls = where
    if cls is None:
        return [] if value is None else [("$", "must be null: the command has no result")]
    quick = fits.BY_CLASS.get(cls)
    if quick is not None and quick(value):
        return []
    try:
        codec.check(cls, value)
        return []
    except DecodeError as err:
        first = (err.path, err.reason)
    errors = list(validator(pointer).iter_errors(value))
    if not errors:
        return []  # the schema is the authority; the codec was stricter
    return [first]
