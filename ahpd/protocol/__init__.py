"""The AHP wire model (generated from the published schemas) and its codec.

Pure: no I/O and no tasks. ``model`` holds one class per schema definition
plus the method and action tables; ``codec`` turns them into wire JSON and
back; ``strict_schema`` derives a closed JSON Schema from them; ``fields``
and ``fields_dict`` read a model class's fields (``has`` says whether a type
is one).
"""

from ahpd.protocol import model
from ahpd.protocol._base import Field, fields, fields_dict, has
from ahpd.protocol.codec import (
    DecodeError,
    decode,
    decode_action,
    decode_params,
    decode_result,
    encode,
)

__all__ = [
    "DecodeError",
    "Field",
    "decode",
    "decode_action",
    "decode_params",
    "decode_result",
    "encode",
    "fields",
    "fields_dict",
    "has",
    "model",
]
