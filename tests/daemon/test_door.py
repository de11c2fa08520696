"""A real daemon under a flood of connections, short of file descriptors, and
fed client strings built to forge its log lines."""

from __future__ import annotations

import json
import resource
from urllib.parse import urlsplit

import trio

from .helpers import eventually, rpc, running_daemon

SILENT = 300


def _nofile(soft: int):
    """A ``preexec_fn`` that gives the daemon a soft open-file limit of ``soft``."""

    def lower() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return lower


async def _flood(port: int, count: int) -> list[trio.SocketStream]:
    """``count`` connections that never send a byte (those the kernel refuses are skipped)."""
    out = []
    for _ in range(count):
        try:
            out.append(await trio.open_tcp_stream("127.0.0.1", port))
        except OSError:
            break
    return out


async def _first_line(port: int) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        answer = b""
        while b"\r\n" not in answer:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n")[0]


async def _served_again(url: str, client_id: str) -> None:
    """Until a client is served again: the daemon notices the flood's departures
    in its own time, and a client it cannot take yet is refused or reset, which
    is no event this side can wait on but the next attempt."""
    while True:
        try:
            async with rpc(url) as client:
                await client.initialize(client_id)
                return
        except Exception:  # noqa: BLE001 - refused or reset while the daemon catches up: try again
            await trio.sleep(0.1)


async def test_defaults_fit_the_open_file_limit_and_a_silent_flood_is_pushed_out(tmp_path) -> None:
    log = tmp_path / "stderr"
    with open(log, "wb") as stderr:  # noqa: ASYNC230 - the child's log file, opened before it starts
        async with running_daemon(
            tmp_path / "d", "--sessions", "memory", "--without-connection-token", stderr=stderr, preexec_fn=_nofile(256)
        ) as daemon:
            port = urlsplit(daemon.url).port
            flood = await _flood(port, SILENT)
            assert len(flood) == SILENT
            # every slot (256 // 2 = 128) is held by a silent one: the oldest makes room for a client
            assert await _first_line(port) == b"HTTP/1.1 101 Switching Protocols"
            for stream in flood:
                await stream.aclose()
            await _served_again(daemon.url, "after-the-flood")
            assert daemon.process.returncode is None
            daemon.terminate()
            assert await daemon.wait() == 0
    text = log.read_text()
    assert "at most 128 connections, 128 in their request head" in text
    assert "dropping the oldest not yet admitted to make room" in text


TRICKLERS = 200
LEGIT = 20


async def _trickle(port: int, reopened: list[int]) -> None:
    """A local process without the token: one connection sending a request
    head that never ends, a byte at a time, opened again whenever it is
    dropped or refused."""
    while True:
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            await trio.sleep(0.05)
            continue
        try:
            async with stream:
                await stream.send_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                while True:
                    await stream.send_all(b"a")
                    with trio.move_on_after(0.2):  # the attack's pace: a byte every 0.2 s
                        await stream.receive_some(4096)  # dropped, or answered (503): go again
                        break
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        reopened[0] += 1


async def test_tokenless_tricklers_cannot_shut_the_door(tmp_path) -> None:
    """Attack: more connections than there are slots (256 // 2 = 128 here)
    trickle an endless request head; each newcomer of theirs pushes out the
    oldest, so every real client is admitted at its first try (before: every
    one was answered 503 while the flood lasted)."""
    async with running_daemon(tmp_path / "d", "--sessions", "memory", preexec_fn=_nofile(256)) as daemon:
        port = urlsplit(daemon.url).port
        reopened = [0]
        async with trio.open_nursery() as flood:
            for _ in range(TRICKLERS):
                flood.start_soon(_trickle, port, reopened)
            # the flood is at full strength once its connections are turned away and come back
            await eventually(lambda: reopened[0] >= TRICKLERS)
            served = 0
            for n in range(LEGIT):
                async with rpc(daemon.url) as client:  # a 503 here raises: refused at its first try
                    await client.initialize(f"legit-{n}")
                    assert "result" in await client.call("ping", {})
                    served += 1
            assert reopened[0] >= 2 * TRICKLERS  # still under attack throughout
            flood.cancel_scope.cancel()
        assert served == LEGIT
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_out_of_file_descriptors_on_accept_the_daemon_waits_and_lives(tmp_path) -> None:
    log = tmp_path / "stderr"
    with open(log, "wb") as stderr:  # noqa: ASYNC230 - the child's log file, opened before it starts
        # caps above the open-file limit on purpose: accept itself runs out
        async with running_daemon(
            tmp_path / "d",
            "--sessions",
            "memory",
            "--without-connection-token",
            "--max-connections",
            "1000",
            "--max-pending-connections",
            "1000",
            stderr=stderr,
            preexec_fn=_nofile(96),
        ) as daemon:
            port = urlsplit(daemon.url).port
            flood = await _flood(port, 200)
            await eventually(lambda: b"EMFILE" in log.read_bytes())
            for stream in flood:
                await stream.aclose()
            await _served_again(daemon.url, "after-emfile")
            assert daemon.process.returncode is None
            daemon.terminate()
            assert await daemon.wait() == 0
    text = log.read_text()
    assert text.count("accept failed (EMFILE)") >= 1
    assert "accept works again" in text


async def test_a_client_cannot_forge_log_lines(tmp_path) -> None:
    forged = "a\nahpd ready: ws://127.0.0.1:1/\r\x1b[2J\u2028INFO fake"
    log = tmp_path / "stderr"
    with open(log, "wb") as stderr:  # noqa: ASYNC230 - the child's log file, opened before it starts
        async with running_daemon(tmp_path / "d", "--sessions", "memory", stderr=stderr) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize(forged)
                await client.notify("no/such\nahpd ready: again", {})
                assert "result" in await client.call("ping", {})
            daemon.terminate()
            assert await daemon.wait() == 0
    raw = log.read_bytes()
    assert b"\x1b" not in raw and b"\r" not in raw and "\u2028".encode() not in raw
    lines = raw.decode().splitlines()
    assert not [line for line in lines if line.startswith(("ahpd ready", "INFO fake"))]
    escaped = json.dumps(forged)[1:-1].replace("\\u001b", "\\x1b")  # \n, \r, \x1b, \u2028 as written
    assert any(escaped in line for line in lines), escaped
    assert any("no/such\\nahpd ready: again" in line for line in lines)
