"""The path a client's action takes: dispatched over a WebSocket, reduced by a
real ``ahpd run``, fanned out to K WebSocket subscribers.

    python benchmarks/dispatch_bench.py [--quick] [--only fast|paced] [--k K] [--sessions memory,file]
                                        [--ahpd-tree DIR] [--before DIR] [--profile DIR]

Servers, all started by this script and measured interleaved in one run:

- **ahpd**: ``python -m ahpd run`` (HOME and data dir in a temporary
  directory, the demo agent), once with ``--sessions memory`` and once with
  ``--sessions file``. A session is created; K subscribers ``initialize``
  subscribed to its default chat; one more client dispatches
  ``chat/draftChanged`` with a unique text each time. ``--ahpd-tree DIR``
  runs the daemon from another checkout's ``ahpd`` package; ``--before DIR``
  runs one from DIR beside this tree's, interleaved (rows ``before ...``),
  for before/after ratios from one run.
- **Node ws**: ``node_ws/relay.js``, the ``ws`` library relaying each text
  the dispatcher sends (parsed, put in an envelope with a serverSeq,
  serialized once) to every subscriber with one ``ws.send`` each.
- **ceiling**: a bare trio relay in a process of its own
  (``--serve-ceiling``): reads a whole chunk of the dispatcher's frames,
  parses each, builds each envelope's frame bytes once, queues them for
  every subscriber, and only then wakes the writers, each of which writes
  its whole queue with one ``send_all``. No protocol, no accounting.

The clients (``_dispatch_bench_client.py``) are spread over ``--client-procs``
processes; the dispatcher has one of its own. Printed per row: frames/s
(K x actions, first send to the last subscriber's last frame), frames per
server CPU-second (the server's CPU from ``/proc/<pid>/task/*/schedstat``,
all its threads), server CPU per dispatched action, subscriber frames per
write system call (``perf stat`` counting sendto/sendmsg/write/writev on the
server's pid, when ``perf`` can), the clients' CPU, and the cores other
processes used meanwhile. The paced mode sends at a given rate and prints
p50/p99 of dispatch (the dispatcher's send) to delivery (the subscriber's
read), both CLOCK_MONOTONIC.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _dispatch_bench_client import worker  # noqa: E402
from _host_bench_client import WsClient  # noqa: E402

HERE = Path(__file__).resolve().parent
#: Where ``--profile`` writes py-spy's collapsed stacks of each ahpd row.
PROFILE_DIR: Path | None = None
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


# -- the ceiling server -----------------------------------------------------------


def _header(n: int) -> bytes:
    if n < 126:
        return bytes((0x81, n))
    if n < 65536:
        return bytes((0x81, 126)) + n.to_bytes(2, "big")
    return bytes((0x81, 127)) + n.to_bytes(8, "big")


async def _ceiling_conn(stream: trio.SocketStream, subs: list[Any], seq: list[int]) -> None:
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        raw += chunk
    head, _, buf_rest = raw.partition(b"\r\n\r\n")
    key = next(
        line.split(b":", 1)[1].strip() for line in head.split(b"\r\n") if line.lower().startswith(b"sec-websocket-key")
    )
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    await stream.send_all(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )
    buf = bytearray(buf_rest)
    queue: list[bytes] = []
    me = (queue, [trio.Event()])

    async def writer() -> None:
        while True:
            if not queue:
                me[1][0] = trio.Event()
                await me[1][0].wait()
                continue
            data = b"".join(queue)
            queue.clear()
            await stream.send_all(data)

    try:
        await _ceiling_loop(stream, buf, queue, me, subs, seq, writer)
    finally:
        if me in subs:
            subs.remove(me)


async def _ceiling_loop(
    stream: Any, buf: bytearray, queue: list[bytes], me: Any, subs: list[Any], seq: list[int], writer: Any
) -> None:
    role = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        while True:
            texts = []
            off, end = 0, len(buf)
            while end - off >= 2:
                b1 = buf[off + 1]
                n, p = b1 & 0x7F, off + 2
                if n == 126:
                    if end - p < 2:
                        break
                    n, p = int.from_bytes(buf[p : p + 2], "big"), p + 2
                elif n == 127:
                    if end - p < 8:
                        break
                    n, p = int.from_bytes(buf[p : p + 8], "big"), p + 8
                if end - p < n + 4:
                    break
                mask = bytes(buf[p : p + 4])
                payload = bytes(buf[p + 4 : p + 4 + n])
                if mask != b"\0\0\0\0":
                    m = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
                    payload = (int.from_bytes(payload, "big") ^ m).to_bytes(n, "big")
                if buf[off] & 0x0F == 0x8:
                    nursery.cancel_scope.cancel()
                    return
                texts.append(payload.decode())
                off = p + 4 + n
            del buf[:off]
            for text in texts:
                if role is None:
                    role = text
                    if role == "sub":
                        subs.append(me)
                    queue.append(_header(2) + b"ok")
                    me[1][0].set()
                    continue
                params = json.loads(text)["params"]
                seq[0] += 1
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "action",
                        "params": {
                            "channel": params["channel"],
                            "action": params["action"],
                            "serverSeq": seq[0],
                            "origin": {"clientId": "pub", "clientSeq": params["clientSeq"]},
                        },
                    },
                    separators=(",", ":"),
                ).encode()
                data = _header(len(body)) + body
                for q, _ in subs:
                    q.append(data)
            if texts and role == "pub":
                for _, w in subs:  # the whole chunk is reduced: now the writers run
                    w[0].set()
            chunk = await stream.receive_some(65536)
            if not chunk:
                nursery.cancel_scope.cancel()
                return
            buf += chunk


async def serve_ceiling() -> None:
    subs: list[Any] = []
    seq = [0]
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    print(json.dumps({"port": listeners[0].socket.getsockname()[1]}), flush=True)

    async def one(stream: trio.SocketStream) -> None:
        try:
            await _ceiling_conn(stream, subs, seq)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, one, listeners)
        await trio.to_thread.run_sync(sys.stdin.read)
        nursery.cancel_scope.cancel()


# -- measuring a process ------------------------------------------------------------


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` (including ones that ended: the
    process's own counters cover those, so the larger is taken)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return max(total, ticks * 10**9 // os.sysconf("SC_CLK_TCK"))


def busy_ns() -> int:
    """CPU time used by everything on the machine (all cores), from /proc/stat."""
    parts = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    values = [int(v) for v in parts]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) * 10**9 // os.sysconf("SC_CLK_TCK")


class SyscallCount:
    """``perf stat`` counting the write system calls of a pid while it runs."""

    EVENTS = ("sendto", "sendmsg", "write", "writev")

    def __init__(self, pid: int) -> None:
        self.proc: subprocess.Popen[str] | None = None
        if shutil.which("perf") is None:
            return
        events = ",".join(f"syscalls:sys_enter_{e}" for e in self.EVENTS)
        self.proc = subprocess.Popen(
            ["perf", "stat", "-x,", "-e", events, "-p", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=10)
        total = 0
        for line in err.splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2].startswith("syscalls:"):
                if not fields[0].strip().isdigit():
                    return None
                total += int(fields[0])
        return total or None


# -- the servers --------------------------------------------------------------------


class Server:
    name: str
    kind: str  # "ahpd" or "anchor"
    proc: subprocess.Popen[bytes]
    port: int
    chat: str = "ahp-chat://bench"

    def stop(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Ahpd(Server):
    kind = "ahpd"

    def __init__(self, work: Path, sessions: str, tree: Path | None, label: str = "ahpd") -> None:
        self.name = f"{label} {sessions}"
        work.mkdir(parents=True)
        env = {**os.environ, "HOME": str(work), "CLAUDE_CONFIG_DIR": str(work / "claude")}
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        self.log = open(work / "stderr", "w+b")  # noqa: SIM115 - closed with the run
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ahpd",
                "run",
                "--port",
                "0",
                "--data-dir",
                str(work / "data"),
                "--sessions",
                sessions,
                "--without-connection-token",
                "--log-level",
                "warning",
            ],
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            cwd=work,
        )
        line = self.proc.stdout.readline().decode()  # type: ignore[union-attr]
        if not line.startswith("ahpd ready: "):
            raise RuntimeError(f"ahpd did not start: {line!r}, {Path(self.log.name).read_text()[-2000:]}")
        self.port = int(line.split(": ", 1)[1].strip().rsplit(":", 1)[1].strip("/").split("/")[0].split("?")[0])
        folder = work / "project"
        folder.mkdir()
        self.chat = trio.run(self._session, folder)

    async def _session(self, folder: Path) -> str:
        c = await WsClient.connect(self.port)
        await c.initialize("bench-setup")
        session = f"ahp-session:/{uuid.uuid4()}"
        reply = await c.call(
            "createSession", {"channel": session, "provider": "demo", "workingDirectories": [folder.as_uri()]}
        )
        assert "result" in reply, reply
        reply = await c.call("subscribe", {"channel": session})
        chat = reply["result"]["snapshot"]["state"]["defaultChat"]
        await c.aclose()
        return str(chat)


class Anchor(Server):
    kind = "anchor"

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = self.proc.stdout.readline().decode()  # type: ignore[union-attr]
        self.port = json.loads(line)["port"]


def node_anchor() -> Anchor | None:
    folder = HERE / "node_ws"
    if shutil.which("node") is None:
        print("node not found: the Node ws anchor is skipped")
        return None
    if not (folder / "node_modules" / "ws").exists():
        subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=folder, check=True)
    return Anchor("Node ws", ["node", str(folder / "relay.js")])


# -- one measurement -------------------------------------------------------------------


class Clients:
    def __init__(self, procs: int) -> None:
        ctx = multiprocessing.get_context("fork")
        self.pipes = []
        self.procs = []
        for _ in range(procs + 1):  # the last one is the dispatcher's
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=worker, args=(theirs,), daemon=True)
            p.start()
            self.pipes.append(mine)
            self.procs.append(p)

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for p in self.procs:
            p.join(10)


def _expect(pipe: Any, what: str) -> Any:
    kind, value = pipe.recv()
    if kind != what:
        raise RuntimeError(f"client said {kind} ({value}), expected {what}")
    return value


def measure(
    server: Server, clients: Clients, k: int, n: int, rate: float | None, first: int, timeout: float
) -> dict[str, Any]:
    subs_pipes, pub_pipe = clients.pipes[:-1], clients.pipes[-1]
    used = subs_pipes[: max(1, min(len(subs_pipes), k))]
    shares = [k // len(used) + (i < k % len(used)) for i in range(len(used))]
    offset = 0
    for pipe, share in zip(used, shares, strict=True):
        pipe.send(
            (
                "subs",
                {
                    "port": server.port,
                    "kind": server.kind,
                    "chat": server.chat,
                    "clients": share,
                    "n": n,
                    "paced": rate is not None,
                    "timeout": timeout,
                    "offset": offset + first,
                },
            )
        )
        offset += share
    for pipe in used:
        _expect(pipe, "ready")
    pub_pipe.send(
        (
            "pub",
            {
                "port": server.port,
                "kind": server.kind,
                "chat": server.chat,
                "n": n,
                "rate": rate,
                "pad": 40,
                "first": first,
            },
        )
    )
    _expect(pub_pipe, "ready")
    time.sleep(0.2)  # the subscriptions settle (ahpd subscribes as part of initialize)
    counter = SyscallCount(server.proc.pid)
    spy = None
    if PROFILE_DIR is not None and server.kind == "ahpd" and shutil.which("py-spy"):
        out = PROFILE_DIR / f"{server.name.replace(' ', '-')}-K{k}-{'paced' if rate else 'fast'}.txt"
        spy = subprocess.Popen(
            ["py-spy", "record", "-p", str(server.proc.pid), "-f", "raw", "-r", "200", "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    time.sleep(0.3)  # perf attached
    cpu0, busy0, wall0 = cpu_ns(server.proc.pid), busy_ns(), time.monotonic()
    pub_pipe.send("go")
    subs = [_expect(pipe, "result") for pipe in used]
    pub = _expect(pub_pipe, "result")
    cpu1, busy1, wall1 = cpu_ns(server.proc.pid), busy_ns(), time.monotonic()
    writes = counter.stop()
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    received = sum(s["received"] for s in subs)
    last = max(max(s["last_ns"]) for s in subs)
    server_cpu = (cpu1 - cpu0) / 1e9
    client_cpu = sum(s["cpu"] for s in subs) + pub["cpu"]
    wall = wall1 - wall0
    row: dict[str, Any] = {
        "server": server.name,
        "k": k,
        "n": n,
        "received": received,
        "complete": received == k * n,
        "seconds": (last - pub["t0"]) / 1e9,
        "server_cpu": server_cpu,
        "client_cpu": client_cpu,
        "others": max(0.0, (busy1 - busy0) / 1e9 - server_cpu - client_cpu) / wall,
        "writes": writes,
    }
    row["frames_s"] = received / row["seconds"] if row["seconds"] > 0 else 0.0
    row["frames_cpu"] = received / server_cpu if server_cpu > 0 else 0.0
    row["cpu_per_action_us"] = server_cpu / n * 1e6
    row["per_write"] = received / writes if writes else None
    if rate is not None:
        sent = pub["sent"]
        delays = []
        for s in subs:
            for idxs, whens in zip(s["idx"], s["when"], strict=True):
                for i, t in zip(idxs, whens, strict=True):
                    j = i - first
                    if 0 <= j < len(sent):
                        delays.append((t - sent[j]) / 1e6)
        delays.sort()
        row["rate"] = rate
        row["achieved"] = n / ((pub["t_end"] - pub["t0"]) / 1e9)
        row["p50"] = delays[len(delays) // 2] if delays else None
        row["p99"] = delays[min(len(delays) - 1, int(len(delays) * 0.99))] if delays else None
    return row


def show(row: dict[str, Any]) -> None:
    parts = [
        f"{row['server']:<13} K={row['k']:<3} N={row['n']:<6}",
        f"{row['frames_s']:>9,.0f} frames/s",
        f"{row['frames_cpu']:>10,.0f} frames/CPU-s",
        f"{row['cpu_per_action_us']:>7.1f} us CPU/action",
        f"{row['per_write']:.1f} frames/write" if row["per_write"] else "frames/write n/a",
        f"server {row['server_cpu']:.2f} s, clients {row['client_cpu']:.2f} s, others {row['others']:.2f} cores",
    ]
    if "p99" in row:
        parts.append(
            f"rate {row['rate']:.0f} (sent {row['achieved']:.0f}/s) p50 {row['p50']:.1f} ms p99 {row['p99']:.1f} ms"
        )
    if not row["complete"]:
        parts.append(f"INCOMPLETE ({row['received']} of {row['k'] * row['n']})")
    print("  " + " | ".join(parts), flush=True)


def ratios(rows: list[dict[str, Any]], key: str, higher_is_better: bool = True) -> None:
    by = {}
    for r in rows:
        by.setdefault(r["server"], []).append(r[key])
    med = {s: statistics.median(v) for s, v in by.items() if all(x is not None for x in v)}
    for name in [s for s in med if s.startswith(("ahpd", "before"))]:
        for anchor in ("Node ws", "ceiling"):
            if anchor in med and med[anchor]:
                print(f"    {key}: {name} / {anchor} = {med[name] / med[anchor]:.2f}")
    for name in [s for s in med if s.startswith("ahpd")]:
        before = name.replace("ahpd", "before", 1)
        if med.get(before):
            print(f"    {key}: {name} / {before} = {med[name] / med[before]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer actions, one repetition")
    parser.add_argument("--only", choices=("fast", "paced"))
    parser.add_argument("--ahpd-tree", type=Path, help="run the daemon from DIR's ahpd package")
    parser.add_argument(
        "--before", type=Path, help="also run DIR's ahpd package (rows 'before ...'), interleaved with this one"
    )
    parser.add_argument("--client-procs", type=int, default=max(2, os.cpu_count() or 2))
    parser.add_argument("--sessions", default="memory,file", help="which --sessions modes to measure")
    parser.add_argument("--k", type=int, help="only this many subscribers")
    parser.add_argument("--profile", type=Path, help="py-spy (on PATH) records each ahpd row's stacks into DIR")
    parser.add_argument("--serve-ceiling", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_ceiling:
        trio.run(serve_ceiling)
        return
    reps = 1 if args.quick else 3
    global PROFILE_DIR
    PROFILE_DIR = args.profile
    if PROFILE_DIR is not None:
        PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    fast = [
        (100, 1500 if args.quick else 4000),
        (10, 6000 if args.quick else 15000),
        (1, 4000 if args.quick else 10000),
    ]
    paced = [(100, 100.0, 2.0), (100, 1000.0, 2.0)]
    if args.k is not None:
        fast = [(k, n) for k, n in fast if k == args.k]
        paced = [p for p in paced if p[0] == args.k]
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cores, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        servers: list[Server] = []
        try:
            for mode in args.sessions.split(","):
                servers.append(Ahpd(Path(tmp) / mode, mode, args.ahpd_tree))
                if args.before is not None:
                    servers.append(Ahpd(Path(tmp) / f"before-{mode}", mode, args.before, "before"))
            node = node_anchor()
            if node is not None:
                servers.append(node)
            servers.append(Anchor("ceiling", [sys.executable, str(Path(__file__).resolve()), "--serve-ceiling"]))
            clients = Clients(args.client_procs)
            first = 1
            try:
                if args.only in (None, "fast"):
                    for k, n in fast:
                        print(f"fast: K={k} subscribers, {n} dispatches as fast as the server reads them")
                        rows = []
                        for _ in range(reps):
                            for server in servers:
                                row = measure(server, clients, k, n, None, first, timeout=120)
                                first += n
                                show(row)
                                rows.append(row)
                        for key in ("frames_cpu", "frames_s", "cpu_per_action_us", "per_write"):
                            ratios(rows, key)
                if args.only in (None, "paced"):
                    for k, rate, secs in paced:
                        n = int(rate * secs)
                        print(f"paced: K={k} subscribers, {rate:.0f} dispatches/s for {secs:.0f} s")
                        rows = []
                        for _ in range(reps):
                            for server in servers:
                                row = measure(server, clients, k, n, rate, first, timeout=60)
                                first += n
                                show(row)
                                rows.append(row)
                        ratios(rows, "p99")
            finally:
                clients.close()
        finally:
            for server in servers:
                server.stop()
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
