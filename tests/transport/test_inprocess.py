"""The in-process pair, and through it the rules every connection shares
(base.Connection and run_connection)."""

from __future__ import annotations

import logging

import pytest
import trio

from ahpd.transport import inprocess_pair, run_inprocess
from ahpd.transport.base import Connection

from .conftest import LIMIT, EchoHandler


async def test_echo_round_trip_and_client_hang_up():
    handler = EchoHandler()
    conn, client = inprocess_pair("test")
    assert conn.name.startswith("test ")
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_inprocess, handler, conn)
            await client.send("one")
            await client.send("two")
            assert await client.receive() == "one"
            assert await client.receive() == "two"
            client.close()
        # run_inprocess returned: the client hung up, the handler saw None and returned
    assert handler.finished == [conn.name]
    assert conn.closed


async def test_send_counts_utf8_bytes_until_written_and_never_waits():
    conn, client = inprocess_pair()
    written = trio.Event()

    async def handler(c: Connection) -> None:
        # No checkpoint between these: send() must not wait for the writer.
        assert c.send("é" * 10)  # 10 characters, 20 bytes
        assert c.send("abc")
        assert c.queued_bytes == 23
        await written.wait()

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_inprocess, handler, conn)
            assert await client.receive() == "é" * 10
            assert await client.receive() == "abc"
            while conn.queued_bytes:  # the writer subtracts right after its write
                await trio.lowlevel.checkpoint()
            written.set()


async def test_host_side_is_never_closed_for_being_behind():
    conn, client = inprocess_pair()
    frame = "x" * 2**20

    async def handler(c: Connection) -> None:
        for _ in range(40):  # 40 MiB, well past the default 16 MiB socket limit
            assert c.send(frame)
        assert not c.closed

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_inprocess, handler, conn)
            for _ in range(40):
                assert await client.receive() == frame
            assert await client.receive() is None  # the handler returned: closed 1000
    assert client.close_code == 1000


async def test_close_flushes_queued_frames_and_wakes_receive():
    conn, client = inprocess_pair()
    woke = []

    async def handler(c: Connection) -> None:
        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                woke.append(await c.receive())

            nursery.start_soon(reader)
            await trio.lowlevel.checkpoint()  # let the reader block in receive()
            c.send("last words")
            c.close(4000, "done here")
            c.close(4001, "ignored")  # idempotent
            assert not c.send("too late")

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_inprocess, handler, conn)
            assert await client.receive() == "last words"
            assert await client.receive() is None
    assert woke == [None]
    assert (client.close_code, client.close_reason) == (4000, "done here")
    assert await conn.receive() is None


async def test_handler_exception_is_logged_and_closes_only_its_connection(caplog):
    caplog.set_level(logging.INFO, logger="ahpd.transport")
    handler = EchoHandler()
    bad, bad_client = inprocess_pair("bad")
    good, good_client = inprocess_pair("good")
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_inprocess, handler, bad)
            nursery.start_soon(run_inprocess, handler, good)
            await bad_client.send("raise")
            assert await bad_client.receive() is None
            await good_client.send("fine")
            assert await good_client.receive() == "fine"
            good_client.close()
    assert bad_client.close_code == 1011
    failures = [r for r in caplog.records if r.exc_info and bad.name in r.getMessage()]
    assert failures and "handler exploded" in str(failures[0].exc_info[1])


async def test_handler_is_cancelled_with_its_connection_on_shutdown():
    conn, client = inprocess_pair()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_inprocess, EchoHandler(), conn)
            await client.send("ping")
            assert await client.receive() == "ping"
            nursery.cancel_scope.cancel()
    assert client.close_code == 1001
    assert await client.receive() is None


@pytest.mark.parametrize("after", ["host closed", "client closed"])
async def test_client_send_after_close_raises(after):
    conn, client = inprocess_pair()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_inprocess, EchoHandler(), conn)
            if after == "host closed":
                await client.send("quit")
                assert await client.receive() is None
            else:
                client.close()
    with pytest.raises((trio.BrokenResourceError, trio.ClosedResourceError)):
        await client.send("hello?")
