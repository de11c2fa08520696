"""How fast the host moves actions to clients over real WebSockets, and what a connection costs.

    python benchmarks/host_bench.py [--quick] [--only fanout|latency] [--client-procs N]

Every figure is set beside two anchors measured in the same run, interleaved
with ahpd, fed the same frame texts and read by the same clients:

- **ceiling**: a bare trio server in this process (upgrade by hand, each
  frame's bytes built once for every client, one ``send_all`` per drain of a
  connection's queue; no protocol, no accounting): the most trio does here;
- **Node ws**: ``node_ws/server.js``, the ``ws`` library as a TypeScript host
  uses it (one ``ws.send`` per client per action). ``npm install`` runs in
  ``node_ws/`` the first time; without ``node`` the anchor is skipped with a
  message.

Four measurements, each printed with its target and whether this run met it:

1. fan-out throughput: one channel's actions to K subscribers, frames
   delivered per second (summed over clients); targets: ahpd >= the Node ws
   anchor and >= 0.5 of the ceiling;
2. dispatch-to-delivery latency: 100 subscribers, actions emitted at a paced
   rate, emit time (server) to receive time (client) per serverSeq, both on
   CLOCK_MONOTONIC (target: p99 < 20 ms at 1,000 actions/s), with the anchors'
   p99 at the same load;
3. handshake cost: initialize with the root snapshot on a new connection,
   against a ping on an initialized one (target: <= 3x);
4. memory per idle initialized connection of an ``ahpd run`` process, from
   its VmRSS (target: <= 64 KiB).

The clients of 1. and 2. are spread over ``--client-procs`` processes (by
default as many as there are CPUs, at least 2). Each row prints the CPU the
server and the clients used (CPU seconds per wall second): a server well
below one core while the clients are busy is client-bound, and its figure a
floor. Frames per server CPU-second is printed too: on a shared machine it
moves less with the neighbours' load than frames per second does. Each
section also says how many cores other processes used meanwhile (from
/proc/stat). Everything goes to 127.0.0.1 and every wait is bounded.
"""

from __future__ import annotations

import argparse
import base64
import gc
import hashlib
import json
import math
import multiprocessing
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _host_bench_client import ROOT, raise_nofile, worker  # noqa: E402

from ahpd.host.assembly import Host  # noqa: E402
from ahpd.host.kernel.jsonrpc import notification_frame  # noqa: E402
from ahpd.transport.frames import text_frame  # noqa: E402
from ahpd.transport.websocket import serve_websocket  # noqa: E402

READY = "ahpd ready: "
MS = 1e6  # ns


def action(i: int) -> dict[str, Any]:
    return {"type": "root/activeSessionsChanged", "activeSessions": i}


def anchor_frame(seq: int) -> str:
    """The text ahpd sends for ``action(seq)`` as its serverSeq ``seq`` (checked in ``check_frames``)."""
    return notification_frame("action", {"channel": ROOT, "action": action(seq), "serverSeq": seq})


def check_frames() -> None:
    """The anchors (ceiling, Node ws) must send exactly what ahpd sends."""
    seen: list[str] = []

    class Sink:
        def send(self, text: str, size: int | None = None) -> bool:
            seen.append(text)
            return True

    host = Host()
    host.bus.channels[ROOT].subscribers.add(Sink())
    for i in (1, 2, 3):
        host.bus.emit(ROOT, action(i))
    assert seen == [anchor_frame(1), anchor_frame(2), anchor_frame(3)], seen


# -- the client processes -----------------------------------------------------------


class Clients:
    """The client processes: ``procs`` workers, each running its share of a job's clients."""

    def __init__(self, procs: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipes: list[Any] = []
        self.procs: list[Any] = []
        for i in range(procs):
            pipe, child = ctx.Pipe()
            proc = ctx.Process(target=worker, args=(child,), name=f"host_bench clients {i}", daemon=True)
            proc.start()
            child.close()
            self.pipes.append(pipe)
            self.procs.append(proc)
        self.pipe = self.pipes[0]  # the single-process jobs (handshake, hold) run here
        self.proc = self.procs[0]
        self._active = self.pipes[:1]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self, job: str, **kwargs: Any) -> None:
        """``job`` on the first process alone."""
        self._active = self.pipes[:1]
        self.pipe.send((job, kwargs))

    def start_split(self, job: str, clients: int, **kwargs: Any) -> None:
        """``job`` with its ``clients`` shared out over every process."""
        n = len(self.pipes)
        shares = [clients // n + (i < clients % n) for i in range(n)]
        self._active = [p for p, share in zip(self.pipes, shares, strict=True) if share]
        offset = 0
        for pipe, share in zip(self.pipes, shares, strict=True):
            if share:
                pipe.send((job, {**kwargs, "clients": share, "offset": offset}))
            offset += share

    async def expect(self, kind: str, timeout: float) -> Any:
        """What the first process said (single-process jobs)."""
        return (await self.expect_all(kind, timeout))[0]

    async def expect_all(self, kind: str, timeout: float) -> list[Any]:
        """What every process running the current job said, in order."""
        out = []
        with trio.fail_after(timeout):
            for pipe in self._active:
                msg = await trio.to_thread.run_sync(pipe.recv, abandon_on_cancel=True)
                if msg[0] != kind:
                    raise RuntimeError(f"client process said {msg[0]!r}, expected {kind!r}")
                out.append(msg[1])
        return out

    def expect_blocking(self, kind: str, timeout: float) -> Any:
        if not self.pipe.poll(timeout):
            raise TimeoutError(f"client process: no {kind!r} within {timeout} s")
        msg = self.pipe.recv()
        if msg[0] != kind:
            raise RuntimeError(f"client process said {msg[0]!r}, expected {kind!r}")
        return msg[1]

    def go(self) -> None:
        self.pipe.send(("go", None))

    def stop(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(None)
            except OSError:
                pass
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()


# -- how much else ran ------------------------------------------------------------------


def _busy_ticks() -> int:
    """CPU ticks spent busy on the whole machine (all cores, /proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return user + nice + system + irq + softirq + steal


def _proc_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def _cpu_seconds(pid: int) -> float:
    return _proc_ticks(pid) / os.sysconf("SC_CLK_TCK")


class OtherLoad:
    """Cores' worth of CPU that processes other than this benchmark used
    meanwhile: on a shared machine, the noise under a figure."""

    def __init__(self, *pids: int) -> None:
        self.pids = (os.getpid(), *pids)
        self.t = time.monotonic()
        self.busy = _busy_ticks()
        self.ours = sum(_proc_ticks(p) for p in self.pids)

    def cores(self) -> float:
        hz = os.sysconf("SC_CLK_TCK")
        others = (_busy_ticks() - self.busy) - (sum(_proc_ticks(p) for p in self.pids) - self.ours)
        return max(0.0, others / hz / (time.monotonic() - self.t))


# -- servers --------------------------------------------------------------------------


async def _until(predicate, timeout: float) -> bool:
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.005)
        return True
    return False


@asynccontextmanager
async def ahpd_server() -> AsyncIterator[tuple[Host, int]]:
    """An in-process Host behind ahpd's own WebSocket transport, wired as ``ahpd run`` wires it."""
    host = Host()
    async with trio.open_nursery() as nursery:
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
        gc.collect()
        gc.freeze()  # as ``ahpd run`` does once started
        try:
            yield host, listening.port
        finally:
            await _until(lambda: not host.peers, 5)  # let closing clients go before cancelling
            nursery.cancel_scope.cancel()
            gc.unfreeze()


class _CeilingConnection:
    __slots__ = ("stream", "queue", "idle", "done")

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.queue: list[bytes] = []
        self.idle = trio.lowlevel.ParkingLot()
        self.done = False


class CeilingServer:
    """The most a trio server does here: a bare upgrade, each frame's bytes
    built once for every client, a writer per connection that writes its
    whole queue with one ``send_all``; no protocol, no accounting."""

    def __init__(self) -> None:
        self.conns: list[_CeilingConnection] = []
        self.open = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            head += chunk
        key = re.search(rb"(?im)^sec-websocket-key:\s*(\S+)", head).group(1)
        accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        await stream.send_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        conn = _CeilingConnection(stream)
        self.conns.append(conn)
        self.open += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write, conn)
                while await stream.receive_some(65536):  # until the client hangs up
                    pass
                nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.open -= 1
            await trio.aclose_forcefully(stream)

    @staticmethod
    async def _write(conn: _CeilingConnection) -> None:
        while True:
            if conn.queue:
                data, conn.queue = b"".join(conn.queue), []
                await conn.stream.send_all(data)
            elif conn.done:
                return
            else:
                await conn.idle.park()

    def send_all(self, text: str) -> None:
        data = text_frame(text.encode())
        for conn in self.conns:
            conn.queue.append(data)
            if conn.idle:
                conn.idle.unpark()

    def finish(self) -> None:
        for conn in self.conns:
            conn.done = True
            conn.idle.unpark_all()


@asynccontextmanager
async def ceiling_server() -> AsyncIterator[tuple[CeilingServer, int]]:
    ceiling = CeilingServer()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, ceiling.serve, 0, host="127.0.0.1"))
        try:
            yield ceiling, listeners[0].socket.getsockname()[1]
        finally:
            await _until(lambda: not ceiling.open, 5)
            nursery.cancel_scope.cancel()


NODE_DIR = Path(__file__).resolve().parent / "node_ws"


class NodeServer:
    """``node_ws/server.js`` (the Node ``ws`` anchor), one process for the whole run."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            ["node", str(NODE_DIR / "server.js")],
            cwd=NODE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = self._read(30)["port"]

    @classmethod
    def start(cls) -> NodeServer | None:
        """None (after saying why) if there is no node, or ``ws`` cannot be installed."""
        if shutil.which("node") is None:
            print("   (Node ws anchor skipped: no 'node' on PATH)")
            return None
        if not (NODE_DIR / "node_modules" / "ws").is_dir():
            npm = shutil.which("npm")
            if npm is None:
                print("   (Node ws anchor skipped: 'ws' is not installed and there is no 'npm')")
                return None
            print(f"   (installing ws in {NODE_DIR} with npm)")
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--silent"],
                cwd=NODE_DIR,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                print(f"   (Node ws anchor skipped: npm install failed: {done.stderr.strip()[-300:]})")
                return None
        node = cls()
        text = node.command_blocking({"cmd": "frame", "seq": 7})["text"]
        assert text == anchor_frame(7), ("the Node server's frames differ from ahpd's", text)
        return node

    def _read(self, timeout: float) -> dict[str, Any]:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"the Node server said nothing within {timeout} s (exit {self.proc.poll()})")
        return json.loads(line)

    def send(self, command: dict[str, Any]) -> None:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def command_blocking(self, command: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        self.send(command)
        return self._read(timeout)

    async def reply(self, timeout: float) -> dict[str, Any]:
        return await trio.to_thread.run_sync(self._read, timeout)

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@asynccontextmanager
async def node_server(node: NodeServer) -> AsyncIterator[tuple[NodeServer, int]]:
    try:
        yield node, node.port
    finally:
        node.send({"cmd": "close"})
        await node.reply(10)


def server_for(kind: str, node: NodeServer | None):
    return {"ahpd": ahpd_server, "ceiling": ceiling_server}[kind]() if kind != "node" else node_server(node)


# -- 1. fan-out throughput ---------------------------------------------------------------


BATCH = 20  # actions emitted between two checkpoints (in every server)


async def fanout_once(clients: Clients, kind: str, k: int, n: int, node: NodeServer | None) -> dict[str, float]:
    """Frames per second delivered, summed over ``k`` clients, for ``n`` actions,
    and how busy the server and the client processes were (CPU time / wall time)."""
    timeout = 60.0
    async with server_for(kind, node) as (server, port):
        clients.start_split("fanout", k, port=port, frames=n, initialize=kind == "ahpd", timeout=timeout)
        await clients.expect_all("ready", 60)
        if kind == "ahpd":
            root = server.bus.channels[ROOT]
            assert await _until(lambda: len(root.subscribers) == k, 10), "subscribers missing"
            emit = server.bus.emit
            cpu0, t0 = time.process_time(), time.monotonic_ns()
            for i in range(1, n + 1):
                emit(ROOT, action(i))
                if i % BATCH == 0:
                    await trio.lowlevel.checkpoint()
        elif kind == "ceiling":
            assert await _until(lambda: len(server.conns) == k, 10), "connections missing"
            cpu0, t0 = time.process_time(), time.monotonic_ns()
            for i in range(1, n + 1):
                server.send_all(anchor_frame(i))
                if i % BATCH == 0:
                    await trio.lowlevel.checkpoint()
            server.finish()
        else:
            cpu0 = _cpu_seconds(server.proc.pid)
            server.send({"cmd": "fanout", "clients": k, "n": n, "batch": BATCH})
            t0 = int((await server.reply(30))["t0"])
        await clients.expect_all("done", timeout + 30)
        server_cpu = (time.process_time() if kind != "node" else _cpu_seconds(server.proc.pid)) - cpu0
        results = await clients.expect_all("result", 30)
    received = sum(r["received"] for r in results)
    last_ns = [t for r in results for t in r["last_ns"]]
    if received != k * n or not all(last_ns):
        raise RuntimeError(f"{kind}: clients received {received} of {k * n} frames")
    wall = (max(last_ns) - t0) / 1e9
    return {"rate": k * n / wall, "server": server_cpu / wall, "clients": sum(r["cpu"] for r in results) / wall}


async def bench_fanout(
    clients: Clients, kinds: list[str], configs: list[tuple[int, int]], rounds: int, node: NodeServer | None
) -> list[dict[str, Any]]:
    print(
        f"\n1. Fan-out throughput: frames delivered/s summed over K clients "
        f"(median of {rounds}, {', '.join(kinds)} interleaved; clients in {len(clients.procs)} processes)"
    )
    rows = []
    for k, n in configs:
        runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
        for _ in range(rounds):
            for kind in kinds:
                runs[kind].append(await fanout_once(clients, kind, k, n, node))
        row: dict[str, Any] = {"k": k, "n": n}
        for kind in kinds:
            row[kind] = {key: statistics.median(r[key] for r in runs[kind]) for key in ("rate", "server", "clients")}
            row[kind]["runs"] = [r["rate"] for r in runs[kind]]
        rows.append(row)
        print(f"   K={k:<4} N={n}")
        for kind in kinds:
            r = row[kind]
            ratios = "  ".join(f"= {r['rate'] / row[a]['rate']:.2f} x {a}" for a in kinds if a != kind)
            print(
                f"     {kind:<8} {r['rate']:>11,.0f} frames/s  {ratios}   CPU: server {r['server']:.0%}, "
                f"clients {r['clients']:.0%}; {r['rate'] / r['server']:,.0f} frames per server CPU-second   "
                f"runs [{', '.join(f'{x:,.0f}' for x in r['runs'])}]"
            )
        for kind in kinds:
            if row[kind]["server"] < 0.85 and row[kind]["clients"] > 0.85:
                print(f"     ({kind}: server below 85% of a core while the clients were busy: client-bound, a floor)")
    return rows


# -- 2. dispatch-to-delivery latency ----------------------------------------------------


def pct(sorted_values: list[int] | array, p: float) -> float:
    if not sorted_values:
        return math.nan
    i = min(len(sorted_values) - 1, max(0, math.ceil(p / 100 * len(sorted_values)) - 1))
    return sorted_values[i]


async def latency_once(
    clients: Clients, kind: str, k: int, rate: float, seconds: float, node: NodeServer | None
) -> dict[str, Any]:
    total = int(rate * seconds)
    drain = 30.0
    async with server_for(kind, node) as (server, port):
        clients.start_split("latency", k, port=port, frames=total, initialize=kind == "ahpd", timeout=seconds + drain)
        await clients.expect_all("ready", 60)
        if kind == "node":
            cpu0 = _cpu_seconds(server.proc.pid)
            server.send({"cmd": "latency", "clients": k, "rate": rate, "n": total, "deadline": seconds + drain / 2})
            said = await server.reply(seconds + drain + 30)
            start, base = int(said["base"]), 0
            emitted = [start + t for t in said["emitted"]]
            emit_seconds = (emitted[-1] - start) / 1e9
            if said["sent"] < total:
                print(f"   (node: sent {said['sent']} of {total} actions before its deadline)")
                total = said["sent"]
            cpu = _cpu_seconds(server.proc.pid) - cpu0
        else:
            if kind == "ahpd":
                root = server.bus.channels[ROOT]
                assert await _until(lambda: len(root.subscribers) == k, 10), "subscribers missing"
                base = server.bus.server_seq
                bus = server.bus

                def emit(i: int) -> int:
                    return bus.emit(ROOT, action(i))
            else:
                assert await _until(lambda: len(server.conns) == k, 10), "connections missing"
                base = 0

                def emit(i: int) -> int:
                    server.send_all(anchor_frame(i))
                    return i

            emitted = array("q", bytes(8 * (total + 1)))
            clock = time.monotonic_ns
            interval = 1e9 / rate
            cpu0 = time.process_time()
            start = clock() + 1_000_000
            i = 0
            while i < total:
                now = clock()
                due = start + i * interval
                if now < due:
                    await trio.sleep((due - now) / 1e9)
                    continue
                while i < total and start + i * interval <= clock():  # catch up after a late wake-up
                    i += 1
                    t = clock()
                    seq = emit(i)
                    emitted[seq - base] = t
                await trio.lowlevel.checkpoint()
            emit_seconds = (clock() - start) / 1e9
            if kind == "ceiling":
                server.finish()
        results = await clients.expect_all("result", seconds + drain + 30)
        if kind != "node":
            cpu = time.process_time() - cpu0
    lat: list[int] = []
    last_rx = 0
    for result in results:
        for seqs, times in zip(result["seqs"], result["times"], strict=True):
            lat.extend(t - emitted[s - base] for s, t in zip(seqs, times, strict=True))
            if times:
                last_rx = max(last_rx, times[-1])
    lat.sort()
    wall = (last_rx - start) / 1e9 if last_rx else math.nan
    return {
        "kind": kind,
        "k": k,
        "rate": rate,
        "seconds": seconds,
        "expected": total * k,
        "received": len(lat),
        "emit_rate": total / emit_seconds,
        "delivered_rate": len(lat) / wall if last_rx else 0.0,
        "server": cpu / wall,
        "clients": sum(r["cpu"] for r in results) / wall,
        "p50": pct(lat, 50) / MS,
        "p99": pct(lat, 99) / MS,
        "max": (lat[-1] / MS) if lat else math.nan,
    }


def latency_ok(r: dict[str, Any]) -> bool:
    return r["p99"] < 20 and r["received"] == r["expected"]


async def bench_latency(
    clients: Clients, kinds: list[str], runs: list[tuple[int, float, int]], seconds: float, node: NodeServer | None
) -> list[dict[str, Any]]:
    """``runs``: (subscribers, actions per second, how many times); the anchors
    run at 100 subscribers x 1,000 actions/s, interleaved with ahpd."""
    print("\n2. Dispatch-to-delivery latency: paced emits, emit (server) to receive (client) per serverSeq")
    rows = []
    for k, rate, repeats in runs:
        for _ in range(repeats):
            for kind in kinds if (k, rate) == (100, 1000.0) else ["ahpd"]:
                r = await latency_once(clients, kind, k, rate, seconds, node)
                rows.append(r)
                lost = (
                    ""
                    if r["received"] == r["expected"]
                    else f"  (only {r['received']:,} of {r['expected']:,} received in time)"
                )
                target = f"target p99 < 20 ms: {'met' if latency_ok(r) else 'NOT met'}" if kind == "ahpd" else ""
                if r["emit_rate"] < 0.9 * rate:
                    lost += "  (the server did not keep the pace: it carried a lighter load than asked)"
                print(
                    f"   {kind:<8} K={k:<4} {rate:>6,.0f} actions/s x {seconds:g} s = {k * rate:,.0f} frames/s "
                    f"(emitted at {r['emit_rate']:,.0f}/s, delivered {r['delivered_rate']:,.0f} frames/s; "
                    f"CPU server {r['server']:.0%}, clients {r['clients']:.0%}):\n"
                    f"             p50 {r['p50']:.2f} ms  p99 {r['p99']:.2f} ms  max {r['max']:.2f} ms  "
                    f"{target}{lost}"
                )
    return rows


# -- 3. handshake cost -----------------------------------------------------------------


async def bench_handshake(clients: Clients, rounds: int) -> dict[str, Any]:
    print(f"\n3. Handshake cost: {rounds} rounds, one request at a time, client-side round trips")
    async with ahpd_server() as (_host, port):
        clients.start("handshake", port=port, rounds=rounds)
        result = await clients.expect("result", 120)
    stats = {}
    for name, label in (
        ("ping", "ping on an initialized connection"),
        ("initialize", "initialize + root snapshot, new connection"),
        ("upgrade", "TCP connect + WebSocket upgrade"),
        ("subscribe", "subscribe root (snapshot), one connection"),
    ):
        values = sorted(result[name])
        stats[name] = {
            "mean": statistics.fmean(values) / 1e3,
            "p50": pct(values, 50) / 1e3,
            "p99": pct(values, 99) / 1e3,
        }
        s = stats[name]
        print(f"   {label:<44} mean {s['mean']:7.0f} us  p50 {s['p50']:7.0f} us  p99 {s['p99']:7.0f} us")
    mean_ratio = stats["initialize"]["mean"] / stats["ping"]["mean"]
    p50_ratio = stats["initialize"]["p50"] / stats["ping"]["p50"]
    sub_ratio = stats["subscribe"]["p50"] / stats["ping"]["p50"]
    full = [u + i for u, i in zip(result["upgrade"], result["initialize"], strict=True)]
    full_ratio = statistics.median(full) / 1e3 / stats["ping"]["p50"]
    met = mean_ratio <= 3 and p50_ratio <= 3
    print(
        f"   initialize / ping: mean {mean_ratio:.2f}x, p50 {p50_ratio:.2f}x  "
        f"target <= 3x: {'met' if met else 'NOT met'}"
    )
    print(
        f"   (subscribe root / ping p50 {sub_ratio:.2f}x; connect + upgrade + initialize / ping p50 {full_ratio:.2f}x)"
    )
    return {
        "stats": stats,
        "mean_ratio": mean_ratio,
        "p50_ratio": p50_ratio,
        "sub_ratio": sub_ratio,
        "full_ratio": full_ratio,
    }


# -- 4. memory per idle connection ------------------------------------------------------


def vm_rss_kib(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", text, re.M).group(1))


class DaemonFailed(RuntimeError):
    pass


def bench_memory(clients: Clients, warm: int, count: int) -> dict[str, Any] | None:
    """None (after saying why) if ``ahpd run`` does not start."""
    print(
        f"\n4. Memory per idle initialized connection (subscribed to root), "
        f"'ahpd run' in its own process, {count} connections"
    )
    half = count // 2
    steps = [warm, warm + half, warm + count]
    rss: list[int] = []
    with tempfile.TemporaryDirectory(prefix="ahpd-bench-") as data_dir:
        log_path = Path(data_dir) / "stderr.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ahpd",
                    "run",
                    "--port",
                    "0",
                    "--data-dir",
                    data_dir,
                    "--without-connection-token",
                    "--sessions",
                    "memory",
                ],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            line = proc.stdout.readline() if ready else ""
            if not line.startswith(READY):
                raise DaemonFailed(f"no ready line (got {line!r}, exit code {proc.poll()})")
            port = int(re.search(r":(\d+)/", line).group(1))
            clients.start("hold", port=port, steps=steps)
            for _step in steps:
                clients.expect_blocking("ready", 120)
                time.sleep(0.5)
                rss.append(vm_rss_kib(proc.pid))
                clients.go()
            clients.expect_blocking("result", 60)
        except DaemonFailed as exc:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-6:]
            print(f"   NOT MEASURED: 'ahpd run' did not start: {exc}")
            for text in tail:
                print(f"   | {text}")
            return None
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    per_conn = (rss[2] - rss[0]) / count
    second_half = (rss[2] - rss[1]) / (count - half)
    print(
        f"   VmRSS after {warm} warm-up connections {rss[0]:,} KiB, after +{half} {rss[1]:,} KiB, "
        f"after +{count} {rss[2]:,} KiB"
    )
    print(
        f"   per connection: {per_conn:.1f} KiB (second half alone {second_half:.1f} KiB)  "
        f"target <= 64 KiB: {'met' if per_conn <= 64 else 'NOT met'}"
    )
    return {"rss": rss, "per_conn": per_conn, "second_half": second_half}


# -- main -----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small runs, a smoke check in well under a minute")
    parser.add_argument(
        "--client-procs",
        type=int,
        default=max(2, os.cpu_count() or 1),
        help="processes the fan-out and latency clients are spread over (default: the CPUs, >= 2)",
    )
    parser.add_argument("--only", choices=["fanout", "latency"], help="run this section alone")
    args = parser.parse_args()
    if args.quick:
        fan_configs, fan_rounds = [(100, 500)], 1
        lat_runs, lat_seconds = [(100, 1000.0, 1)], 1.0
        hs_rounds = 50
        mem_warm, mem_count = 10, 100
    else:
        fan_configs, fan_rounds = [(10, 10000), (100, 2000)], 3
        lat_runs = [(100, 1000.0, 2), (100, 2000.0, 1), (10, 1000.0, 1)]
        lat_seconds = 3.0
        hs_rounds = 300
        mem_warm, mem_count = 20, 400
    raise_nofile(8192)
    check_frames()
    print(
        f"host_bench{' --quick' if args.quick else ''}: python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
        f"servers ahpd and ceiling in pid {os.getpid()}, clients in {args.client_procs} processes"
    )
    started = time.monotonic()
    node = NodeServer.start()
    kinds = ["ahpd", "ceiling"] + (["node"] if node else [])
    clients = Clients(args.client_procs)
    fanout: list[dict[str, Any]] = []
    latency: list[dict[str, Any]] = []
    handshake = memory = None
    try:

        async def in_trio() -> None:
            nonlocal fanout, latency, handshake
            sections = []
            if args.only in (None, "fanout"):
                sections.append(("fanout", partial(bench_fanout, clients, kinds, fan_configs, fan_rounds, node)))
            if args.only in (None, "latency"):
                sections.append(("latency", partial(bench_latency, clients, kinds, lat_runs, lat_seconds, node)))
            if args.only is None:
                sections.append(("handshake", partial(bench_handshake, clients, hs_rounds)))
            for name, section in sections:
                other = OtherLoad(*clients.pids, *([node.proc.pid] if node else []))
                result = await section()
                print(f"   (other processes on this machine used {other.cores():.2f} cores meanwhile)")
                if name == "fanout":
                    fanout = result
                elif name == "latency":
                    latency = result
                else:
                    handshake = result

        trio.run(in_trio)
        if args.only is None:
            memory = bench_memory(clients, mem_warm, mem_count)
    finally:
        clients.stop()
        if node is not None:
            node.stop()
    summary(kinds, fanout, latency, handshake, memory)
    print(f"\ntotal {time.monotonic() - started:.1f} s")
    if args.only is None and memory is None:
        sys.exit(1)


def summary(
    kinds: list[str],
    fanout: list[dict[str, Any]],
    latency: list[dict[str, Any]],
    handshake: dict[str, Any] | None,
    memory: dict[str, Any] | None,
) -> None:
    verdict = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    print("\nSummary")
    for r in fanout:
        a = r["ahpd"]["rate"]
        line = f"   fan-out K={r['k']}: ahpd {a:,.0f} frames/s"
        c = r["ceiling"]["rate"]
        line += f" = {a / c:.2f} x ceiling ({c:,.0f}/s; target >= 0.5: {verdict(a / c >= 0.5)})"
        if "node" in r:
            nd = r["node"]["rate"]
            line += f", {a / nd:.2f} x Node ws ({nd:,.0f}/s; target >= 1: {verdict(a >= nd)})"
        print(line)
        per_cpu = {kind: r[kind]["rate"] / r[kind]["server"] for kind in kinds}
        print(
            "      per server CPU-second (load-independent): "
            + ", ".join(
                f"{kind} {per_cpu[kind]:,.0f}"
                + (f" ({per_cpu['ahpd'] / per_cpu[kind]:.2f}x)" if kind != "ahpd" else "")
                for kind in kinds
            )
        )
    groups: dict[tuple[str, int, float], list[dict[str, Any]]] = {}
    for r in latency:
        groups.setdefault((r["kind"], r["k"], r["rate"]), []).append(r)
    anchors = {
        kind: statistics.median(r["p99"] for r in rs)
        for (kind, k, rate), rs in groups.items()
        if (k, rate) == (100, 1000.0)
    }
    slow = {
        kind
        for (kind, k, rate), rs in groups.items()
        if (k, rate) == (100, 1000.0) and any(r["emit_rate"] < 0.9 * rate for r in rs)
    }
    for (kind, k, rate), rs in groups.items():
        if kind != "ahpd":
            continue
        met = sum(latency_ok(r) for r in rs)
        p99s = ", ".join(f"{r['p99']:.1f}" for r in rs)
        extra = ""
        if (k, rate) == (100, 1000.0):
            extra = "".join(
                f"; {anchors['ahpd'] / anchors[a]:.2f} x {a} p99 ({anchors[a]:.1f} ms"
                f"{', not at the full pace' if a in slow else ''})"
                for a in kinds
                if a != "ahpd" and a in anchors
            )
        print(
            f"   latency K={k} at {rate:,.0f} actions/s: p99 [{p99s}] ms; target < 20 ms: "
            f"{'met' if met == len(rs) else 'NOT met' if not met else 'mixed'} ({met} of {len(rs)} runs){extra}"
        )
    if handshake is not None:
        print(
            f"   handshake: initialize = {handshake['mean_ratio']:.2f}x ping (mean), "
            f"{handshake['p50_ratio']:.2f}x (p50); target <= 3x: "
            f"{verdict(handshake['mean_ratio'] <= 3 and handshake['p50_ratio'] <= 3)}"
        )
    if memory is not None:
        print(
            f"   memory: {memory['per_conn']:.1f} KiB per idle connection; target <= 64 KiB: "
            f"{verdict(memory['per_conn'] <= 64)}"
        )


if __name__ == "__main__":
    main()
