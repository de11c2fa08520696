"""The bytes of a server's WebSocket text frame (RFC 6455 section 5.2).

A server's frames are never masked, so one message's frame is the same bytes
for every client: the writer builds it once per message (``SharedFrame``
caches it) and many frames go out in one write. Only complete, unfragmented
text frames are written here; the handshake, reading, ping/pong and the
close handshake stay with trio-websocket (see ``websocket``).

The header: FIN and the text opcode (0x81), then the payload length in 7
bits, or 126 and 16 bits, or 127 and 64 bits (network byte order); the mask
bit is 0.
"""

from __future__ import annotations

import struct

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
