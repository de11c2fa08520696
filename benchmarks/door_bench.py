"""What a real ``ahpd run`` does under a flood of connections, and the memory
it holds for clients that never read.

    python benchmarks/door_bench.py [--silent N] [--sockets N] [--draft-kib K] [--drafts N]
                                    [--tricklers N] [--only silent|websocket|memory|trickle]

1. Silent flood: N TCP connections that never send a byte, against a daemon
   whose soft open-file limit is 1024 (so its defaults are 512 connections,
   as many pending, a newcomer dropping the oldest). Printed: how many were
   answered 503 or dropped, the
   daemon's peak descriptor count, and whether a real client is served once
   the flood leaves.
2. WebSocket flood: N clients that complete the handshake and stay. Printed:
   how many were admitted (the cap) and refused, the peak descriptor count,
   whether the daemon lives.
3. Memory: 30 clients that subscribe to a chat and never read again, while
   another client changes that chat's draft (K KiB each time) N times.
   Printed: the daemon's VmRSS before, at its peak and after, and which limit
   closed the 30 (the per-client ``clientQueueBytes`` or the budget over all).

4. Trickle: N local connections without the token (1,000 by default) that
   send a request head a byte a second and come back whenever dropped, from
   a process of their own, against a daemon with a token and the same 1024
   open-file limit; then 20 real clients one after another. Printed: how
   many were served and the slowest connect + ``initialize``.

No pass/fail: the figures are for the closing note.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio
from trio_websocket import open_websocket_url

HEAD = (
    "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
).encode()


def masked(text: str) -> bytes:
    """A client text frame masked with zeros (valid, and the payload stays as is)."""
    payload = text.encode()
    n = len(payload)
    if n < 126:
        head = bytes([0x81, 0x80 | n])
    elif n < 65536:
        head = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"\0\0\0\0" + payload


class Daemon:
    def __init__(self, work: Path, nofile: int | None, token: bool = False) -> None:
        def lower() -> None:
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        self.log = open(work / "stderr", "w+b")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "HOME": str(work), "CLAUDE_CONFIG_DIR": str(work / "claude")}
        self.proc = subprocess.Popen(
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
                *([] if token else ["--without-connection-token"]),
            ],
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            preexec_fn=lower,
        )
        line = self.proc.stdout.readline().decode()
        assert line.startswith("ahpd ready: "), line
        self.url = line.split(": ", 1)[1].strip()
        self.port = int(self.url.split("/")[2].rsplit(":", 1)[1])

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        text = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024

    def stderr(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> int:
        self.proc.terminate()
        code = self.proc.wait(30)
        self.log.close()
        return code


async def served(url: str) -> bool:
    try:
        with trio.fail_after(10):
            async with open_websocket_url(url) as ws:
                await ws.send_message(
                    json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "id": 1,
                            "method": "initialize",
                            "params": {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "probe"},
                        }
                    )
                )
                return "result" in json.loads(await ws.get_message())
    except Exception:  # noqa: BLE001 - any failure means "not served"
        return False


async def sample_fds(daemon: Daemon, peak: list[int], stop: trio.Event) -> None:
    while not stop.is_set():
        try:
            peak[0] = max(peak[0], daemon.fds())
        except OSError:
            return
        await trio.sleep(0.01)


async def read_answer(stream: trio.SocketStream) -> bytes:
    data = b""
    try:
        with trio.move_on_after(15):
            while (chunk := await stream.receive_some(4096)) and b"\r\n" not in data:
                data += chunk
    except trio.BrokenResourceError:
        pass
    return data


async def silent_flood(work: Path, count: int) -> None:
    daemon = Daemon(work, nofile=1024)
    peak, stop = [daemon.fds()], trio.Event()
    answers: list[bytes] = []
    streams: list[trio.SocketStream] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample_fds, daemon, peak, stop)
        started = time.monotonic()
        for _ in range(count):
            streams.append(await trio.open_tcp_stream("127.0.0.1", daemon.port))
        async with trio.open_nursery() as readers:
            for stream in streams:
                readers.start_soon(_collect, stream, answers)
        for stream in streams:
            await stream.aclose()
        took = time.monotonic() - started
        ok = await served(daemon.url)
        stop.set()
    busy = sum(a.startswith(b"HTTP/1.1 503") for a in answers)
    dropped = sum(a == b"" for a in answers)
    print(f"silent flood: {count} connections that never send, soft open-file limit 1024")
    print(f"  503 answered: {busy}; dropped at the 10 s head deadline: {dropped}; took {took:.1f} s")
    print(
        f"  daemon's peak descriptors: {peak[0]}; alive: {daemon.proc.poll() is None}; "
        f"a real client served afterwards: {ok}"
    )
    print(f"  503 log lines: {daemon.stderr().count('refused with 503')}")
    print(f"  exit status on SIGTERM: {daemon.stop()}")


async def _collect(stream: trio.SocketStream, answers: list[bytes]) -> None:
    answers.append(await read_answer(stream))


async def websocket_flood(work: Path, count: int) -> None:
    daemon = Daemon(work, nofile=1024)
    peak, stop = [daemon.fds()], trio.Event()
    statuses: list[int] = []
    streams: list[trio.SocketStream] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample_fds, daemon, peak, stop)

        async def one() -> None:
            stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
            streams.append(stream)
            await stream.send_all(HEAD)
            answer = await read_answer(stream)
            statuses.append(int(answer.split()[1]) if answer else 0)

        for wave in range(0, count, 32):  # waves smaller than the pending cap: the connection cap decides
            async with trio.open_nursery() as clients:
                for _ in range(min(32, count - wave)):
                    clients.start_soon(one)
        while_full = await served(daemon.url)
        alive = daemon.proc.poll() is None
        for stream in streams:
            await stream.aclose()
        await trio.sleep(1)
        after = await served(daemon.url)
        stop.set()
    print(f"WebSocket flood: {count} clients that complete the handshake and stay")
    print(
        f"  admitted (101): {statuses.count(101)}; refused 503: {statuses.count(503)}; "
        f"other: {len(statuses) - statuses.count(101) - statuses.count(503)}"
    )
    print(
        f"  daemon's peak descriptors: {peak[0]}; alive: {alive}; a new client served while full: "
        f"{while_full}; once they left: {after}"
    )
    print(f"  exit status on SIGTERM: {daemon.stop()}")


async def never_readers(work: Path, clients: int, draft_kib: int, drafts: int) -> None:
    daemon = Daemon(work, nofile=None)
    session = f"ahp-session:/{uuid.uuid4()}"
    folder = work / "project"
    folder.mkdir()
    async with open_websocket_url(daemon.url, max_message_size=2**30) as ws:

        async def call(ident: int, method: str, params: dict) -> dict:
            await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
            while True:
                frame = json.loads(await ws.get_message())
                if frame.get("id") == ident:
                    return frame

        await call(1, "initialize", {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "driver"})
        await call(2, "createSession", {"channel": session, "workingDirectories": [folder.as_uri()]})
        chat = (await call(3, "subscribe", {"channel": session}))["result"]["snapshot"]["state"]["defaultChat"]
        await call(4, "subscribe", {"channel": chat})
        socks = []
        for n in range(clients):
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            await sock.connect(("127.0.0.1", daemon.port))
            await sock.send(HEAD)
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += await sock.recv(1)
            await sock.send(
                masked(
                    json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "id": 1,
                            "method": "initialize",
                            "params": {
                                "channel": "ahp-root://",
                                "protocolVersions": ["1.0.0"],
                                "clientId": f"sleeper-{n}",
                                "initialSubscriptions": [session, chat],
                            },
                        }
                    )
                )
            )
            socks.append(sock)
        await trio.sleep(1)
        before = daemon.rss_mib()
        peak = before
        text = "d" * (draft_kib * 1024)

        seen = [0]

        async def drain() -> None:  # the driver reads everything it is sent
            while True:
                if "chat/draftChanged" in await ws.get_message():
                    seen[0] += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            for n in range(drafts):
                await ws.send_message(
                    json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "method": "dispatchAction",
                            "params": {
                                "channel": chat,
                                "clientSeq": n + 1,
                                "action": {
                                    "type": "chat/draftChanged",
                                    "draft": {"text": f"{n}{text}", "origin": {"kind": "user"}},
                                },
                            },
                        }
                    )
                )
                if n % 20 == 0:
                    peak = max(peak, daemon.rss_mib())
                    await trio.sleep(0.01)
            with trio.move_on_after(120):
                while seen[0] < drafts:  # the host has taken every draft
                    peak = max(peak, daemon.rss_mib())
                    await trio.sleep(0.05)
            await trio.sleep(1)
            peak = max(peak, daemon.rss_mib())
            nursery.cancel_scope.cancel()
        log = daemon.stderr()
        per_client = log.count(" fell behind: ")
        by_budget = log.count(" has the most queued ")
        after = daemon.rss_mib()
        for sock in socks:
            sock.close()
    offered = drafts * (draft_kib * 1024) / 2**20
    print(
        f"memory: {clients} clients that never read, {drafts} drafts of {draft_kib} KiB "
        f"({offered:.0f} MiB offered to each)"
    )
    print(f"  drafts the host took: {seen[0]}")
    print(f"  VmRSS before {before:.0f} MiB, peak {peak:.0f} MiB, after {after:.0f} MiB")
    print(f"  closed by clientQueueBytes (16 MiB each): {per_client}; by the 256 MiB budget over all: {by_budget}")
    print(f"  exit status on SIGTERM: {daemon.stop()}")


async def _trickler(port: int, stop: trio.Event, reopened: list[int]) -> None:
    """One connection without the token, sending a head a byte a second, again whenever dropped."""
    while not stop.is_set():
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            await trio.sleep(0.05)
            continue
        try:
            async with stream:
                await stream.send_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                while not stop.is_set():
                    await stream.send_all(b"a")
                    with trio.move_on_after(1):
                        await stream.receive_some(4096)  # dropped or answered: come back
                        break
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        reopened[0] += 1


async def tricklers(port: int, count: int) -> None:
    """The attack, in a process of its own (``--trickle-at PORT``), until its stdin closes."""
    stop, reopened = trio.Event(), [0]
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(_trickler, port, stop, reopened)
        await trio.to_thread.run_sync(sys.stdin.read)
        stop.set()
        nursery.cancel_scope.cancel()
    print(reopened[0], flush=True)


async def trickle(work: Path, count: int) -> None:
    daemon = Daemon(work, nofile=1024, token=True)
    attack = subprocess.Popen(  # noqa: ASYNC220 - the attack's own process, started once
        [sys.executable, __file__, "--trickle-at", str(daemon.port), "--tricklers", str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    await trio.sleep(5)  # the flood at full strength: every slot taken, the rest coming back
    cpu = daemon.cpu_seconds()
    took: list[float] = []
    for _ in range(20):
        start = time.monotonic()
        ok = await served(daemon.url)
        took.append(time.monotonic() - start if ok else math.inf)
    cpu = daemon.cpu_seconds() - cpu
    out, _ = attack.communicate(b"")
    print(f"trickle: {count} connections without the token, a header byte a second, back whenever dropped")
    print(
        f"  real clients served: {sum(t < math.inf for t in took)} of 20; within 1 s: "
        f"{sum(t <= 1 for t in took)}; slowest {max(took):.2f} s, median {sorted(took)[10]:.3f} s"
    )
    print(f"  trickling connections dropped or refused and reopened: {out.decode().strip()}")
    print(f"  daemon CPU while the 20 were served: {cpu:.2f} s in {sum(took):.2f} s")
    log = daemon.stderr()
    print(f"  503 log lines: {log.count('refused with 503')}; drop spells: {log.count('dropping the oldest')}")
    print(f"  accept out of descriptors (spells): {log.count('accept failed')}")
    print(f"  exit status on SIGTERM: {daemon.stop()}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--silent", type=int, default=2000)
    parser.add_argument("--sockets", type=int, default=800)
    parser.add_argument("--draft-kib", type=int, default=64)
    parser.add_argument("--drafts", type=int, default=600)
    parser.add_argument("--tricklers", type=int, default=1000)
    parser.add_argument("--only", choices=["silent", "websocket", "memory", "trickle"])
    parser.add_argument("--trickle-at", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))  # our side of the floods
    if args.trickle_at:
        await tricklers(args.trickle_at, args.tricklers)
        return
    parts = {
        "silent": lambda w: silent_flood(w, args.silent),
        "websocket": lambda w: websocket_flood(w, args.sockets),
        "memory": lambda w: never_readers(w, 30, args.draft_kib, args.drafts),
        "trickle": lambda w: trickle(w, args.tricklers),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, run in parts.items():
            if args.only and name != args.only:
                continue
            work = Path(tmp) / name
            work.mkdir()
            await run(work)


if __name__ == "__main__":
    trio.run(main)
