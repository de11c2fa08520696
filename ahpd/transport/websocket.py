"""AHP over WebSocket on loopback: the listener and the door in front of it.

Why not ``trio_websocket.serve_websocket``: it cannot answer a request that
is not an upgrade (wsproto rejects those before the application sees them),
it tears the whole server down when one handler raises, its connections
have no send queue, and its reader task costs a task switch per message.
So we own the listener (``trio.serve_listeners``), read each request head
ourselves with h11, answer refusals and plain HTTP requests directly
(``_http.decide``), and hand an admitted upgrade, its head and whatever the
client sent right behind it, to a ``wsconnection.WebSocketConnection``,
which answers the handshake and from then on reads, writes and closes the
WebSocket itself. The writers share a ``base.WriteGate``, so a burst of
dispatches is reduced before they run and each writes all its frames of
the burst at once.

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
import resource
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import h11
import trio

from ahpd.transport import _http
from ahpd.transport.base import (
    Handler,
    QueueBudget,
    WriteGate,
    logger,
    run_connection,
)
from ahpd.transport.frames import BatchBytes
from ahpd.transport.wsconnection import (
    HANDSHAKE_TIMEOUT,
    LINGER_TIMEOUT,
    WebSocketConnection,
    _linger_close,
    _Stream,
)

#: The same for a 503 at capacity: short, since holding sockets is what we are short of.
BUSY_LINGER_TIMEOUT = 0.1
#: Seconds the listener waits after ``accept`` failed for lack of file descriptors.
ACCEPT_RETRY_DELAY = 0.1
#: What ``accept`` says when the process or system is out of descriptors or memory.
_ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


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


async def _read_head(stream: trio.SocketStream) -> tuple[h11.Request | None, bytes, bytes]:
    """Read up to the end of the request head: the request (None if there is
    none), its bytes, and the bytes read after it.

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
            end = len(raw) - len(parser.trailing_data[0])
            if end > _http.MAX_HEAD_BYTES:
                raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
            return event, bytes(raw[:end]), bytes(raw[end:])
        return None, bytes(raw), b""  # ConnectionClosed: nothing but EOF


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
                admission = await self._admit(stream, name)
            if door.cancelled_caught or key not in self.heads:  # dropped, maybe after its last wait
                logger.debug("%s: dropped before it was admitted, for a newer connection", name)
                return
            if admission is None:
                return
            del self.heads[key]
            self.admitted += 1
            admitted = True
            conn = WebSocketConnection(
                _Stream(stream),
                name,
                max_message_size=self.max_message_size,
                queue_limit=self.queue_limit,
                budget=self.budget,
                batches=self.batches,
                gate=self.gate,
                head=admission[0],
                rest=admission[1],
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

    async def _admit(self, stream: trio.SocketStream, name: str) -> tuple[bytes, bytes] | None:
        """Read the request head and decide on it: the head's bytes and those
        read after it if the upgrade is admitted, None once the connection
        has been answered (a refusal) or has nothing to say (EOF, the head
        deadline)."""
        request, head, rest = None, b"", b""
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            try:
                request, head, rest = await _read_head(stream)
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
        return head, rest

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
