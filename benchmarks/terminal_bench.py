"""A noisy terminal watched by many clients: what gets through, and whether
the host still answers everyone else meanwhile.

    python benchmarks/terminal_bench.py [--mib N] [--full] [--watchers K]

A real ``ahpd run`` (bash with shell integration, a temporary HOME) runs
``yes | head -c N`` in a terminal that K clients (real WebSocket clients,
trio-websocket, in this process) subscribe to. Printed:

* delivered: MB/s of ``terminal/data`` text each watcher received, from the
  command being typed to its ``terminal/commandFinished``; and all K together;
* baseline, same run: ``cat`` of a file holding the same bytes through a bare
  pty (ptyprocess, read in this process as fast as it goes);
* ping: the round trip of ``ping`` from one more client every 20 ms while the
  terminal floods (p50, p99, max), and the same with the terminal quiet.

Default N is 20 MiB (the machine is shared); ``--full`` is 200 MiB. No
pass/fail: the figures are for the closing note.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ptyprocess
import trio
from trio_websocket import open_websocket_url

MIB = 2**20


class Client:
    def __init__(self, ws) -> None:
        self.ws = ws
        self.ids = 0

    async def call(self, method: str, params: dict) -> dict:
        self.ids += 1
        ident = self.ids
        await self.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
        while True:
            frame = json.loads(await self.ws.get_message())
            if frame.get("id") == ident:
                return frame


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
        ],
        stdout=subprocess.PIPE,
        env=env,
    )
    line = b""
    with trio.fail_after(60):
        while not line.endswith(b"\n"):
            line += await proc.stdout.receive_some(1)
    return proc, line.decode().split("ahpd ready: ", 1)[1].strip()


def bare_pty(path: Path) -> float:
    """MB/s of ``cat path`` through a bare pty, read here."""
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
    return total / elapsed / 1e6


async def pings(url: str, stop: trio.Event, out: list[float]) -> None:
    async with open_websocket_url(url) as ws:
        client = Client(ws)
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


async def main(size: int, watchers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sample = work / "yes.txt"
        subprocess.run(f"yes | head -c {size} > {sample}", shell=True, check=True)  # noqa: ASYNC221 - setting up the benchmark, before it measures
        baseline = bare_pty(sample)
        proc, url = await start_daemon(work)
        uri = "ahp-terminal:/bench"
        try:
            received = [0] * watchers
            finished = [0.0] * watchers
            typed = trio.Event()
            start_at = [0.0]
            ready = [trio.Event() for _ in range(watchers)]

            async def watch(i: int) -> None:
                async with open_websocket_url(url, max_message_size=64 * MIB) as ws:
                    client = Client(ws)
                    await client.call(
                        "initialize", {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": f"w{i}"}
                    )
                    if i == 0:
                        reply = await client.call(
                            "createTerminal",
                            {"channel": uri, "claim": {"kind": "client", "clientId": "w0"}, "cols": 120, "rows": 40},
                        )
                        assert reply.get("result", 1) is None, reply
                        for other in ready[1:]:
                            other.set()
                    else:
                        await ready[i].wait()
                    await client.call("subscribe", {"channel": uri})
                    if i == 0:
                        await trio.sleep(1.0)  # the prompt is out, the watchers are subscribed
                        start_at[0] = time.perf_counter()
                        typed.set()
                        await ws.send_message(
                            json.dumps(
                                {
                                    "jsonrpc": "2.0",
                                    "method": "dispatchAction",
                                    "params": {
                                        "channel": uri,
                                        "clientSeq": 1,
                                        "action": {"type": "terminal/input", "data": f"yes | head -c {size}\r"},
                                    },
                                }
                            )
                        )
                    await typed.wait()
                    while True:
                        frame = json.loads(await ws.get_message())
                        action = frame.get("params", {}).get("action", {})
                        if action.get("type") == "terminal/data":
                            received[i] += len(action["data"])
                        elif action.get("type") == "terminal/commandFinished":
                            finished[i] = time.perf_counter()
                            return

            quiet: list[float] = []
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pings, url, stop, quiet)
                await trio.sleep(2)
                stop.set()
            busy: list[float] = []
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pings, url, stop, busy)
                async with trio.open_nursery() as inner:
                    for i in range(watchers):
                        inner.start_soon(watch, i)
                stop.set()
            each = [received[i] / (finished[i] - start_at[0]) / 1e6 for i in range(watchers)]
            print(
                f"terminal_bench: {size / MIB:.0f} MiB of `yes` output, {watchers} watchers, "
                f"{os.cpu_count()} cores, python {sys.version.split()[0]}"
            )
            print(f"  bare pty, cat of the same bytes:      {baseline:8.1f} MB/s")
            print(
                f"  delivered to each watcher (median):   {statistics.median(each):8.1f} MB/s "
                f"(min {min(each):.1f}, max {max(each):.1f}); {statistics.median(each) / baseline:.2f} of the bare pty"
            )
            print(f"  delivered to all {watchers} together:          {sum(each):8.1f} MB/s")
            print(
                f"  bytes received per watcher:           {min(received):,} .. {max(received):,} "
                f"(plus the echo and prompt)"
            )
            print(f"  ping, terminal quiet:                 {summary(quiet)}")
            print(f"  ping, while it floods:                {summary(busy)}")
        finally:
            proc.terminate()
            with trio.move_on_after(15):
                await proc.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=20, help="MiB of output (default 20)")
    parser.add_argument("--full", action="store_true", help="200 MiB, as the issue asks")
    parser.add_argument("--watchers", type=int, default=10)
    args = parser.parse_args()
    trio.run(main, (200 if args.full else args.mib) * MIB, args.watchers)
