"""The bytes of a server's WebSocket text frame (RFC 6455 section 5.2).

A server's frames are never masked, so one message's frame is the same bytes
for every client: the writer builds it once per message (``SharedFrame``
caches it) and many frames go out in one write. Only complete, unfragmented
text frames are written here; the handshake, reading, pongs and close frames
are ``wsconnection``'s, a client's frames are parsed by ``wsread``.

The header: FIN and the text opcode (0x81), then the payload length in 7
bits, or 126 and 16 bits, or 127 and 64 bits (network byte order); the mask
bit is 0.

A fan-out queues the same frames for every subscriber, and their writers
usually take the same batch one after the other, so ``BatchBytes`` joins a
batch's bytes once for all of them.

A large frame (a file's content in a ``resourceRead`` answer) is the other
way round: one connection's, megabytes long. Encoding it whole and then
prefixing its header would copy it twice more; ``text_frame_pieces``
encodes it a piece at a time instead, so writing it costs a piece's worth
of memory, not the frame's.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from ahpd.host.kernel.frame import SharedFrame

_TEXT_FIN = 0x81
_LEN16 = struct.Struct("!BBH")
_LEN64 = struct.Struct("!BBQ")


def text_frame(payload: bytes) -> bytes:
    """One unmasked, final text frame carrying ``payload`` (UTF-8 text)."""
    return _header(len(payload)) + payload


#: A frame of more characters than this is written a piece at a time
#: (``text_frame_pieces``); each piece is this many characters.
PIECE = 1 << 20


def _header(n: int) -> bytes:
    if n < 126:
        return bytes((_TEXT_FIN, n))
    if n < 65536:
        return _LEN16.pack(_TEXT_FIN, 126, n)
    return _LEN64.pack(_TEXT_FIN, 127, n)


def text_frame_pieces(text: str) -> Iterator[bytes]:
    """The bytes of ``text``'s frame, as its header and then its payload
    encoded ``PIECE`` characters at a time (joined, they are
    ``text_frame(text.encode())``). The payload's length in bytes is its
    length in characters when it is ASCII, as a file's base64 or most text
    is; otherwise it is counted a piece at a time too."""
    ends = range(0, len(text), PIECE)
    size = len(text) if text.isascii() else sum(len(text[i : i + PIECE].encode()) for i in ends)
    yield _header(size)
    for i in ends:
        yield text[i : i + PIECE].encode()


def utf8_frame_pieces(pieces: list[bytes], size: int) -> Iterator[bytes]:
    """The bytes of a frame whose payload is ``pieces`` (UTF-8, ``size``
    bytes in all): its header, then the pieces as they are."""
    yield _header(size)
    yield from pieces


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
            self._data = b"".join(
                [
                    text.encoded(text_frame) if type(text) is SharedFrame else text_frame(text.encode())
                    for text in frames
                ]
            )
            self._frames = frames
        return self._data
