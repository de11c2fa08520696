"""The rules every Connection shares, over a fake transport (no sockets)."""

from __future__ import annotations

import trio
import trio.testing

from ahpd.transport import base
from ahpd.transport.base import Connection, QueueBudget, run_connection

from .conftest import LIMIT


class Silent(Connection):
    """A transport whose peer never says anything and swallows what it is sent."""

    def __init__(self) -> None:
        super().__init__("silent", queue_limit=lambda: 10)
        self.written: list[str] = []
        self.closed_with: tuple[int, str] | None = None

    async def _read_frame(self) -> str | None:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def _write_frame(self, text: str) -> None:
        self.written.append(text)
        await trio.lowlevel.checkpoint()

    async def _close_transport(self, code: int, reason: str) -> None:
        self.closed_with = (code, reason)


async def test_close_wakes_a_pending_receive_even_if_the_transport_would_not():
    conn = Silent()
    results: list[str | None] = []

    async def handler(c: Connection) -> None:
        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                results.append(await c.receive())

            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            c.send("bye")
            c.close(4000, "enough")

    with trio.fail_after(LIMIT):
        await run_connection(handler, conn)
    assert results == [None]
    assert conn.written == ["bye"]  # queued before close(): still written
    assert conn.closed_with == (4000, "enough")


async def test_queue_limit_counts_bytes_and_drops_what_is_pending():
    conn = Silent()

    async def handler(c: Connection) -> None:
        assert c.send("12345")
        assert c.send("é")  # 2 bytes: 7 queued
        assert c.queued_bytes == 7
        assert not c.send("abcd")  # 11 > 10
        assert c.closed and c.close_code == 1008
        assert c.close_reason == "client fell behind by 11 bytes"

    with trio.fail_after(LIMIT):
        await run_connection(handler, conn)
    assert conn.written == []  # the writer never caught up, so nothing more is written
    assert conn.queued_bytes == 0
    assert conn.closed_with == (1008, "client fell behind by 11 bytes")


class Stuck(Silent):
    """A transport whose peer stopped reading: the first write never returns."""

    def __init__(self, name: str, budget: QueueBudget) -> None:
        Connection.__init__(self, name, queue_limit=lambda: 10**9, budget=budget)
        self.written = []
        self.closed_with = None

    async def _write_frame(self, text: str) -> None:
        await trio.sleep_forever()


async def test_a_shared_budget_closes_the_connection_with_the_most_queued(monkeypatch):
    monkeypatch.setattr(base, "CLOSE_TIMEOUT", 0.1)
    budget = QueueBudget(100)
    a, b, c = (Stuck(name, budget) for name in "abc")
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            for conn in (a, b, c):
                assert await nursery.start(conn._run_io)
            assert a.send("a" * 30) and b.send("b" * 50) and c.send("c" * 10)
            assert budget.total == 90
            assert c.send("c" * 20)  # 110 > 100: b, with the most, makes room
            assert b.closed and b.close_code == 1008 and b.close_reason == "server send queue full"
            assert not a.closed and not c.closed
            assert budget.total == 60 and not b.send("b")
            assert not a.send("a" * 60)  # a would hold 90 of 120: it is the one closed
            assert a.closed and a.close_code == 1008
            assert budget.total == 30 and budget.members == {c}
            big = "c" * 500  # alone over the budget, but c is not the one with the most ...
            assert not c.send(big)  # ... once it counts this frame: closed too
            assert budget.total == 0 and budget.members == set()
    assert [x.queued_bytes for x in (a, b, c)] == [0, 0, 0]


async def test_an_empty_queue_takes_a_frame_over_the_shared_budget(monkeypatch):
    monkeypatch.setattr(base, "CLOSE_TIMEOUT", 0.1)
    budget = QueueBudget(10)
    conn = Stuck("alone", budget)
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            assert await nursery.start(conn._run_io)
            assert conn.send("x" * 50)  # like the per-connection limit: an empty queue is not behind
            assert budget.total == 50
            conn.close()
    assert budget.total == 0 and budget.members == set()
