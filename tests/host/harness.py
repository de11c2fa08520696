"""Drive a Host in memory: two ends of a connection, no sockets.

The host's protocol logic is plain code over a Connection (receive/send);
these tests drive it the way h11's tests drive two endpoints against each
other. The real transports are tested over real sockets in tests/transport
and end to end in tests/host/test_websocket_e2e.py.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import trio

from ahpd.host.assembly import Host


class MemoryConnection:
    """The host's side of an in-memory connection."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.queued_bytes = 0
        self._to_host_send, self._to_host = trio.open_memory_channel[str | None](math.inf)
        self._to_client, self._from_host = trio.open_memory_channel[str](math.inf)

    async def receive(self) -> str | None:
        if self.closed:
            return None
        return await self._to_host.receive()

    def send(self, text: str, size: int | None = None) -> bool:
        if self.closed:
            return False
        self._to_client.send_nowait(text)
        return True

    def close(self, code: int = 1000, reason: str = "") -> None:
        if not self.closed:
            self.closed = True
            self._to_host_send.send_nowait(None)


class Client:
    """A test client: send frames, read what the host wrote."""

    _ids = itertools.count(1)

    def __init__(self, host: Host, name: str = "mem") -> None:
        self.host = host
        self.conn = MemoryConnection(name)
        self.seq = itertools.count(1)
        self.backlog: list[dict[str, Any]] = []  # notifications read past by call()

    def send_raw(self, text: str) -> None:
        self.conn._to_host_send.send_nowait(text)

    def notify(self, method: str, params: Any) -> None:
        self.send_raw(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    async def frame(self, timeout: float = math.inf) -> dict[str, Any]:
        """The next frame the host wrote, however long that takes (the test's guard judges a hang)."""
        if self.backlog:
            return self.backlog.pop(0)
        with trio.fail_after(timeout):
            return json.loads(await self.conn._from_host.receive())

    def pending(self) -> list[dict[str, Any]]:
        out, self.backlog = self.backlog, []
        while True:
            try:
                out.append(json.loads(self.conn._from_host.receive_nowait()))
            except trio.WouldBlock:
                return out

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        """Send a request and return its response frame (skipping notifications,
        which are kept for ``pending``)."""
        ident = next(self._ids)
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            frame["params"] = params
        self.send_raw(json.dumps(frame))
        skipped = []
        while True:
            reply = json.loads(await self.conn._from_host.receive())
            if reply.get("id") == ident and "method" not in reply:
                self.backlog.extend(skipped)
                return reply
            skipped.append(reply)

    async def initialize(self, client_id: str = "c1", subscriptions=("ahp-root://",), versions=("1.0.0",)) -> dict:
        reply = await self.call(
            "initialize",
            {
                "channel": "ahp-root://",
                "protocolVersions": list(versions),
                "clientId": client_id,
                "initialSubscriptions": list(subscriptions),
            },
        )
        assert "result" in reply, reply
        return reply["result"]

    def dispatch(self, channel: str, action: dict[str, Any]) -> int:
        client_seq = next(self.seq)
        self.notify("dispatchAction", {"channel": channel, "clientSeq": client_seq, "action": action})
        return client_seq

    def close(self) -> None:
        self.conn.close()


async def connect(nursery: trio.Nursery, host: Host, name: str = "mem") -> Client:
    client = Client(host, name)
    nursery.start_soon(host.serve_connection, client.conn)
    return client
