"""The rules every Connection shares, over a fake transport (no sockets)."""

from __future__ import annotations

import trio
import trio.testing

from ahpd.transport.base import Connection, run_connection

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
