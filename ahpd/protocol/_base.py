"""The few building blocks the generated model is written in.

Kept apart from the generated module so that what a field *is* (required,
optional, a constant) is decided once, here, and the codec and the strict
schema read the same metadata back.
"""

from __future__ import annotations

from typing import Any, Union

import attrs

#: A JSON number. Kept as int or float exactly as it arrived, so that a
#: ``serverSeq`` of 7 goes back out as ``7`` and not ``7.0``.
Number = Union[int, float]

#: Field metadata key for JSON Schema constraints (minimum, minLength, ...).
SCHEMA = "ahpd.schema"
#: Field metadata key marking a constant (discriminator) field.
CONST = "ahpd.const"


def model(cls: type) -> type:
    """An AHP object: immutable, keyword-only, compared by value."""
    return attrs.frozen(kw_only=True)(cls)


def required(schema: dict[str, Any] | None = None) -> Any:
    return attrs.field(metadata={SCHEMA: schema or {}})


def optional(schema: dict[str, Any] | None = None) -> Any:
    """An optional field: ``None`` means absent, and absent is never sent."""
    return attrs.field(default=None, metadata={SCHEMA: schema or {}})


def const(value: Any) -> Any:
    """A field fixed by the schema, such as an action's ``type``: always sent."""
    return attrs.field(
        default=value,
        validator=attrs.validators.in_((value,)),
        metadata={CONST: True, SCHEMA: {}},
    )
