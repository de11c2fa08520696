"""One WebSocket connection (RFC 6455) after its request head was admitted.

``websocket.py`` owns the listener and the door (who may upgrade); this
module owns what follows: the handshake's answer (wsproto's ``H11Handshake``,
so the 101 is what wsproto spells), reading the client's messages, and
writing ours.

Reading: ``receive()`` runs on the host's task for this client. It reads a
chunk of up to ``RECEIVE_BYTES`` from the socket, ``wsread.Incoming``
parses every whole frame in it, and the messages are handed out one at a
time from what is held: a chunk of a hundred client actions costs one
read, no task switch and no cancel scope per action. Only a real wait for
the socket goes through ``Connection.receive``'s cancel scope, which
``close()`` cancels. The same task answers a ping (a pong, between a
message's fragments too), answers the peer's close frame (echoing its code)
and ends the connection with that code, ignores a binary message with a
log line, and fails the connection when the peer breaks the protocol: 1002,
1007 for text that is not UTF-8, 1009 (the reason naming the limit) for a
message over ``max_message_size`` bytes. Until 2026-12 trio-websocket read
on a task of its own and passed each message over a memory channel; that,
wsproto's frame parsing and a cancel scope per message were a third of the
CPU of a client's action (benchmarks/README.md, dispatch_bench.py). The
parser is ours, not wsproto's ``Connection`` driven the same way: measured
on that path (2026-12-05), wsproto's cost 50 us of CPU per action against
35 us with ours (``benchmarks/wsread_bench.py``: 9.3 against 1.8 us to
parse one 250-byte message). After ``BURST`` messages handed out from one
chunk the task lets the others run, so a chunk of thousands of tiny
messages does not hold the event loop.

Writing: the writer writes data frames itself (``frames.text_frame``): a
fanned-out action's frame bytes are built once (``SharedFrame``), each
batch the writer takes goes out in one ``send_all``, and a batch of the
same frames as the connection before it reuses its bytes
(``frames.BatchBytes``). Control frames (a pong, the close frame) go
through the same stream object, whose write lock keeps them from
interleaving mid-frame; nothing is written after our close frame.

Closing: our close frame (after what was queued), then the peer's answer
read (data meanwhile dropped unparsed) within the close deadline, then the
TCP connection closed (the server closes first, RFC 6455 section 7.1.1).
After the peer's close frame: our answer, then the TCP close. When the
peer vanished, or its bytes can no longer be parsed (1002), we half-close
and drain briefly (``_linger_close``) so that our last bytes are not lost
to a reset.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

import trio
from wsproto import ConnectionType
from wsproto.events import AcceptConnection, Request
from wsproto.handshake import H11Handshake

from ahpd.host.kernel.frame import SharedFrame, Utf8Frame
from ahpd.transport.base import (
    ABNORMAL,
    NORMAL,
    Connection,
    PeerGone,
    QueueBudget,
    WriteGate,
    logger,
)
from ahpd.transport.frames import PIECE, BatchBytes, text_frame_pieces, utf8_frame_pieces
from ahpd.transport.wsread import NO_STATUS, Binary, Close, Event, Fail, Incoming, Ping, close_payload

#: What one read from a client's socket asks for: a chunk of many small
#: messages parsed at once, a large frame (a ``resourceWrite`` of megabytes)
#: in few reads.
RECEIVE_BYTES = 64 * 1024
#: Messages ``receive`` hands out from what it already read before it lets
#: the other tasks run once: a 64 KiB chunk can hold thousands of tiny
#: messages, and one client's chunk must not hold the event loop that long.
#: (Reading the socket again is a checkpoint too.)
BURST = 64
#: Seconds a new TCP connection gets to send its request head and finish the handshake.
HANDSHAKE_TIMEOUT = 10.0
#: Seconds a pong or a close frame may wait for room in the socket (the client
#: reading nothing at all) before the connection is dropped: the write cannot
#: be cut midway, so it is shielded, and this bounds it.
CONTROL_TIMEOUT = 10.0
#: Seconds we keep reading (and discarding) after our last byte, so the peer
#: reads our close frame or HTTP answer instead of a reset.
LINGER_TIMEOUT = 1.0
_CLOSE_CODES_NOT_ON_THE_WIRE = {1005, 1006, 1015}
_CLOSE, _PONG = 0x8, 0xA


class _Stream(trio.abc.HalfCloseableStream):
    """The socket of one WebSocket, with a lock for writing and one for reading.

    Every write, our writer's batches (``send_data``) and the control frames
    (``send_control``: a pong, a close frame), holds ``write_lock`` for its
    whole length, and so does the half-close: no frame is cut by another or
    by the EOF. Reads take turns too: a closing connection reads the peer's
    close frame on its I/O task while the reading task may still be
    unwinding from its last read.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.closed = False
        self.write_lock = trio.Lock()
        self._read_lock = trio.Lock()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        try:
            self._read_lock.acquire_nowait()  # the usual case: no trip through the scheduler
        except trio.WouldBlock:
            await self._read_lock.acquire()
        try:
            return await self.stream.receive_some(max_bytes)
        finally:
            self._read_lock.release()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        async with self.write_lock:
            await self.stream.send_all(data)

    async def send_data(self, pieces: Iterable[bytes], still_open: Callable[[], bool]) -> bool:
        """Write ``pieces``, in order and with nothing between them, unless,
        once it is our turn to write, ``still_open()`` is false or the stream
        was closed; whether they were written."""
        try:
            self.write_lock.acquire_nowait()  # the usual case: no trip through the scheduler
        except trio.WouldBlock:
            await self.write_lock.acquire()
        try:
            if self.closed or not still_open():
                return False
            for data in pieces:
                await self.stream.send_all(data)
            return True
        finally:
            self.write_lock.release()

    async def send_control(self, frame: bytes, still_open: Callable[[], bool], deadline: Callable[[], float]) -> bool:
        """Write one control frame unless, once it is our turn, ``still_open()``
        is false; whether it was written.

        The wait for our turn may be cancelled (nothing is written yet); the
        write itself is shielded, since a frame cut midway would garble
        every byte after it, and bounded by ``deadline()`` (read when the
        write starts): past it the socket is closed, and the connection with
        it (``PeerGone``)."""
        await self.write_lock.acquire()
        try:
            if self.closed or not still_open():
                return False
            with trio.CancelScope(shield=True, deadline=deadline()):
                await self.stream.send_all(frame)
                return True
            await trio.aclose_forcefully(self)  # cut off, maybe mid-frame: nothing more can follow it
            raise PeerGone
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise PeerGone from None
        finally:
            self.write_lock.release()

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        async with self.write_lock:
            await self.stream.send_eof()

    async def aclose(self) -> None:
        self.closed = True
        await self.stream.aclose()


async def _linger_close(stream: trio.abc.HalfCloseableStream, linger: float = LINGER_TIMEOUT) -> None:
    """Half-close, read until the peer's EOF (briefly), then close.

    Closing a socket with unread input makes the kernel send a reset, which
    can destroy our last bytes in flight (a close frame, an HTTP answer).
    """
    try:
        await stream.send_eof()
        with trio.move_on_after(linger):
            while await stream.receive_some(65536):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


def _control_frame(opcode: int, payload: bytes) -> bytes:
    """A server's (unmasked) control frame; ``payload`` is at most 125 bytes."""
    return bytes((0x80 | opcode, len(payload))) + payload


class WebSocketConnection(Connection):
    """One WebSocket client: its messages are read on the task that asks for
    them (``receive``), its frames written by the connection's I/O task.

    ``receive`` takes the next message from what was already read and
    parsed (``wsread.Incoming``): no task switch, no cancel scope. Only
    when that holds no whole message does it go through
    ``Connection.receive`` (whose cancel scope ``close()`` cancels) to read
    the socket, answer a ping, or end at the peer's close frame, its EOF or
    its protocol error.
    """

    def __init__(
        self,
        stream: _Stream,
        name: str,
        *,
        max_message_size: int,
        queue_limit: Callable[[], int],
        budget: QueueBudget | None = None,
        batches: BatchBytes | None = None,
        gate: WriteGate | None = None,
        head: bytes = b"",
        rest: bytes = b"",
    ) -> None:
        super().__init__(name, queue_limit, budget, gate)
        self._batches = batches or BatchBytes()  # shared with the server's other connections
        self._stream = stream
        self._head = head  # the request head, answered by the handshake
        self._incoming = Incoming(max_message_size)
        self._incoming.feed(rest)  # what the client sent right behind its head
        self._pending: Event | None = None  # taken out by receive's quick look, not a message
        self._streak = 0  # messages handed out since this task last let others run
        self._close_sent = False  # our close frame went (or is going) out: nothing may follow it
        self._close_heard = False  # the peer's close frame was read
        self._vanished = False  # the peer's EOF came first, or its socket broke

    async def _open(self, nursery: trio.Nursery) -> bool:
        handshake = H11Handshake(ConnectionType.SERVER)
        handshake.receive_data(self._head)
        if not isinstance(next(handshake.events(), None), Request):  # _http.decide admitted it: not expected
            logger.warning("%s: wsproto did not take the request head that was admitted", self.name)
            return False
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            await self._stream.send_all(handshake.send(AcceptConnection()))
            return True
        logger.info("%s: WebSocket handshake timed out", self.name)
        return False

    async def receive(self) -> str | None:
        if not self.closed and not self._eof and self._pending is None:
            event = self._incoming.next()
            if type(event) is str:
                self._streak += 1
                if self._streak >= BURST:  # a chunk of many small messages: let the others run
                    self._streak = 0
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return event
            self._pending = event
        return await super().receive()

    def _next_event(self) -> Event | None:
        event, self._pending = self._pending, None
        return event if event is not None else self._incoming.next()

    async def _fill(self) -> bool:
        """Read a chunk into the parser; False at the peer's EOF or a broken socket."""
        try:
            data = await self._stream.receive_some(RECEIVE_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        if not data:
            return False
        self._incoming.feed(data)
        self._streak = 0  # the read was a checkpoint
        return True

    async def _read_frame(self) -> str | None:
        while True:
            event = self._next_event()
            if type(event) is str:
                return event
            if event is None:
                if await self._fill():
                    continue
                self._vanished = True
                if not self.closed:
                    logger.info("%s closed (%d %s)", self.name, ABNORMAL, "")
                    self._peer_gone(ABNORMAL, "")
                return None
            if type(event) is Binary:
                logger.warning("%s: ignored a binary frame of %d bytes (AHP uses text frames)", self.name, event.size)
            elif type(event) is Ping:
                try:
                    await self._stream.send_control(
                        _control_frame(_PONG, event.payload), self._open_for_data, self._control_deadline
                    )
                except PeerGone:
                    self._vanished = True
                    self._peer_gone(ABNORMAL, "")
                    return None
            elif type(event) is Close:
                self._close_heard = True
                # The answer echoes the peer's code and reason (none if it gave none).
                answer = b"" if event.code == NO_STATUS else close_payload(event.code, event.reason)
                try:
                    await self._stream.send_control(
                        _control_frame(_CLOSE, answer), self._close_first, self._control_deadline
                    )
                except PeerGone:
                    pass
                if not self.closed:
                    logger.info("%s closed (%d %s)", self.name, event.code, event.reason)
                    self._peer_gone(event.code, event.reason)
                return None
            elif type(event) is Fail:
                logger.warning("%s: %s; closing it with %d", self.name, event.reason, event.code)
                self.close(event.code, event.reason)
                return None
            # a Pong: nothing to do

    def _close_first(self) -> bool:
        """Whether our close frame may go now (none went before); if so, nothing follows it."""
        if self._close_sent:
            return False
        self._close_sent = True
        return True

    def _control_deadline(self) -> float:
        return min(trio.current_time() + CONTROL_TIMEOUT, self._close_deadline)

    async def _write_frames(self, frames: list[str]) -> None:
        last = frames[-1]
        if type(last) is Utf8Frame:  # made in pieces off the loop; large, so it ends its batch
            head = [self._batches.of(frames[:-1])] if len(frames) > 1 else []
            pieces: Iterable[bytes] = itertools.chain(head, utf8_frame_pieces(last.pieces, last.size))
        elif len(last) > PIECE and type(last) is not SharedFrame:
            # A large frame ends its batch (it reaches the batch's cap): the
            # frames before it go as one write, it a piece at a time.
            head = [self._batches.of(frames[:-1])] if len(frames) > 1 else []
            pieces = itertools.chain(head, text_frame_pieces(last))
        else:
            pieces = (self._batches.of(frames),)
        try:
            written = await self._stream.send_data(pieces, self._open_for_data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise PeerGone from None
        if not written:
            raise PeerGone

    def _open_for_data(self) -> bool:
        """No close frame went or is going out."""
        return not self._close_sent

    async def _close_transport(self, code: int, reason: str) -> None:
        stream = self._stream
        if not self._close_sent and not self._vanished and not stream.closed:
            # Our close frame, then the peer's answer (data meanwhile is
            # dropped unread), all within the close deadline ...
            if code in _CLOSE_CODES_NOT_ON_THE_WIRE:
                code = NORMAL
            try:
                sent = await stream.send_control(
                    _control_frame(_CLOSE, close_payload(code, reason)), self._close_first, self._control_deadline
                )
            except PeerGone:
                sent = False
            if sent and not self._incoming.broken:
                await self._await_close_answer()
        # ... after which the server closes the TCP connection first (RFC 6455
        # section 7.1.1). Without the handshake (the peer vanished, or its
        # bytes can no longer be parsed), half-close and drain what it still
        # sends, so our close frame is not lost to a reset.
        if stream.closed:
            return
        if self._close_heard:
            await stream.aclose()
        else:
            await _linger_close(stream)

    async def _await_close_answer(self) -> None:
        self._incoming.discard()
        while True:
            event = self._next_event()
            if event is None:
                if not await self._fill():
                    return
            elif type(event) is Close:
                self._close_heard = True
                return
            elif type(event) is Fail and self._incoming.broken:
                return
            # data, a ping (no pong may follow our close frame), a pong: dropped


__all__ = ["CONTROL_TIMEOUT", "HANDSHAKE_TIMEOUT", "LINGER_TIMEOUT", "RECEIVE_BYTES", "WebSocketConnection"]
