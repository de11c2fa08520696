"""Attacks on a real daemon's reliability, each against a real socket on
127.0.0.1: a request that waits on another client must not hold up its own
connection, thread users must not starve each other, and large reads must
not stall the event loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


from ahpd.host.kernel import forward

from .helpers import Rpc, daemon_in_process, rpc

ROOT = "ahp-root://"


async def _send(client: Rpc, ident: str, method: str, **params: Any) -> None:
    """A request sent without waiting for its answer."""
    frame = {"jsonrpc": "2.0", "id": ident, "method": method, "params": {"channel": ROOT, **params}}
    await client.ws.send_message(json.dumps(frame))


async def _answers(client: Rpc, ids: set[str]) -> dict[str, dict[str, Any]]:
    """The answers to ``ids``, in whatever order they come."""
    found: dict[str, dict[str, Any]] = {}
    while ids - found.keys():
        frame = json.loads(await client.ws.get_message())
        if frame.get("id") in ids and "method" not in frame:
            found[frame["id"]] = frame
    return found


# -- attack 8: a connection's requests one at a time ------------------------------------


async def test_a_request_waiting_on_another_client_leaves_its_connection_free(tmp_path: Path) -> None:
    """Two reads forwarded to a client that does not answer: the asker's ping
    is answered at once (before: after 60 s per pending read), and each read's
    answer comes back under its own id once the publisher answers."""
    async with daemon_in_process(tmp_path / "data", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as asker, rpc(daemon.url) as mute:
            await asker.initialize("asker")
            await mute.initialize("mute", subscriptions=())
            for n in (1, 2):
                await _send(asker, f"read-{n}", "resourceRead", uri=f"virtual://mute/{n}.txt")
            asked = [json.loads(await mute.ws.get_message()) for _ in range(2)]
            assert [a["method"] for a in asked] == ["resourceRead", "resourceRead"]
            # the wait itself is the question: a forward waits up to 60 s
            assert "result" in await asker.call("ping", {}, timeout=10)
            assert "result" in await asker.call("subscribe", {"channel": ROOT}, timeout=10)
            for question in reversed(asked):  # answered out of order
                uri = question["params"]["uri"]
                data = {"data": uri, "encoding": "utf-8", "contentType": "text/plain"}
                await mute.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": question["id"], "result": data}))
            answers = await _answers(asker, {"read-1", "read-2"})
            assert answers["read-1"]["result"]["data"] == "virtual://mute/1.txt"
            assert answers["read-2"]["result"]["data"] == "virtual://mute/2.txt"


async def test_requests_waiting_on_other_clients_are_capped_per_connection(tmp_path: Path) -> None:
    cap = forward.WAITING_PER_CONNECTION
    async with daemon_in_process(tmp_path / "data", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as asker, rpc(daemon.url) as mute:
            await asker.initialize("asker")
            await mute.initialize("mute", subscriptions=())
            for n in range(cap + 1):
                await _send(asker, f"read-{n}", "resourceRead", uri=f"virtual://mute/{n}.txt")
            refused = (await _answers(asker, {f"read-{cap}"}))[f"read-{cap}"]
            assert refused["error"]["code"] == -32603, refused
            assert f"{cap} requests of this connection already wait" in refused["error"]["message"]
            assert refused["error"]["data"] == {"limit": cap}
            assert "result" in await asker.call("ping", {}, timeout=10)
