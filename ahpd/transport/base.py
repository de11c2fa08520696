"""A connection that moves text frames, and the task tree that runs one.

Every transport (WebSocket, stdio, in-process) gives the host the same
``Connection``: ``receive()`` the next frame, ``send()`` one without waiting,
``close()``. The transport knows nothing about AHP; it moves text.

Why ``send()`` never waits: the host fans one action out to every client, and
a client that stops reading must not stall the others. So each connection has
exactly one writer task fed by an unbounded queue, and counts the bytes it
has queued but not yet written (``queued_bytes``). The writer takes
everything queued (up to ``BATCH_BYTES``) at each turn and hands it to the
transport as one batch, which a socket writes with one ``send_all``: a
client's frames cost one system call per turn of the writer, not one each.
When a send would push that past the connection's ``queue_limit()`` the
client has fallen behind: it is named in the log, closed with 1008 and the
frame is dropped. The limit is a callable read at every send that finds
something pending, so a configuration change applies to the next frame.

Connections may share a ``WriteGate``, which wakes their writers once a
burst of actions is reduced (many frames per write when busy, a lone action
at once), and a ``QueueBudget``, a cap on the bytes they queue together
(past it, the connection with the most queued is closed with 1008).

The task tree of one connection (``run_connection``)::

    connection nursery
    |-- handler(conn)                    cancellable: host shutdown reaches it
    `-- I/O task, in a *shielded* scope  writer (+ the transport's reader)

The I/O task is shielded so that, when the host shuts down, it can still
flush, send its close frame (1001) and wait for the peer's reply, instead of
dropping the socket mid-frame. The shield is bounded: ``close()`` puts a
deadline of ``CLOSE_TIMEOUT`` seconds on it, after which the transport is
aborted. The handler's exit always calls ``close()``, so nothing outlives the
connection.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_left
from collections.abc import Awaitable, Callable
from itertools import accumulate

import trio

# trio.testing's own spelling would import trio.testing, and with it pytest wherever pytest is
# installed (~100 ms and several MB before the ready line): the same function, from trio's core.
from trio._core import wait_all_tasks_blocked

from ahpd.host.telemetry import telemetry
from ahpd.host.kernel.feed import Feed
from ahpd.host.kernel.frame import NoRoom
from ahpd.host.kernel.supervise import supervised

logger = logging.getLogger("ahpd.transport")

Handler = Callable[["Connection"], Awaitable[None]]

#: Seconds a closing connection gets to flush, send its close frame and hear
#: the peer's reply before its socket is simply closed.
CLOSE_TIMEOUT = 2.0

#: A batch ends with the frame that brings it to this many bytes: enough to
#: amortize a system call over hundreds of actions, little enough that a
#: write to a slow client does not copy its whole queue.
BATCH_BYTES = 256 * 1024

# WebSocket close codes (RFC 6455 section 7.4.1); other transports record them
# for the log.
NORMAL = 1000
GOING_AWAY = 1001
UNSUPPORTED_DATA = 1003
ABNORMAL = 1006
POLICY_VIOLATION = 1008
MESSAGE_TOO_BIG = 1009
INTERNAL_ERROR = 1011


class PeerGone(Exception):
    """Raised by a transport's ``_write_frame`` when the peer can no longer be written to."""


class QueueBudget:
    """The bytes queued across every connection that shares it, and their cap.

    Bytes are counted here from the moment a frame is queued until it is
    written or its connection's queue is dropped.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        #: Bytes promised to large frames being made (``Connection.room_for``).
        self.reserved = 0
        #: Who waits for bytes to be written, to promise some.
        self.freed = trio.lowlevel.ParkingLot()
        self.members: set[Connection] = set()

    def make_room(self, conn: Connection, size: int) -> bool:
        """Close the connections with the most queued until ``size`` more bytes
        for ``conn`` fit; False if ``conn`` itself was the one closed."""
        while self.total + size > self.limit:
            victim = max(self.members, key=lambda c: c.queued_bytes + (size if c is conn else 0))
            if victim is conn and conn.queued_bytes == 0:
                return True  # an empty queue always takes a frame (see Connection.send)
            logger.warning(
                "%s has the most queued (%d bytes) while all connections together are over "
                "%d bytes; closing it with %d",
                victim.name,
                victim.queued_bytes,
                self.limit,
                POLICY_VIOLATION,
            )
            victim._close(POLICY_VIOLATION, "server send queue full", discard=True)
            victim._drop_queue()  # already closing, but still writing: stop that too
            if victim is conn:
                return False
        return True


class WriteGate:
    """Wakes the writers of the connections that share it once a burst is over.

    ``hold(conn)`` notes a parked writer that has something to write; the
    gate's task (``run``, in the server's nursery) waits until every other
    task is blocked (trio's ``wait_all_tasks_blocked``: nothing runnable,
    no I/O ready) or ``HOLD`` seconds have passed, then wakes every writer
    noted meanwhile. Without a running gate a writer is woken at once.
    (``wait_all_tasks_blocked``, public in ``trio.testing``, is the only way
    trio offers to learn that the loop has run out of work.)
    """

    #: The longest a frame waits for the loop to be idle before its writer
    #: is woken anyway: under a flood that never lets the loop idle, the
    #: writers still run this often, each writing all it has.
    HOLD = 0.010

    def __init__(self) -> None:
        self._held: list[Connection] = []
        self._lot = trio.lowlevel.ParkingLot()
        self._running = False

    @property
    def running(self) -> bool:
        """Whether the gate's task runs (a writer held now will be released)."""
        return self._running

    def hold(self, conn: Connection) -> None:
        if not self._running:
            conn._writer_idle.unpark()
            return
        if not self._held:
            self._lot.unpark()
        self._held.append(conn)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._running = True
        task_status.started()
        try:
            while True:
                if not self._held:
                    await self._lot.park()
                    continue
                with trio.move_on_after(self.HOLD):
                    await wait_all_tasks_blocked()
                self._release()
        finally:
            self._running = False
            self._release()

    def _release(self) -> None:
        held, self._held = self._held, []
        for conn in held:
            conn._writer_idle.unpark()


class Connection:
    """One client, as the host sees it: text frames in, text frames out.

    Subclasses supply the I/O (``_read_frame``, ``_write_frame`` or
    ``_write_frames``, ``_close_transport``, ``_abort_transport`` and
    optionally ``_open``); this class owns the queue, its accounting and the
    closing rules.
    """

    name: str
    closed: bool
    #: The channel's frames this connection follows (``ahpd.host.kernel.feed``):
    #: its queue goes on with them from ``feed_pos`` (``feed_cum`` bytes in).
    feed: Feed | None
    feed_pos: int
    feed_cum: int

    def __init__(
        self,
        name: str,
        queue_limit: Callable[[], int] | None = None,
        budget: QueueBudget | None = None,
        gate: WriteGate | None = None,
    ) -> None:
        self.name = name
        self._gate = gate
        #: Bytes queued in ``_queue`` or being written (a view of a feed comes on top).
        self._counted = 0
        self.feed, self.feed_pos, self.feed_cum = None, 0, 0
        telemetry.COUNTS.connections += 1
        self._budget = budget  # None once this connection's bytes no longer count there
        if budget is not None:
            budget.members.add(self)
        self.closed = False
        #: Set by ``close()``: what this side sent (or would send) as its close code.
        self.close_code: int | None = None
        self.close_reason = ""
        self._queue_limit = queue_limit
        # What the writer has not taken yet: the frames and their UTF-8 bytes.
        self._queue: list[str] = []
        self._sizes: list[int] = []
        self._writer_idle = trio.lowlevel.ParkingLot()  # the writer, while the queue is empty
        self._writer_parked = False
        self._discard = False  # drop what is still queued instead of writing it
        self._eof = False
        self._receive_scope: trio.CancelScope | None = None
        self._io_scope: trio.CancelScope | None = None
        self._close_deadline = math.inf
        self._reserved = 0  # promised to large frames being made for this connection
        self._freed = trio.lowlevel.ParkingLot()  # who waits for room here (room_for)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} closed={self.closed}>"

    @property
    def queued_bytes(self) -> int:
        """Bytes queued for this client and not yet written, its view of a feed included."""
        feed = self.feed
        return self._counted if feed is None else self._counted + feed.cum - self.feed_cum

    def queued_outside_feed(self) -> int:
        return self._counted

    # -- the host's side -------------------------------------------------------

    async def receive(self) -> str | None:
        """The next text frame; ``None`` once the peer is gone or the connection closed."""
        if self.closed or self._eof:
            await trio.lowlevel.checkpoint()
            return None
        with trio.CancelScope() as scope:  # close() cancels it, waking the reader
            self._receive_scope = scope
            try:
                text = await self._read_frame()
            finally:
                self._receive_scope = None
            if text is None:
                self._eof = True
            return text
        return None

    def send(self, text: str, size: int | None = None) -> bool:
        """Queue ``text`` for the writer task without waiting.

        Returns False when the frame was not queued: the connection is closed,
        or this frame would put it over its queue limit (and it is now closed
        with 1008). A frame offered while nothing is pending is always taken,
        whatever it weighs: the limit is on what piles up for a client that
        is not reading, and one with an empty queue is not behind (a large
        ``reconnect`` answer must be able to reach it).
        """
        if self.closed:
            return False
        if size is None:  # a fan-out measures its frame once for every subscriber
            size = len(text.encode())
        if self.feed is not None:  # what it follows is queued before this frame
            self._unfollow()
        queued = self._counted
        if queued and self._queue_limit is not None:
            limit = self._queue_limit()
            if queued + size > limit:
                logger.warning(
                    "%s fell behind: %d bytes pending (limit %d); closing it with %d",
                    self.name,
                    queued + size,
                    limit,
                    POLICY_VIOLATION,
                )
                self._close(POLICY_VIOLATION, f"client fell behind by {queued + size} bytes", discard=True)
                return False
        budget = self._budget
        if budget is not None:
            if budget.total + size > budget.limit and not budget.make_room(self, size):
                return False
            budget.total += size
        self._counted += size
        self._queue.append(text)
        self._sizes.append(size)
        self.wake_writer()
        telemetry.COUNTS.sent(size)
        return True

    def wake_writer(self) -> None:
        """Something new is queued: the writer, if parked, is woken (through the gate)."""
        if self._writer_parked:
            self._writer_parked = False  # woken once, however many frames follow before it runs
            if self._gate is not None:
                self._gate.hold(self)
            else:
                self._writer_idle.unpark()

    # -- following a channel's feed ------------------------------------------------

    def follow(self, feed: Feed) -> bool:
        """Go on with ``feed``'s frames from its end (what this connection
        follows now is queued before them); False once closed."""
        if self.feed is feed:
            return True
        if self.closed:
            return False
        if self.feed is not None:
            self._unfollow()
        feed.join(self, self._budget, self._queue_limit)
        if self._writer_parked:
            feed.sleep(self)  # parked before it followed: the feed's next frame wakes it
        return True

    def unfollow(self, feed: Feed) -> None:
        """Stop following ``feed`` (its frames already in the view are still written)."""
        if self.feed is feed:
            self._unfollow()

    def _unfollow(self) -> None:
        """The view becomes frames of this connection's own queue."""
        assert self.feed is not None
        frames, sizes = self.feed.leave(self)
        if frames:
            self._adopt(len(frames), sum(sizes))
            self._queue.extend(frames)
            self._sizes.extend(sizes)

    def _adopt(self, count: int, size: int) -> None:
        """``count`` frames of ``size`` bytes taken from the view now count
        as this connection's own (their bytes are already in the budget)."""
        self._counted += size
        counts = telemetry.COUNTS
        counts.frames_sent += count
        counts.bytes_sent += size

    async def room_for(self, size: int, patience: float) -> Callable[[], None]:
        """Wait until a frame of about ``size`` bytes, not yet made, would be
        queued without closing anybody: this connection's queue empty or
        with room under its limit, and the shared budget with room beside
        what is queued and promised. The room is promised to it until the
        returned function is called (just before the frame is sent).

        For a large answer made off the event loop (a file's content): it
        is counted before it is made, so a client that does not read, or
        many large reads at once, wait here rather than hold the memory.
        ``NoRoom`` with the reason when it never fits, the connection
        closes, or ``patience`` seconds pass."""
        budget = self._budget
        if budget is not None and size > budget.limit:
            raise NoRoom(
                f"a frame of about {size} bytes is more than the {budget.limit} bytes "
                "this host queues for all clients together"
            )
        lot = budget.freed if budget is not None else self._freed
        with trio.move_on_after(patience):
            while not self.closed and not self._fits(size):
                await lot.park()  # the writers wake it as bytes go out
            if self.closed:
                raise NoRoom(f"{self.name} is closing")
            self._reserved += size
            if budget is not None:
                budget.reserved += size
            promised = [budget]

            def release() -> None:
                if promised:
                    held = promised.pop()
                    self._reserved -= size
                    if held is not None:
                        held.reserved -= size

            return release
        queued = f"{budget.total + budget.reserved} bytes queued or promised for all clients, " if budget else ""
        raise NoRoom(
            f"no room for a frame of about {size} bytes within {patience:g} s: {queued}{self.queued_bytes} for this one"
        )

    def _fits(self, size: int) -> bool:
        mine = self.queued_bytes + self._reserved
        if mine and self._queue_limit is not None and mine + size > self._queue_limit():
            return False
        budget = self._budget
        return budget is None or budget.total + budget.reserved + size <= budget.limit

    def _wake_waiters(self) -> None:
        if self._freed:
            self._freed.unpark_all()
        if self._budget is not None and self._budget.freed:
            self._budget.freed.unpark_all()

    def close(self, code: int = NORMAL, reason: str = "") -> None:
        """Start closing: frames already queued are still written, then the
        transport closes with ``code``. Idempotent; ``receive()`` returns None."""
        self._close(code, reason, discard=False)

    # -- closing ---------------------------------------------------------------

    def _close(self, code: int, reason: str, *, discard: bool) -> None:
        if self.closed:
            return
        self.closed = True
        if self.feed is not None:  # nothing more is queued here: what it follows is its own now
            self._unfollow()
        self.close_code, self.close_reason = code, reason
        telemetry.COUNTS.queue_closes += code == POLICY_VIOLATION  # 1008: only a client that fell behind
        if discard:
            self._drop_queue()
        self._writer_idle.unpark_all()  # the writer drains what is queued, then stops
        self._wake_waiters()  # nothing more is promised room here
        if self._receive_scope is not None:
            self._receive_scope.cancel()
        self._close_deadline = trio.current_time() + CLOSE_TIMEOUT
        if self._io_scope is not None:
            self._io_scope.deadline = min(self._io_scope.deadline, self._close_deadline)

    def _peer_gone(self, code: int = ABNORMAL, reason: str = "peer gone") -> None:
        """The peer can no longer be written to: drop what is queued and close."""
        self._eof = True
        self._drop_queue()
        self._close(code, reason, discard=True)

    def _drop_queue(self) -> None:
        """What is queued will not be written: it stops counting against the shared budget now."""
        self._discard = True
        self._leave_budget()

    def _leave_budget(self) -> None:
        if self._budget is not None:
            self._wake_waiters()
            self._budget.total -= self.queued_bytes
            self._budget.members.discard(self)
            self._budget = None

    # -- the I/O task ----------------------------------------------------------

    async def _run_io(self, *, task_status: trio.TaskStatus[bool] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the transport, write queued frames until closed, close it.

        Reports ``True`` through ``task_status`` once open, ``False`` if the
        transport could not be opened (the handler is then not run).
        """
        started = False
        with trio.CancelScope(shield=True, deadline=self._close_deadline) as scope:
            self._io_scope = scope
            async with trio.open_nursery() as nursery:
                if await self._open(nursery):
                    task_status.started(True)
                    started = True
                    await self._write_loop()
                    await self._close_transport(self.close_code or NORMAL, self.close_reason)
                # whatever the transport left running (its reader) ends with it
                nursery.cancel_scope.cancel()
        self._io_scope = None
        self._leave_budget()  # the writer is done: nothing it held is queued any more
        if scope.cancelled_caught:
            logger.info("%s did not close within %.1f s; dropping it", self.name, CLOSE_TIMEOUT)
            with trio.CancelScope(shield=True):
                await self._abort_transport()
        if not started:
            self.closed = True
            task_status.started(False)

    async def _write_loop(self) -> None:
        """Write what is queued, a batch at a time, until closed and drained."""
        while True:
            if not self._queue and (self.feed is None or self.feed_cum == self.feed.cum):
                if self.closed:
                    return
                self._writer_parked = True
                if self.feed is not None:
                    self.feed.sleep(self)  # its next frame wakes this writer
                try:
                    await self._writer_idle.park()  # send() or close() wakes it
                finally:
                    self._writer_parked = False
                continue
            batch, size = self._take_batch()
            try:
                if not self._discard:
                    await self._write_frames(batch)
            except PeerGone:
                logger.info("%s: peer gone while writing", self.name)
                self._peer_gone()
            except Exception:  # noqa: BLE001 - the writer's boundary: this connection closes, not the server
                # The writer's own fault: what is queued is dropped (the
                # client would see a gap) and the connection closes with 1011.
                logger.exception("%s: writing a frame failed; closing it with %d", self.name, INTERNAL_ERROR)
                self._close(INTERNAL_ERROR, "internal error", discard=True)
                self._discard = True
            finally:
                self._counted -= size
                if self._budget is not None:
                    self._budget.total -= size
                self._wake_waiters()
            if not self.closed and self._gate is not None and self._gate.running:
                # What came while this batch was written waits with the
                # other writers for the burst to end, unless it is a full
                # batch already: written at once, it would go a frame or
                # two at a time, interleaved with the burst it is part of.
                # (Not marked parked: it is held already, a send need not hold it again.)
                if 0 < self.queued_bytes < BATCH_BYTES:  # all of it is unwritten: one writer
                    self._gate.hold(self)
                    await self._writer_idle.park()  # the gate, or close(), wakes it

    def _take_batch(self) -> tuple[list[str], int]:
        """The frames at the head of the queue, up to ``BATCH_BYTES`` (all of
        them once the queue is being dropped), and their bytes."""
        frames, sizes = self._queue, self._sizes
        total = sum(sizes)
        if total <= BATCH_BYTES or self._discard:
            self._queue, self._sizes = [], []
            feed = self.feed
            if feed is not None and total < BATCH_BYTES:  # then what it follows, as far as the cap
                if feed.cum - self.feed_cum <= BATCH_BYTES - total:
                    more, size = feed.take_all(self)
                else:
                    more, sizes = feed.take(self, BATCH_BYTES - total)
                    size = sum(sizes)
                if more:
                    self._adopt(len(more), size)
                    total += size
                    frames = more if not frames else frames + more
            return frames, total
        ends = list(accumulate(sizes))  # a backlog is cut without a Python loop per frame
        n = bisect_left(ends, BATCH_BYTES) + 1  # the frame that reaches the cap goes too
        self._queue, self._sizes = frames[n:], sizes[n:]
        return frames[:n], ends[n - 1]

    # -- what a transport supplies ----------------------------------------------

    async def _open(self, nursery: trio.Nursery) -> bool:
        """Finish opening (e.g. the WebSocket handshake); background tasks go in ``nursery``."""
        return True

    async def _read_frame(self) -> str | None:
        """The next incoming text frame, or None at the end of input."""
        raise NotImplementedError

    async def _write_frames(self, frames: list[str]) -> None:
        """Write a batch of frames, in order; raise ``PeerGone`` if the peer
        can no longer be written to. A transport that can should make it one
        write; by default each frame is written with ``_write_frame``."""
        for text in frames:
            if self._discard:  # closed meanwhile, its queue dropped
                return
            await self._write_frame(text)

    async def _write_frame(self, text: str) -> None:
        """Write one frame; raise ``PeerGone`` if the peer can no longer be written to."""
        raise NotImplementedError

    async def _close_transport(self, code: int, reason: str) -> None:
        """Close gracefully; runs shielded, under the close deadline."""

    async def _abort_transport(self) -> None:
        """Close at once: the graceful close ran out of time."""


async def run_connection(handler: Handler, conn: Connection) -> None:
    """Run ``handler`` on ``conn`` in the connection's own nursery, then close it.

    The handler's exit decides the close code: 1000 when it returns, 1011 when
    it raises (the exception is logged with its traceback and goes no
    further, so one client's failure never reaches the server or another
    client), 1001 when the host is shutting down (cancellation passes through).
    """
    async with trio.open_nursery() as nursery:
        if not await nursery.start(conn._run_io):
            return
        code, reason = GOING_AWAY, "server shutting down"

        def failed(exc: Exception) -> None:
            nonlocal code, reason
            code, reason = INTERNAL_ERROR, "internal error"

        try:
            # The connection's failure boundary: an error (even one mixed
            # with a cancellation) is logged and closes this connection with
            # 1011; only the cancellation (or a KeyboardInterrupt) goes on.
            with supervised(f"the handler of {conn.name}", failed):
                await handler(conn)
                code, reason = NORMAL, ""
        finally:
            conn.close(code, reason)
