"""The client side of dispatch_bench.py: runs in processes of its own.

Built on ``_host_bench_client.WsClient`` (a raw-socket WebSocket client, far
cheaper per frame than any server measured). Two jobs:

- ``subs``: this process's share of the K subscribers. Each says hello
  (ahpd: ``initialize`` subscribed to the chat; an anchor: ``sub``), then
  reads until it has seen ``n`` dispatched drafts. It records when each
  client read its last one and, in the paced mode, when each draft arrived
  (its index is in the draft's text: ``"text":"k<i>:``).
- ``pub``: the one dispatcher: says hello, waits for the parent's go, then
  sends ``n`` ``dispatchAction`` frames of ``chat/draftChanged`` with
  unique texts, either as fast as the server reads them (written in 64 KiB
  chunks, TCP's flow control sets the pace) or paced at ``rate`` per second,
  recording when each left.

The parent talks to each ``worker`` over a multiprocessing Pipe: it sends
``(job, kwargs)``; the job sends ``("ready", None)`` once connected, the
``pub`` job then waits for ``"go"``; every job ends with ``("result", value)``.
"""

from __future__ import annotations

import functools
import json
import re
import time
from array import array
from typing import Any

import trio

from _host_bench_client import OP_TEXT, WsClient, _from_parent, _frame, raise_nofile

_INDEX = re.compile(rb'"text":"k(\d+):')
_CHUNK = 64 * 1024


def dispatch_text(chat: str, i: int, pad: int) -> str:
    """The ``i``-th dispatch: a draft whose text is unique and carries ``i``."""
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "dispatchAction",
            "params": {
                "channel": chat,
                "clientSeq": i,
                "action": {
                    "type": "chat/draftChanged",
                    "draft": {"text": f"k{i}:" + "x" * pad, "origin": {"kind": "user"}},
                },
            },
        },
        separators=(",", ":"),
    )


async def hello(c: WsClient, kind: str, role: str, chat: str, name: str) -> None:
    if kind == "ahpd":
        reply = await c.call(
            "initialize",
            {
                "channel": "ahp-root://",
                "protocolVersions": ["1.0.0"],
                "clientId": name,
                "initialSubscriptions": [chat] if role == "sub" else [],
            },
        )
        if "result" not in reply:
            raise RuntimeError(f"initialize failed: {reply}")
        return
    await c.send_text(role)
    while True:
        for opcode, payload in await c.frames():
            if opcode == OP_TEXT and payload == b"ok":
                return


async def job_subs(
    pipe: Any, *, port: int, kind: str, chat: str, clients: int, n: int, paced: bool, timeout: float, offset: int
) -> dict[str, Any]:
    conns: list[WsClient] = []
    limit = trio.CapacityLimiter(20)

    async def open_one(i: int) -> None:
        async with limit:
            c = await WsClient.connect(port)
            await hello(c, kind, "sub", chat, f"sub-{offset + i}")
            conns.append(c)

    async with trio.open_nursery() as nursery:
        for i in range(clients):
            nursery.start_soon(open_one, i)
    pipe.send(("ready", None))
    last_ns = [0] * len(conns)
    got = [0] * len(conns)
    idx = [array("q") for _ in conns]
    when = [array("q") for _ in conns]
    cpu0 = time.process_time()

    async def read(i: int, c: WsClient) -> None:
        search = _INDEX.search
        while got[i] < n:
            batch = await c.frames()
            now = time.monotonic_ns()
            for opcode, payload in batch:
                if opcode != OP_TEXT:
                    continue
                m = search(payload)
                if m is None:
                    continue
                got[i] += 1
                if paced:
                    idx[i].append(int(m.group(1)))
                    when[i].append(now)
        last_ns[i] = time.monotonic_ns()

    with trio.move_on_after(timeout):
        async with trio.open_nursery() as nursery:
            for i, c in enumerate(conns):
                nursery.start_soon(read, i, c)
    cpu = time.process_time() - cpu0
    for c in conns:
        await trio.aclose_forcefully(c.stream)
    return {"last_ns": last_ns, "received": sum(got), "cpu": cpu, "idx": idx, "when": when}


async def job_pub(
    pipe: Any, *, port: int, kind: str, chat: str, n: int, rate: float | None, pad: int, first: int
) -> dict[str, Any]:
    c = await WsClient.connect(port)
    await hello(c, kind, "pub", chat, "pub")
    frames = [_frame(OP_TEXT, dispatch_text(chat, first + i, pad).encode()) for i in range(n)]
    pipe.send(("ready", None))
    await _from_parent(pipe)
    cpu0 = time.process_time()
    sent = array("q")

    async def drain() -> None:  # whatever the server says to the dispatcher is read and dropped
        while await c.stream.receive_some(65536):
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        t0 = time.monotonic_ns()
        if rate is None:
            chunk: list[bytes] = []
            size = 0
            for data in frames:
                chunk.append(data)
                size += len(data)
                if size >= _CHUNK:
                    await c.stream.send_all(b"".join(chunk))
                    chunk, size = [], 0
            if chunk:
                await c.stream.send_all(b"".join(chunk))
        else:
            step = 1e9 / rate
            for i, data in enumerate(frames):
                due = t0 + int(i * step)
                now = time.monotonic_ns()
                if due > now:
                    await trio.sleep((due - now) / 1e9)
                sent.append(time.monotonic_ns())
                await c.stream.send_all(data)
        t_end = time.monotonic_ns()
        nursery.cancel_scope.cancel()
    cpu = time.process_time() - cpu0
    await trio.aclose_forcefully(c.stream)
    return {"t0": t0, "t_end": t_end, "sent": sent, "cpu": cpu}


JOBS = {"subs": job_subs, "pub": job_pub}


def worker(pipe: Any) -> None:
    raise_nofile(8192)
    while True:
        command = pipe.recv()
        if command is None:
            return
        name, kwargs = command
        result = trio.run(functools.partial(JOBS[name], pipe, **kwargs))
        pipe.send(("result", result))
