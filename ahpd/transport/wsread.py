"""A client's WebSocket frames, parsed from the bytes read so far (RFC 6455 section 5).

No sockets and no tasks here: ``feed()`` bytes in, ``next()`` the next
thing they complete. ``websocket.WebSocketConnection`` reads its socket on
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
wire. The size limit is on a message's bytes, whatever its characters.

Unmasking XORs the payload with its 4-byte key: as one big integer for
small payloads (one C operation each way), with wsproto's translate tables
a quarter of the bytes at a time for large ones, where the integer's
conversions cost more.
"""

from __future__ import annotations

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
#: A buffer larger than this is dropped once everything in it is parsed,
#: rather than kept for the next small frames.
_KEEP = 1 << 20
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

    __slots__ = ("_buf", "_pos", "_kind", "_parts", "_size", "_skip", "_discarding", "_failed", "max_size")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._pos = 0  # where the unparsed bytes of _buf begin
        self._kind = 0  # the opcode of the message in progress (0: none)
        self._parts: list[bytes | bytearray] = []  # its fragments so far, unmasked
        self._size = 0  # their bytes
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
        self._kind, self._parts, self._size = 0, [], 0

    def next(self) -> Event | None:
        """The next message, control frame or failure; None until more bytes come."""
        buf, pos = self._buf, self._pos
        have = len(buf) - pos
        # The usual frame: a whole, masked, final text frame of under 64 KiB,
        # no message in progress. Anything else takes the general path.
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
                return None
            self._pos = end
            payload = unmask(memoryview(buf)[pos + head : end], buf[pos + head - 4 : pos + head])
            if end == len(buf) and end > _KEEP:  # a large frame, all read: its buffer goes with it
                self._buf, self._pos = bytearray(), 0
            if opcode >= _CLOSE:
                event = self._control(opcode, bytes(payload))  # at most 125 bytes: already bytes
                if event is not None:
                    return event
                continue
            if opcode:
                self._kind = opcode
            if not fin:
                self._parts.append(payload)
                self._size += n
                continue
            kind = self._kind
            if self._parts:
                self._parts.append(payload)
                payload = b"".join(self._parts)
            self._kind, self._parts, self._size = 0, [], 0
            if kind == _BINARY:
                return Binary(len(payload))
            try:
                return payload.decode()
            except UnicodeDecodeError as exc:
                return self._invalid(exc)

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
        return self._fail(INVALID_DATA, f"{what} that is not UTF-8 (byte {exc.start})")

    def _fail(self, code: int, reason: str) -> Fail:
        self._failed = Fail(code, reason)
        self.discard()  # also keeps next() off its quick path
        return self._failed


__all__ = ["Binary", "Close", "Event", "Fail", "Incoming", "Ping", "Pong", "close_payload", "unmask"]
