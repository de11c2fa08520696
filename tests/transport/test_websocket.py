"""serve_websocket against real clients on 127.0.0.1: trio-websocket's client,
raw HTTP over a trio TCP stream, and a raw socket that stops reading."""

from __future__ import annotations

import logging
import socket

import pytest
import trio
import trio_websocket
from trio_websocket import ConnectionClosed, ConnectionRejected

from ahpd.transport import base

from .conftest import LIMIT, EchoHandler, serving, transport_tasks, wait_until, ws_client

UPGRADE_HEAD = (
    "GET {target} HTTP/1.1\r\n"
    "Host: 127.0.0.1\r\n"
    "Connection: Upgrade\r\n"
    "Upgrade: websocket\r\n"
    "Sec-WebSocket-Version: 13\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    "\r\n"
)


async def http(port: int, head: str) -> tuple[int, dict[str, str], bytes]:
    """Send a raw request head; read the whole answer (the server closes after it)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(head.encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head_bytes, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head_bytes.decode().split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


async def closed_by_server(ws: trio_websocket.WebSocketConnection) -> trio_websocket.CloseReason:
    """Read until the server closes; the close code and reason it sent."""
    with pytest.raises(ConnectionClosed) as info:
        while True:
            await ws.get_message()
    assert info.value.reason is not None
    return info.value.reason


async def rejection(port: int, target: str) -> ConnectionRejected:
    """Attempt a handshake with trio-websocket's client over a stream we own
    (its ``open_websocket`` leaves the socket open when rejected)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        with pytest.RaisesGroup(ConnectionRejected, allow_unwrapped=True) as info:
            async with trio.open_nursery() as nursery:
                await trio_websocket.wrap_client_stream(nursery, stream, "127.0.0.1", target)
    rejected = info.value if isinstance(info.value, ConnectionRejected) else info.value.exceptions[0]
    assert isinstance(rejected, ConnectionRejected)
    return rejected


class RawClient:
    """A WebSocket client that completes the handshake and then never reads."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock

    @classmethod
    async def connect(cls, port: int, target: str = "/") -> RawClient:
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window fills fast
        await sock.connect(("127.0.0.1", port))
        await sock.send(UPGRADE_HEAD.format(target=target).encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = await sock.recv(1)  # byte by byte: read nothing past the 101
            assert chunk, "server closed during the handshake"
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 101 ")
        return cls(sock)

    def close(self) -> None:
        self.sock.close()


# -- frames -------------------------------------------------------------------


async def test_echo_and_frames_over_one_mebibyte_by_default():
    handler = EchoHandler()
    big = "y" * (2 * 2**20)
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            async with ws_client(server.url, max_message_size=4 * 2**20) as ws:
                await ws.send_message('{"jsonrpc":"2.0","method":"ping"}')
                assert await ws.get_message() == '{"jsonrpc":"2.0","method":"ping"}'
                await ws.send_message(big)
                assert await ws.get_message() == big
                conn = await handler.next_connection()
                assert conn.name.startswith("ws 127.0.0.1:")


async def test_binary_frames_are_ignored_with_a_log_line(caplog):
    caplog.set_level(logging.INFO, logger="ahpd.transport")
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            async with ws_client(server.url) as ws:
                await ws.send_message(b"\x00\x01binary")
                await ws.send_message("text")
                assert await ws.get_message() == "text"
    assert handler.received == ["text"]
    assert any("binary frame of 8 bytes" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        ("x" * 1001, "frame of 1001 bytes exceeds the 1000-byte limit"),
        # refused at its header: the rest is dropped unread, the close handshake completes
        ("x" * 50_000, "frame of 50000 bytes exceeds the 1000-byte limit"),
        # few enough characters, too many bytes: the limit is on bytes
        ("é" * 600, "frame of 1200 bytes exceeds the 1000-byte limit"),
    ],
)
async def test_oversized_frame_closes_with_1009_naming_the_limit(frame, expected):
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler, max_message_size=1000) as server:
            async with ws_client(server.url) as ws:
                await ws.send_message("x" * 1000)  # exactly the limit is fine
                assert await ws.get_message() == "x" * 1000
                await ws.send_message(frame)
                reason = await closed_by_server(ws)
    assert reason.code == 1009
    assert expected in reason.reason
    assert handler.received == ["x" * 1000]


# -- handlers -------------------------------------------------------------------


async def test_handler_exception_closes_only_its_connection(caplog):
    caplog.set_level(logging.INFO, logger="ahpd.transport")
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            async with ws_client(server.url) as bad, ws_client(server.url) as good:
                bad_conn = await handler.next_connection()
                await bad.send_message("raise")
                reason = await closed_by_server(bad)
                await good.send_message("still here")
                assert await good.get_message() == "still here"
            async with ws_client(server.url) as later:  # the server still accepts
                await later.send_message("hello")
                assert await later.get_message() == "hello"
            assert not server.stopped.is_set()
    assert (reason.code, reason.reason) == (1011, "internal error")
    failures = [r for r in caplog.records if r.exc_info and bad_conn.name in r.getMessage()]
    assert failures and "handler exploded" in str(failures[0].exc_info[1])


async def test_no_task_outlives_its_connection():
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            idle = sorted(transport_tasks())
            async with ws_client(server.url) as ws:
                await ws.send_message("quit")  # the handler returns
                reason = await closed_by_server(ws)
            assert reason.code == 1000
            await wait_until(lambda: sorted(transport_tasks()) == idle, "connection tasks end")

            raw = await RawClient.connect(server.listening.port)
            conn = await handler.next_connection()
            raw.close()  # the peer vanishes without a close frame
            await wait_until(lambda: sorted(transport_tasks()) == idle, "connection tasks end")
            assert conn.closed
            assert len(handler.finished) == 2


# -- the token and plain HTTP ---------------------------------------------------


@pytest.mark.parametrize(
    ("target", "headers"),
    [("/?tkn=s3cret", []), ("/?token=s3cret", []), ("/", [(b"Authorization", b"Bearer s3cret")])],
)
async def test_upgrade_with_token_is_admitted(target, headers):
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler, token="s3cret") as server:
            url = f"ws://127.0.0.1:{server.listening.port}{target}"
            async with ws_client(url, extra_headers=headers) as ws:
                await ws.send_message("in")
                assert await ws.get_message() == "in"


@pytest.mark.parametrize("target", ["/", "/?tkn=wrong", "/?token=", "/?tkn=s3cret-not"])
async def test_upgrade_without_token_is_refused_with_401(target):
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler, token="s3cret") as server:
            rejected = await rejection(server.listening.port, target)
            status, headers, _ = await http(server.listening.port, UPGRADE_HEAD.format(target=target))
    assert rejected.status_code == 401
    assert (b"access-control-allow-origin", b"*") in rejected.headers
    assert status == 401 and headers["access-control-allow-origin"] == "*"
    assert handler.received == [] and handler.finished == []


@pytest.mark.parametrize(
    ("token", "target", "extra", "expected"),
    [
        (None, "/", "", 426),
        ("s3cret", "/", "", 401),
        ("s3cret", "/?tkn=nope", "", 401),
        ("s3cret", "/?tkn=s3cret", "", 426),
        ("s3cret", "/?token=s3cret", "", 426),
        ("s3cret", "/", "Authorization: Bearer s3cret\r\n", 426),
    ],
)
async def test_plain_http_request_gets_401_or_426(token, target, extra, expected):
    with trio.fail_after(LIMIT):
        async with serving(EchoHandler(), token=token) as server:
            head = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n"
            status, headers, body = await http(server.listening.port, head)
    assert status == expected
    assert headers["access-control-allow-origin"] == "*"
    assert int(headers["content-length"]) == len(body) > 0
    if expected == 426:
        assert headers["upgrade"] == "websocket"


async def test_garbage_and_silence_do_not_disturb_the_server():
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            status, _, _ = await http(server.listening.port, "NOT HTTP AT ALL\r\n\r\n")
            assert status == 400
            silent = await trio.open_tcp_stream("127.0.0.1", server.listening.port)
            await silent.aclose()  # connects and leaves without a word
            async with ws_client(server.url) as ws:
                await ws.send_message("ok")
                assert await ws.get_message() == "ok"


# -- the queue limit --------------------------------------------------------------


async def test_queue_limit_is_read_at_every_send_and_the_client_sees_1008(caplog):
    caplog.set_level(logging.INFO, logger="ahpd.transport")
    limit = [2**20]
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler, queue_limit=lambda: limit[0]) as server:
            async with ws_client(server.url) as ws:
                conn = await handler.next_connection()
                assert conn.send("é" * 30)
                assert await ws.get_message() == "é" * 30
                await wait_until(lambda: conn.queued_bytes == 0, "the writer to catch up")
                limit[0] = 100  # a runtime config change: applies to the next send
                assert conn.send("a" * 40)
                assert conn.send("b" * 40)
                assert not conn.send("é" * 30)  # 30 characters but 60 bytes: 140 > 100
                assert not conn.send("x")  # closed now
                # what was still queued is dropped, not written: the close frame comes first
                with pytest.raises(ConnectionClosed) as info:
                    await ws.get_message()
    assert conn.closed
    reason = info.value.reason
    assert reason.code == 1008
    assert reason.reason == "client fell behind by 140 bytes"
    assert any(conn.name in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


async def test_client_that_stops_reading_is_cut_off_and_others_are_not(caplog):
    caplog.set_level(logging.INFO, logger="ahpd.transport")
    handler = EchoHandler()
    chunk = "z" * 65536
    with trio.fail_after(LIMIT):
        async with serving(handler, queue_limit=lambda: 256 * 1024) as server:
            slow_client = await RawClient.connect(server.listening.port)
            slow = await handler.next_connection()
            async with ws_client(server.url) as fast_client:
                fast = await handler.next_connection()
                sent = 0
                while slow.send(chunk):  # fills the socket buffers, then the queue
                    sent += 1
                    assert fast.send(f"tick {sent}")
                    assert await fast_client.get_message() == f"tick {sent}"
                assert slow.closed and slow.close_code == 1008
                assert slow.close_reason.startswith("client fell behind by ")
                assert not slow.send("more")
                assert slow.queued_bytes <= 256 * 1024
                # the other client is unaffected
                assert not fast.closed
                assert fast.send("after")
                assert await fast_client.get_message() == "after"
                await fast_client.send_message("echo?")
                assert await fast_client.get_message() == "echo?"
            slow_client.close()
    assert sent >= 256 * 1024 // len(chunk)  # cut off only once over the limit
    cut = [r for r in caplog.records if slow.name in r.getMessage() and "fell behind" in r.getMessage()]
    assert cut and cut[0].levelno == logging.WARNING


# -- shutdown -------------------------------------------------------------------------


async def test_shutdown_closes_every_client_with_1001_and_leaves_no_task():
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            async with ws_client(server.url) as a, ws_client(server.url) as b:
                await a.send_message("1")
                await b.send_message("2")
                assert await a.get_message() == "1" and await b.get_message() == "2"
                server.stop()
                reasons = [await closed_by_server(a), await closed_by_server(b)]
                await server.stopped.wait()
            # the clients' own tasks ended with their context; nothing of ours remains
            assert transport_tasks() == []
    assert [r.code for r in reasons] == [1001, 1001]
    assert all(r.reason == "server shutting down" for r in reasons)
    assert len(handler.finished) == 2


async def test_shutdown_is_bounded_when_a_client_does_not_read(monkeypatch):
    monkeypatch.setattr(base, "CLOSE_TIMEOUT", 0.5)
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            raw = await RawClient.connect(server.listening.port)
            conn = await handler.next_connection()
            for _ in range(200):  # ~13 MB: more than the socket buffers hold
                conn.send("w" * 65536)
            await trio.lowlevel.checkpoint()
            server.stop()
            await server.stopped.wait()
            assert transport_tasks() == []
            raw.close()
    assert conn.closed and conn.close_code == 1001
