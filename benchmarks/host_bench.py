"""How fast the host moves actions to clients over real WebSockets, and what a connection costs.

    python benchmarks/host_bench.py [--quick]

Four measurements, each printed with its target and whether this run met it:

1. fan-out throughput: one channel's actions to K subscribers, frames
   delivered per second (summed over clients), ahpd against a bare
   trio-websocket server sending the same frame texts with one writer per
   connection, in the same run (target: ahpd >= 50% of the bare server);
2. dispatch-to-delivery latency: 100 subscribers, actions emitted at a paced
   rate, emit time (server) to receive time (client) per serverSeq, both on
   CLOCK_MONOTONIC (target: p99 < 20 ms at 1,000 actions/s; also run at
   300, 200 and 100 actions/s, and at 1,000/s to 10 subscribers, to show
   where it is met);
3. handshake cost: initialize with the root snapshot on a new connection,
   against a ping on an initialized one (target: <= 3x);
4. memory per idle initialized connection of an ``ahpd run`` process, from
   its VmRSS (target: <= 64 KiB).

The servers run in this process; the clients run in a second process
(``_host_bench_client.py``), so on a two-core machine each side has a core.
Everything goes to 127.0.0.1 and every wait is bounded. The machine is
shared and noisy: throughput runs alternate ahpd and bare and report medians,
and each timed section says how many cores other processes used meanwhile
(from /proc/stat); a figure taken beside a busy neighbour is not the host's.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import re
import select
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
import trio_websocket

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _host_bench_client import ROOT, raise_nofile, worker  # noqa: E402

from ahpd.host import Host  # noqa: E402
from ahpd.host.jsonrpc import notification_frame  # noqa: E402
from ahpd.transport.websocket import serve_websocket  # noqa: E402

READY = "ahpd ready: "
MS = 1e6  # ns


def action(i: int) -> dict[str, Any]:
    return {"type": "root/activeSessionsChanged", "activeSessions": i}


def bare_frame(seq: int) -> str:
    """The text ahpd sends for ``action(seq)`` as its serverSeq ``seq`` (checked in ``check_frames``)."""
    return notification_frame("action", {"channel": ROOT, "action": action(seq), "serverSeq": seq})


def check_frames() -> None:
    """The bare server must send exactly what ahpd sends."""
    seen: list[str] = []

    class Sink:
        def send(self, text: str, size: int | None = None) -> bool:
            seen.append(text)
            return True

    host = Host()
    host.bus.channels[ROOT].subscribers.add(Sink())
    for i in (1, 2, 3):
        host.bus.emit(ROOT, action(i))
    assert seen == [bare_frame(1), bare_frame(2), bare_frame(3)], seen


# -- the client process -------------------------------------------------------------


class Clients:
    """The second process, where every client runs."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipe, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker, args=(child,), name="host_bench clients", daemon=True)
        self.proc.start()
        child.close()

    def start(self, job: str, **kwargs: Any) -> None:
        self.pipe.send((job, kwargs))

    async def expect(self, kind: str, timeout: float) -> Any:
        with trio.fail_after(timeout):
            msg = await trio.to_thread.run_sync(self.pipe.recv, abandon_on_cancel=True)
        if msg[0] != kind:
            raise RuntimeError(f"client process said {msg[0]!r}, expected {kind!r}")
        return msg[1]

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
        try:
            self.pipe.send(None)
        except OSError:
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


# -- how much else ran ------------------------------------------------------------------


def _busy_ticks() -> int:
    """CPU ticks spent busy on the whole machine (all cores, /proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return user + nice + system + irq + softirq + steal


def _proc_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


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
        listening = await nursery.start(partial(
            serve_websocket, host.serve_connection, host="127.0.0.1", port=0, token=None,
            queue_limit=host.queue_limit))
        try:
            yield host, listening.port
        finally:
            await _until(lambda: not host.peers, 5)  # let closing clients go before cancelling
            nursery.cancel_scope.cancel()


class BareServer:
    """trio-websocket with nothing on top: accept, one writer task per connection
    fed by an unbounded memory channel (as in ahpd), frames handed to all."""

    def __init__(self) -> None:
        self.outboxes: list[trio.MemorySendChannel[str]] = []
        self.open = 0

    async def handler(self, request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept()
        send, receive = trio.open_memory_channel[str](math.inf)
        self.outboxes.append(send)
        self.open += 1
        try:
            async for text in receive:
                await ws.send_message(text)
            while True:  # until the client closes
                await ws.get_message()
        except trio_websocket.ConnectionClosed:
            pass
        finally:
            self.open -= 1

    def send_all(self, text: str) -> None:
        for outbox in self.outboxes:
            outbox.send_nowait(text)

    def finish(self) -> None:
        for outbox in self.outboxes:
            outbox.close()


@asynccontextmanager
async def bare_server() -> AsyncIterator[tuple[BareServer, int]]:
    bare = BareServer()
    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(
            trio_websocket.serve_websocket, bare.handler, "127.0.0.1", 0, ssl_context=None))
        try:
            yield bare, server.port
        finally:
            await _until(lambda: not bare.open, 5)
            nursery.cancel_scope.cancel()


# -- 1. fan-out throughput ---------------------------------------------------------------


BATCH = 20  # actions emitted between two checkpoints


async def fanout_once(clients: Clients, kind: str, k: int, n: int) -> tuple[float, float, float]:
    """Frames per second delivered, summed over ``k`` clients, for ``n`` actions,
    and how busy the server and the client process were (CPU time / wall time)."""
    timeout = 60.0
    cm = ahpd_server() if kind == "ahpd" else bare_server()
    async with cm as (server, port):
        clients.start("fanout", port=port, clients=k, frames=n, initialize=kind == "ahpd", timeout=timeout)
        await clients.expect("ready", 60)
        if kind == "ahpd":
            root = server.bus.channels[ROOT]
            assert await _until(lambda: len(root.subscribers) == k, 10), "subscribers missing"
            emit = server.bus.emit
            cpu0, t0 = time.process_time(), time.monotonic_ns()
            for i in range(1, n + 1):
                emit(ROOT, action(i))
                if i % BATCH == 0:
                    await trio.sleep(0)
        else:
            assert await _until(lambda: len(server.outboxes) == k, 10), "connections missing"
            cpu0, t0 = time.process_time(), time.monotonic_ns()
            for i in range(1, n + 1):
                server.send_all(bare_frame(i))
                if i % BATCH == 0:
                    await trio.sleep(0)
            server.finish()
        await clients.expect("done", timeout + 30)
        server_cpu = time.process_time() - cpu0
        result = await clients.expect("result", 30)
    if result["received"] != k * n or not all(result["last_ns"]):
        raise RuntimeError(f"{kind}: clients received {result['received']} of {k * n} frames")
    wall = (max(result["last_ns"]) - t0) / 1e9
    return k * n / wall, server_cpu / wall, result["cpu"] / wall


async def bench_fanout(clients: Clients, configs: list[tuple[int, int]], rounds: int) -> list[dict[str, Any]]:
    print(f"\n1. Fan-out throughput: frames delivered/s summed over K clients "
          f"(median of {rounds}, ahpd and bare alternating)")
    rows = []
    for k, n in configs:
        rates: dict[str, list[float]] = {"ahpd": [], "bare": []}
        busy: dict[str, list[tuple[float, float]]] = {"ahpd": [], "bare": []}
        for _ in range(rounds):
            for kind in ("ahpd", "bare"):
                rate, server_busy, client_busy = await fanout_once(clients, kind, k, n)
                rates[kind].append(rate)
                busy[kind].append((server_busy, client_busy))
        a, b = statistics.median(rates["ahpd"]), statistics.median(rates["bare"])
        ratio = a / b
        rows.append({"k": k, "n": n, "ahpd": a, "bare": b, "ratio": ratio})
        runs = lambda xs: ", ".join(f"{x:,.0f}" for x in xs)  # noqa: E731
        print(f"   K={k:<4} N={n:<6} ahpd {a:>9,.0f}/s   bare trio-websocket {b:>9,.0f}/s   "
              f"ratio {ratio:.2f}  target >= 0.50: {'met' if ratio >= 0.5 else 'NOT met'}")
        print(f"            runs: ahpd [{runs(rates['ahpd'])}]  bare [{runs(rates['bare'])}]")
        cpu = {kind: (statistics.median(s for s, _ in v), statistics.median(c for _, c in v))
               for kind, v in busy.items()}
        print(f"            CPU busy (median): ahpd run server {cpu['ahpd'][0]:.0%} clients {cpu['ahpd'][1]:.0%}; "
              f"bare run server {cpu['bare'][0]:.0%} clients {cpu['bare'][1]:.0%}")
        rows[-1]["cpu"] = cpu
    return rows


# -- 2. dispatch-to-delivery latency ----------------------------------------------------


def pct(sorted_values: list[int] | array, p: float) -> float:
    if not sorted_values:
        return math.nan
    i = min(len(sorted_values) - 1, max(0, math.ceil(p / 100 * len(sorted_values)) - 1))
    return sorted_values[i]


async def latency_once(clients: Clients, k: int, rate: float, seconds: float) -> dict[str, Any]:
    total = int(rate * seconds)
    drain = 30.0
    async with ahpd_server() as (host, port):
        clients.start("latency", port=port, clients=k, frames=total, timeout=seconds + drain)
        await clients.expect("ready", 60)
        root = host.bus.channels[ROOT]
        assert await _until(lambda: len(root.subscribers) == k, 10), "subscribers missing"
        base = host.bus.server_seq
        emitted = array("q", bytes(8 * (total + 1)))
        emit, clock = host.bus.emit, time.monotonic_ns
        interval = 1e9 / rate
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
                seq = emit(ROOT, action(i))
                emitted[seq - base] = t
            await trio.sleep(0)
        emit_seconds = (clock() - start) / 1e9
        result = await clients.expect("result", seconds + drain + 30)
    lat: list[int] = []
    last_rx = 0
    for seqs, times in zip(result["seqs"], result["times"], strict=True):
        lat.extend(t - emitted[s - base] for s, t in zip(seqs, times, strict=True))
        if times:
            last_rx = max(last_rx, times[-1])
    lat.sort()
    return {
        "k": k, "rate": rate, "seconds": seconds, "expected": total * k, "received": len(lat),
        "emit_rate": total / emit_seconds,
        "delivered_rate": len(lat) / ((last_rx - start) / 1e9) if last_rx else 0.0,
        "p50": pct(lat, 50) / MS, "p99": pct(lat, 99) / MS, "max": (lat[-1] / MS) if lat else math.nan,
    }


def latency_ok(r: dict[str, Any]) -> bool:
    return r["p99"] < 20 and r["received"] == r["expected"]


async def bench_latency(clients: Clients, runs: list[tuple[int, float, int]], seconds: float) -> list[dict[str, Any]]:
    """``runs``: (subscribers, actions per second, how many times)."""
    print("\n2. Dispatch-to-delivery latency: paced emits, emit (server) to receive (client) per serverSeq")
    rows = []
    for k, rate, repeats in runs:
        for _ in range(repeats):
            r = await latency_once(clients, k, rate, seconds)
            rows.append(r)
            lost = "" if r["received"] == r["expected"] else \
                f"  (only {r['received']:,} of {r['expected']:,} received in time)"
            print(f"   K={k:<4} {rate:>6,.0f} actions/s x {seconds:g} s = {k * rate:,.0f} frames/s needed "
                  f"(emitted at {r['emit_rate']:,.0f}/s, delivered {r['delivered_rate']:,.0f} frames/s):\n"
                  f"             p50 {r['p50']:.2f} ms  p99 {r['p99']:.2f} ms  max {r['max']:.2f} ms  "
                  f"target p99 < 20 ms: {'met' if latency_ok(r) else 'NOT met'}{lost}")
    return rows


# -- 3. handshake cost -----------------------------------------------------------------


async def bench_handshake(clients: Clients, rounds: int) -> dict[str, Any]:
    print(f"\n3. Handshake cost: {rounds} rounds, one request at a time, client-side round trips")
    async with ahpd_server() as (_host, port):
        clients.start("handshake", port=port, rounds=rounds)
        result = await clients.expect("result", 120)
    stats = {}
    for name, label in (("ping", "ping on an initialized connection"),
                        ("initialize", "initialize + root snapshot, new connection"),
                        ("upgrade", "TCP connect + WebSocket upgrade"),
                        ("subscribe", "subscribe root (snapshot), one connection")):
        values = sorted(result[name])
        stats[name] = {"mean": statistics.fmean(values) / 1e3, "p50": pct(values, 50) / 1e3,
                       "p99": pct(values, 99) / 1e3}
        s = stats[name]
        print(f"   {label:<44} mean {s['mean']:7.0f} us  p50 {s['p50']:7.0f} us  p99 {s['p99']:7.0f} us")
    mean_ratio = stats["initialize"]["mean"] / stats["ping"]["mean"]
    p50_ratio = stats["initialize"]["p50"] / stats["ping"]["p50"]
    sub_ratio = stats["subscribe"]["p50"] / stats["ping"]["p50"]
    full = [u + i for u, i in zip(result["upgrade"], result["initialize"], strict=True)]
    full_ratio = statistics.median(full) / 1e3 / stats["ping"]["p50"]
    met = mean_ratio <= 3 and p50_ratio <= 3
    print(f"   initialize / ping: mean {mean_ratio:.2f}x, p50 {p50_ratio:.2f}x  "
          f"target <= 3x: {'met' if met else 'NOT met'}")
    print(f"   (subscribe root / ping p50 {sub_ratio:.2f}x; "
          f"connect + upgrade + initialize / ping p50 {full_ratio:.2f}x)")
    return {"stats": stats, "mean_ratio": mean_ratio, "p50_ratio": p50_ratio,
            "sub_ratio": sub_ratio, "full_ratio": full_ratio}


# -- 4. memory per idle connection ------------------------------------------------------


def vm_rss_kib(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", text, re.M).group(1))


class DaemonFailed(RuntimeError):
    pass


def bench_memory(clients: Clients, warm: int, count: int) -> dict[str, Any] | None:
    """None (after saying why) if ``ahpd run`` does not start."""
    print(f"\n4. Memory per idle initialized connection (subscribed to root), "
          f"'ahpd run' in its own process, {count} connections")
    half = count // 2
    steps = [warm, warm + half, warm + count]
    rss: list[int] = []
    with tempfile.TemporaryDirectory(prefix="ahpd-bench-") as data_dir:
        log_path = Path(data_dir) / "stderr.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ahpd", "run", "--port", "0", "--data-dir", data_dir,
                 "--without-connection-token", "--sessions", "memory"],
                stdout=subprocess.PIPE, stderr=log, text=True)
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
    print(f"   VmRSS after {warm} warm-up connections {rss[0]:,} KiB, after +{half} {rss[1]:,} KiB, "
          f"after +{count} {rss[2]:,} KiB")
    print(f"   per connection: {per_conn:.1f} KiB (second half alone {second_half:.1f} KiB)  "
          f"target <= 64 KiB: {'met' if per_conn <= 64 else 'NOT met'}")
    return {"rss": rss, "per_conn": per_conn, "second_half": second_half}


# -- main -----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small runs, a smoke check in well under a minute")
    args = parser.parse_args()
    if args.quick:
        fan_configs, fan_rounds = [(10, 1000), (100, 100)], 1
        lat_runs, lat_seconds = [(100, 1000.0, 1), (100, 100.0, 1)], 0.5
        hs_rounds = 50
        mem_warm, mem_count = 10, 100
    else:
        fan_configs, fan_rounds = [(10, 6000), (100, 800)], 5
        lat_runs = [(100, 1000.0, 1), (100, 300.0, 2), (100, 200.0, 2), (100, 100.0, 2), (10, 1000.0, 2)]
        lat_seconds = 3.0
        hs_rounds = 300
        mem_warm, mem_count = 20, 400
    raise_nofile(8192)
    check_frames()
    print(f"host_bench{' --quick' if args.quick else ''}: python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"servers in pid {os.getpid()}, clients in a second process")
    started = time.monotonic()
    clients = Clients()
    try:
        async def in_trio() -> tuple[Any, Any, Any]:
            results = []
            for section in (partial(bench_fanout, clients, fan_configs, fan_rounds),
                            partial(bench_latency, clients, lat_runs, lat_seconds),
                            partial(bench_handshake, clients, hs_rounds)):
                other = OtherLoad(clients.proc.pid)
                results.append(await section())
                print(f"   (other processes on this machine used {other.cores():.2f} cores meanwhile)")
            return tuple(results)

        fanout, latency, handshake = trio.run(in_trio)
        memory = bench_memory(clients, mem_warm, mem_count)
    finally:
        clients.stop()
    summary(fanout, latency, handshake, memory)
    print(f"\ntotal {time.monotonic() - started:.1f} s")
    if memory is None:
        sys.exit(1)


def summary(fanout: list[dict[str, Any]], latency: list[dict[str, Any]], handshake: dict[str, Any],
            memory: dict[str, Any] | None) -> None:
    verdict = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    print("\nSummary")
    for r in fanout:
        print(f"   fan-out K={r['k']}: ahpd {r['ahpd']:,.0f} frames/s = {r['ratio']:.0%} of bare trio-websocket "
              f"({r['bare']:,.0f}/s); target >= 50%: {verdict(r['ratio'] >= 0.5)}")
    if fanout:
        big = max(fanout, key=lambda r: r["k"])
        print(f"   (fan-out capacity to K={big['k']} measured in 1.: ahpd {big['ahpd']:,.0f} frames/s, "
              f"bare trio-websocket {big['bare']:,.0f} frames/s)")
    groups: dict[tuple[int, float], list[dict[str, Any]]] = {}
    for r in latency:
        groups.setdefault((r["k"], r["rate"]), []).append(r)
    for (k, rate), rs in groups.items():
        met = sum(latency_ok(r) for r in rs)
        p99s = ", ".join(f"{r['p99']:.1f}" for r in rs)
        main = " (the target's load)" if (k, rate) == (100, 1000) else ""
        print(f"   latency K={k} at {rate:,.0f} actions/s{main}: p99 [{p99s}] ms; target < 20 ms: "
              f"{'met' if met == len(rs) else 'NOT met' if not met else 'mixed'} ({met} of {len(rs)} runs)")
    print(f"   handshake: initialize = {handshake['mean_ratio']:.2f}x ping (mean), "
          f"{handshake['p50_ratio']:.2f}x (p50); target <= 3x: "
          f"{verdict(handshake['mean_ratio'] <= 3 and handshake['p50_ratio'] <= 3)}")
    if memory is None:
        print("   memory: not measured ('ahpd run' did not start)")
    else:
        print(f"   memory: {memory['per_conn']:.1f} KiB per idle connection; target <= 64 KiB: "
              f"{verdict(memory['per_conn'] <= 64)}")


if __name__ == "__main__":
    main()
