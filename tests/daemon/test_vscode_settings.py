"""``ahpd vscode`` prints the settings VS Code needs for the daemon that runs
now, and a client that connects the way VS Code does with them gets in
(issue 27, item 8)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio
from trio_websocket import HandshakeError

from .helpers import rpc, running_daemon


async def _vscode(data: Path, *args: str) -> trio.CompletedProcess:
    return await trio.run_process(
        [sys.executable, "-m", "ahpd", "vscode", "--data-dir", str(data), *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        stdin=-3,  # DEVNULL
    )


def _url_of(entry: dict[str, Any]) -> str:
    """The URL VS Code builds from a remoteAgentHosts entry: ws:// added, the token as ?tkn=."""
    token = entry.get("connectionToken")
    return f"ws://{entry['address']}/" + (f"?tkn={token}" if token else "")


async def test_the_settings_printed_connect_to_the_running_daemon(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with running_daemon(data, "--sessions", "memory") as daemon:
        done = await _vscode(data, "--name", "my box")
        assert done.returncode == 0, done.stderr.decode()
        settings = json.loads(done.stdout)  # the JSON alone: a script can merge it
        assert settings["chat.remoteAgentHostsEnabled"] is True
        [entry] = settings["chat.remoteAgentHosts"]
        assert set(entry) == {"name", "address", "connectionToken"} and entry["name"] == "my box"
        assert _url_of(entry) == daemon.url
        async with rpc(_url_of(entry)) as client:
            assert (await client.initialize("vscode"))["protocolVersion"] == "1.0.0"
        bad = {**entry, "connectionToken": entry["connectionToken"][:-1]}
        try:
            async with rpc(_url_of(bad)):
                raise AssertionError("a wrong token got in")
        except HandshakeError:
            pass
        assert "keep it private" in done.stderr.decode() and "Chat: Open Agents Window" in done.stderr.decode()
        assert "chat.agentHost.allowSignedOutWhenUsable" not in settings
        signed_out = json.loads((await _vscode(data, "--signed-out")).stdout)
        assert signed_out["chat.agentHost.allowSignedOutWhenUsable"] is True
        assert signed_out["chat.remoteAgentHosts"][0]["name"] == "ahpd"


async def test_without_a_token_the_entry_has_none(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with running_daemon(data, "--sessions", "memory", "--without-connection-token"):
        done = await _vscode(data)
        [entry] = json.loads(done.stdout)["chat.remoteAgentHosts"]
        assert "connectionToken" not in entry
        async with rpc(_url_of(entry)) as client:
            await client.initialize("vscode")


async def test_no_daemon_is_said_on_stderr_with_status_3(tmp_path: Path) -> None:
    done = await _vscode(tmp_path / "none")
    assert done.returncode == 3 and done.stdout == b""
    assert "no daemon runs with data directory" in done.stderr.decode()


async def test_a_record_whose_pid_is_now_another_program_names_no_daemon(tmp_path: Path) -> None:
    """A record a crashed daemon left behind, its pid since taken by another
    program, is not a daemon to connect to (as ``ahpd status`` says)."""
    data = tmp_path / "d"
    data.mkdir()
    other = await trio.lowlevel.open_process(["sleep", "600"])
    try:
        (data / "ahpd.json").write_text(json.dumps({"pid": other.pid, "url": "ws://127.0.0.1:9/?tkn=x"}))
        done = await _vscode(data)
    finally:
        other.kill()
        await other.wait()
    assert done.returncode == 3 and done.stdout == b""
    assert "no daemon runs with data directory" in done.stderr.decode() and "another program" in done.stderr.decode()
