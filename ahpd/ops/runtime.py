"""The runtime record ``<data_dir>/ahpd.json``: which process serves which URL.

``ahpd status`` and ``ahpd stop`` (and clients that discover the daemon) read
it instead of guessing a port. It is written whole or not at all (a private
temporary file renamed over the old one), so a reader never sees half a record.

A record outlives a crash, so a reader checks that its pid still runs; a dead
pid makes the record *stale*, reported as absent (with a log line saying so).
A pid can be reused by another program after a crash: callers that are about
to act on the process (``ahpd stop``) also check ``pid_is_ahpd``.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Any

from ahpd.ops.paths import ensure_private_dir
from ahpd.ports.atomic import write_atomic

log = logging.getLogger(__name__)

RUNTIME_FILE = "ahpd.json"


def runtime_path(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / RUNTIME_FILE


def utc_now_iso() -> str:
    """Now as ISO-8601 UTC with a ``Z`` suffix, e.g. ``2026-01-02T03:04:05Z``."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def pid_alive(pid: int) -> bool:
    """True while ``pid`` is a running process (a zombie awaiting its parent counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just not ours to signal
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no procfs (not Linux): kill(0) is all we know
    return state not in (b"Z", b"X")


def pid_is_ahpd(pid: int) -> bool:
    """On Linux, whether ``/proc/<pid>/cmdline`` mentions ahpd; True where that cannot be known."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read()
    except FileNotFoundError:
        return not os.path.isdir("/proc/self")  # procfs exists and the pid is gone: not ahpd
    except OSError:
        return True
    return b"ahpd" in argv


def write_runtime(data_dir: str | os.PathLike[str], **fields: Any) -> Path:
    """Atomically write the record (mode 0600); ``pid`` and ``startedAt`` default to ours and now.

    The daemon passes ``host``, ``port`` and ``url`` once it listens.
    """
    directory = ensure_private_dir(data_dir)
    record = {"pid": os.getpid(), "startedAt": utc_now_iso(), **fields}
    write_atomic(directory / RUNTIME_FILE, (json.dumps(record, indent=2) + "\n").encode("utf-8"))
    return directory / RUNTIME_FILE


def read_runtime(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The record, or None when there is none, it is unreadable, or its pid has exited."""
    path = runtime_path(data_dir)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable runtime record %s: %s", path, exc)
        return None
    pid = record.get("pid") if isinstance(record, dict) else None
    if not isinstance(pid, int) or isinstance(pid, bool):
        log.warning("ignoring runtime record %s without a valid pid", path)
        return None
    if not pid_alive(pid):
        log.warning("runtime record %s is stale: pid %d is not running", path, pid)
        return None
    return record


def remove_runtime(data_dir: str | os.PathLike[str]) -> bool:
    """Remove the record if it names this process; a successor's record is left alone."""
    path = runtime_path(data_dir)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("pid") != os.getpid():
        return False
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


LOCK_FILE = "ahpd.lock"


class AlreadyRunning(Exception):
    """Another live process holds the data directory; the message names its pid."""


_held: list[int] = []  # the lock's descriptors: closing one would let a second daemon in


def hold_data_dir(data_dir: str | os.PathLike[str]) -> None:
    """Take ``<data_dir>/ahpd.lock`` for the rest of this process's life, or
    raise :class:`AlreadyRunning`.

    ``flock`` is released by the kernel when the process ends, however it
    ends, so unlike ``ahpd.json`` the lock is never stale. The holder's pid is
    written into the file (after the lock is ours) so the refusal can name it
    even before the holder has written its ``ahpd.json``.
    """
    path = Path(data_dir) / LOCK_FILE
    # The descriptor held is read-only: a file kept open for writing would
    # pin the data directory's filesystem writable (no read-only remount).
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600))
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip()
        os.close(fd)
        who = f"pid {holder}" if holder.isdigit() else "another process"
        raise AlreadyRunning(f"another ahpd ({who}) already runs with data directory {data_dir}") from None
    except BaseException:
        os.close(fd)
        raise
    _held.append(fd)
    writer = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.write(writer, f"{os.getpid()}\n".encode("ascii"))
    finally:
        os.close(writer)
