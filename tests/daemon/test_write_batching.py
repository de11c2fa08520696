"""A burst of client dispatches is fanned out in few writes per subscriber, a
lone one leaves at once, and a draft typed key by key is written down once
per burst, not once per key, and still survives a restart.

A real daemon in this process (``daemon_in_process``), real WebSockets on
127.0.0.1; the dispatcher is a raw socket client so that its burst reaches
the daemon as one TCP write, the way a fast client's keystrokes arrive. The
writes are counted where they happen: ``trio.SocketStream.send_all`` on the
daemon's side of each connection.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import uuid
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio
import trio.testing

from ahpd.host.sessions import manager
from ahpd.host.sessions.store import MemorySessionStore
from ahpd.transport import base

from tests.daemon.helpers import create, daemon_in_process, rpc

BURST = 40


class RawWs:
    """A client that writes masked text frames itself (many in one write) and
    reads the server's frames off its socket."""

    def __init__(self, stream: trio.SocketStream, rest: bytes) -> None:
        self.stream = stream
        self.buf = bytearray(rest)

    @classmethod
    async def connect(cls, url: str) -> RawWs:
        parts = urlsplit(url)
        assert parts.port is not None
        stream = await trio.open_tcp_stream("127.0.0.1", parts.port)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        key = base64.b64encode(os.urandom(16)).decode()
        await stream.send_all(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{parts.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        raw = b""
        while b"\r\n\r\n" not in raw:
            chunk = await stream.receive_some(65536)
            assert chunk, "closed during the upgrade"
            raw += chunk
        head, _, rest = raw.partition(b"\r\n\r\n")
        assert b" 101 " in head.split(b"\r\n", 1)[0], head
        return cls(stream, rest)

    @staticmethod
    def frame(text: str) -> bytes:
        payload = text.encode()
        n = len(payload)
        head = struct.pack("!BB", 0x81, 0x80 | n) if n < 126 else struct.pack("!BBH", 0x81, 0x80 | 126, n)
        return head + b"\0\0\0\0" + payload  # a zero mask leaves the payload as it is

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)

    async def send(self, *texts: str) -> None:
        await self.stream.send_all(b"".join(self.frame(t) for t in texts))

    async def texts(self) -> list[dict[str, Any]]:
        """Wait for input; every complete text frame buffered, parsed."""
        while True:
            out, off, buf = [], 0, self.buf
            while len(buf) - off >= 2:
                n, p = buf[off + 1] & 0x7F, off + 2
                if n == 126:
                    if len(buf) - p < 2:
                        break
                    n, p = int.from_bytes(buf[p : p + 2], "big"), p + 2
                elif n == 127:
                    if len(buf) - p < 8:
                        break
                    n, p = int.from_bytes(buf[p : p + 8], "big"), p + 8
                if len(buf) - p < n:
                    break
                if buf[off] == 0x81:
                    out.append(json.loads(bytes(buf[p : p + n])))
                off = p + n
            del buf[:off]
            if out:
                return out
            chunk = await self.stream.receive_some(65536)
            assert chunk, "the server closed the connection"
            buf += chunk

    async def initialize(self, client_id: str, subscriptions: list[str]) -> None:
        await self.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "channel": "ahp-root://",
                        "protocolVersions": ["1.0.0"],
                        "clientId": client_id,
                        "initialSubscriptions": subscriptions,
                    },
                }
            )
        )
        while not any(m.get("id") == 1 and "result" in m for m in await self.texts()):
            pass

    async def drafts(self, count: int) -> list[str]:
        """Read until ``count`` draftChanged actions came; their texts."""
        seen: list[str] = []
        while len(seen) < count:
            for m in await self.texts():
                action = m.get("params", {}).get("action", {}) if m.get("method") == "action" else {}
                if action.get("type") == "chat/draftChanged":
                    seen.append(action["draft"]["text"])
        return seen


def draft(chat: str, seq: int, text: str) -> str:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "dispatchAction",
            "params": {
                "channel": chat,
                "clientSeq": seq,
                "action": {"type": "chat/draftChanged", "draft": {"text": text, "origin": {"kind": "user"}}},
            },
        }
    )


@pytest.fixture
def daemon_writes(monkeypatch) -> dict[int, Counter]:
    """Per port of the daemon's listening socket: for each of its connections
    (by the client's port), the writes that carried drafts and the drafts they carried."""
    counts: dict[int, Counter] = {}
    send_all = trio.SocketStream.send_all

    async def counting(self: trio.SocketStream, data: Any) -> None:
        carried = bytes(data).count(b'"type":"chat/draftChanged"')
        if carried:
            local, peer = self.socket.getsockname()[1], self.socket.getpeername()[1]
            if local in counts:
                counts[local][f"writes {peer}"] += 1
                counts[local][f"drafts {peer}"] += carried
        await send_all(self, data)

    monkeypatch.setattr(trio.SocketStream, "send_all", counting)
    return counts


async def subscribers(url: str, chat: str, count: int) -> list[RawWs]:
    subs = []
    for n in range(count):
        sub = await RawWs.connect(url)
        await sub.initialize(f"sub-{n}", [chat])
        subs.append(sub)
    return subs


async def test_a_burst_of_dispatches_goes_out_in_a_few_writes_to_each_subscriber(tmp_path, monkeypatch, daemon_writes):
    # Only the loop running out of work releases the writers here, never the clock.
    monkeypatch.setattr(base.WriteGate, "HOLD", 3600.0, raising=False)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as setup:
            await setup.initialize("setup")
            _, chat = await create(setup, tmp_path, channel=f"demo:/{uuid.uuid4()}")
        subs = await subscribers(daemon.url, chat, 3)
        pub = await RawWs.connect(daemon.url)
        await pub.initialize("pub", [])
        port = urlsplit(daemon.url).port
        assert port is not None
        daemon_writes[port] = Counter()
        texts = [f"burst {i} {uuid.uuid4()}" for i in range(BURST)]
        await pub.send(*(draft(chat, i + 1, t) for i, t in enumerate(texts)))  # one write, one burst
        for sub in subs:
            assert await sub.drafts(BURST) == texts  # all of them, in order
        for client in (pub, *subs):
            await client.aclose()
    counts = daemon_writes[port]
    peers = [int(key.split()[1]) for key in counts if key.startswith("drafts ")]
    assert len(peers) == 3 and all(counts[f"drafts {p}"] == BURST for p in peers), counts
    for p in peers:
        # Per frame, one write each would be 40; the burst goes out in a few.
        assert counts[f"writes {p}"] <= BURST // 8, counts


async def test_a_lone_dispatch_is_delivered_at_once_without_waiting_for_a_batch(tmp_path, monkeypatch):
    # Were a lone frame held for a batch, it would wait an hour: the test's guard would end it first.
    monkeypatch.setattr(base.WriteGate, "HOLD", 3600.0, raising=False)
    monkeypatch.setattr(manager, "SAVE_HOLD", 3600.0, raising=False)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as setup:
            await setup.initialize("setup")
            _, chat = await create(setup, tmp_path, channel=f"demo:/{uuid.uuid4()}")
        [sub] = await subscribers(daemon.url, chat, 1)
        pub = await RawWs.connect(daemon.url)
        await pub.initialize("pub", [])
        for seq in (1, 2, 3):  # each one alone: sent only once the one before has arrived
            await pub.send(draft(chat, seq, f"alone {seq}"))
            assert await sub.drafts(1) == [f"alone {seq}"]
        await pub.aclose()
        await sub.aclose()


async def test_a_draft_typed_in_a_burst_is_recorded_once_per_burst(tmp_path, monkeypatch):
    saves: list[str] = []
    save = MemorySessionStore.save

    def counting(self: MemorySessionStore, record: dict[str, Any]) -> None:
        saves.append(record["uri"])
        save(self, record)

    monkeypatch.setattr(MemorySessionStore, "save", counting)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as setup:
            await setup.initialize("setup")
            uri, chat = await create(setup, tmp_path, channel=f"demo:/{uuid.uuid4()}")
        [sub] = await subscribers(daemon.url, chat, 1)
        pub = await RawWs.connect(daemon.url)
        await pub.initialize("pub", [])
        before = saves.count(uri)
        typed = [f"h{'e' * i}" for i in range(BURST)]
        await pub.send(*(draft(chat, i + 1, t) for i, t in enumerate(typed)))
        assert await sub.drafts(BURST) == typed
        store = daemon.host.sessions.store
        await wait_for(lambda: (store.chat_logs[chat].fields.get("draft") or {}).get("text") == typed[-1])
        assert 1 <= saves.count(uri) - before <= BURST // 8, saves
        await pub.aclose()
        await sub.aclose()


async def test_the_last_draft_of_a_burst_survives_a_restart(tmp_path):
    data = tmp_path / "d"
    async with daemon_in_process(data, "--sessions", "file") as daemon:
        async with rpc(daemon.url) as setup:
            await setup.initialize("setup")
            _, chat = await create(setup, tmp_path, channel=f"demo:/{uuid.uuid4()}")
        [sub] = await subscribers(daemon.url, chat, 1)
        pub = await RawWs.connect(daemon.url)
        await pub.initialize("pub", [])
        typed = [f"w{'o' * i}" for i in range(BURST)]
        await pub.send(*(draft(chat, i + 1, t) for i, t in enumerate(typed)))
        assert await sub.drafts(BURST) == typed
        await pub.aclose()
        await sub.aclose()
        daemon.terminate()  # at once: whatever waits to be written is written on the way out
        assert await daemon.wait() == 0
    async with daemon_in_process(data, "--sessions", "file") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("again")
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert state["draft"]["text"] == typed[-1]


async def wait_for(check) -> None:
    """Until ``check()`` holds: the save comes once the daemon's loop idles,
    which only its own tasks decide (this test's tasks are all blocked)."""
    while not check():
        await trio.testing.wait_all_tasks_blocked()
        await trio.lowlevel.checkpoint()
