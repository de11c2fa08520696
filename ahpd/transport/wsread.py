"""A client's WebSocket frames, parsed from the bytes read so far (RFC 6455 section 5).

No sockets and no tasks here: ``feed()`` bytes in, ``next()`` the next
thing they complete. ``wsconnection.WebSocketConnection`` reads its socket on
the task that asks for a message, feeds every chunk it reads here and takes
the messages out one at a time, so a chunk holding a hundred client
actions costs one read and no task switch per action. (trio-websocket
read on a task of its own, parsed with wsproto and handed each message
over a memory channel: a third of a client's action's CPU, measured.)

What ``next()`` returns:

* a ``str``: a complete text message (its fragments joined, valid UTF-8,
  within ``max_size`` bytes);
* ``Binary(size)``: a complete binary message, its payload dropped
  (AHP is text);
* ``Ping(payload)``, ``Pong(payload)``, ``Close(code, reason)``: control
  frames, also between the fragments of a message;
* ``Fail(code, reason)``: the peer broke the protocol; the connection is to
  be closed with ``code``. 1002 (protocol error) leaves the byte stream
  unreadable: ``next()`` returns the same ``Fail`` from then on. After 1009
  (a message over ``max_size``) and 1007 (a text message that is not
  UTF-8) the parser goes on, dropping data, so the peer's answer to our
  close frame can still be read;
* ``None``: more bytes are needed.

``discard()`` drops data from then on (their payloads are skipped as they
arrive, never held), for a connection waiting for the peer's close frame.

What a client must do, and is failed with 1002 for not doing: mask every
frame; set no reserved bit (no extension is negotiated); use a known opcode;
keep control frames unfragmented and within 125 bytes; start a message
before continuing one, and finish it before starting another; spell a
length in its shortest form; send a close code that may travel on the
wire. The size limit is on a message's bytes, whatever its characters, and
is checked at each frame's header, before its payload is read.

A frame waits in the buffer until it is whole, except a data frame of
``_STREAM`` bytes or more: that one is unmasked a read at a time, and a
text message in several pieces is decoded a piece at a time (an
incremental UTF-8 decoder), so a message of megabytes costs a little work
per read instead of one long pause of the event loop once it is complete,
and is never held masked and unmasked at once.

Unmasking XORs the payload with its 4-byte key: as one big integer for
small payloads (one C operation each way), with translate tables (wsproto's
trick) a quarter of the bytes at a time for large ones, where the integer's
conversions cost more (8 against 1.2 ms per MiB, measured).
"""

from __future__ import annotations

import codecs
from typing import NamedTuple

# Close codes this parser fails a connection with (RFC 6455 section 7.4.1).
PROTOCOL_ERROR = 1002
INVALID_DATA = 1007
MESSAGE_TOO_BIG = 1009
#: The code a close frame without a payload stands for (never sent).
NO_STATUS = 1005

_CONTINUATION, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
#: Close codes a peer may send: the defined ones that may travel on the wire
#: (the ones wsproto accepts) and the registered and private ranges.
_SENDABLE = frozenset((1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013))
#: From this many bytes a payload is unmasked with translate tables.
_LARGE = 4096
#: A data frame of at least this many bytes whose payload is not all read
#: yet is unmasked a read at a time: a message of megabytes then costs a
#: chunk's worth of work per read, not one long pause of the event loop at
#: its end, and is never held masked and unmasked at once.
_STREAM = 1 << 16
_utf8 = codecs.getincrementaldecoder("utf-8")
_XOR = [bytes(i ^ k for i in range(256)) for k in range(256)]


class Binary(NamedTuple):
    size: int


class Ping(NamedTuple):
    payload: bytes


class Pong(NamedTuple):
    payload: bytes


class Close(NamedTuple):
    code: int  # NO_STATUS when the frame had no payload
    reason: str


class Fail(NamedTuple):
    code: int
    reason: str


Event = str | Binary | Ping | Pong | Close | Fail


def unmask(data: bytes | bytearray | memoryview, key: bytes | bytearray) -> bytes | bytearray:
    """``data`` XOR the 4-byte ``key`` repeated (masking and unmasking alike);
    a large payload comes back as the bytearray it was unmasked in, not
    copied once more."""
    n = len(data)
    if n < _LARGE:
        if not n:
            return b""
        pad = (bytes(key) * ((n >> 2) + 1))[:n]
        return (int.from_bytes(data, "little") ^ int.from_bytes(pad, "little")).to_bytes(n, "little")
    out = bytearray(data)
    for i in range(4):
        out[i::4] = out[i::4].translate(_XOR[key[i]])
    return out


def close_payload(code: int, reason: str) -> bytes:
    """A close frame's payload: the code, then the reason cut to fit 125 bytes
    (at a character boundary, so it stays UTF-8)."""
    spelled = reason.encode()
    if len(spelled) > 123:
        spelled = spelled[:123].decode("utf-8", "ignore").encode()
    return code.to_bytes(2, "big") + spelled


class Incoming:
    """The parser of one connection's client frames (see the module's docstring)."""

    __slots__ = (
        "_buf",
        "_pos",
        "_kind",
        "_parts",
        "_decoder",
        "_bytes",
        "_size",
        "_left",
        "_key",
        "_fin",
        "_skip",
        "_discarding",
        "_failed",
        "max_size",
    )

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._pos = 0  # where the unparsed bytes of _buf begin
        self._kind = 0  # the opcode of the message in progress (0: none)
        # A fragmented (or streamed) text message is decoded piece by piece,
        # so text that is not UTF-8 fails at the piece that shows it, and no
        # piece waits for the others to be decoded.
        self._parts: list[str] = []  # its text so far
        self._decoder: codecs.IncrementalDecoder | None = None
        self._bytes = 0  # a binary message's bytes so far (dropped as they come)
        self._size = 0  # the message's bytes announced so far, for the size limit
        # A large data frame is unmasked as its bytes come (``_STREAM``):
        self._left = 0  # its payload bytes still to come
        self._key = b""  # its mask, turned to the next byte
        self._fin = False  # whether it ends its message
        self._skip = 0  # payload bytes still to drop (a frame being discarded)
        self._discarding = False
        self._failed: Fail | None = None

    @property
    def broken(self) -> bool:
        """The stream cannot be parsed any further (a protocol error)."""
        return self._failed is not None and self._failed.code == PROTOCOL_ERROR

    @property
    def buffered(self) -> int:
        """Bytes read but not yet parsed."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def discard(self) -> None:
        """Drop every data frame from now on (a message in progress too)."""
        self._discarding = True
        self._kind, self._parts, self._decoder, self._bytes, self._size = 0, [], None, 0, 0
        self._skip += self._left  # the rest of a frame being streamed
        self._left = 0

    def next(self) -> Event | None:
        """The next message, control frame or failure; None until more bytes come."""
        buf, pos = self._buf, self._pos
        have = len(buf) - pos
        # The usual frame: a whole, masked, final text frame of under 64 KiB,
        # no message in progress (nor a frame being streamed: that sets
        # _kind). Anything else takes the general path.
        if have >= 6 and buf[pos] == 0x81 and not self._kind and not self._skip and not self._discarding:
            n = buf[pos + 1] ^ 0x80  # the mask bit set, the length below it
            if n < 126:
                start = pos + 6
            elif n == 126 and have >= 8:
                n = (buf[pos + 2] << 8) | buf[pos + 3]
                start = pos + 8
                if n < 126:
                    return self._fail(PROTOCOL_ERROR, "a length in 16 bits that fits in 7")
            else:
                return self._general()
            end = start + n
            if end <= len(buf) and n <= self.max_size:
                self._pos = end
                try:
                    return unmask(memoryview(buf)[start:end], buf[start - 4 : start]).decode()
                except UnicodeDecodeError as exc:
                    return self._invalid(exc)
        return self._general()

    def _general(self) -> Event | None:
        while True:
            if self._failed is not None and (self.broken or not self._discarding):
                return self._failed
            buf, pos = self._buf, self._pos
            have = len(buf) - pos
            if self._skip:
                drop = min(self._skip, have)
                self._pos += drop
                self._skip -= drop
                if self._skip:
                    return None
                continue
            if self._left:
                take = min(self._left, have)
                if not take:
                    return None
                piece = unmask(memoryview(buf)[pos : pos + take], self._key)
                self._pos = pos + take
                self._left -= take
                turn = take & 3
                self._key = self._key[turn:] + self._key[:turn]
                event = self._piece(piece, not self._left and self._fin)
                if event is not None:
                    return event
                if self._left:
                    return None
                continue
            if have < 2:
                return None
            b0, b1 = buf[pos], buf[pos + 1]
            fin, opcode, n = b0 & 0x80, b0 & 0x0F, b1 & 0x7F
            if b0 & 0x70:
                return self._fail(PROTOCOL_ERROR, "a frame with a reserved bit set (no extension was negotiated)")
            if not b1 & 0x80:
                return self._fail(PROTOCOL_ERROR, "an unmasked frame from the client")
            head = 6
            if n == 126:
                if have < 4:
                    return None
                n, head = (buf[pos + 2] << 8) | buf[pos + 3], 8
                if n < 126:
                    return self._fail(PROTOCOL_ERROR, "a length in 16 bits that fits in 7")
            elif n == 127:
                if have < 10:
                    return None
                n, head = int.from_bytes(buf[pos + 2 : pos + 10], "big"), 14
                if n >> 63:
                    return self._fail(PROTOCOL_ERROR, "a 64-bit length with its top bit set")
                if n < 65536:
                    return self._fail(PROTOCOL_ERROR, "a length in 64 bits that fits in 16")
            if have < head:  # the mask is not all here yet
                return None
            if opcode >= _CLOSE:
                if opcode > _PONG:
                    return self._fail(PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")
                if not fin:
                    return self._fail(PROTOCOL_ERROR, "a fragmented control frame")
                if n > 125:
                    return self._fail(PROTOCOL_ERROR, f"a control frame of {n} bytes (at most 125)")
            elif opcode > _BINARY:
                return self._fail(PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")
            elif opcode == _CONTINUATION and not self._kind and not self._discarding:
                return self._fail(PROTOCOL_ERROR, "a continuation frame with no message to continue")
            elif opcode != _CONTINUATION and self._kind:
                return self._fail(PROTOCOL_ERROR, "a new message before the last one was finished")
            if opcode < _CLOSE and (self._discarding or self._size + n > self.max_size):
                self._pos = pos + head
                self._skip = n
                if self._discarding:
                    continue
                size = self._size + n
                self.discard()
                return self._fail(MESSAGE_TOO_BIG, f"frame of {size} bytes exceeds the {self.max_size}-byte limit")
            end = pos + head + n
            if len(buf) < end:
                if opcode >= _CLOSE or n < _STREAM:
                    return None
                # A large data frame: unmasked as it comes, never held whole in the buffer.
                self._pos = pos + head
                self._key = bytes(buf[pos + head - 4 : pos + head])
                self._left, self._fin = n, bool(fin)
                if opcode:
                    self._kind = opcode
                self._size += n
                continue
            self._pos = end
            payload = unmask(memoryview(buf)[pos + head : end], buf[pos + head - 4 : pos + head])
            if opcode >= _CLOSE:
                event = self._control(opcode, bytes(payload))  # at most 125 bytes: already bytes
                if event is not None:
                    return event
                continue
            if opcode:
                self._kind = opcode
            if not fin:
                self._size += n
            event = self._piece(payload, bool(fin))
            if event is not None:
                return event

    def _piece(self, payload: bytes | bytearray, last: bool) -> Event | None:
        """One more piece of the message in progress (a frame, or what came
        of a streamed one); the message once ``last``."""
        if self._kind == _BINARY:
            self._bytes += len(payload)
            if not last:
                return None
            size = self._bytes
            self._kind, self._bytes, self._size = 0, 0, 0
            return Binary(size)
        if last and self._decoder is None:  # a whole message in one frame
            self._kind, self._size = 0, 0
            try:
                return payload.decode()
            except UnicodeDecodeError as exc:
                return self._invalid(exc)
        if self._decoder is None:
            self._decoder = _utf8()
        try:
            self._parts.append(self._decoder.decode(payload, last))
        except UnicodeDecodeError as exc:
            return self._invalid(exc)
        if not last:
            return None
        text = "".join(self._parts)
        self._kind, self._parts, self._decoder, self._size = 0, [], None, 0
        return text

    def _control(self, opcode: int, payload: bytes) -> Event | None:
        if opcode == _PING:
            return Ping(payload)
        if opcode == _PONG:
            return Pong(payload)
        if not payload:
            return Close(NO_STATUS, "")
        if len(payload) == 1:
            return self._fail(PROTOCOL_ERROR, "a close frame with a 1-byte payload")
        code = int.from_bytes(payload[:2], "big")
        if code not in _SENDABLE and not 3000 <= code <= 4999:
            return self._fail(PROTOCOL_ERROR, f"a close frame with code {code}, which may not be sent")
        try:
            return Close(code, payload[2:].decode())
        except UnicodeDecodeError as exc:
            return self._invalid(exc, "a close frame's reason")

    def _invalid(self, exc: UnicodeDecodeError, what: str = "a text message") -> Fail:
        return self._fail(INVALID_DATA, f"{what} that is not UTF-8 ({exc.reason})")

    def _fail(self, code: int, reason: str) -> Fail:
        self._failed = Fail(code, reason)
        self.discard()  # also keeps next() off its quick path
        return self._failed


__all__ = ["Binary", "Close", "Event", "Fail", "Incoming", "Ping", "Pong", "close_payload", "unmask"]
