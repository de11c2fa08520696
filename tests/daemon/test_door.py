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


async def test_defaults_fit_the_open_file_limit_and_a_flood_gets_503(tmp_path) -> None:
    log = tmp_path / "stderr"
    with open(log, "wb") as stderr:  # noqa: ASYNC230 - the child's log file, opened before it starts
        async with running_daemon(
            tmp_path / "d", "--sessions", "memory", "--without-connection-token", stderr=stderr, preexec_fn=_nofile(256)
        ) as daemon:
            port = urlsplit(daemon.url).port
            flood = await _flood(port, SILENT)
            assert len(flood) == SILENT
            # every pending slot (256 // 2 // 8 = 16) is held by a silent one: a client is turned away
            assert await _first_line(port) == b"HTTP/1.1 503 Service Unavailable"
            for stream in flood:
                await stream.aclose()
            await _served_again(daemon.url, "after-the-flood")
            assert daemon.process.returncode is None
            daemon.terminate()
            assert await daemon.wait() == 0
    text = log.read_text()
    assert "at most 128 connections, 16 in their request head" in text
    assert "refused with 503" in text


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
