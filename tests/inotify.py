"""What the kernel says a process watches: its inotify watches, read from
``/proc/<pid>/fdinfo`` (one ``inotify wd:`` line per watch, whatever library
made it), and its threads, from ``/proc/<pid>/task``."""

from __future__ import annotations

import os


def kernel_watches(pid: int | None = None) -> int:
    """How many inotify watches process ``pid`` (this one by default) holds, over all its instances."""
    base = f"/proc/{pid or os.getpid()}/fdinfo"
    count = 0
    for fd in os.listdir(base):
        try:
            with open(f"{base}/{fd}") as info:
                count += sum(1 for line in info if line.startswith("inotify wd:"))
        except OSError:
            pass  # closed meanwhile
    return count


def inotify_instances(pid: int | None = None) -> int:
    """How many inotify instances process ``pid`` has open."""
    base = f"/proc/{pid or os.getpid()}/fd"
    count = 0
    for fd in os.listdir(base):
        try:
            count += os.readlink(f"{base}/{fd}") == "anon_inode:inotify"
        except OSError:
            pass
    return count


def threads_of(pid: int | None = None) -> int:
    """How many threads process ``pid`` runs."""
    return len(os.listdir(f"/proc/{pid or os.getpid()}/task"))
