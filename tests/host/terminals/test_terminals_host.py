"""Terminals in an in-memory host over a real pty: a fault ends only the
terminal it happened in, and a host given no terminals port serves none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from ahpd.host.terminals import terminal as terminal_module
from ahpd.host.assembly import Host
from ahpd.ports.pty import PtyPort, session_members
from tests.waits import eventually

from ..harness import connect


async def until_action(client: Any, kind: str, channel: str) -> dict[str, Any]:
    while True:
        frame = await client.frame()
        params = frame.get("params", {})
        if frame.get("method") == "action" and params["channel"] == channel and params["action"]["type"] == kind:
            return params["action"]


async def test_a_fault_in_one_terminal_ends_that_terminal_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SHELL", "/bin/sh")
    original = terminal_module.Terminal._text

    def faulty(self: Any, text: str) -> None:
        if "BOOM" in text and self.uri.endswith("/bad"):
            raise RuntimeError("a bug in the reader")
        original(self, text)

    monkeypatch.setattr(terminal_module.Terminal, "_text", faulty)
    host = Host(terminals=PtyPort())
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        client = await connect(nursery, host)
        init = await client.initialize("c1")
        assert init["terminalCommandPrefix"] == "!"
        for name in ("bad", "good"):
            reply = await client.call(
                "createTerminal", {"channel": f"ahp-terminal:/{name}", "claim": {"kind": "client", "clientId": "c1"}}
            )
            assert reply["result"] is None, reply
            await client.call("subscribe", {"channel": f"ahp-terminal:/{name}"})
        bad = host.terminals.terminals["ahp-terminal:/bad"]
        pid = bad.pty.pid
        client.dispatch("ahp-terminal:/bad", {"type": "terminal/input", "data": "echo BO''OM\n"})
        exited = await until_action(client, "terminal/exited", "ahp-terminal:/bad")
        assert "exitCode" not in exited  # killed by the host, not exited on its own
        await eventually(lambda: not session_members(pid))  # the session's processes, in /proc
        client.dispatch("ahp-terminal:/good", {"type": "terminal/input", "data": "echo still here\n"})
        while "still here\r\n" not in host.terminals.terminals["ahp-terminal:/good"].text():
            await client.frame()
        assert "result" in await client.call("ping")
        nursery.cancel_scope.cancel()


async def test_a_host_without_a_terminals_port_serves_none(tmp_path: Path) -> None:
    host = Host()
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        client = await connect(nursery, host)
        init = await client.initialize("c1")
        assert "terminalCommandPrefix" not in init
        reply = await client.call(
            "createTerminal", {"channel": "ahp-terminal:/x", "claim": {"kind": "client", "clientId": "c1"}}
        )
        assert reply["error"]["code"] == -32602 and "no terminals port" in reply["error"]["message"]
        nursery.cancel_scope.cancel()
