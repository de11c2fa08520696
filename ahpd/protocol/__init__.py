"""The AHP wire model (generated from the published schemas) and its codec.

Pure: no I/O and no tasks. ``model`` holds one attrs class per schema
definition plus the method and action tables; ``codec`` turns them into wire
JSON and back; ``strict_schema`` derives a closed JSON Schema from them.
"""

from ahpd.protocol import model
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
    "decode",
    "decode_action",
    "decode_params",
    "decode_result",
    "encode",
    "model",
]
