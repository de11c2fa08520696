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
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from ahpd.host.assembly import Host
from ahpd.ports.pty import PtyPort
from ahpd.transport.websocket import serve_websocket
from tests.daemon.helpers import Rpc, rpc, until
from tests.daemon.test_slow_client import masked_text_frame
from tests.transport.test_websocket import RawClient
from tests.waits import eventually

MIB = 2**20


@asynccontextmanager
async def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **config: Any) -> AsyncIterator[tuple[Host, int]]:
    """A host with real terminals behind a real WebSocket; its port."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SHELL", "/bin/sh")
    host = Host(terminals=PtyPort(), config_values=config)
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        listening = await nursery.start(
            partial(
                serve_websocket,
                host.serve_connection,
                host="127.0.0.1",
                port=0,
                token=None,
                queue_limit=host.queue_limit,
            )
        )
        yield host, listening.port
        nursery.cancel_scope.cancel()


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
