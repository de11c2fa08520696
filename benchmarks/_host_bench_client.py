"""The client side of host_bench.py: runs in processes of its own.

The clients speak just enough WebSocket to drive a server over raw trio
sockets: an upgrade request, masked text frames out, unmasked frames in,
parsed straight from the receive buffer. A full client library (trio-websocket
on the client side) costs about as much per frame as the server does, so with
100 of them in one process the measurement would be of the client; this one
is several times cheaper per frame than the server and stays out of the way.

The fan-out and latency jobs are split over several such processes (each
runs its share of the clients, ``offset`` numbers them), so that the clients
are not what sets the pace. The parent talks to each ``worker`` over a
multiprocessing Pipe: it sends
``(job, kwargs)``, the job may send ``("ready", info)`` and wait for
``("go", ...)``, and ends with ``("result", value)`` (the fan-out job first says
``("done", None)`` when its clients have read everything).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import resource
import struct
import time
from array import array
from typing import Any

import trio

ROOT = "ahp-root://"
_SEQ = re.compile(rb'"serverSeq":(\d+)')
_HEAD_END = b"\r\n\r\n"

OP_TEXT, OP_CLOSE, OP_PING = 0x1, 0x8, 0x9


def raise_nofile(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _frame(opcode: int, payload: bytes) -> bytes:
    """A client frame. The mask key is zero (valid, and the payload stays as is)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + b"\0\0\0\0" + payload


class WsClient:
    """One raw WebSocket client connection."""

    __slots__ = ("stream", "buf", "next_id")

    def __init__(self, stream: trio.SocketStream, leftover: bytes) -> None:
        self.stream = stream
        self.buf = bytearray(leftover)
        self.next_id = 0

    @classmethod
    async def connect(cls, port: int) -> WsClient:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        key = base64.b64encode(os.urandom(16)).decode()
        await stream.send_all(
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        raw = b""
        while _HEAD_END not in raw:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise ConnectionError("server closed during the upgrade")
            raw += chunk
        head, _, rest = raw.partition(_HEAD_END)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"upgrade refused: {head[:200]!r}")
        return cls(stream, rest)

    async def send_text(self, text: str) -> None:
        await self.stream.send_all(_frame(OP_TEXT, text.encode()))

    async def frames(self) -> list[tuple[int, bytes]]:
        """Wait for input, then return every complete frame now buffered."""
        while True:
            out = self._parse()
            if out:
                return out
            chunk = await self.stream.receive_some(262144)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk

    async def count_text_frames(self) -> int:
        """Wait for input, then drop every complete frame now buffered; how many were text."""
        while True:
            buf, off, end, count = self.buf, 0, len(self.buf), 0
            while end - off >= 2:
                b0, n = buf[off], buf[off + 1] & 0x7F
                p = off + 2
                if n == 126:
                    if end - p < 2:
                        break
                    n, p = (buf[p] << 8) | buf[p + 1], p + 2
                elif n == 127:
                    if end - p < 8:
                        break
                    n, p = int.from_bytes(buf[p : p + 8], "big"), p + 8
                if end - p < n:
                    break
                if b0 == 0x81:
                    count += 1
                elif b0 & 0x0F == OP_CLOSE:
                    raise ConnectionError("closed by server")
                off = p + n
            if off:
                del buf[:off]
            if count:
                return count
            chunk = await self.stream.receive_some(262144)
            if not chunk:
                raise ConnectionError("server closed the connection")
            buf += chunk

    def _parse(self) -> list[tuple[int, bytes]]:
        buf, off, end, out = self.buf, 0, len(self.buf), []
        while end - off >= 2:
            b0, b1 = buf[off], buf[off + 1]
            n, p = b1 & 0x7F, off + 2
            if n == 126:
                if end - p < 2:
                    break
                n, p = int.from_bytes(buf[p : p + 2], "big"), p + 2
            elif n == 127:
                if end - p < 8:
                    break
                n, p = int.from_bytes(buf[p : p + 8], "big"), p + 8
            if end - p < n:
                break
            if not b0 & 0x80:
                raise ValueError("fragmented frames are not expected here")
            out.append((b0 & 0x0F, bytes(buf[p : p + n])))
            off = p + n
        if off:
            del buf[:off]
        return out

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        await self.send_text(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}}))
        while True:
            for opcode, payload in await self.frames():
                if opcode == OP_TEXT:
                    msg = json.loads(payload)
                    if msg.get("id") == ident and "method" not in msg:
                        return msg
                elif opcode == OP_CLOSE:
                    raise ConnectionError(f"closed by server: {payload!r}")

    async def initialize(self, client_id: str) -> dict[str, Any]:
        reply = await self.call(
            "initialize",
            {
                "channel": ROOT,
                "protocolVersions": ["1.0.0"],
                "clientId": client_id,
                "initialSubscriptions": [ROOT],
            },
        )
        if "result" not in reply:
            raise RuntimeError(f"initialize failed: {reply}")
        return reply["result"]

    async def aclose(self) -> None:
        """Say goodbye (1000) and drop the socket without waiting for the answer."""
        try:
            await self.stream.send_all(_frame(OP_CLOSE, struct.pack("!H", 1000)))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        await trio.aclose_forcefully(self.stream)


async def _from_parent(pipe: Any) -> Any:
    return await trio.to_thread.run_sync(pipe.recv, abandon_on_cancel=True)


async def _open_many(port: int, count: int, initialize: bool, parallel: int = 20, offset: int = 0) -> list[WsClient]:
    clients: list[WsClient | None] = [None] * count
    limit = trio.CapacityLimiter(parallel)

    async def one(i: int) -> None:
        async with limit:
            c = await WsClient.connect(port)
            if initialize:
                await c.initialize(f"bench-{offset + i}")
            clients[i] = c

    async with trio.open_nursery() as n:
        for i in range(count):
            n.start_soon(one, i)
    return clients  # type: ignore[return-value]


async def _close_all(clients: list[WsClient]) -> None:
    async with trio.open_nursery() as n:
        for c in clients:
            n.start_soon(c.aclose)


# -- jobs ------------------------------------------------------------------------


async def job_fanout(
    pipe: Any, *, port: int, clients: int, frames: int, initialize: bool, timeout: float, offset: int = 0
) -> dict[str, Any]:
    """K clients each read ``frames`` text frames; report when each got its last."""
    conns = await _open_many(port, clients, initialize, offset=offset)
    last_ns = [0] * clients
    got = [0] * clients
    pipe.send(("ready", None))
    cpu0 = time.process_time()

    async def read(i: int, c: WsClient) -> None:
        count = 0
        while count < frames:
            count += await c.count_text_frames()
            got[i] = count
        last_ns[i] = time.monotonic_ns()

    with trio.move_on_after(timeout):
        async with trio.open_nursery() as n:
            for i, c in enumerate(conns):
                n.start_soon(read, i, c)
    cpu = time.process_time() - cpu0
    pipe.send(("done", None))
    await _close_all(conns)
    return {"last_ns": last_ns, "received": sum(got), "cpu": cpu}


async def job_latency(
    pipe: Any, *, port: int, clients: int, frames: int, initialize: bool, timeout: float, offset: int = 0
) -> dict[str, Any]:
    """K clients record (serverSeq, receive time) of every action."""
    conns = await _open_many(port, clients, initialize, offset=offset)
    seqs = [array("q") for _ in conns]
    times = [array("q") for _ in conns]
    pipe.send(("ready", None))
    cpu0 = time.process_time()

    async def read(i: int, c: WsClient) -> None:
        s_arr, t_arr, search = seqs[i], times[i], _SEQ.search
        while len(s_arr) < frames:
            batch = await c.frames()
            now = time.monotonic_ns()  # every frame of this read had arrived by now
            for opcode, payload in batch:
                if opcode == OP_TEXT:
                    m = search(payload, len(payload) - 24)
                    if m is None:
                        m = search(payload)
                    s_arr.append(int(m.group(1)))
                    t_arr.append(now)

    with trio.move_on_after(timeout):
        async with trio.open_nursery() as n:
            for i, c in enumerate(conns):
                n.start_soon(read, i, c)
    cpu = time.process_time() - cpu0
    await _close_all(conns)
    return {"seqs": seqs, "times": times, "cpu": cpu}


async def job_handshake(pipe: Any, *, port: int, rounds: int) -> dict[str, Any]:
    """Interleaved, one at a time: a ping on an initialized connection; a new
    connection's upgrade, then its initialize (with the root snapshot); a
    subscribe to root (its snapshot) on the first connection."""
    base = await WsClient.connect(port)
    await base.initialize("bench-base")
    for _ in range(20):  # warm up every path once
        await base.call("ping")
        await base.call("subscribe", {"channel": ROOT})
    ping, upgrade, init, sub = [], [], [], []
    held: list[WsClient] = []
    clock = time.perf_counter_ns
    for i in range(rounds):
        t = clock()
        reply = await base.call("ping")
        ping.append(clock() - t)
        assert "result" in reply, reply
        t = clock()
        c = await WsClient.connect(port)
        upgrade.append(clock() - t)
        t = clock()
        await c.initialize(f"bench-{i}")
        init.append(clock() - t)
        held.append(c)
        t = clock()
        reply = await base.call("subscribe", {"channel": ROOT})
        sub.append(clock() - t)
        assert "result" in reply, reply
    await _close_all([base, *held])
    return {"ping": ping, "upgrade": upgrade, "initialize": init, "subscribe": sub}


async def job_hold(pipe: Any, *, port: int, steps: list[int]) -> dict[str, Any]:
    """Open initialized idle connections up to each count in ``steps``, tell
    the parent after each step and wait for its go; then close them all."""
    held: list[WsClient] = []
    for target in steps:
        more = await _open_many(port, target - len(held), True)
        held.extend(more)
        # a ping on every connection: the host has finished with each of them
        for c in held[-len(more) :] if more else []:
            await c.call("ping")
        pipe.send(("ready", len(held)))
        await _from_parent(pipe)
    await _close_all(held)
    return {"held": len(held)}


JOBS = {"fanout": job_fanout, "latency": job_latency, "handshake": job_handshake, "hold": job_hold}


def worker(pipe: Any) -> None:
    """The client process: run jobs the parent sends until it sends None."""
    raise_nofile(8192)
    while True:
        command = pipe.recv()
        if command is None:
            return
        name, kwargs = command
        result = trio.run(functools.partial(JOBS[name], pipe, **kwargs))
        pipe.send(("result", result))
