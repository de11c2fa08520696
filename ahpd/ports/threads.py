"""Worker threads, bounded per family.

``trio.to_thread.run_sync`` shares one limiter of 40 threads across the
whole process. One family that holds threads for long (a watcher loop, a
read of a trickling web server) then starves every other: 40 of them and a
``resourceRead`` of a small file waits minutes. So every blocking call the
daemon makes goes through :func:`run` with its family, and each family has
a ``trio.CapacityLimiter`` of its own, sized here: a family can only queue
behind itself.

The families:

- ``files``: the filesystem port (``resource*``, a watch's set-up, copies,
  the debug-log archive);
- ``git``: pygit2 and git work (changesets, worktrees, branch completion);
- ``store``: what the stores write and read back (sessions, seqstore, root
  config, automations);
- ``auth``: password hashing (Argon2 is slow on purpose);
- ``search``: walks over folders (file completion);
- ``agents``: a backend's own files (transcripts, an ACP agent's reads);
- ``net``: name lookups for ``diagnosticsFetch``;
- ``pty``: reading a terminal's output (non-blocking reads, milliseconds
  each, shared by every terminal).

The limiters are per trio run (a ``RunVar``), as trio's own default is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import trio

T = TypeVar("T")

#: Threads each family may use at once.
SIZES: dict[str, int] = {
    "files": 8,
    "git": 4,
    "store": 4,
    "auth": 2,
    "search": 2,
    "agents": 4,
    "net": 4,
    "pty": 4,
}

_LIMITERS: trio.lowlevel.RunVar[dict[str, trio.CapacityLimiter]] = trio.lowlevel.RunVar("ahpd_thread_limiters")


def limiter(family: str) -> trio.CapacityLimiter:
    """The limiter of ``family`` in this trio run (made at first use)."""
    try:
        limiters = _LIMITERS.get()
    except LookupError:
        limiters = {}
        _LIMITERS.set(limiters)
    found = limiters.get(family)
    if found is None:
        found = limiters[family] = trio.CapacityLimiter(SIZES[family])  # KeyError: a family nobody sized
    return found


async def run(family: str, fn: Callable[..., T], *args: Any, abandon_on_cancel: bool = False) -> T:
    """``fn(*args)`` in a worker thread of ``family``."""
    return await trio.to_thread.run_sync(fn, *args, limiter=limiter(family), abandon_on_cancel=abandon_on_cancel)


__all__ = ["SIZES", "limiter", "run"]
