"""AHP over WebSocket on loopback: a thin trio layer over trio-websocket.

Why not ``trio_websocket.serve_websocket``: it cannot answer a request that
is not an upgrade (wsproto rejects those before the application sees them),
it tears the whole server down when one handler raises, and its connections
have no send queue. So we own the listener (``trio.serve_listeners``), read
each request head ourselves with h11, answer refusals and plain HTTP
requests directly (``_http.decide``), and hand admitted upgrades to
``trio_websocket.wrap_server_stream`` over a stream that first replays the
bytes we already read. From there trio-websocket does the handshake, the
reading, ping/pong and the close handshake.

Writing: trio-websocket's ``send_message`` builds a frame and makes a system
call per message per client, which at a few dozen clients is most of the
daemon's time. Our writer instead writes data frames itself
(``frames.text_frame``): a fanned-out action's frame bytes are built once
(``SharedFrame``), each batch the writer takes goes out in one
``send_all``, and a batch of the same frames as the connection before it
reuses its bytes (``frames.BatchBytes``). The writers share a
``base.WriteGate``, so a burst of dispatches is reduced before they run and
each writes all its frames of the burst at once. trio-websocket writes its own
frames (the 101 answer, pongs, close frames) through the same stream object,
whose one lock keeps the two from interleaving mid-frame; a batch is not written once trio-websocket
says the connection is closing (it then has sent, or is sending, a close
frame, and nothing may follow it) or has closed the socket.

Resources: a connection is *pending* from its accept until it is admitted
as a WebSocket (its request head read and ``_http.decide`` satisfied); a
refusal lingering on its socket is still pending. When a new connection
finds ``Limits.pending`` others pending, or ``Limits.connections`` open, the
oldest pending one is dropped to make room (its socket closed, nothing
said): a local process without the token cannot hold the door shut by
trickling heads a byte at a time, since every newcomer pushes the oldest
trickler out, and a real client sends its head at once, so it is admitted
long before it becomes the oldest. Only when every open connection is an
admitted WebSocket is a newcomer answered 503 with ``Retry-After``. A head
must still be complete within ``HANDSHAKE_TIMEOUT`` seconds and
``_http.MAX_HEAD_BYTES`` bytes. The defaults stay below the process's
open-file limit, and when ``accept`` fails for lack of file descriptors
anyway the listener waits a moment and goes on. All connections share one
``QueueBudget`` (``Limits.queued_bytes``).

Frames: text frames are the protocol; a binary frame is ignored with a log
line (a client bug should not cost its session). A frame over
``max_message_size`` closes the connection with 1009 and a reason naming the
limit. When the server task is cancelled every open WebSocket is closed with
1001 (see ``base`` for the shielded, time-bounded close).
"""

from __future__ import annotations

import errno
import itertools
import resource
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import h11
import trio
import trio_websocket

from ahpd.transport import _http
from ahpd.transport.base import (
    ABNORMAL,
    MESSAGE_TOO_BIG,
    NORMAL,
    Connection,
    Handler,
    PeerGone,
    QueueBudget,
    WriteGate,
    logger,
    run_connection,
)
from ahpd.host.kernel.frame import SharedFrame, Utf8Frame
from ahpd.transport.frames import PIECE, BatchBytes, text_frame_pieces, utf8_frame_pieces

#: What one read from a client's socket asks for: trio-websocket's 4 KiB
#: would take a large frame (a ``resourceWrite`` of megabytes) thousands of
#: reads through wsproto and the scheduler.
RECEIVE_BYTES = 64 * 1024
#: Seconds a new TCP connection gets to send its request head and finish the handshake.
HANDSHAKE_TIMEOUT = 10.0
#: Seconds we keep reading (and discarding) after our last byte, so the peer
#: reads our close frame or HTTP answer instead of a reset.
LINGER_TIMEOUT = 1.0
#: The same for a 503 at capacity: short, since holding sockets is what we are short of.
BUSY_LINGER_TIMEOUT = 0.1
#: Seconds the listener waits after ``accept`` failed for lack of file descriptors.
ACCEPT_RETRY_DELAY = 0.1
#: What ``accept`` says when the process or system is out of descriptors or memory.
_ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}

_CLOSE_CODES_NOT_ON_THE_WIRE = {1005, 1006, 1015}


@dataclass(frozen=True)
class Listening:
    """Where ``serve_websocket`` accepts connections (``port`` is the bound one)."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}/"


@dataclass(frozen=True)
class Limits:
    """How much the WebSocket listener takes on at once.

    ``connections``: open TCP connections, WebSocket or not yet admitted;
    ``pending``: connections not yet admitted (sending their request head,
    or being told why not); ``queued_bytes``:
    bytes queued for all clients together (see ``base.QueueBudget``).
    """

    connections: int
    pending: int
    queued_bytes: int = 256 * 2**20

    @classmethod
    def for_this_process(
        cls, connections: int | None = None, pending: int | None = None, queued_bytes: int | None = None
    ) -> Limits:
        """The given values, the others derived from the open-file limit: half of
        it (the rest is for agents, terminals, stores), at most 1024, for
        connections; as many for pending ones. A pending connection can be
        dropped for a newer one, so the more of them there may be, the longer
        a newcomer has to send its head before it is the oldest, however fast
        a flood churns."""
        if connections is None:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            fds = 2**20 if soft == resource.RLIM_INFINITY else soft
            connections = max(1, min(1024, fds // 2))
        if pending is None:
            pending = connections
        return cls(connections, pending, 256 * 2**20 if queued_bytes is None else queued_bytes)


class _ReplayStream(trio.abc.HalfCloseableStream):
    """A stream that first yields ``prefix`` (the bytes we already read), then ``stream``.

    Every write, trio-websocket's (``send_all``) or our writer's
    (``send_data``), holds ``write_lock`` for its whole length, and so does
    the half-close: no frame is cut by another or by the EOF. Reads take
    turns too: when trio-websocket answers a peer's close frame by itself,
    its reader may still be reading while our close lingers on the socket.
    """

    def __init__(self, stream: trio.SocketStream, prefix: bytes) -> None:
        self.stream = stream
        self._prefix = prefix
        self.closed = False
        self.write_lock = trio.Lock()
        self._read_lock = trio.Lock()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            n = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:n], self._prefix[n:]
            await trio.lowlevel.checkpoint()
            return data
        async with self._read_lock:
            return await self.stream.receive_some(max_bytes)

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


class WebSocketConnection(Connection):
    """One WebSocket client; trio-websocket's reader runs in the shielded I/O task."""

    def __init__(
        self,
        stream: _ReplayStream,
        name: str,
        *,
        max_message_size: int,
        queue_limit: Callable[[], int],
        budget: QueueBudget | None = None,
        batches: BatchBytes | None = None,
        gate: WriteGate | None = None,
    ) -> None:
        super().__init__(name, queue_limit, budget, gate)
        self._batches = batches or BatchBytes()  # shared with the server's other connections
        self._stream = stream
        self._max = max_message_size
        self._ws: trio_websocket.WebSocketConnection | None = None

    async def _open(self, nursery: trio.Nursery) -> bool:
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            # trio-websocket counts len() of the text, in characters, and
            # closes with 1009 past it; our limit is in bytes, so frames with
            # few enough characters but too many bytes are caught in _read_frame.
            request = await trio_websocket.wrap_server_stream(
                nursery, self._stream, max_message_size=self._max, receive_buffer_size=RECEIVE_BYTES
            )
            self._ws = await request.accept()
            return True
        logger.info("%s: WebSocket handshake timed out", self.name)
        return False

    async def _read_frame(self) -> str | None:
        assert self._ws is not None
        while True:
            try:
                message = await self._ws.get_message()
            except trio_websocket.ConnectionClosed as exc:
                code = exc.reason.code if exc.reason else ABNORMAL
                why = (exc.reason.reason if exc.reason else None) or ""
                if not self.closed:
                    logger.info("%s closed (%d %s)", self.name, code, why)
                    self._peer_gone(code, why)
                return None
            if isinstance(message, bytes):
                logger.warning("%s: ignored a binary frame of %d bytes (AHP uses text frames)", self.name, len(message))
                continue
            size = len(message) if len(message) * 4 <= self._max or message.isascii() else len(message.encode())
            if size > self._max:
                why = f"frame of {size} bytes exceeds the {self._max}-byte limit"
                logger.warning("%s: %s; closing it with %d", self.name, why, MESSAGE_TOO_BIG)
                self.close(MESSAGE_TOO_BIG, why)
                return None
            return message

    async def _write_frames(self, frames: list[str]) -> None:
        assert self._ws is not None
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
        """trio-websocket has not begun closing: no close frame went or is going out."""
        return self._ws is not None and self._ws.closed is None

    async def _close_transport(self, code: int, reason: str) -> None:
        if self._ws is not None and self._ws.closed is None:
            if code in _CLOSE_CODES_NOT_ON_THE_WIRE:
                code = NORMAL
            # Sends our close frame and waits for the peer's (the reader
            # still runs), then closes the socket ...
            await self._ws.aclose(code, reason[:120] or None)
        elif self._ws is not None:
            # ... unless trio-websocket is closing on its own (the peer's
            # close frame, a frame over its size limit, a protocol error).
            # Its close frame may still be waiting for the stream: the end
            # of its messages comes after it, and only then may we half-close.
            with trio.move_on_after(LINGER_TIMEOUT):
                try:
                    while True:
                        await self._ws.get_message()  # the connection is closing: dropped
                except trio_websocket.ConnectionClosed:
                    pass
        # If the socket is still open it is ours to close.
        if not self._stream.closed:
            await _linger_close(self._stream)

    async def _abort_transport(self) -> None:
        await trio.aclose_forcefully(self._stream)


async def _read_head(stream: trio.SocketStream) -> tuple[h11.Request | None, bytes]:
    """Read up to the end of the request head; (None, ...) if it is not one.

    A head over ``MAX_HEAD_BYTES`` raises h11's error with status 431, also
    when it arrives whole in one read (h11's own cap is on incomplete heads).
    """
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=_http.MAX_HEAD_BYTES)
    raw = bytearray()
    while True:
        event = parser.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(_http.MAX_HEAD_BYTES + 1)
            raw += data
            parser.receive_data(data)  # b"" marks the end of input
            continue
        if isinstance(event, h11.Request):
            if len(raw) - len(parser.trailing_data[0]) > _http.MAX_HEAD_BYTES:
                raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
            return event, bytes(raw)
        return None, bytes(raw)  # ConnectionClosed: nothing but EOF


def _peer_name(stream: trio.SocketStream) -> str:
    try:
        host, port, *_ = stream.socket.getpeername()
    except (OSError, ValueError):
        return "ws ?"
    return f"ws {host}:{port}" if ":" not in host else f"ws [{host}]:{port}"


@dataclass
class _Server:
    handler: Handler
    token: str | None
    listen_host: str
    max_message_size: int
    queue_limit: Callable[[], int]
    limits: Limits
    budget: QueueBudget
    #: The browser origins admitted (the web console's), or None for the
    #: rule without a console (``_http.decide``); filled in once it listens.
    origins: set[str] | None = None
    batches: BatchBytes = field(default_factory=BatchBytes)
    gate: WriteGate = field(default_factory=WriteGate)  # run in serve_websocket's nursery
    admitted: int = 0  # open WebSockets
    refused: int = 0  # answered 503 since the last one admitted
    dropped: int = 0  # pending ones dropped for newer ones in the current spell
    #: The connections not yet admitted, oldest first, each with the scope
    #: that drops it.
    heads: dict[object, trio.CancelScope] = field(default_factory=dict)

    @property
    def connections(self) -> int:
        """Open connections, admitted or not (one being dropped no longer counts)."""
        return self.admitted + len(self.heads)

    @property
    def pending(self) -> int:
        return len(self.heads)

    def _make_room(self, name: str) -> bool:
        """Drop the oldest pending connections until a newcomer fits under both
        caps; False when it cannot (every open connection is a WebSocket).

        A dropped connection stops counting at once; its socket closes when
        its task next runs, so the descriptors in use may pass the cap by
        the few dropped in one turn of the scheduler."""
        limits = self.limits
        while self.heads and (len(self.heads) >= limits.pending or self.connections >= limits.connections):
            oldest = next(iter(self.heads))
            self.heads.pop(oldest).cancel()
            if not self.dropped:
                logger.warning(
                    "%s: %d connections open (limit %d), %d not yet admitted (limit %d): "
                    "dropping the oldest not yet admitted to make room",
                    name,
                    self.connections + 1,
                    limits.connections,
                    len(self.heads) + 1,
                    limits.pending,
                )
            self.dropped += 1
        if self.connections >= limits.connections:
            return False
        return True

    async def serve_stream(self, stream: trio.SocketStream) -> None:
        """One TCP connection, from request head to closed socket. Never raises
        (except Cancelled): a failure here is this connection's alone."""
        name = _peer_name(stream)
        crowded = len(self.heads) >= self.limits.pending or self.connections >= self.limits.connections
        if not crowded and self.dropped:
            logger.info("room again after dropping %d connections that had not been admitted", self.dropped)
            self.dropped = 0
        if not self._make_room(name):
            await self._busy(stream, name)
            return
        if self.refused:
            logger.info("accepting connections again after refusing %d", self.refused)
            self.refused = 0
        key = object()
        door = self.heads[key] = trio.CancelScope()
        admitted = False
        try:
            with door:  # cancelled when a newer connection needs the slot
                request = await self._admit(stream, name)
            if door.cancelled_caught or key not in self.heads:  # dropped, maybe after its last wait
                logger.debug("%s: dropped before it was admitted, for a newer connection", name)
                return
            if request is None:
                return
            del self.heads[key]
            self.admitted += 1
            admitted = True
            conn = WebSocketConnection(
                _ReplayStream(stream, request),
                name,
                max_message_size=self.max_message_size,
                queue_limit=self.queue_limit,
                budget=self.budget,
                batches=self.batches,
                gate=self.gate,
            )
            logger.info("%s connected", name)
            try:
                await run_connection(self.handler, conn)
            finally:
                logger.info("%s gone (%s %s)", name, conn.close_code, conn.close_reason)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            logger.info("%s: connection lost (%s)", name, exc)
        except Exception:  # noqa: BLE001 - one connection's failure, logged, must not end the server's others
            logger.exception("%s: transport failure", name)
        finally:
            self.heads.pop(key, None)
            if admitted:
                self.admitted -= 1
            await trio.aclose_forcefully(stream)

    async def _admit(self, stream: trio.SocketStream, name: str) -> bytes | None:
        """Read the request head and decide on it: the bytes read if the
        upgrade is admitted, None once the connection has been answered
        (a refusal) or has nothing to say (EOF, the head deadline)."""
        request, raw = None, b""
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            try:
                request, raw = await _read_head(stream)
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                logger.info("%s: bad HTTP request (%s)", name, exc)
                await self._refuse(
                    stream, name, _http.Refusal(status, "bad request" if status != 431 else "request head too large")
                )
                return None
        if request is None:
            logger.debug("%s: no complete request head", name)
            return None
        refusal = _http.decide(request, self.token, self.listen_host, self.origins)
        if refusal is not None:
            await self._refuse(stream, name, refusal)
            return None
        return raw

    async def _refuse(self, stream: trio.SocketStream, name: str, refusal: _http.Refusal) -> None:
        logger.info("%s: answered HTTP %d (%s)", name, refusal.status, refusal.message)
        with trio.move_on_after(LINGER_TIMEOUT):
            await stream.send_all(_http.response(refusal))
        await _linger_close(stream)

    async def _busy(self, stream: trio.SocketStream, name: str) -> None:
        """503 and close, logged once per spell of refusals (a flood must not flood the log)."""
        if not self.refused:
            logger.warning(
                "%s: refused with 503: %d connections open (limit %d), %d in their request head (limit %d)",
                name,
                self.connections,
                self.limits.connections,
                self.pending,
                self.limits.pending,
            )
        self.refused += 1
        busy = _http.Refusal(
            503, "ahpd is serving as many connections as it may; retry shortly", [(b"Retry-After", b"5")]
        )
        try:
            with trio.move_on_after(BUSY_LINGER_TIMEOUT):
                await stream.send_all(_http.response(busy))
            await _linger_close(stream, BUSY_LINGER_TIMEOUT)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)


async def _accept_loop(
    listener: trio.SocketListener, nursery: trio.Nursery, serve: Callable[[trio.SocketStream], Awaitable[None]]
) -> None:
    """Accept until cancelled. Out of file descriptors (or memory), wait a moment
    and try again: connections that end free some; the daemon does not die of it."""
    short = False
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                if not short:
                    logger.warning(
                        "accept failed (%s); retrying every %.1f s until it succeeds",
                        errno.errorcode[exc.errno],
                        ACCEPT_RETRY_DELAY,
                    )
                short = True
                await trio.sleep(ACCEPT_RETRY_DELAY)
                continue
            if short:
                logger.info("accept works again")
                short = False
            nursery.start_soon(serve, stream)


async def serve_websocket(
    handler: Handler,
    *,
    host: str,
    port: int,
    token: str | None,
    max_message_size: int = 16 * 2**20,
    queue_limit: Callable[[], int] = lambda: 16 * 2**20,
    limits: Limits | None = None,
    origins: set[str] | None = None,
    task_status: trio.TaskStatus[Listening] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``handler`` to every WebSocket client on ``host:port`` until cancelled.

    Follows the nursery ``start`` protocol: ``await nursery.start(serve_websocket, ...)``
    returns a ``Listening`` with the bound port (``port=0`` picks a free one).
    ``limits`` defaults to ``Limits.for_this_process()``. ``origins``: the
    browser origins admitted, read at each upgrade (the daemon fills it in
    once the web console listens; None keeps the rule without a console).
    """
    limits = limits or Limits.for_this_process()
    listeners = await trio.open_tcp_listeners(port, host=host)
    if port == 0 and len(listeners) > 1:
        # a name with several addresses got a different free port on each; keep one
        for extra in listeners[1:]:
            await extra.aclose()
        listeners = listeners[:1]
    server = _Server(
        handler, token, host, max_message_size, queue_limit, limits, QueueBudget(limits.queued_bytes), origins
    )
    bound = listeners[0].socket.getsockname()
    where = Listening(host=host, port=bound[1])
    async with trio.open_nursery() as nursery:
        await nursery.start(server.gate.run)
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, nursery, server.serve_stream)
        logger.info(
            "listening on %s (at most %d connections, %d in their request head, %d bytes queued in all)",
            where.url,
            limits.connections,
            limits.pending,
            limits.queued_bytes,
        )
        task_status.started(where)


__all__ = ["HANDSHAKE_TIMEOUT", "Limits", "Listening", "WebSocketConnection", "serve_websocket"]
