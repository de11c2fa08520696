"""Start a real ``ahpd`` process and talk to it over a real socket."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from trio_websocket import WebSocketConnection, open_websocket_url

from ahpd.protocol.strict_schema import validator

READY = "ahpd ready: "


class Daemon:
    def __init__(self, process: trio.Process, url: str, data_dir: Path) -> None:
        self.process = process
        self.url = url
        self.data_dir = data_dir

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    async def wait(self, timeout: float = 15) -> int:
        with trio.fail_after(timeout):
            return await self.process.wait()


async def _read_line(stream: trio.abc.ReceiveStream, timeout: float) -> str:
    data = b""
    with trio.fail_after(timeout):
        while not data.endswith(b"\n"):
            chunk = await stream.receive_some(1)
            if not chunk:
                break
            data += chunk
    return data.decode()


@asynccontextmanager
async def running_daemon(data_dir: Path, *args: str, env: dict[str, str] | None = None,
                         **popen: Any) -> AsyncIterator[Daemon]:
    """``popen``: more for ``open_process`` (``stderr=``, ``preexec_fn=``)."""
    command = [sys.executable, "-m", "ahpd", "run", "--port", "0", "--data-dir", str(data_dir), *args]
    env = dict(env or {})
    if "HOME" not in env and "CLAUDE_CONFIG_DIR" not in env:
        # Claude Code's transcripts are the catalogue's past sessions: a test
        # that did not give the daemon a home of its own must not list (or
        # write into) the ones of whoever runs the suite.
        env["CLAUDE_CONFIG_DIR"] = str(data_dir.parent / f"{data_dir.name}-claude")
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, env={**os.environ, **env}, **{"stderr": None, **popen},
    )
    try:
        line = await _read_line(process.stdout, timeout=30)
        assert line.startswith(READY), f"no ready line, got {line!r}"
        yield Daemon(process, line[len(READY):].strip(), data_dir)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


class Rpc:
    """A minimal AHP client over a real WebSocket."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self.next_id = 0
        self.notes: list[dict[str, Any]] = []

    async def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 10) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        await self.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}}))
        with trio.fail_after(timeout):
            while True:
                frame = json.loads(await self.ws.get_message())
                if frame.get("id") == ident and "method" not in frame:
                    return frame
                self.notes.append(frame)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.ws.send_message(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    async def next_note(self, timeout: float = 10) -> dict[str, Any]:
        if self.notes:
            return self.notes.pop(0)
        with trio.fail_after(timeout):
            return json.loads(await self.ws.get_message())

    async def initialize(self, client_id: str = "test", subscriptions=("ahp-root://",)) -> dict[str, Any]:
        reply = await self.call("initialize", {
            "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": client_id,
            "initialSubscriptions": list(subscriptions),
        })
        assert "result" in reply, reply
        return reply["result"]


@asynccontextmanager
async def rpc(url: str) -> AsyncIterator[Rpc]:
    async with open_websocket_url(url, max_message_size=64 * 2**20) as ws:
        yield Rpc(ws)


def fits(pointer: str, value: Any) -> None:
    """``value`` is valid against the protocol's schema at ``pointer``."""
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator(pointer).iter_errors(value)]
    assert errors == [], errors


async def until(client: Rpc, predicate, timeout: float = 240) -> list[dict]:
    """Notes up to and including the first one ``predicate`` accepts, each
    action checked against the schema. ``timeout`` is a hang guard only (an
    agent starting on a loaded machine may be silent for a while); it
    governs the whole wait, not each note's own."""
    seen = []
    with trio.fail_after(timeout):
        while True:
            note = await client.next_note(timeout=timeout)
            if note.get("method") == "action":
                fits("/notifications/action", note["params"])
            seen.append(note)
            if predicate(note):
                return seen
