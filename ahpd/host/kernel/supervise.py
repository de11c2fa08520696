"""Failure boundaries: a fault inside one thing ends that thing, no more.

Every session, chat agent, turn, connection and background job of the host
runs as a task of its own, and the body of each is *supervised*. The rule
is the same everywhere:

* ``trio.Cancelled``, ``KeyboardInterrupt`` and ``SystemExit`` pass
  untouched: they are how a parent ends its children and how a person
  stops the daemon, and swallowing them would keep a dead thing running.
* Any ``Exception`` - alone, or inside an exception group, even one mixed
  with cancellations - is logged once with its traceback and handed to the
  supervised thing's ``report`` callback, which says it to clients in
  protocol terms (a turn ends with ``chat/error``, a session shows the
  Error status bit, a connection is closed with 1011). Then the task ends
  normally, so its parent nursery - the session's, the host's, the
  daemon's - never sees it: a parent only ever fails for its own reasons.
* A report that fails in turn is logged and dropped; it never escapes.

A thing that fails *before* it started (before ``task_status.started()``)
is its starter's failure, not its own: :func:`run_supervised` lets such an
error reach the ``nursery.start`` that waits on it (an agent that cannot
start fails the turn or the ``createSession`` that asked for it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio

log = logging.getLogger("ahpd.host")

Report = Callable[[Exception], object]


def _errors(exc: BaseException) -> tuple[Exception | None, BaseException | None]:
    """Split ``exc`` into (the errors a boundary stops, what must go on)."""
    if isinstance(exc, BaseExceptionGroup):
        errors, rest = exc.split(Exception)
        return errors, rest
    if isinstance(exc, Exception):
        return exc, None
    return None, exc


def _handle(what: str, report: Report | None, exc: BaseException) -> BaseException | None:
    """Log and report the errors in ``exc``; what must propagate, if anything."""
    errors, rest = _errors(exc)
    if errors is not None:
        log.error("%s failed; it alone ends", what, exc_info=errors)
        if report is not None:
            try:
                report(_single(errors))
            except Exception:  # noqa: BLE001 - a report never becomes a second failure
                log.exception("%s: reporting its failure failed too", what)
    return rest


def _single(errors: Exception) -> Exception:
    """The one error of a group of one (what a report names), else the group."""
    while isinstance(errors, ExceptionGroup) and len(errors.exceptions) == 1:
        errors = errors.exceptions[0]
    return errors


@contextmanager
def supervised(what: str, report: Report | None = None) -> Iterator[None]:
    """The failure boundary of a task body: see the module docstring.

    ``what`` names the thing in the log (``"turn t-1 of ahp-chat:/..."``)."""
    try:
        yield
    except BaseException as exc:  # noqa: BLE001 - sorted out by _handle
        rest = _handle(what, report, exc)
        if rest is exc:
            raise
        if rest is not None:
            raise rest from None


class _StartWatch:
    """A ``task_status`` that remembers whether ``started()`` was called."""

    def __init__(self, inner: trio.TaskStatus[Any]) -> None:
        self.inner = inner
        self.done = False

    def started(self, value: Any = None) -> None:
        self.done = True
        self.inner.started(value)


async def run_supervised(
    what: str,
    body: Callable[..., Awaitable[object]],
    *args: Any,
    report: Report | None = None,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``body(*args, task_status=...)`` under a failure boundary that
    opens once it has started: a failure before ``started()`` is raised to
    whoever awaits ``nursery.start``; a failure after it ends only ``body``.
    Use with ``nursery.start(run_supervised, what, body, ...)``."""
    watch = _StartWatch(task_status)
    try:
        await body(*args, task_status=watch)
    except BaseException as exc:  # noqa: BLE001 - sorted out by _handle
        if not watch.done:
            raise
        rest = _handle(what, report, exc)
        if rest is exc:
            raise
        if rest is not None:
            raise rest from None


def spawn(
    nursery: trio.Nursery, what: str, body: Callable[..., Awaitable[object]], *args: Any, report: Report | None = None
) -> None:
    """``nursery.start_soon(body, *args)``, supervised."""

    async def task() -> None:
        with supervised(what, report):
            await body(*args)

    nursery.start_soon(task, name=what)
