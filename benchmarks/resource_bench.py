"""resourceRead of a large file, a 50 MB round trip, and a watch over a large tree, against a real daemon.

    .venv/bin/python benchmarks/resource_bench.py [--quick]

A separate ``ahpd run --sessions memory`` process serves; this process is the
client. Prints numbers only:

- ``resourceRead`` of a 10 MiB file, as text (utf-8) and as bytes (base64),
  against a plain ``open().read()`` of the same file in this process, in the
  same run (medians), and its CPU against ``open().read()`` plus base64 of
  the bytes in this process (the anchor of the read's own cost): the time until the answer's frame has reached a raw
  socket client (a WebSocket handshake and frame header read by hand, the
  payload read with ``recv_into`` into one buffer: the daemon's own cost plus
  the loopback copy), and separately the time until a trio-websocket client
  has the message and ``json.loads`` has parsed it (mostly that client's
  4 KiB reads through wsproto). The daemon's CPU time per read (its threads'
  ``schedstat``: what the read costs it, however loaded the machine is).
  The daemon's peak RSS rise during one read
  (``/proc/<pid>/clear_refs`` then ``VmHWM``) against the file's size.
- Six clients reading a 60 MiB file in base64 at once (30 MiB with
  ``--quick``) while another client pings every 10 ms: the longest a ping
  waited, and the daemon's peak RSS rise against the files' sizes.
- A 50 MB file written with ``resourceWrite`` in base64 and read back with
  ``resourceRead`` in base64: the daemon's peak RSS rise over the round trip
  against the file's size.
- A recursive watch over a tree of 10,000 files in 100 folders: the time
  ``createResourceWatch`` takes to answer (the watcher is set up before it
  does), and the latency from a write to the ``resourceWatch/changed`` that
  names the file (p50/p99 over the writes, writes spaced apart so each is
  its own batch).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import struct
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
BIG = 50 * 2**20


class Client:
    def __init__(self, ws) -> None:
        self.ws = ws
        self.ids = 0

    async def call(self, method: str, **params) -> dict:
        self.ids += 1
        await self.ws.send_message(
            json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": {"channel": ROOT, **params}})
        )
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


def _cpu(pid: int) -> float:
    """Seconds the daemon's threads have spent on a CPU (``schedstat``, in
    nanoseconds): its own cost, whatever else the machine is doing."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            pass
    return total / 1e9


def _plain_read(path: Path) -> float:
    start = time.perf_counter()
    with open(path, "rb") as f:
        f.read()
    return time.perf_counter() - start


def _read_and_base64(path: Path) -> float:
    """The anchor of a read's CPU: ``open().read()`` and its base64, in this process."""
    start = time.process_time()
    with open(path, "rb") as f:
        base64.b64encode(f.read())
    return time.process_time() - start


class RawClient:
    """A WebSocket client by hand: the least a client can do to receive a frame."""

    def __init__(self, url: str, buffer: int = 64 * 2**20) -> None:
        host, port = url.removeprefix("ws://").rstrip("/").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert head.startswith(b"HTTP/1.1 101"), head
        self.ids = 0
        self.buffer = bytearray(buffer)

    def send(self, method: str, **params) -> int:
        self.ids += 1
        payload = json.dumps(
            {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": {"channel": ROOT, **params}}
        ).encode()
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x81, 0x80 | n]) if n < 126 else bytes([0x81, 0x80 | 126]) + struct.pack("!H", n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)
        return self.ids

    def _exactly(self, n: int) -> memoryview:
        view = memoryview(self.buffer)[:n]
        got = 0
        while got < n:
            got += self.sock.recv_into(view[got:], n - got)
        return view

    def answer(self, ident: int) -> int:
        """Read frames until the answer to ``ident``; its payload's size (not parsed)."""
        prefix = b'{"jsonrpc":"2.0","id":%d,' % ident
        while True:
            first, second = self._exactly(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._exactly(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._exactly(8))[0]
            payload = self._exactly(n)
            if first == 0x81 and payload[: len(prefix)] == prefix:
                return n

    def call(self, method: str, **params) -> int:
        return self.answer(self.send(method, **params))


async def bench_read(client: Client, raw: RawClient, pid: int, work: Path, runs: int) -> None:
    text = work / "text.txt"
    line = b"the quick brown fox jumps over the lazy dog 0123456789\n"
    text.write_bytes((line * (SIZE // len(line) + 1))[:SIZE])
    binary = work / "bytes.bin"
    binary.write_bytes(os.urandom(SIZE))
    print(f"resourceRead of a {SIZE // 2**20} MiB file, medians of {runs} (open().read(): of {runs * 5}):")
    for path, encoding in ((text, "utf-8"), (binary, "base64")):
        plain = statistics.median(_plain_read(path) for _ in range(runs * 5))
        anchor = statistics.median(_read_and_base64(path) for _ in range(runs * 5))
        wire, parsed, cpu = [], [], []
        for _ in range(runs):
            start, used = time.perf_counter(), _cpu(pid)
            raw.call("resourceRead", uri=path.as_uri(), encoding=encoding)
            wire.append(time.perf_counter() - start)
            cpu.append(_cpu(pid) - used)
            start = time.perf_counter()
            await client.call("resourceRead", uri=path.as_uri(), encoding=encoding)
            parsed.append(time.perf_counter() - start)
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # noqa: ASYNC240 - /proc: answered at once
        before = _memory(pid, "VmRSS")
        raw.call("resourceRead", uri=path.as_uri(), encoding=encoding)
        rise = _memory(pid, "VmHWM") - before
        took, full, spent = statistics.median(wire), statistics.median(parsed), statistics.median(cpu)
        print(
            f"  {encoding:7} open().read() {plain * 1e3:6.2f} ms, +base64 CPU {anchor * 1e3:6.2f} ms | "
            f"daemon CPU per read {spent * 1e3:6.1f} ms ({spent / anchor:4.1f}x read+base64) | "
            "frame at a raw socket client "
            f"{took * 1e3:7.1f} ms ({took / plain:5.1f}x) | trio-websocket client + json.loads "
            f"{full * 1e3:7.1f} ms ({full / plain:6.1f}x) | daemon peak RSS rise {rise / 2**20:5.1f} MiB "
            f"({rise / SIZE:.1f}x the file)"
        )


async def bench_concurrent(client: Client, url: str, pid: int, work: Path, readers: int, mib: int) -> None:
    """``readers`` clients read a ``mib`` MiB file at once while another pings:
    the longest a ping waited, and the daemon's peak RSS rise."""
    path = work / "concurrent.bin"
    path.write_bytes(os.urandom(mib * 2**20))
    raws = []
    for n in range(readers):
        raw = RawClient(url, buffer=mib * 2**20 * 4 // 3 + 2**20)
        raw.call("initialize", protocolVersions=["1.0.0"], clientId=f"bench-reader-{n}")
        raws.append(raw)
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # noqa: ASYNC240 - /proc: answered at once
    before = _memory(pid, "VmRSS")
    pings: list[float] = []
    done = trio.Event()

    async def ping() -> None:
        while not done.is_set():
            start = time.perf_counter()
            await client.call("ping")
            pings.append(time.perf_counter() - start)
            await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ping)
        async with trio.open_nursery() as reads:
            for raw in raws:
                reads.start_soon(
                    trio.to_thread.run_sync,
                    lambda raw=raw: raw.call("resourceRead", uri=path.as_uri(), encoding="base64"),
                )
        done.set()
    rise = _memory(pid, "VmHWM") - before
    for raw in raws:
        raw.sock.close()
    print(
        f"{readers} concurrent base64 resourceReads of {mib} MiB while another client pings: longest ping "
        f"{max(pings) * 1e3:.0f} ms (median {statistics.median(pings) * 1e3:.1f} ms, {len(pings)} pings); "
        f"daemon peak RSS rise {rise / 2**20:.0f} MiB = {rise / (readers * mib * 2**20):.2f}x the files"
    )


async def bench_round_trip(client: Client, pid: int, work: Path) -> None:
    payload = os.urandom(BIG)
    coded = base64.b64encode(payload).decode()
    target = work / "big.bin"
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # noqa: ASYNC240 - /proc: answered at once
    before = _memory(pid, "VmRSS")
    await client.call("resourceWrite", uri=target.as_uri(), data=coded, encoding="base64")
    writing = _memory(pid, "VmHWM") - before
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # noqa: ASYNC240 - /proc: answered at once
    back = await client.call("resourceRead", uri=target.as_uri(), encoding="base64")
    rise = max(writing, _memory(pid, "VmHWM") - before)
    assert base64.b64decode(back["data"]) == payload
    print(
        f"{BIG // 2**20} MiB base64 resourceWrite + resourceRead: daemon peak RSS rise {rise / 2**20:.0f} MiB "
        f"= {rise / BIG:.1f}x the file (write {writing / BIG:.1f}x; RSS before {before / 2**20:.0f} MiB)"
    )


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
    await client.ws.send_message(
        json.dumps({"jsonrpc": "2.0", "id": 10**6, "method": "subscribe", "params": {"channel": channel}})
    )
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
    print(
        f"watch over {files:,} files in {folders} folders: set-up (createResourceWatch answered) "
        f"{setup * 1e3:.1f} ms; write -> resourceWatch/changed over {writes} writes: "
        f"p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms, max {latencies[-1] * 1e3:.1f} ms"
    )


async def main(quick: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="ahpd-resource-bench-") as tmp:
        work = Path(tmp)
        # The Claude backend probes its CLI at boot, growing the daemon while it
        # is measured: hidden (its SDK fails to import), only the demo agent is offered.
        hide = work / "hide" / "claude_agent_sdk"
        hide.mkdir(parents=True)
        (hide / "__init__.py").write_text('raise ImportError("hidden for the benchmark")\n')
        env = {
            **os.environ,
            "CLAUDE_CONFIG_DIR": str(work / "claude"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(hide.parent), os.environ.get("PYTHONPATH")])),
        }
        process = await trio.lowlevel.open_process(
            [
                sys.executable,
                "-m",
                "ahpd",
                "run",
                "--port",
                "0",
                "--data-dir",
                str(work / "data"),
                "--max-frame-bytes",
                str(128 * 2**20),
                "--sessions",
                "memory",
                "--log-level",
                "warning",
                "--without-connection-token",
            ],
            stdout=subprocess.PIPE,
            env=env,
        )
        try:
            line = b""
            with trio.fail_after(30):
                while not line.endswith(b"\n"):
                    line += await process.stdout.receive_some(1)
            url = line.decode().split("ahpd ready: ", 1)[1].strip()
            raw = RawClient(url)
            raw.call("initialize", protocolVersions=["1.0.0"], clientId="bench-raw")
            async with open_websocket_url(url, max_message_size=128 * 2**20) as ws:
                client = Client(ws)
                await client.call("initialize", protocolVersions=["1.0.0"], clientId="bench")
                await bench_read(client, raw, process.pid, work, runs=3 if quick else 10)
                raw.sock.close()
                await bench_concurrent(client, url, process.pid, work, readers=6, mib=30 if quick else 60)
                await bench_round_trip(client, process.pid, work)
                await bench_watch(client, work, files=10_000, writes=30 if quick else 200)
        finally:
            process.terminate()
            await process.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    trio.run(main, parser.parse_args().quick)
