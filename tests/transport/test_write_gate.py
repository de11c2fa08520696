"""The writers of a WebSocket server share a write gate: frames queued in a
burst go out in one write per connection, and a loop that never idles still
gets its frames written.

Real WebSockets on 127.0.0.1 (``serving`` and trio-websocket's client); the
server's writes are counted where they happen, ``trio.SocketStream.send_all``
on the server's side of the connection.
"""

from __future__ import annotations

from typing import Any

import trio

from ahpd.transport.base import Connection

from .conftest import serving, ws_client

BURST = 50


class Burst:
    """On ``"burst"``, sends ``BURST`` frames with a checkpoint between two, as
    a host handling a burst of dispatches yields between two of them."""

    async def __call__(self, conn: Connection) -> None:
        while (text := await conn.receive()) is not None:
            if text == "burst":
                for i in range(BURST):
                    conn.send(f"frame {i}")
                    await trio.lowlevel.checkpoint()
            else:
                conn.send(text)


def count_server_writes(monkeypatch, port: list[int]) -> list[bytes]:
    writes: list[bytes] = []
    send_all = trio.SocketStream.send_all

    async def counting(self: trio.SocketStream, data: Any) -> None:
        if port and self.socket.getsockname()[1] == port[0]:
            writes.append(bytes(data))
        await send_all(self, data)

    monkeypatch.setattr(trio.SocketStream, "send_all", counting)
    return writes


async def test_frames_queued_in_a_burst_go_out_in_one_write(monkeypatch):
    port: list[int] = []
    writes = count_server_writes(monkeypatch, port)
    async with serving(Burst()) as server, ws_client(server.url) as ws:
        await ws.send_message("hello")
        assert await ws.get_message() == "hello"
        port.append(server.listening.port)
        await ws.send_message("burst")
        got = [await ws.get_message() for _ in range(BURST)]
    assert got == [f"frame {i}" for i in range(BURST)]
    carrying = [w for w in writes if b"frame " in w]
    # One write per frame before the gate; the burst now goes out in one
    # (two if the clock's hold ran out on a loaded machine, a few at worst).
    assert 1 <= len(carrying) <= BURST // 10, len(carrying)


async def test_a_loop_that_never_idles_still_gets_its_frames_written():
    async def spin() -> None:
        while True:  # always runnable: the loop is never idle while this runs
            await trio.lowlevel.checkpoint()

    async with serving(Burst()) as server, ws_client(server.url) as ws:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(spin)
            for text in ("one", "two", "three"):
                await ws.send_message(text)
                assert await ws.get_message() == text  # released by the gate's hold, not by idleness
            nursery.cancel_scope.cancel()
