"""Waiting for what a test needs, and for nothing else.

A test that waits waits for an event: a frame on a socket, an action on a
channel, a task's exit, a subscriber being told. None of these helpers has a
clock of its own; how long is too long is the one guard the root
``conftest.py`` puts on every async test. ``eventually`` is the exception
that proves the rule: for what nothing announces (a file another process or
a thread writes, a process's state in /proc), it checks the condition, never
the clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import trio


async def eventually(predicate, interval: float = 0.05) -> None:
    """Until ``predicate()`` holds, for what no event announces: a file another
    process writes, a process's state in /proc. It checks the condition, never
    the clock: how long is the test's guard's to judge."""
    while not predicate():  # noqa: ASYNC110 - nothing to wait on but the condition itself
        await trio.sleep(interval)


def _frames(task: trio.lowlevel.Task) -> Iterator[Any]:
    """The frames ``task`` is suspended in, outermost first (its await chain)."""
    awaited: Any = task.coro
    while awaited is not None:
        frame = (
            getattr(awaited, "cr_frame", None)
            or getattr(awaited, "gi_frame", None)
            or getattr(awaited, "ag_frame", None)
        )
        if frame is not None:
            yield frame
        awaited = (
            getattr(awaited, "cr_await", None)
            or getattr(awaited, "gi_yieldfrom", None)
            or getattr(awaited, "ag_await", None)
        )


def _tasks() -> list[trio.lowlevel.Task]:
    found: list[trio.lowlevel.Task] = []

    def walk(task: trio.lowlevel.Task) -> None:
        found.append(task)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return found


async def until_tasks_exit(check) -> None:
    """Until ``check()`` holds, judged now and again each time a task of this
    trio run exits (a trio instrument): for a condition on what the run's
    tasks are doing, such as an in-process host's."""
    if check():
        return
    done = trio.Event()
    token = trio.lowlevel.current_trio_token()

    class Exits(trio.abc.Instrument):
        def task_exited(self, task: trio.lowlevel.Task) -> None:
            token.run_sync_soon(lambda: done.set() if not done.is_set() and check() else None)

    instrument = Exits()
    trio.lowlevel.add_instrument(instrument)
    try:
        await done.wait()
    finally:
        trio.lowlevel.remove_instrument(instrument)


async def until_step(check) -> None:
    """Until ``check()`` holds, judged now and again after each step any task
    of this trio run takes (a trio instrument): for a condition on an
    in-process host's own state, which only its tasks move (a writer's queue,
    a store's failing flag)."""
    if check():
        return
    done = trio.Event()
    token = trio.lowlevel.current_trio_token()

    class Steps(trio.abc.Instrument):
        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            token.run_sync_soon(lambda: done.set() if not done.is_set() and check() else None)

    instrument = Steps()
    trio.lowlevel.add_instrument(instrument)
    try:
        await done.wait()
    finally:
        trio.lowlevel.remove_instrument(instrument)


async def tasks_ended(*owners: object) -> None:
    """Until no task of this trio run is running a method of any of ``owners``
    (an in-process daemon's session, chat or turn, say): whatever they were
    doing, and whatever they do on their way out, is done."""
    ids = {id(owner) for owner in owners}

    def idle() -> bool:
        return not any(
            id(frame.f_locals.get("self")) in ids
            for task in _tasks()
            for frame in _frames(task)
            if "self" in frame.f_code.co_varnames
        )

    await until_tasks_exit(idle)


class Listener:
    """A subscriber on an in-process host's bus: lets a test wait for a
    condition on a channel, judged again each time the channel says something.
    ``host.bus.subscribe(channel, listener)`` to start."""

    def __init__(self) -> None:
        self._said = trio.Event()

    def send(self, text: str, size: int | None = None) -> bool:
        self._said.set()
        return True

    async def until(self, check) -> None:
        while not check():
            self._said = trio.Event()
            await self._said.wait()
