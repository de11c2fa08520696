"""Attacks on a real daemon's reliability, each against a real socket on
127.0.0.1: a request that waits on another client must not hold up its own
connection, thread users must not starve each other, and large reads must
not stall the event loop."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

from ahpd.host.kernel import forward
from ahpd.host.window import window

from .helpers import Rpc, daemon_in_process, eventually, rpc

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


# -- attack 2: worker threads starved ---------------------------------------------------


async def _trickling_server(task_status: trio.TaskStatus[tuple[int, list[int]]] = trio.TASK_STATUS_IGNORED) -> None:
    """An HTTP server that answers every request a byte every 0.2 s, for ever."""
    held = [0]

    async def trickle(stream: trio.SocketStream) -> None:
        held[0] += 1
        try:
            await stream.receive_some(4096)
            await stream.send_all(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while True:
                await stream.send_all(b"a")
                await trio.sleep(0.2)  # the server's pace, not a wait
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, trickle, listeners)
        task_status.started((listeners[0].socket.getsockname()[1], held))


async def test_fetches_from_a_trickling_server_do_not_starve_file_reads(tmp_path: Path, monkeypatch) -> None:
    """42 ``diagnosticsFetch`` of a server that trickles for ever (one per
    connection, as many as the shared thread pool holds and more), then a
    read of a small file: answered at once (before: not until the server
    stopped, since every fetch's thread kept reading and kept its token)."""
    monkeypatch.setattr(window, "FETCH_TIMEOUT", 3.0)
    small = tmp_path / "small.txt"
    small.write_text("small")
    async with daemon_in_process(tmp_path / "data", "--sessions", "memory") as daemon, trio.open_nursery() as nursery:
        port, held = await nursery.start(_trickling_server)
        async with AsyncExitStack() as stack:
            fetchers = [await stack.enter_async_context(rpc(daemon.url)) for _ in range(42)]
            for n, fetcher in enumerate(fetchers):
                await fetcher.initialize(f"fetcher-{n}", subscriptions=())
                await _send(fetcher, "fetch", "diagnosticsFetch", url=f"http://127.0.0.1:{port}/{n}")
            await eventually(lambda: held[0] >= 40)
            async with rpc(daemon.url) as reader:
                await reader.initialize("reader")
                # the wait itself is the question: the fetches hold the server for ever
                read = await reader.call("resourceRead", {"channel": ROOT, "uri": small.as_uri()}, timeout=15)
                assert read["result"]["data"] == "small", read
            assert trio.to_thread.current_default_thread_limiter().borrowed_tokens < 40
            # and each fetch is answered at its deadline, naming it
            answer = (await _answers(fetchers[0], {"fetch"}))["fetch"]["result"]
            assert "no complete answer in 3 seconds" in answer["error"], answer
        nursery.cancel_scope.cancel()


async def _watch(client: Rpc, folder: Path) -> dict[str, Any]:
    return await client.call("createResourceWatch", {"channel": ROOT, "uri": folder.as_uri(), "recursive": False})


async def test_many_watches_hold_no_thread_another_family_needs_and_are_capped(tmp_path: Path) -> None:
    """100 watches from two connections (more than trio's shared pool of 40
    threads): none of the shared pool's threads is held (before: all 40,
    and every file read, git call and store write queued behind the
    watchers), a file read is answered; the 65th watch of one connection is
    refused, naming the key that caps it."""
    folders = []
    for n in range(65):
        folder = tmp_path / "w" / str(n)
        folder.mkdir(parents=True)
        folders.append(folder)
    small = tmp_path / "small.txt"
    small.write_text("small")
    async with daemon_in_process(tmp_path / "data", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as one, rpc(daemon.url) as two:
            await one.initialize("one")
            await two.initialize("two")
            for folder in folders[:50]:
                for client in (one, two):
                    reply = await _watch(client, folder)
                    assert "result" in reply, reply
            assert len(daemon.host.watches.watches) == 100
            assert trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0
            read = await one.call("resourceRead", {"channel": ROOT, "uri": small.as_uri()}, timeout=15)
            assert read["result"]["data"] == "small", read
            for folder in folders[50:64]:
                assert "result" in await _watch(one, folder)
            refused = await _watch(one, folders[64])
            assert refused["error"]["code"] == -32009, refused
            assert "resourceWatchesPerConnection = 64" in refused["error"]["message"]
            assert folders[64].as_uri() in refused["error"]["message"]
            assert "result" in await _watch(two, folders[64])  # the other connection is under its own cap


# -- attack 7: large reads --------------------------------------------------------------


class _RawClient:
    """A WebSocket client by hand, which reads its socket only when told to."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    @classmethod
    async def connect(cls, url: str) -> _RawClient:
        host, port = url.removeprefix("ws://").split("/")[0].rsplit(":", 1)
        client = cls(await trio.open_tcp_stream(host, int(port)))
        await client.stream.send_all(
            f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".encode()
        )
        while b"\r\n\r\n" not in client.buffer:
            client.buffer += await client.stream.receive_some(65536)
        head, _, client.buffer[:] = bytes(client.buffer).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        return client

    async def send(self, ident: int, method: str, **params: Any) -> None:
        payload = json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}).encode()
        n = len(payload)
        head = bytes([0x81, 0x80 | n]) if n < 126 else bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
        await self.stream.send_all(head + b"\0\0\0\0" + payload)  # masked with zeros

    async def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = await self.stream.receive_some(1 << 20)
            if not chunk:
                raise EOFError("closed by the daemon")
            self.buffer += chunk
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    async def answer(self, ident: int) -> dict[str, Any]:
        while True:
            first, second = await self._exactly(2)
            n = second & 0x7F
            if n == 126:
                n = int.from_bytes(await self._exactly(2), "big")
            elif n == 127:
                n = int.from_bytes(await self._exactly(8), "big")
            payload = await self._exactly(n)
            if first == 0x88:
                raise EOFError(f"closed by the daemon: {payload[2:].decode(errors='replace')}")
            frame = json.loads(payload)
            if frame.get("id") == ident and "method" not in frame:
                return frame


async def test_large_reads_wait_for_room_in_the_queues_rather_than_close_anybody(tmp_path: Path) -> None:
    """Six 20 MiB reads by clients that are not reading yet, against 60 MiB
    of queue for all clients together: two answers are made and queued, the
    other four wait for room before they are made, and once the clients
    read, every one gets its file (before: all six were made at once and
    queued, 120 MiB against a budget of 60, since an empty queue takes any
    frame)."""
    big = tmp_path / "big.txt"
    line = b"the quick brown fox jumps over the lazy dog 0123456789\n"
    big.write_bytes((line * (20 * 2**20 // len(line) + 1))[: 20 * 2**20])
    args = ("--sessions", "memory", "--without-connection-token", "--max-queued-bytes", str(60 * 2**20))
    async with daemon_in_process(tmp_path / "data", *args) as daemon:
        clients = [await _RawClient.connect(daemon.url) for _ in range(6)]
        for n, client in enumerate(clients):
            await client.send(1, "initialize", channel=ROOT, protocolVersions=["1.0.0"], clientId=f"reader-{n}")
            assert "result" in await client.answer(1)
        for client in clients:
            await client.send(2, "resourceRead", channel=ROOT, uri=big.as_uri())

        def settled() -> int:
            """Reads answered (queued), waiting for room, or whose connection is gone."""
            conns = [peer.conn for peer in daemon.host.peers if (peer.client_id or "").startswith("reader-")]
            budget = next((c._budget for c in conns if c._budget is not None), None)
            waiting = len(getattr(budget, "freed", ()))
            return 6 - len(conns) + sum(1 for c in conns if c.queued_bytes > 0 or c.closed) + waiting

        await eventually(lambda: settled() >= 6)
        queued = sum(peer.conn.queued_bytes for peer in daemon.host.peers)
        assert 40 * 2**20 < queued <= 60 * 2**20  # two answers; the other four are not made yet
        async with trio.open_nursery() as nursery:
            sizes: list[int] = []

            async def read(client: _RawClient) -> None:
                answer = await client.answer(2)
                assert "result" in answer, answer["error"]
                sizes.append(len(answer["result"]["data"]))

            for client in clients:
                nursery.start_soon(read, client)
        assert sizes == [20 * 2**20] * 6
        for client in clients:
            await client.stream.aclose()


async def test_a_read_larger_than_the_whole_queue_budget_is_refused_naming_it(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (12 * 2**20))
    args = ("--sessions", "memory", "--max-queued-bytes", str(8 * 2**20))
    async with daemon_in_process(tmp_path / "data", *args) as daemon, rpc(daemon.url) as client:
        await client.initialize("reader")
        refused = await client.call("resourceRead", {"channel": ROOT, "uri": big.as_uri()})
        assert refused["error"]["code"] == -32009, refused
        message = refused["error"]["message"]
        assert big.as_uri() in message and f"more than the {8 * 2**20} bytes" in message, message
        assert "result" in await client.call("ping", {})
