"""The bytes of a server's WebSocket text frame (RFC 6455 section 5.2).

A server's frames are never masked, so one message's frame is the same bytes
for every client: the writer builds it once per message (``SharedFrame``
caches it) and many frames go out in one write. Only complete, unfragmented
text frames are written here; the handshake, reading, ping/pong and the
close handshake stay with trio-websocket (see ``websocket``).

The header: FIN and the text opcode (0x81), then the payload length in 7
bits, or 126 and 16 bits, or 127 and 64 bits (network byte order); the mask
bit is 0.

A fan-out queues the same frames for every subscriber, and their writers
usually take the same batch one after the other, so ``BatchBytes`` joins a
batch's bytes once for all of them.
"""

from __future__ import annotations

import struct

from ahpd.host.frame import SharedFrame

_TEXT_FIN = 0x81
_LEN16 = struct.Struct("!BBH")
_LEN64 = struct.Struct("!BBQ")


def text_frame(payload: bytes) -> bytes:
    """One unmasked, final text frame carrying ``payload`` (UTF-8 text)."""
    n = len(payload)
    if n < 126:
        return bytes((_TEXT_FIN, n)) + payload
    if n < 65536:
        return _LEN16.pack(_TEXT_FIN, 126, n) + payload
    return _LEN64.pack(_TEXT_FIN, 127, n) + payload


class BatchBytes:
    """The bytes of a batch of text frames, reused while the batches asked for are equal.

    Shared by the connections of one server. The comparison is of the texts
    (identical objects compare at once), and equal texts are equal bytes, so
    a reuse is never wrong, only sometimes missed.
    """

    def __init__(self) -> None:
        self._frames: list[str] = []
        self._data = b""

    def of(self, frames: list[str]) -> bytes:
        if frames != self._frames:
            self._data = b"".join([text.encoded(text_frame) if type(text) is SharedFrame
                                   else text_frame(text.encode()) for text in frames])
            self._frames = frames
        return self._data
