"""Files the host keeps beside its state, written so that a full or
read-only disk costs nothing a user set and never stops the daemon.

A write is asked for, never awaited: :class:`PendingWrites` holds the
latest record of each file until the disk takes it, writes off the event
loop, and retries with a backoff, logging once when the writes start
failing and once when they are taken again. A whole file is written
atomically (``ahpd.ports.atomic``). A damaged file found at start is set
aside as ``<name>.damaged`` with a logged reason, never written over.

Every store shares these steps: the serverSeq reservation
(``ahpd.host.kernel.seqstore``), the root config values
(``ahpd.host.kernel.rootconfig``), the sessions
(``ahpd.host.sessions.store``) and the customization decisions
(``ahpd.host.customizations.decisions``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from ahpd.ports import threads

from ahpd.ports import regular

log = logging.getLogger("ahpd.host")

#: The first retry of a refused write, and the longest wait between two.
FIRST_RETRY = 0.25
LAST_RETRY = 5.0
#: How deep a stored record may nest: far beyond any state a client is
#: served, far below where encoding it again would run out of stack.
MAX_DEPTH = 200


def set_aside(path: Path, reason: str) -> None:
    """Move a damaged file out of the way, keeping it for whoever wants to
    look: ``<name>.damaged`` (``.damaged.1``... when that is taken)."""
    target = path.with_name(path.name + ".damaged")
    n = 0
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged.{n}")
    try:
        path.rename(target)
    except OSError as exc:
        log.error("%s is damaged (%s) and could not be set aside (%s); ignored", path, reason, exc.strerror or exc)
        return
    log.error("%s is damaged (%s); set aside as %s", path, reason, target.name)


def read_json(path: Path, *, constants: bool = False) -> Any:
    """The JSON in ``path``; ValueError naming what is wrong with it (also
    when what lies there is not a regular file: a folder, a symlink, a FIFO).
    A lone surrogate in a string comes back as U+FFFD; NaN is refused unless
    ``constants`` (the caller checks each value and drops only that one)."""
    data = regular.read_regular(path)  # NotRegular is a ValueError
    try:
        return regular.loads(data, constants=constants)
    except RecursionError:
        raise ValueError("nested deeper than a record can be") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason})") from None
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None


def disk_reason(exc: OSError) -> str:
    """Why the disk refused, without the name of the temporary file it refused."""
    return exc.strerror or str(exc) or type(exc).__name__


class PendingWrites:
    """The latest write of each file, kept until the disk takes it.

    ``put(key, op)`` replaces whatever was pending for ``key``: only the
    latest record of a file is ever worth writing. ``prepare(key, op)`` runs
    on the event loop (it encodes the record, so no thread reads state the
    loop may be changing) and returns what a thread then does to the disk;
    what that returns, if anything, is called back on the loop once it has
    been done (the journal store notes there what is now on disk).

    While :meth:`run` runs, writes go through one task, in a thread, in the
    order they were asked for per key. Without it (before the host runs,
    and after it stopped) a write is done at once. A write the disk refuses
    stays pending and is retried; nothing is raised to whoever asked.
    """

    def __init__(self, what: str, prepare: Callable[[str, Any], Callable[[], Any]]) -> None:
        self.what = what
        self._prepare = prepare
        self._pending: dict[str, Any] = {}
        self._wake: trio.Event | None = None
        #: Why writes are failing, while they are; None when the disk takes them.
        self.failing: str | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def put(self, key: str, op: Any) -> None:
        self._pending.pop(key, None)  # to the end: written in the order asked
        self._pending[key] = op
        if self._wake is not None:
            self._wake.set()
        else:
            self.flush()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._wake = trio.Event()
        task_status.started()
        delay = FIRST_RETRY
        try:
            while True:
                if not self._pending:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    continue
                key, op = next(iter(self._pending.items()))
                write = self._encode(key, op)
                if write is None:
                    continue
                try:
                    then = await threads.run("store", write)
                except OSError as exc:
                    self._failed(exc, key)
                    # Another file may be luckier (a file-descriptor
                    # shortage passes); this one waits its turn again.
                    if self._pending.get(key) is op:
                        self._pending[key] = self._pending.pop(key)
                    await trio.sleep(delay)
                    delay = min(delay * 2, LAST_RETRY)
                    continue
                if then is not None:
                    then()
                self._done(key, op)
                delay = FIRST_RETRY
        finally:
            self._wake = None

    def flush(self) -> bool:
        """Write what is pending now, here; True when nothing is left."""
        for key, op in list(self._pending.items()):
            write = self._encode(key, op)
            if write is None:
                continue
            try:
                then = write()
            except OSError as exc:
                self._failed(exc, key)
                break
            if then is not None:
                then()
            self._done(key, op)
        return not self._pending

    def close(self) -> None:
        """The host stops: the last chance to write what a user set."""
        if self._pending and not self.flush():
            log.error(
                "%s: %d record(s) could not be written before stopping (%s); what they held is lost",
                self.what,
                len(self._pending),
                self.failing,
            )

    def _encode(self, key: str, op: Any) -> Callable[[], Any] | None:
        try:
            return self._prepare(key, op)
        except Exception:  # noqa: BLE001 - a record that cannot be written at all is dropped, said once
            log.exception("%s: the record of %s cannot be written; dropped", self.what, key)
            if self._pending.get(key) is op:
                del self._pending[key]
            return None

    def _done(self, key: str, op: Any) -> None:
        if self._pending.get(key) is op:
            del self._pending[key]
        if self.failing is not None:
            log.warning(
                "%s: the disk takes writes again (after: %s); %d more pending",
                self.what,
                self.failing,
                len(self._pending),
            )
            self.failing = None

    def _failed(self, exc: OSError, key: str) -> None:
        if self.failing is None:
            log.error(
                "%s: a write failed (%s, writing %s); kept in memory and retried until the disk takes it",
                self.what,
                disk_reason(exc),
                key,
            )
        self.failing = disk_reason(exc)


def read_kept(path: Path, what: str, expect: type = dict, *, constants: bool = False) -> Any:
    """What a store kept in ``path``, or None when there is nothing to read:
    missing, unreadable (logged), damaged or of the wrong kind (set aside,
    so that the next write does not cover what a person may want back).
    ``what`` names the content in the messages ("the decisions")."""
    try:
        value = read_json(path, constants=constants)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.error("%s cannot be read (%s); %s start empty", path, disk_reason(exc), what)
        return None
    except ValueError as exc:
        set_aside(path, str(exc))
        return None
    if not isinstance(value, expect):
        set_aside(path, f"{what} are {'an object' if expect is dict else expect.__name__}, not {type(value).__name__}")
        return None
    return value
