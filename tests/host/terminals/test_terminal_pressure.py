"""Terminals under pressure, over a real WebSocket on 127.0.0.1 and a real pty:
a watcher that stops reading, input a program never reads, more terminals
than the host allows.

The host runs in the test's trio run behind ``serve_websocket``; a stalled
watcher is a raw socket with a small receive buffer that completes the
handshake, subscribes, and never reads again.
"""

from __future__ import annotations

import gc
import json
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from ahpd.host.assembly import Host
from ahpd.ports.pty import PtyPort
from tests.host.live import live_host
from tests.daemon.helpers import Rpc, action_of, create, daemon_in_process, dispatch, is_action, rpc, start_turn, until
from tests.daemon.test_slow_client import masked_text_frame
from tests.daemon.test_terminals import env_for
from tests.transport.test_websocket import RawClient
from tests.waits import eventually

MIB = 2**20


@asynccontextmanager
async def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **config: Any) -> AsyncIterator[tuple[Host, int]]:
    """A host with real terminals behind a real WebSocket; its port."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SHELL", "/bin/sh")
    async with live_host(tmp_path, {}, terminals=PtyPort(), **config) as live:
        yield live.host, urlsplit(live.url).port or 0


async def open_terminal(client: Rpc, uri: str, client_id: str) -> None:
    reply = await client.call("createTerminal", {"channel": uri, "claim": {"kind": "client", "clientId": client_id}})
    assert reply.get("result", 1) is None, reply
    assert "result" in await client.call("subscribe", {"channel": uri})


def data_of(note: dict[str, Any], uri: str) -> dict[str, Any] | None:
    params = note.get("params", {})
    return params.get("action") if note.get("method") == "action" and params.get("channel") == uri else None


async def test_a_watcher_that_stops_reading_neither_stops_the_program_nor_the_other_watchers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = "ahp-terminal:/flood"
    size = 24 * MIB  # past the stalled watcher's queue limit (16 MiB) and what its socket's buffers hold
    async with served(tmp_path, monkeypatch) as (host, port), rpc(f"ws://127.0.0.1:{port}/") as reader:
        await reader.initialize("reader")
        await open_terminal(reader, uri, "reader")
        stalled = await RawClient.connect(port)  # SO_RCVBUF 4 KiB, set before connecting
        for ident, method, params in (
            (1, "initialize", {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "stalled"}),
            (2, "subscribe", {"channel": uri}),
        ):
            await stalled.sock.send(
                masked_text_frame(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
            )
        # It reads nothing, so only the host can say when it is watching.
        await eventually(lambda: any(p.client_id == "stalled" for p in host.bus.channels[uri].subscribers))
        [peer] = [p for p in host.peers if p.client_id == "stalled"]
        # Q is \121: the echoed command line holds none, the output nothing else.
        command = f"head -c {size} /dev/zero | tr '\\000' '\\121'; exit\n"
        await reader.notify(
            "dispatchAction",
            {"channel": uri, "clientSeq": 1, "action": {"type": "terminal/input", "data": command}},
        )
        got = 0
        while True:
            action = data_of(await reader.next_note(), uri)
            if action is None:
                continue
            if action["type"] == "terminal/data":
                got += action["data"].count("Q")
            elif action["type"] == "terminal/exited":
                break
        assert got == size  # the program finished, and the reader has every byte of it
        # The watcher that stopped reading was cut, saying why; nobody waited for it.
        assert peer.conn.close_code == 1008 and "behind" in peer.conn.close_reason
        stalled.close()


async def answers(client: Rpc, uri: str, seqs: range) -> dict[int, dict[str, Any]]:
    """The host's answer to each of ``seqs`` (the sender's dispatches on ``uri``)."""
    found: dict[int, dict[str, Any]] = {}
    while len(found) < len(seqs):
        note = await client.next_note()
        params = note.get("params", {})
        seq = params.get("origin", {}).get("clientSeq")
        if note.get("method") == "action" and params.get("channel") == uri and seq in seqs:
            found[seq] = params
    return found


async def test_input_a_program_never_reads_is_bounded_refused_and_let_go_on_dispose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = "ahp-terminal:/deaf"
    limit = 64 * 1024
    async with served(tmp_path, monkeypatch, terminalInputBytes=limit) as (host, port):
        async with rpc(f"ws://127.0.0.1:{port}/") as client:
            await client.initialize("ann")
            await open_terminal(client, uri, "ann")
            await client.notify(
                "dispatchAction",
                {
                    "channel": uri,
                    "clientSeq": 1,
                    "action": {"type": "terminal/input", "data": "stty raw -echo; echo RE''ADY; exec sleep 100000\n"},
                },
            )
            while "READY" not in ((data_of(await client.next_note(), uri) or {}).get("data") or ""):
                pass
            # sleep reads nothing, and a raw line discipline neither echoes nor
            # drops: the pty takes a few KiB, then its writer blocks.
            chunk, seqs = "k" * 16 * 1024, range(2, 2 + 64)  # 1 MiB in all
            for seq in seqs:
                await client.notify(
                    "dispatchAction",
                    {"channel": uri, "clientSeq": seq, "action": {"type": "terminal/input", "data": chunk}},
                )
            told = await answers(client, uri, seqs)
            refused = [p["rejectionReason"] for p in told.values() if "rejectionReason" in p]
            taken = len(seqs) - len(refused)
            assert refused, "every input was taken, however much the program left unread"
            assert "terminalInputBytes" in refused[0] and str(limit) in refused[0]
            terminal = host.terminals.terminals[uri]
            assert terminal.input_pending <= limit
            assert taken * len(chunk) <= limit + 64 * 1024  # what the pty itself swallowed, at most
            assert "result" in await client.call("ping")  # the host serves on

            assert "result" in await client.call("disposeTerminal", {"channel": uri})
            await terminal.exited.wait()
            assert terminal.input_pending == 0
            assert terminal._input_receive.statistics().current_buffer_used == 0
            gone = weakref.ref(terminal)
            del terminal
            await eventually(lambda: gc.collect() is not None and gone() is None)


async def test_running_terminals_are_capped_per_client_and_in_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        served(tmp_path, monkeypatch) as (host, port),
        rpc(f"ws://127.0.0.1:{port}/") as ann,
        rpc(f"ws://127.0.0.1:{port}/") as bob,
    ):
        await ann.initialize("ann")
        await bob.initialize("bob")
        await ann.notify(
            "dispatchAction",
            {
                "channel": "ahp-root://",
                "clientSeq": 1,
                "action": {
                    "type": "root/configChanged",
                    "config": {"terminalsPerClient": 2, "terminalsRunning": 3},
                },
            },
        )
        await answers(ann, "ahp-root://", range(1, 2))
        assert host.config("terminalsPerClient") == 2

        async def create(client: Rpc, name: str, client_id: str) -> dict[str, Any]:
            return await client.call(
                "createTerminal",
                {"channel": f"ahp-terminal:/{name}", "claim": {"kind": "client", "clientId": client_id}},
            )

        assert (await create(ann, "a1", "ann"))["result"] is None
        assert (await create(ann, "a2", "ann"))["result"] is None
        third = await create(ann, "a3", "ann")
        assert third["error"]["code"] == -32602 and "terminalsPerClient" in third["error"]["message"]
        assert (await create(bob, "b1", "bob"))["result"] is None
        fourth = await create(bob, "b2", "bob")
        assert fourth["error"]["code"] == -32602 and "terminalsRunning" in fourth["error"]["message"]
        assert "ahp-terminal:/b2" not in host.bus.channels and len(host.terminals.terminals) == 3

        # An exited terminal is kept for its scrollback, and no longer counts.
        await ann.call("subscribe", {"channel": "ahp-terminal:/a1"})
        await ann.notify(
            "dispatchAction",
            {"channel": "ahp-terminal:/a1", "clientSeq": 2, "action": {"type": "terminal/input", "data": "exit\n"}},
        )
        while (data_of(await ann.next_note(), "ahp-terminal:/a1") or {}).get("type") != "terminal/exited":
            pass
        assert (await create(bob, "b2", "bob"))["result"] is None
        assert (await create(ann, "a3", "ann"))["error"]["code"] == -32602  # three run again
        assert "result" in await bob.call("disposeTerminal", {"channel": "ahp-terminal:/b1"})
        assert (await create(ann, "a3", "ann"))["result"] is None


async def test_an_agents_command_finishes_though_its_only_watcher_stopped_reading(tmp_path: Path) -> None:
    """A session's terminal (a ``!command``) waits for nobody: its one
    watcher stops reading, and the command still runs to its end."""
    env = env_for(tmp_path)
    work = Path(env["HOME"]) / "work"
    size = 24 * MIB
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ann")
            _, chat = await create(client, work)
            # It waits for the watcher, then floods (Q is \121: the command line holds none).
            line = f"!while [ ! -e go ]; do sleep 0.05; done; head -c {size} /dev/zero | tr '\\000' '\\121'"
            await dispatch(client, chat, start_turn(line), 1)
            notes = await until(client, is_action("chat/toolCallContentChanged", chat))
            uri = action_of(notes[-1])["content"][0]["resource"]
            split = urlsplit(daemon.url)
            stalled = await RawClient.connect(split.port, f"{split.path}?{split.query}")
            for ident, method, params in (
                (1, "initialize", {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "stalled"}),
                (2, "subscribe", {"channel": uri}),
            ):
                await stalled.sock.send(
                    masked_text_frame(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
                )
            host = daemon.host
            await eventually(lambda: any(p.client_id == "stalled" for p in host.bus.channels[uri].subscribers))
            [peer] = [p for p in host.peers if p.client_id == "stalled"]
            (work / "go").touch()
            notes = await until(client, is_action("chat/turnComplete", chat))
            done = next(action_of(n) for n in notes if (action_of(n) or {}).get("type") == "chat/toolCallComplete")
            assert done["result"]["success"] is True
            assert host.terminals.terminals[uri].text().count("Q") > 0  # the end of it, in the scrollback
            assert peer.conn.close_code == 1008  # cut by its own queue limit, not waited for
            stalled.close()
        daemon.terminate()
        assert await daemon.wait() == 0
