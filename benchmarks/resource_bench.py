"""resourceRead of a large file, and a watch over a large tree, against a real daemon.

    .venv/bin/python benchmarks/resource_bench.py [--quick]

A separate ``ahpd run --sessions memory`` process serves; this process is the
client (trio-websocket). Prints numbers only:

- ``resourceRead`` of a 10 MB file, as text (utf-8) and as bytes (base64):
  the round trip (median of the runs) against a plain ``open().read()`` of
  the same file in this process, and the daemon's peak RSS rise during one
  read (``/proc/<pid>/clear_refs`` then ``VmHWM``) against the file's size.
- A recursive watch over a tree of 10,000 files in 100 folders: the time
  ``createResourceWatch`` takes to answer (the watcher is set up before it
  does), and the latency from a write to the ``resourceWatch/changed`` that
  names the file (p50/p99 over the writes, writes spaced apart so each is
  its own batch).
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

import trio
from trio_websocket import open_websocket_url

ROOT = "ahp-root://"
SIZE = 10 * 2**20


class Client:
    def __init__(self, ws) -> None:
        self.ws = ws
        self.ids = 0

    async def call(self, method: str, **params) -> dict:
        self.ids += 1
        await self.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method,
                                               "params": {"channel": ROOT, **params}}))
        while True:
            frame = json.loads(await self.ws.get_message())
            if frame.get("id") == self.ids and "method" not in frame:
                if "error" in frame:
                    raise RuntimeError(frame["error"])
                return frame["result"]


def _memory(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _plain_read(path: Path) -> float:
    start = time.perf_counter()
    with open(path, "rb") as f:
        f.read()
    return time.perf_counter() - start


async def bench_read(client: Client, pid: int, work: Path, runs: int) -> None:
    text = work / "text.txt"
    line = b"the quick brown fox jumps over the lazy dog 0123456789\n"
    text.write_bytes((line * (SIZE // len(line) + 1))[:SIZE])
    binary = work / "bytes.bin"
    binary.write_bytes(os.urandom(SIZE))
    print(f"resourceRead of a {SIZE // 2**20} MiB file, median of {runs} (open().read() median of {runs * 5}):")
    for path, encoding in ((text, "utf-8"), (binary, "base64")):
        plain = statistics.median(_plain_read(path) for _ in range(runs * 5))
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            await client.call("resourceRead", uri=path.as_uri(), encoding=encoding)
            times.append(time.perf_counter() - start)
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        before = _memory(pid, "VmRSS")
        await client.call("resourceRead", uri=path.as_uri(), encoding=encoding)
        rise = _memory(pid, "VmHWM") - before
        took = statistics.median(times)
        print(f"  {encoding:7} resourceRead {took * 1e3:7.1f} ms   open().read() {plain * 1e3:6.2f} ms   "
              f"ratio {took / plain:6.1f}x   daemon peak RSS rise {rise / 2**20:6.1f} MiB "
              f"({rise / SIZE:.1f}x the file; open().read() holds 1.0x)")


async def bench_watch(client: Client, work: Path, files: int, writes: int) -> None:
    tree = work / "tree"
    folders = 100
    for d in range(folders):
        (tree / f"d{d:03}").mkdir(parents=True)
        for n in range(files // folders):
            (tree / f"d{d:03}" / f"f{n:04}.txt").write_bytes(b"x")
    start = time.perf_counter()
    channel = (await client.call("createResourceWatch", uri=tree.as_uri(), recursive=True))["channel"]
    setup = time.perf_counter() - start
    await client.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": 10**6, "method": "subscribe",
                                             "params": {"channel": channel}}))
    while json.loads(await client.ws.get_message()).get("id") != 10**6:
        pass
    latencies = []
    for n in range(writes):
        target = tree / f"d{n % folders:03}" / f"f{n % (files // folders):04}.txt"
        uri = target.as_uri()
        start = time.perf_counter()
        target.write_bytes(b"changed %d" % n)
        with trio.fail_after(10):
            while True:
                frame = json.loads(await client.ws.get_message())
                items = frame.get("params", {}).get("action", {}).get("changes", {}).get("items", [])
                if any(i["uri"] == uri for i in items):
                    latencies.append(time.perf_counter() - start)
                    break
        await trio.sleep(0.05)  # the next write is its own batch
    latencies.sort()
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3  # noqa: E731
    print(f"watch over {files:,} files in {folders} folders: set-up (createResourceWatch answered) "
          f"{setup * 1e3:.1f} ms; write -> resourceWatch/changed over {writes} writes: "
          f"p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms, max {latencies[-1] * 1e3:.1f} ms")


async def main(quick: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="ahpd-resource-bench-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "CLAUDE_CONFIG_DIR": str(work / "claude")}
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahpd", "run", "--port", "0", "--data-dir", str(work / "data"),
             "--sessions", "memory", "--log-level", "warning", "--without-connection-token"],
            stdout=subprocess.PIPE, env=env)
        try:
            line = b""
            with trio.fail_after(30):
                while not line.endswith(b"\n"):
                    line += await process.stdout.receive_some(1)
            url = line.decode().split("ahpd ready: ", 1)[1].strip()
            async with open_websocket_url(url, max_message_size=64 * 2**20) as ws:
                client = Client(ws)
                await client.call("initialize", protocolVersions=["1.0.0"], clientId="bench")
                await bench_read(client, process.pid, work, runs=3 if quick else 10)
                await bench_watch(client, work, files=10_000, writes=30 if quick else 200)
        finally:
            process.terminate()
            await process.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    trio.run(main, parser.parse_args().quick)
