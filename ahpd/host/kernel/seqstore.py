"""Where ``serverSeq`` survives a restart.

A client remembers the highest serverSeq it saw; a host whose counter came
back at 0 could never replay to it again, and worse, would number new
actions below what the client already holds. So the counter is reserved
ahead in blocks: the file holds a value no action has reached yet, written
(and fsynced) before the counter passes it. After a crash the host resumes
from the reservation: numbers may skip, but never repeat or go backwards.

The reservation is renewed off the event loop when less than half a block
is left, and the host believes in a reservation only once its write
succeeded. A disk that refuses the write is retried with a backoff while
the counter runs on in the block already reserved. Should that block run
out before the disk takes a write, the host hands out no number above it:
a client's action is refused with the reason (``Sequencer.unavailable``),
and a change the host itself would say is dropped and logged, until the
disk takes the write. A number handed out is always below a reservation
on disk, so a crash can never make one repeat.

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
import time
from pathlib import Path

import trio

from ahpd.host.kernel.writes import FIRST_RETRY, LAST_RETRY, set_aside
from ahpd.ports.atomic import write_atomic
from ahpd.ports import threads

log = logging.getLogger("ahpd.host")

BLOCK = 1024
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

    def __init__(self, store: MemorySeqStore | FileSeqStore) -> None:
        self._store = store
        self.current = store.load()
        #: What the store holds for sure: no number past it is handed out
        #: while the disk takes writes.
        self.reserved = self.current
        self._wake: trio.Event | None = None
        #: Why the reservation cannot be written, while it cannot.
        self.failing: str | None = None
        self._beyond = False
        self._reserve_now()

    def unavailable(self) -> str | None:
        """Why no number can be handed out now, or None when one can: the
        next one would pass the reservation on disk, which cannot be written."""
        if self.current < self.reserved:
            return None
        if self._wake is None:  # no renewal task (yet): write it here
            self._reserve_now()
            if self.current < self.reserved:
                return None
        if not self._beyond:
            self._beyond = True
            log.error(
                "serverSeq %d is the last one reserved on disk (%s): no action is numbered, "
                "so none is taken, until the reservation can be written",
                self.reserved,
                self.failing or "its write is still under way",
            )
        return (
            "this host cannot number actions now: its serverSeq reservation cannot be written "
            f"({self.failing or 'the write is still under way'}); try again once the disk takes writes"
        )

    def next(self) -> int:
        """The next number; only after ``unavailable()`` said None."""
        if self.unavailable() is not None:
            raise RuntimeError("serverSeq asked for past the reservation on disk")
        self.current += 1
        if self._wake is not None and self.current > self.reserved - BLOCK // 2:
            self._wake.set()
        return self.current

    def _reserve_now(self) -> None:
        try:
            self._store.reserve(self.current + BLOCK)
        except OSError as exc:
            self._failed(exc)
        else:
            self._written(self.current + BLOCK)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Renew the reservation off the event loop, ahead of the counter."""
        self._wake = trio.Event()
        task_status.started()
        delay = FIRST_RETRY
        try:
            while True:
                if self.current <= self.reserved - BLOCK // 2:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    continue
                upto = self.current + BLOCK
                try:
                    await threads.run("store", self._store.reserve, upto)
                except OSError as exc:
                    self._failed(exc)
                    await trio.sleep(delay)
                    delay = min(delay * 2, LAST_RETRY)
                    continue
                self._written(upto)
                delay = FIRST_RETRY
        finally:
            self._wake = None

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
            self._store.reserve(self.current)
        except OSError as exc:
            self._failed(exc)
            if self.current > self.reserved:
                log.error(
                    "serverSeq %d was never reserved on disk (%d is): the next start may repeat numbers",
                    self.current,
                    self.reserved,
                )
