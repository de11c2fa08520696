"""A noisy terminal watched by many clients, beside a bare pty in the same run;
what typed input a program never reads costs; whether the host still answers.

    python benchmarks/terminal_bench.py [--mib N] [--full] [--watchers 1,10] [--rounds R] [--input-mib M]

A real ``ahpd run`` (bash with shell integration, a temporary HOME) runs
``cat`` of a file of N MiB of ``yes`` output in a terminal that K clients
subscribe to. The watchers are raw-socket WebSocket clients (see
``_host_bench_client.py``: several times cheaper per frame than the host, so
they do not set the pace), all in this process. The anchor, measured just
before each round with the same file: ``cat`` in a bare pty (ptyprocess),
read here as fast as it goes. Per watcher count, the median of the rounds:

* MB/s of ``terminal/data`` text each watcher received, from the command
  being typed to its ``terminal/commandFinished``, and its ratio to the bare
  pty's MB/s (the target: >= 0.5 at 10 watchers);
* the daemon's CPU seconds per MB delivered to one watcher, beside the bare
  pty's (``cat`` plus its reader) per MB: CPU moves less than wall time with
  the neighbours' load on a shared machine;
* the CPU this process (the watchers) used meanwhile, and the cores the
  whole machine was busy (/proc/stat), to tell a client-bound run;
* ping round trips from another client while the terminal floods.

``--input-mib M`` (default 0: skipped) then types M MiB of input, in
256 KiB ``terminal/input`` actions, into a terminal whose program never reads
(``stty raw; exec sleep``) and prints the daemon's VmRSS before, after, and
once the terminal is disposed, with how many of the actions were refused.

Before measuring, it waits until the daemon is idle (its start-up agent
probes done). Default N is 20 MiB (the machine is shared); ``--full`` is 200 MiB.
No pass/fail: the figures are for benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ptyprocess
import trio
from trio_websocket import open_websocket_url

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _host_bench_client import OP_TEXT, WsClient  # noqa: E402

MIB = 2**20
#: ``--profile PREFIX``: py-spy (not a dependency: pip install py-spy) records the
#: daemon during each round, as collapsed stacks in PREFIX.<round>.txt.
PROFILE = ""
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """CPU seconds ``pid`` has used (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (all cores)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / TICK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def start_daemon(work: Path) -> tuple[trio.Process, str]:
    home = work / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "SHELL": "/bin/bash", "CLAUDE_CONFIG_DIR": str(work / "claude")}
    proc = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "ahpd",
            "run",
            "--port",
            "0",
            "--data-dir",
            str(work / "d"),
            "--sessions",
            "memory",
            "--log-level",
            "warning",
            "--without-connection-token",
        ],
        stdout=subprocess.PIPE,
        env=env,
    )
    line = b""
    with trio.fail_after(60):
        while not line.endswith(b"\n"):
            line += await proc.stdout.receive_some(1)
    return proc, line.decode().split("ahpd ready: ", 1)[1].strip()


async def until_idle(pid: int, limit: float = 60.0) -> None:
    """Until ``pid`` used under 5% of a core over half a second (its probes done)."""
    with trio.move_on_after(limit):
        while True:
            before = proc_cpu(pid)
            await trio.sleep(0.5)
            if proc_cpu(pid) - before < 0.025:
                return


def bare_pty(path: Path) -> tuple[float, float]:
    """``cat path`` through a bare pty, read here: (MB/s, the reader's CPU seconds per MB)."""
    mine = time.process_time()
    process = ptyprocess.PtyProcess.spawn(["cat", str(path)])
    total = 0
    started = time.perf_counter()
    while True:
        try:
            data = os.read(process.fd, 65536)
        except OSError:
            break
        if not data:
            break
        total += len(data)
    elapsed = time.perf_counter() - started
    process.close(force=True)
    cpu = time.process_time() - mine  # the reader's, as the daemon's excludes its shell's cat
    return total / elapsed / 1e6, cpu / (total / 1e6)


class Control:
    """A watcher that also asks things (trio-websocket: it is one of a few)."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.ids = 0
        self.seq = 0

    async def call(self, method: str, params: dict) -> dict:
        self.ids += 1
        ident = self.ids
        await self.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
        while True:
            frame = json.loads(await self.ws.get_message())
            if frame.get("id") == ident:
                return frame

    async def dispatch(self, channel: str, action: dict) -> None:
        self.seq += 1
        await self.ws.send_message(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "dispatchAction",
                    "params": {"channel": channel, "clientSeq": self.seq, "action": action},
                }
            )
        )


async def pings(url: str, stop: trio.Event, out: list[float]) -> None:
    async with open_websocket_url(url) as ws:
        client = Control(ws)
        await client.call("initialize", {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "pinger"})
        while not stop.is_set():
            started = time.perf_counter()
            await client.call("ping", {})
            out.append((time.perf_counter() - started) * 1000)
            await trio.sleep(0.02)


def summary(rtts: list[float]) -> str:
    if not rtts:
        return "no pings"
    ordered = sorted(rtts)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered):.2f} ms, p99 {p99:.2f} ms, max {ordered[-1]:.2f} ms ({len(ordered)} pings)"


async def watch(client: WsClient, uri: str, received: list[int], finished: list[float], i: int) -> None:
    """Count ``terminal/data`` text until ``terminal/commandFinished``."""
    while True:
        for opcode, payload in await client.frames():
            if opcode != OP_TEXT:
                continue
            frame = json.loads(payload)
            action = frame.get("params", {}).get("action", {})
            if frame.get("params", {}).get("channel") != uri:
                continue
            if action.get("type") == "terminal/data":
                received[i] += len(action["data"])
            elif action.get("type") == "terminal/commandFinished":
                finished[i] = time.perf_counter()
                return


async def one_round(
    url: str, port: int, pid: int, sample: Path, watchers: int, tag: str, control: Control
) -> dict[str, float]:
    uri = f"ahp-terminal:/bench-{tag}"
    reply = await control.call(
        "createTerminal", {"channel": uri, "claim": {"kind": "client", "clientId": "control"}, "cols": 120, "rows": 40}
    )
    assert reply.get("result", 1) is None, reply
    clients = [await WsClient.connect(port) for _ in range(watchers)]
    for i, c in enumerate(clients):
        await c.initialize(f"w{tag}-{i}")
        await c.call("subscribe", {"channel": uri})
    # The prompt is out once the shell's integration said so (to the watchers too).
    snapshot = (await control.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
    while not snapshot.get("supportsCommandDetection"):
        frame = json.loads(await control.ws.get_message())
        if frame.get("params", {}).get("action", {}).get("type") == "terminal/commandDetectionAvailable":
            break
    await control.ws.send_message(
        json.dumps({"jsonrpc": "2.0", "method": "unsubscribe", "params": {"channel": uri}})
    )  # it reads nothing while the watchers do
    await until_idle(pid, 10)
    for c in clients:  # drop what the prompt said
        c.buf.clear()
    received = [0] * watchers
    finished = [0.0] * watchers
    busy0, cpu0, mine0 = machine_busy(), proc_cpu(pid), time.process_time()
    spy = None
    if PROFILE:
        spy = await trio.lowlevel.open_process(
            ["py-spy", "record", "-p", str(pid), "-r", "250", "--format", "raw", "-o", f"{PROFILE}.{tag}.txt"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await trio.sleep(1)  # attached
    started = time.perf_counter()
    await control.dispatch(uri, {"type": "terminal/input", "data": f"cat {sample}\r"})
    async with trio.open_nursery() as nursery:
        for i, c in enumerate(clients):
            nursery.start_soon(watch, c, uri, received, finished, i)
    wall = max(finished) - started
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        await spy.wait()
    daemon_cpu, mine = proc_cpu(pid) - cpu0, time.process_time() - mine0
    busy = machine_busy() - busy0
    for c in clients:
        await c.aclose()
    await control.call("disposeTerminal", {"channel": uri})
    each = [received[i] / (finished[i] - started) / 1e6 for i in range(watchers)]
    return {
        "each": statistics.median(each),
        "cpu_per_mb": daemon_cpu / (statistics.median(received) / 1e6),
        "daemon_cores": daemon_cpu / wall,
        "clients_cores": mine / wall,
        "others_cores": max(0.0, busy / wall - daemon_cpu / wall - mine / wall),
        "bytes": statistics.median(received),
    }


async def input_flood(url: str, pid: int, mib: int, control: Control) -> None:
    uri = "ahp-terminal:/deaf"
    reply = await control.call("createTerminal", {"channel": uri, "claim": {"kind": "client", "clientId": "control"}})
    assert reply.get("result", 1) is None, reply
    await control.call("subscribe", {"channel": uri})
    await control.dispatch(uri, {"type": "terminal/input", "data": "stty raw -echo; echo RE''ADY; exec sleep 100000\n"})
    while "READY" not in json.dumps(json.loads(await control.ws.get_message()).get("params", {}).get("action", {})):
        pass
    await until_idle(pid, 10)
    before = rss_mib(pid)
    chunk = "k" * 256 * 1024
    count = mib * 4
    first = control.seq + 1
    refused = answered = 0
    caught_up = trio.Event()

    async def type_all() -> None:
        nonlocal caught_up
        for sent in range(count):
            while sent - answered > 16:  # a window, so that the answers (echoes) never pile up
                await caught_up.wait()
                caught_up = trio.Event()
            await control.dispatch(uri, {"type": "terminal/input", "data": chunk})

    async with trio.open_nursery() as nursery:  # each action is answered (echoed or refused): read as it goes
        nursery.start_soon(type_all)
        while answered < count:
            frame = json.loads(await control.ws.get_message())
            params = frame.get("params", {})
            if params.get("channel") == uri and params.get("origin", {}).get("clientSeq", 0) >= first:
                answered += 1
                refused += "rejectionReason" in params
                caught_up.set()
    await until_idle(pid, 10)
    loaded = rss_mib(pid)
    await control.call("disposeTerminal", {"channel": uri})
    await until_idle(pid, 10)
    after = rss_mib(pid)
    print(
        f"  input: {mib} MiB typed into a program that never reads, {count} actions of 256 KiB, "
        f"{refused} refused; daemon VmRSS {before:.0f} MiB before, {loaded:.0f} MiB after, "
        f"{after:.0f} MiB once the terminal is disposed"
    )


async def main(size: int, watcher_counts: list[int], rounds: int, input_mib: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sample = work / "yes.txt"
        subprocess.run(f"yes | head -c {size} > {sample}", shell=True, check=True)  # noqa: ASYNC221 - setting up, before it measures
        proc, url = await start_daemon(work)
        port = int(url.split(":")[2].split("/")[0])
        try:
            await until_idle(proc.pid)
            print(
                f"terminal_bench: cat of {size / MIB:.0f} MiB of `yes` output, watchers {watcher_counts}, "
                f"{rounds} round(s) each, {os.cpu_count()} cores, python {sys.version.split()[0]}"
            )
            async with open_websocket_url(url, max_message_size=64 * MIB) as ws:
                control = Control(ws)
                await control.call(
                    "initialize", {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "control"}
                )
                for watchers in watcher_counts:
                    results, anchors = [], []
                    busy: list[float] = []
                    for r in range(rounds):
                        anchors.append(bare_pty(sample))
                        stop = trio.Event()
                        async with trio.open_nursery() as nursery:
                            nursery.start_soon(pings, url, stop, busy)
                            results.append(
                                await one_round(url, port, proc.pid, sample, watchers, f"{watchers}-{r}", control)
                            )
                            stop.set()
                    bare = statistics.median(a[0] for a in anchors)
                    bare_cpu = statistics.median(a[1] for a in anchors)
                    each = statistics.median(x["each"] for x in results)
                    cpu = statistics.median(x["cpu_per_mb"] for x in results)

                    def med(key: str, results: list[dict[str, float]] = results) -> float:
                        return statistics.median(x[key] for x in results)

                    print(f"  {watchers} watcher(s):")
                    print(f"    bare pty, cat of the same file:   {bare:7.1f} MB/s, {bare_cpu * 1000:6.1f} CPU ms/MB")
                    print(
                        f"    each watcher (median):            {each:7.1f} MB/s = {each / bare:.2f} x the bare pty; "
                        f"daemon {cpu * 1000:6.1f} CPU ms per MB per watcher = {cpu / bare_cpu:.1f} x the bare pty's"
                    )
                    print(
                        f"    cores used: daemon {med('daemon_cores'):.2f}, watchers {med('clients_cores'):.2f}, "
                        f"other processes {med('others_cores'):.2f}; {med('bytes'):,.0f} bytes per watcher"
                    )
                    print(f"    ping while it floods:             {summary(busy)}")
                if input_mib:
                    await input_flood(url, proc.pid, input_mib, control)
        finally:
            proc.terminate()
            with trio.move_on_after(15):
                await proc.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=20, help="MiB of output (default 20)")
    parser.add_argument("--full", action="store_true", help="200 MiB")
    parser.add_argument("--watchers", default="1,10", help="watcher counts, comma-separated (default 1,10)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per watcher count (default 3; the median)")
    parser.add_argument("--input-mib", type=int, default=0, help="MiB of unread input to type (default 0: skipped)")
    parser.add_argument("--profile", default="", help="py-spy the daemon in each round, to PREFIX.<round>.txt")
    args = parser.parse_args()
    PROFILE = args.profile
    counts = [int(k) for k in args.watchers.split(",")]
    trio.run(main, (200 if args.full else args.mib) * MIB, counts, args.rounds, args.input_mib)
