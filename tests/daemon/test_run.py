"""``ahpd run`` as a user starts it: a real process, a real socket."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys

import pytest
import trio
from trio_websocket import ConnectionClosed, ConnectionRejected, open_websocket_url

from ..schema import fits
from .helpers import rpc, running_daemon

ROOT = "ahp-root://"


async def test_ready_line_runtime_record_root_state_and_clean_stop(tmp_path) -> None:
    data = tmp_path / "data"
    async with running_daemon(data, "--sessions", "memory") as daemon:
        assert daemon.url.startswith("ws://127.0.0.1:") and "?tkn=" in daemon.url
        record = json.loads((data / "ahpd.json").read_text())
        assert record["pid"] == daemon.process.pid and record["url"] == daemon.url
        assert stat.S_IMODE((data / "ahpd.json").stat().st_mode) == 0o600
        assert stat.S_IMODE((data / "token").stat().st_mode) == 0o600
        async with rpc(daemon.url) as client:
            result = await client.initialize()
            fits("/commands/initialize/result", result)
            [snapshot] = result["snapshots"]
            fits("/$defs/RootState", snapshot["state"])
            sub = await client.call("subscribe", {"channel": ROOT})
            fits("/commands/subscribe/result", sub["result"])
            daemon.terminate()
            with pytest.raises(ConnectionClosed) as closed:
                with trio.fail_after(10):
                    await client.ws.get_message()
            assert closed.value.reason.code == 1001
        assert await daemon.wait() == 0
    assert not (data / "ahpd.json").exists()


async def test_the_token_is_checked_at_the_upgrade(tmp_path) -> None:
    async with running_daemon(tmp_path / "d", "--sessions", "memory") as daemon:
        bare = daemon.url.split("?")[0]
        with pytest.raises(ConnectionRejected) as rejected:
            async with open_websocket_url(bare):
                pass
        assert rejected.value.status_code == 401
        with pytest.raises(ConnectionRejected):
            async with open_websocket_url(bare + "?tkn=wrong"):
                pass
        token = daemon.url.split("tkn=")[1]
        async with rpc(bare + "?token=" + token) as client:
            assert "result" in await client.call("ping")
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_token_can_be_given_or_turned_off(tmp_path) -> None:
    async with running_daemon(tmp_path / "a", "--connection-token", "s3cret") as daemon:
        assert daemon.url.endswith("?tkn=s3cret")
        daemon.terminate()
        await daemon.wait()
    async with running_daemon(tmp_path / "b", "--without-connection-token") as daemon:
        assert "?" not in daemon.url
        async with rpc(daemon.url) as client:
            assert "result" in await client.call("ping")
        daemon.terminate()
        await daemon.wait()


async def test_no_token_or_a_short_one_is_warned_about_at_start(tmp_path) -> None:
    """Said once, naming the address anyone could drive the agents through; a token of 16
    characters or more, or the generated one, is not warned about."""
    for name, argv, wanted in (
        ("none", ["--without-connection-token"], "no connection token (--without-connection-token): anyone"),
        ("short", ["--connection-token", "abc"], "the connection token is only 3 characters: anyone"),
        ("generated", [], None),
        ("enough", ["--connection-token", "x" * 16], None),
    ):
        log = tmp_path / f"{name}.log"
        with log.open("wb") as stderr:
            async with running_daemon(tmp_path / name, "--sessions", "memory", *argv, stderr=stderr) as daemon:
                address = daemon.url.split("?")[0]
                daemon.terminate()
                assert await daemon.wait() == 0
        warned = [line for line in log.read_text().splitlines() if " WARNING " in line]
        if wanted is None:
            assert warned == [], (name, warned)
        else:
            [line] = warned
            assert wanted in line and f"reach {address} " in line, (name, line)


def test_a_public_address_needs_an_explicit_token_choice(tmp_path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "ahpd", "run", "--host", "0.0.0.0", "--port", "0", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "not loopback" in run.stderr and run.stdout == ""


async def test_systemd_is_told_ready(tmp_path) -> None:
    path = str(tmp_path / "notify.sock")
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    await sock.bind(path)
    with sock:
        async with running_daemon(tmp_path / "d", env={"NOTIFY_SOCKET": path}) as daemon:
            with trio.fail_after(10):
                message = await sock.recv(1024)
            assert message == b"READY=1"
            daemon.terminate()
            assert await daemon.wait() == 0


async def test_what_a_client_set_and_server_seq_survive_a_restart(tmp_path) -> None:
    data = tmp_path / "d"
    async with running_daemon(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c")
            await client.notify(
                "dispatchAction",
                {
                    "channel": ROOT,
                    "clientSeq": 1,
                    "action": {"type": "root/configChanged", "config": {"autoReplyEnabled": True}},
                },
            )
            envelope = (await client.next_note())["params"]
            assert envelope["serverSeq"] == 1
        daemon.terminate()
        assert await daemon.wait() == 0
    async with running_daemon(data) as daemon:
        async with rpc(daemon.url) as client:
            result = await client.initialize("c")
            assert result["serverSeq"] >= 1
            values = result["snapshots"][0]["state"]["config"]["values"]
            assert values["autoReplyEnabled"] is True
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_status_and_stop_commands(tmp_path) -> None:
    data = tmp_path / "d"
    async with running_daemon(data, "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize()
            status = await trio.run_process(
                [sys.executable, "-m", "ahpd", "status", "--json", "--data-dir", str(data)],
                capture_stdout=True,
            )
            report = json.loads(status.stdout)
            assert report["live"]["connections"] == 1 and report["pid"] == daemon.process.pid
            assert report["webUrl"] == daemon.web_url and daemon.web_url.startswith("http://127.0.0.1:")
            said = await trio.run_process(
                [sys.executable, "-m", "ahpd", "status", "--data-dir", str(data)], capture_stdout=True
            )
            assert f"web console: {daemon.web_url}\n" in said.stdout.decode()
        stop = await trio.run_process([sys.executable, "-m", "ahpd", "stop", "--data-dir", str(data)], check=False)
        assert stop.returncode == 0
        assert await daemon.wait() == 0
    status = await trio.run_process(
        [sys.executable, "-m", "ahpd", "status", "--data-dir", str(data)],
        check=False,
        capture_stdout=True,
    )
    assert status.returncode == 3


async def test_stdio_end_to_end(tmp_path) -> None:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "ahpd", "stdio", "--data-dir", str(tmp_path), "--sessions", "memory"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        lines = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "channel": ROOT,
                    "protocolVersions": ["0.9.0"],
                    "clientId": "editor",
                    "initialSubscriptions": [ROOT],
                },
            },
            {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}},
        ]
        await process.stdin.send_all(b"{bad json\n" + "".join(json.dumps(message) + "\n" for message in lines).encode())
        received = b""
        with trio.fail_after(30):
            while received.count(b"\n") < 3:
                received += await process.stdout.receive_some(65536)
        replies = [json.loads(text) for text in received.decode().splitlines()]
        assert replies[0]["error"]["code"] == -32700
        assert replies[1]["result"]["protocolVersion"] == "0.9.0"
        assert replies[2] == {"jsonrpc": "2.0", "id": 2, "result": None}
        await process.stdin.aclose()
        with trio.fail_after(15):
            assert await process.wait() == 0
        stderr = await process.stderr.receive_some(65536)
        assert b"connected" in stderr  # logs go to stderr, never stdout
        logged = (tmp_path / "logs" / "ahpd.log").read_text()  # and to the file a bug report collects
        assert f"[{process.pid}]: " in logged and "connected" in logged
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
