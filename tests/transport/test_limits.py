"""The door and the caps of serve_websocket, against real sockets on 127.0.0.1:
request heads over 16 KiB, Origin and Host, a flood of connections that
never speak, the connection cap, and a budget shared by clients that never read."""

from __future__ import annotations

import logging

import pytest
import trio

from ahpd.transport.websocket import Limits

from .conftest import LIMIT, EchoHandler, serving, ws_client
from .test_websocket import UPGRADE_HEAD, RawClient, http, rejection


async def _answer(stream: trio.SocketStream) -> bytes:
    """Everything the server says until it closes (a reset counts as a close)."""
    data = b""
    try:
        while chunk := await stream.receive_some(65536):
            data += chunk
    except trio.BrokenResourceError:
        pass
    return data


async def _upgrade_and_echo(port: int) -> int:
    """Open a WebSocket by hand; when admitted (101), have one frame echoed. The status."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(UPGRADE_HEAD.format(target="/").encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += await stream.receive_some(1)
        status = int(answer.split()[1])
        if status == 101:
            await stream.send_all(bytes([0x81, 0x80 | 2, 0, 0, 0, 0]) + b"hi")  # masked with zeros
            echo = b""
            while len(echo) < 4:
                echo += await stream.receive_some(4 - len(echo))
            assert echo == bytes([0x81, 2]) + b"hi"
    return status


async def _still_serves(url: str) -> None:
    async with ws_client(url) as ws:
        await ws.send_message("still here")
        assert await ws.get_message() == "still here"


# -- the request head ------------------------------------------------------------


@pytest.mark.parametrize("piece", [None, 1024], ids=["whole", "in-1KiB-pieces"])
async def test_a_head_over_16_kib_is_answered_431_and_closed(piece):
    head = UPGRADE_HEAD.format(target="/").replace("\r\n\r\n", "\r\nX-Padding: " + "p" * 17 * 1024 + "\r\n\r\n")
    with trio.fail_after(LIMIT):
        async with serving(EchoHandler()) as server:
            stream = await trio.open_tcp_stream("127.0.0.1", server.listening.port)
            async with stream:
                data = head.encode()
                step = piece or len(data)
                try:
                    for i in range(0, len(data), step):
                        await stream.send_all(data[i : i + step])
                except trio.BrokenResourceError:
                    pass  # the server answered and closed before the rest
                answer = await _answer(stream)
            assert answer.startswith(b"HTTP/1.1 431 ")
            await _still_serves(server.url)


async def test_a_head_just_under_16_kib_is_admitted():
    padding = "p" * (16 * 1024 - len(UPGRADE_HEAD.format(target="/")) - len("X-Padding: \r\n"))
    head = UPGRADE_HEAD.format(target="/").replace("\r\n\r\n", f"\r\nX-Padding: {padding}\r\n\r\n")
    assert len(head) == 16 * 1024
    with trio.fail_after(LIMIT):
        async with serving(EchoHandler()) as server:
            stream = await trio.open_tcp_stream("127.0.0.1", server.listening.port)
            async with stream:
                await stream.send_all(head.encode())
                answer = await stream.receive_some(65536)
            assert answer.startswith(b"HTTP/1.1 101 ")


# -- Origin and Host -----------------------------------------------------------------


async def test_a_web_page_cannot_open_a_tokenless_daemon():
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            port = server.listening.port
            evil = UPGRADE_HEAD.format(target="/").replace(
                "Host: 127.0.0.1", "Host: 127.0.0.1\r\nOrigin: https://evil.example"
            )
            status, headers, body = await http(port, evil)
            assert status == 403 and b"origin" in body
            rebound = UPGRADE_HEAD.format(target="/").replace("Host: 127.0.0.1", f"Host: evil.example:{port}")
            status, _, body = await http(port, rebound)
            assert status == 403 and b"Host" in body
            local = UPGRADE_HEAD.format(target="/").replace(
                "Host: 127.0.0.1", "Host: 127.0.0.1\r\nOrigin: http://localhost:3000"
            )
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(local.encode())
                assert (await stream.receive_some(65536)).startswith(b"HTTP/1.1 101 ")
            await _still_serves(server.url)
    assert handler.received == ["still here"]


async def test_with_a_token_a_foreign_host_is_still_refused():
    with trio.fail_after(LIMIT):
        async with serving(EchoHandler(), token="s3cret") as server:
            port = server.listening.port
            rebound = UPGRADE_HEAD.format(target="/?tkn=s3cret").replace("Host: 127.0.0.1", "Host: evil.example")
            status, _, _ = await http(port, rebound)
            assert status == 403
            await _still_serves(f"ws://127.0.0.1:{port}/?tkn=s3cret")


# -- connection caps ------------------------------------------------------------------


async def test_a_flood_of_silent_connections_makes_room_for_a_real_client(caplog):
    caplog.set_level(logging.INFO, logger="ahpd.transport")
    limits = Limits(connections=200, pending=20)
    handler = EchoHandler()
    with trio.fail_after(4 * LIMIT):
        async with serving(handler, limits=limits) as server:
            port = server.listening.port
            flood = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(300)]
            answers: list[bytes] = []
            async with trio.open_nursery() as nursery:

                async def hear(stream: trio.SocketStream) -> None:
                    answers.append(await _answer(stream))

                for stream in flood:
                    nursery.start_soon(hear, stream)
                # while the flood holds every pending slot, a real client pushes the oldest out
                assert await _upgrade_and_echo(port) == 101
                # every silent one but the newest few is dropped, unanswered, for those after it
                while len(answers) < 300 - limits.pending:  # noqa: ASYNC110 - each drop is the flood's own event
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()  # the newest few are still pending, unanswered
            for stream in flood:
                await stream.aclose()
            assert all(a == b"" for a in answers)
            await _still_serves(server.url)
            assert not server.stopped.is_set()
    drops = [r for r in caplog.records if "dropping the oldest" in r.getMessage()]
    assert 1 <= len(drops) <= 3  # once per spell, not once per connection


async def test_connections_beyond_the_cap_are_refused_until_one_leaves():
    with trio.fail_after(LIMIT):
        async with serving(EchoHandler(), limits=Limits(connections=3, pending=3)) as server:
            port = server.listening.port
            clients = [await RawClient.connect(port) for _ in range(3)]
            rejected = await rejection(port, "/")
            assert rejected.status_code == 503
            clients.pop().close()
            # Until the server notices the departure: a refused client is no event to wait on but a retry.
            while await _upgrade_and_echo(port) == 503:  # noqa: ASYNC110 - each try is the question
                await trio.sleep(0.05)
            for client in clients:
                client.close()


# -- one budget for every connection's queue ------------------------------------------


async def test_clients_that_never_read_share_one_budget(caplog):
    caplog.set_level(logging.INFO, logger="ahpd.transport")
    handler = EchoHandler()
    chunk = "q" * 65536
    with trio.fail_after(LIMIT):
        async with serving(
            handler, limits=Limits(connections=64, pending=8, queued_bytes=4 * 2**20), queue_limit=lambda: 64 * 2**20
        ) as server:
            port = server.listening.port
            raws = []
            conns = []
            for _ in range(6):
                raws.append(await RawClient.connect(port))
                conns.append(await handler.next_connection())
            async with ws_client(server.url) as reader:
                live = await handler.next_connection()
                # fill the six round-robin, the reader keeps up
                for n in range(400):
                    for conn in conns:
                        conn.send(chunk)
                    assert live.send(f"tick {n}")
                    assert await reader.get_message() == f"tick {n}"
                    if all(c.closed for c in conns):
                        break
                    await trio.lowlevel.checkpoint()
                budget = live._budget
                assert budget is not None and budget.total <= 4 * 2**20
                assert not live.closed
                assert any(c.closed and c.close_code == 1008 for c in conns)
            for raw in raws:
                raw.close()
    cut = [r for r in caplog.records if "has the most queued" in r.getMessage()]
    assert cut and all(r.levelno == logging.WARNING for r in cut)
