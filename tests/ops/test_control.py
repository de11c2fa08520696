"""The control socket, served by trio and queried by the blocking client."""

from __future__ import annotations

import json
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
import trio

from ahpd.ops.control import ControlSocketInUse, query_status, serve_control


def counts() -> dict[str, Any]:
    return {"connections": 3, "sessions": 7}


async def ask(path: Path, line: bytes) -> dict[str, Any]:
    stream = await trio.open_unix_socket(str(path))
    async with stream:
        await stream.send_all(line)
        buf = b""
        with trio.fail_after(10):
            while not buf.endswith(b"\n"):
                chunk = await stream.receive_some()
                assert chunk, "closed without an answer"
                buf += chunk
    return json.loads(buf)


async def test_round_trip_and_cleanup(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with trio.open_nursery() as nursery:
        path = await nursery.start(serve_control, data, counts)
        assert path == data / "control.sock"
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert await trio.to_thread.run_sync(query_status, data) == counts()
        assert await ask(path, b'{"cmd": "reboot"}\n') == {"error": "unknown cmd 'reboot'; known: 'status'"}
        assert "error" in await ask(path, b"not json\n")
        assert await ask(path, b'{"cmd": "status"}\n') == counts()  # still serving after bad requests
        nursery.cancel_scope.cancel()
    assert not path.exists()
    assert sorted(p.name for p in data.iterdir()) == []


async def test_failing_status_is_answered_as_an_error(tmp_path: Path) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("boom")

    async with trio.open_nursery() as nursery:
        path = await nursery.start(serve_control, tmp_path, broken)
        answer = await ask(path, b'{"cmd": "status"}\n')
        assert "boom" in answer["error"]
        nursery.cancel_scope.cancel()


async def test_stale_socket_file_is_replaced(tmp_path: Path) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "control.sock"))
    stale.close()  # the file stays, nobody listens: what a crash leaves behind
    assert await trio.to_thread.run_sync(query_status, tmp_path) is None
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_control, tmp_path, counts)
        assert await trio.to_thread.run_sync(query_status, tmp_path) == counts()
        nursery.cancel_scope.cancel()


async def test_a_live_socket_is_not_taken_over(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_control, tmp_path, counts)
        with pytest.raises(ControlSocketInUse):
            await nursery.start(serve_control, tmp_path, lambda: {})
        assert await trio.to_thread.run_sync(query_status, tmp_path) == counts()
        nursery.cancel_scope.cancel()


def test_query_without_a_daemon_is_none(tmp_path: Path) -> None:
    assert query_status(tmp_path, timeout=1.0) is None
