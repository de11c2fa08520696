"""One AHP connection for ``ahpd chat``: requests, dispatches, and the action stream.

The daemon is found through its runtime record (``ahpd.json`` in the data
directory, which carries the URL with its token) unless a URL is given. A
reader task sorts what arrives: answers go to the request waiting for them,
action envelopes into a channel the turn reads in order.
"""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import trio

from ahpd.ops.runtime import read_runtime

ROOT = "ahp-root://"
PROTOCOL_VERSIONS = ["1.0.0"]


class HostError(RuntimeError):
    """The host answered a request with a JSON-RPC error."""


def find_url(data_dir: Path) -> str:
    record = read_runtime(data_dir)
    if record is None:
        raise SystemExit(f"ahpd chat: no daemon runs with data directory {data_dir}; start one with `ahpd run`")
    return record["url"]


class Connection:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.client_id = f"ahpd-chat-{uuid.uuid4().hex[:8]}"
        self._ids = itertools.count(1)
        self._seq = itertools.count(1)
        self._replies: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._actions_in, self.actions = trio.open_memory_channel[dict[str, Any]](10_000)

    async def reader(self) -> None:
        from trio_websocket import ConnectionClosed

        while True:
            try:
                frame = json.loads(await self.ws.get_message())
            except ConnectionClosed:
                self._actions_in.close()
                for waiting in self._replies.values():
                    waiting.close()  # their requests will never be answered
                self._replies.clear()
                return
            if "id" in frame and "method" not in frame and frame["id"] in self._replies:
                await self._replies.pop(frame["id"]).send(frame)
            elif frame.get("method") == "action":
                await self._actions_in.send(frame["params"])

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        ident = next(self._ids)
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._replies[ident] = send
        await self.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
        try:
            reply = await receive.receive()
        except trio.EndOfChannel:
            raise HostError(f"{method}: the connection to the daemon closed") from None
        if "error" in reply:
            raise HostError(f"{method}: {reply['error'].get('message', reply['error'])}")
        return reply.get("result")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """A notification: nothing answers it."""
        await self.ws.send_message(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    async def dispatch(self, channel: str, action: dict[str, Any]) -> None:
        await self.ws.send_message(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "dispatchAction",
                    "params": {"channel": channel, "clientSeq": next(self._seq), "action": action},
                }
            )
        )

    async def initialize(self) -> None:
        await self.call(
            "initialize", {"channel": ROOT, "protocolVersions": PROTOCOL_VERSIONS, "clientId": self.client_id}
        )
