"""A client that stops reading is closed (1008) and, coming back, catches up.

The host runs in this test's trio run over a real WebSocket. The slow client
is a raw socket that completes the handshake, sends ``initialize`` and then
never reads again; a second client keeps reading throughout.
"""

from __future__ import annotations

import json
import os
import struct

import trio

from ahpd.host.assembly import Host
from ahpd.transport.websocket import Limits
from tests.host.live import serve

from ..transport.test_websocket import RawClient
from .helpers import eventually, rpc

ROOT = "ahp-root://"


def masked_text_frame(text: str) -> bytes:
    payload = text.encode()
    mask = os.urandom(4)
    head = bytes([0x81])
    if len(payload) < 126:
        head += bytes([0x80 | len(payload)])
    else:
        head += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def silent_client(port: int, client_id: str) -> RawClient:
    """A raw socket that completes the handshake, sends ``initialize`` subscribed
    to the root and never reads again."""
    raw = await RawClient.connect(port)
    params = {"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": client_id, "initialSubscriptions": [ROOT]}
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    await raw.sock.send(masked_text_frame(json.dumps(request)))
    return raw


def emit_big(host: Host, n: int, big: str) -> None:
    """A root action of about ``len(big)`` bytes, the ``n``th."""
    agents = [{"provider": f"p{n}", "displayName": "P", "description": big, "models": []}]
    host.bus.emit(ROOT, {"type": "root/agentsChanged", "agents": agents})


async def test_a_reader_that_stops_is_closed_and_catches_up_on_reconnect() -> None:
    host = Host(config_values={"clientQueueBytes": 2**20})
    big = "x" * 60_000
    async with trio.open_nursery() as nursery:
        port = (await serve(nursery, host)).port
        url = f"ws://127.0.0.1:{port}/"
        slow = await silent_client(port, "slow")
        # Initialized: it sent its request and reads nothing, so only the host can tell.
        await eventually(lambda: any(p.client_id == "slow" for p in host.peers))
        async with rpc(url) as fast:
            await fast.initialize("fast")
            emitted = 0
            with trio.fail_after(30):
                while any(p.client_id == "slow" for p in host.peers):
                    emitted += 1
                    emit_big(host, emitted, big)
                    note = await fast.next_note()
                    assert note["params"]["serverSeq"] == emitted  # the fast one misses nothing
                    await trio.lowlevel.checkpoint()
            assert emitted > 2**20 // 60_000
            slow.close()
            # The slow client comes back and is answered from the replay buffer.
            async with rpc(url) as back:
                reply = await back.call(
                    "reconnect",
                    {
                        "channel": ROOT,
                        "clientId": "slow",
                        "lastSeenServerSeq": 0,
                        "subscriptions": [ROOT],
                    },
                )
                result = reply["result"]
                assert result["type"] == "replay"
                assert [e["serverSeq"] for e in result["actions"]] == list(range(1, emitted + 1))
        nursery.cancel_scope.cancel()


async def test_readers_that_stop_are_closed_by_the_shared_budget_while_a_reader_gets_everything(caplog) -> None:
    """The budget across connections, with the bus queuing each action once
    on the channel's feed: the silent clients with the most queued are
    closed with 1008 ("server send queue full"), the reading one misses
    nothing, and the budget is never exceeded."""
    host = Host(config_values={"clientQueueBytes": 64 * 2**20})  # only the shared budget bites
    big = "x" * 60_000
    budget_bytes = 2**20
    async with trio.open_nursery() as nursery:
        port = (await serve(nursery, host, Limits(connections=64, pending=8, queued_bytes=budget_bytes))).port
        url = f"ws://127.0.0.1:{port}/"
        silent = [await silent_client(port, f"silent-{n}") for n in range(3)]
        names = {f"silent-{n}" for n in range(3)}
        await eventually(lambda: names <= {p.client_id for p in host.peers})
        silent_conns = [p.conn for p in host.peers if p.client_id in names]
        async with rpc(url) as fast:
            await fast.initialize("fast")
            budget = next(p for p in host.peers if p.client_id == "fast").conn._budget
            emitted = 0
            with trio.fail_after(30):
                while any(p.client_id in names for p in host.peers):
                    emitted += 1
                    emit_big(host, emitted, big)
                    assert budget.total <= budget_bytes
                    note = await fast.next_note()
                    assert note["params"]["serverSeq"] == emitted  # the reading one misses nothing
                    await trio.lowlevel.checkpoint()
            assert emitted > budget_bytes // 60_000 // 4  # they were fed until the budget bit
            fast_conn = next(p for p in host.peers if p.client_id == "fast").conn
            assert not fast_conn.closed
            for raw in silent:
                raw.close()
        nursery.cancel_scope.cancel()
    assert [(c.close_code, c.close_reason) for c in silent_conns] == [(1008, "server send queue full")] * 3
    cut = [r for r in caplog.records if "has the most queued" in r.getMessage()]
    assert len(cut) == 3 and all(r.levelname == "WARNING" for r in cut)
