"""The failure boundary (``ahpd.host.kernel.supervise``) on its own."""

from __future__ import annotations

import logging

import pytest
import trio

from ahpd.host.kernel.supervise import run_supervised, spawn, supervised


async def test_an_error_is_logged_reported_and_stops_there(caplog: pytest.LogCaptureFixture) -> None:
    reports: list[Exception] = []
    async with trio.open_nursery() as nursery:

        async def body() -> None:
            await trio.lowlevel.checkpoint()
            raise ValueError("boom")

        spawn(nursery, "the thing", body, report=reports.append)
    assert [type(r) for r in reports] == [ValueError]
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "the thing failed" in record.getMessage() and record.exc_info is not None


async def test_an_error_inside_a_nursery_is_reported_as_itself() -> None:
    reports: list[Exception] = []
    with supervised("a nursery", reports.append):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_raise, KeyError("k"))
    assert [type(r) for r in reports] == [KeyError]


async def _raise(exc: BaseException) -> None:
    await trio.lowlevel.checkpoint()
    raise exc


async def _raise_at_once(exc: BaseException) -> None:
    raise exc  # before any checkpoint, so a cancellation cannot pre-empt it


async def test_cancellation_passes_untouched() -> None:
    reports: list[Exception] = []
    with trio.CancelScope() as scope:
        with supervised("cancelled", reports.append):
            scope.cancel()
            await trio.sleep_forever()
    assert scope.cancelled_caught and reports == []


async def test_an_error_mixed_with_a_cancellation_is_reported_and_the_cancellation_goes_on() -> None:
    reports: list[Exception] = []
    with trio.CancelScope() as outer:
        with supervised("mixed", reports.append):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_raise_at_once, RuntimeError("bad"))
                outer.cancel()
                await trio.sleep_forever()
    assert outer.cancelled_caught
    assert [type(r) for r in reports] == [RuntimeError]


def test_keyboard_interrupt_and_system_exit_pass() -> None:
    for exc in (KeyboardInterrupt(), SystemExit(3)):
        with pytest.raises(type(exc)):
            with supervised("stop", lambda e: pytest.fail("reported")):
                raise exc


def test_a_report_that_fails_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def bad_report(exc: Exception) -> None:
        raise OSError("cannot even say it")

    with supervised("twice unlucky", bad_report):
        raise ValueError("first")
    assert any("reporting its failure failed" in r.getMessage() for r in caplog.records)


async def test_a_failure_before_started_is_the_starters() -> None:
    async def body(task_status: trio.TaskStatus[None]) -> None:
        raise LookupError("could not start")

    async with trio.open_nursery() as nursery:
        with pytest.raises(LookupError):
            await nursery.start(run_supervised, "starting", body)


async def test_a_failure_after_started_is_its_own() -> None:
    reports: list[Exception] = []

    async def body(task_status: trio.TaskStatus[str]) -> None:
        task_status.started("up")
        await trio.lowlevel.checkpoint()
        raise LookupError("later")

    async with trio.open_nursery() as nursery:
        value = await nursery.start(
            lambda task_status: run_supervised("running", body, report=reports.append, task_status=task_status)
        )
    assert value == "up" and [type(r) for r in reports] == [LookupError]
