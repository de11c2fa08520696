"""Where ``serverSeq`` survives a restart.

A client remembers the highest serverSeq it saw; a host whose counter came
back at 0 could never replay to it again, and worse, would number new
actions below what the client already holds. So the counter is reserved
ahead in blocks: the file holds a value no action has reached yet, written
(and fsynced) before the counter passes it. After a crash the host resumes
from the reservation: numbers may skip, but never repeat or go backwards.

The reservation is renewed off the event loop when less than half a block
is left, and the host believes in a reservation only once its write
succeeded. The block grows with the pace: when more than a quarter of it
was used while one renewal was being written, the next one reserves twice
as many numbers (up to ``MAX_BLOCK``), so the renewal starts early enough
for the next write to land before the block is spent. Numbers may skip by
up to a block after a crash; they never repeat.

Should a healthy disk still be writing when the block runs out (a burst
faster than the growth caught up with), nothing is refused or dropped for
it. A client's action waits for that write (``Sequencer.numbered``): that
connection's reading pauses, nobody else's. A change the host itself says
cannot wait (it is said synchronously), so the event loop waits for the
write under way (one lock orders the writes), for at most ``STALL``
seconds, and takes what it wrote (or writes the reservation itself when no
write was under way yet): a stall of one write, logged, which the growth
makes practically unreachable, and better than a change nobody hears of.
A write that outlasts ``STALL`` (a disk that hangs) is not waited for
longer: that change is dropped and logged as on a refusing disk, and the
daemon serves on.

A disk that refuses the write is retried with a backoff while the counter
runs on in the block already reserved. Should that block run out before
the disk takes a write, the host hands out no number above it: a client's
action is refused with the reason (``Sequencer.unavailable``), and a change
the host itself would say is dropped and logged, until the disk takes the
write. A number handed out is always below a reservation on disk, so a
crash can never make one repeat.

A ``serverSeq`` file that is not a count (damaged by hand or by the disk)
is set aside as ``serverSeq.damaged``, and numbering resumes at the
current time in microseconds since the epoch: above anything a counter
that started at 0 could have reached (it would take a million actions a
second since 1970), below 2**53 (what a JavaScript client holds exactly)
for two centuries. Numbers jump; they never repeat. An unreadable one is
treated the same, but left where it is.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import trio

from ahpd.host.kernel.writes import FIRST_RETRY, LAST_RETRY, set_aside
from ahpd.ports.atomic import write_atomic
from ahpd.ports import threads

log = logging.getLogger("ahpd.host")

#: The first block reserved; a fast pace doubles it, up to ``MAX_BLOCK``.
BLOCK = 1024
MAX_BLOCK = 2**20
#: The longest the event loop waits for a renewal under way (seconds).
STALL = 1.0
#: The largest serverSeq a JavaScript client holds exactly.
MAX_SEQ = 2**53 - 1


def safe_floor() -> int:
    """A serverSeq above any a counter could have reached."""
    return time.time_ns() // 1000


class MemorySeqStore:
    """For tests and embedding: starts where it is told, keeps nothing."""

    def __init__(self, start: int = 0) -> None:
        self._reserved = start

    def load(self) -> int:
        return self._reserved

    def reserve(self, upto: int) -> None:
        self._reserved = upto


class FileSeqStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> int:
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            floor = safe_floor()
            log.error(
                "%s cannot be read (%s); serverSeq resumes at %d, above any it could have reached",
                self.path,
                exc.strerror or exc,
                floor,
            )
            return floor
        try:
            value = int(text.strip())
        except ValueError:
            problem = f"not a serverSeq reservation: {text[:40]!r}"
        else:
            if 0 <= value <= MAX_SEQ:
                return value
            problem = f"serverSeq reservation {value} out of range"
        set_aside(self.path, problem)
        floor = safe_floor()
        log.error("serverSeq resumes at %d, above any it could have reached", floor)
        return floor

    def reserve(self, upto: int) -> None:
        write_atomic(self.path, f"{upto}\n".encode())


class Sequencer:
    """The one counter every state change is numbered by."""

    def __init__(self, store: MemorySeqStore | FileSeqStore, block: int = BLOCK) -> None:
        self._store = store
        #: Orders the renewal's write (in a thread) and one the event loop
        #: must make itself: never two writes of the file at once.
        self._lock = threading.Lock()
        self.current = store.load()
        #: What the store holds for sure: no number past it is handed out
        #: while the disk takes writes.
        self.reserved = self.current
        #: The last reservation the store took (set under the lock, by whichever thread wrote it).
        self._on_disk = self.current
        #: How many numbers the next reservation takes ahead (grows with the pace).
        self.block = block
        self._wake: trio.Event | None = None
        #: Set (and replaced) each time a renewal's write ends, well or not.
        self._landed = trio.Event()
        #: Why the reservation cannot be written, while it cannot.
        self.failing: str | None = None
        self._beyond = False
        #: A write under way outlasted ``STALL``: not waited for again until it ends.
        self._stalled = False
        self._reserve_now()

    def unavailable(self) -> str | None:
        """Why no number can be handed out now, or None when one can: the
        next one would pass the reservation on disk, which cannot be written."""
        if self.current < self.reserved:
            return None
        if self._wake is None or self.failing is None:
            # No renewal task (yet), or a healthy disk still writing its
            # renewal: the caller cannot wait, so the reservation is written
            # here (after the write under way, if one is).
            if self._wake is None:
                self._reserve_now()
            else:
                self._catch_up()
            if self.current < self.reserved:
                return None
            if self.failing is None:
                return f"this host's serverSeq reservation took over {STALL:g} s to write; try again"
        if not self._beyond:
            self._beyond = True
            log.error(
                "serverSeq %d is the last one reserved on disk (%s): no action is numbered, "
                "so none is taken, until the reservation can be written",
                self.reserved,
                self.failing,
            )
        return (
            "this host cannot number actions now: its serverSeq reservation cannot be written "
            f"({self.failing}); try again once the disk takes writes"
        )

    async def numbered(self) -> None:
        """Return once a number can be handed out without writing on the
        event loop, or once the disk refused (``unavailable`` says why): a
        client's action waits here while a healthy disk writes the renewal."""
        while self.current >= self.reserved and self.failing is None and self._wake is not None:
            self._wake.set()  # renewed from here on, if it was not yet asked for
            await self._landed.wait()

    def next(self) -> int:
        """The next number; only after ``unavailable()`` said None."""
        if self.unavailable() is not None:
            raise RuntimeError("serverSeq asked for past the reservation on disk")
        self.current += 1
        if self._wake is not None and self.current > self.reserved - self.block // 2:
            self._wake.set()
        return self.current

    def _upto(self) -> int:
        return min(self.current + self.block, MAX_SEQ)

    def _reserve(self, upto: int) -> None:
        with self._lock:
            self._store.reserve(upto)
            self._on_disk = upto

    def _catch_up(self) -> None:
        """The block spent while the renewal task writes (or is about to):
        on the event loop, wait for that write, briefly, and take it. Once
        it outlasted ``STALL``, nothing waits for it again until it ends."""
        if self._stalled:
            return
        log.warning(
            "serverSeq %d: the reservation was spent before its renewal landed; "
            "the event loop waits for it (the next blocks are larger)",
            self.reserved,
        )
        self._grow()
        if not self._lock.acquire(timeout=STALL):
            self._stalled = True
            log.error("serverSeq: the reservation's write took over %g s; changes are dropped until it ends", STALL)
            return
        try:
            landed = self._on_disk
        finally:
            self._lock.release()
        if landed > self.current:
            self._written(landed)
        else:  # not under way yet: written here
            self._reserve_now()

    def _reserve_now(self) -> None:
        upto = self._upto()
        try:
            self._reserve(upto)
        except OSError as exc:
            self._failed(exc)
        else:
            self._written(upto)

    def _grow(self) -> None:
        if self.block < MAX_BLOCK:
            self.block = min(self.block * 2, MAX_BLOCK)
            log.info("serverSeq is reserved %d ahead now, at the pace actions are numbered", self.block)

    def _land(self) -> None:
        self._stalled = False
        self._landed.set()
        self._landed = trio.Event()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Renew the reservation off the event loop, ahead of the counter."""
        self._wake = trio.Event()
        task_status.started()
        delay = FIRST_RETRY
        try:
            while True:
                if self.current <= self.reserved - self.block // 2:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    continue
                upto, before = self._upto(), self.current
                try:
                    await threads.run("store", self._reserve, upto)
                except OSError as exc:
                    self._failed(exc)
                    self._land()
                    await trio.sleep(delay)
                    delay = min(delay * 2, LAST_RETRY)
                    continue
                if self.current - before > self.block // 4:  # the pace outran a quarter block per write
                    self._grow()
                self._written(upto)
                self._land()
                delay = FIRST_RETRY
        finally:
            self._wake = None
            self._land()

    def _written(self, upto: int) -> None:
        self.reserved = max(self.reserved, upto)
        if self.failing is not None:
            log.warning("the serverSeq reservation is written again (after: %s); actions are numbered", self.failing)
            self.failing = None
        if self.current < self.reserved:
            self._beyond = False

    def _failed(self, exc: OSError) -> None:
        reason = exc.strerror or str(exc) or type(exc).__name__
        if self.failing is None:
            log.error(
                "the serverSeq reservation cannot be written (%s); numbering goes on up to %d, "
                "then stops until the retried write succeeds",
                reason,
                self.reserved,
            )
        self.failing = reason

    def close(self) -> None:
        """A clean stop: the next start resumes right after the last number."""
        try:
            self._reserve(self.current)
        except OSError as exc:
            self._failed(exc)
            if self.current > self.reserved:
                log.error(
                    "serverSeq %d was never reserved on disk (%d is): the next start may repeat numbers",
                    self.current,
                    self.reserved,
                )
