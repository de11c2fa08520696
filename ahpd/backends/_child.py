"""A helper process's ``trio.run`` that a SIGTERM ends through its cleanup.

The boot probe and the catalogue ask an agent from a short-lived Python
process of their own, and the agent runs in a process group of its own
beneath it. The daemon stops such a helper as ``trio.run_process`` stops
anything it is no longer waiting for, with SIGTERM, and Python's default for
SIGTERM is to die on the spot: the agent's group, which only the helper's
``finally`` ends, was left running with nobody to reap it (an agent that
never answered, still there an hour after its daemon stopped). Here SIGTERM
cancels the work instead, so every ``finally`` runs, then exits 143.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

T = TypeVar("T")

#: The exit status of a process ended by SIGTERM, as a shell reports it.
TERMINATED = 128 + signal.SIGTERM


def run(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(fn, *args)``; on SIGTERM, ``fn`` is cancelled, its cleanup
    runs, and the process exits with :data:`TERMINATED`."""
    told = False

    async def main() -> Any:
        nonlocal told
        result: Any = None
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal told
                with trio.open_signal_receiver(signal.SIGTERM) as signals:
                    async for _ in signals:
                        told = True
                        nursery.cancel_scope.cancel()
                        return

            nursery.start_soon(watch)
            result = await fn(*args)
            nursery.cancel_scope.cancel()
        return result

    result = trio.run(main)
    if told:
        sys.exit(TERMINATED)
    return result
