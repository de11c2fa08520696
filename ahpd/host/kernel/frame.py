"""One outgoing text frame shared by every subscriber it is fanned out to.

An action is serialized once by the bus and queued for every subscriber.
What each transport writes for it (a WebSocket frame, an ndjson line) is the
same bytes for every connection of that transport: server-to-client
WebSocket frames are not masked. ``SharedFrame`` is that text (a ``str``, so
anything that reads frames as text keeps working) carrying its UTF-8 bytes,
measured once, and the encodings transports asked for, each made once at the
first connection's write and reused by the rest. The host makes these
frames and knows nothing of the encodings; a transport passes its own
encoding function and gets the cached bytes.
"""

from __future__ import annotations

from collections.abc import Callable


class SharedFrame(str):
    """A text frame and, made once each, its UTF-8 bytes and its wire encodings."""

    utf8: bytes
    _encoded: dict[Callable[[bytes], bytes], bytes]

    def __new__(cls, text: str) -> SharedFrame:
        self = super().__new__(cls, text)
        self.utf8 = text.encode()
        self._encoded = {}
        return self

    @property
    def size(self) -> int:
        """Its length in UTF-8 bytes (what a connection's queue counts)."""
        return len(self.utf8)

    def encoded(self, encode: Callable[[bytes], bytes]) -> bytes:
        """``encode(self.utf8)``, computed at the first call for this ``encode``."""
        try:
            return self._encoded[encode]
        except KeyError:
            data = self._encoded[encode] = encode(self.utf8)
            return data


class Utf8Frame:
    """A frame made as its UTF-8 bytes, in pieces, off the event loop (a
    large file's content): never held as one text, never joined. Each
    transport writes the pieces in order (a WebSocket after one header);
    ``size`` is their total, what a connection's queue counts.

    Not a ``str``: whatever would read it as text must ask for ``text()``,
    which builds the whole of it (the wire capture does)."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.size = sum(len(piece) for piece in pieces)

    def text(self) -> str:
        return b"".join(self.pieces).decode()


class NoRoom(Exception):
    """A large frame that cannot be queued now (a transport's ``room_for``): the reason."""
