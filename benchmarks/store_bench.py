"""What a turn costs the session store: a long chat against a short one.

    python benchmarks/store_bench.py [--turns 8] [--legacy]

A real ``ahpd run`` (``--sessions file``) in a temporary data folder holds
two sessions whose chats were written directly: one of 100 turns, one of
10,000 (about 2.2 KB each, many small parts, 22 MB of history as in issue 11). The benchmark
runs the same short turn on each, alternately (the first turn of each,
which starts its agent, is not counted), and reports the median and worst
time from ``chat/turnStarted`` to ``chat/turnComplete`` as the client sees
it, and to the turn being on disk (the file it lands in changed); meanwhile
a second connection sends ``ping`` every 5 ms and the longest round trip is
the longest a connection stalled (targets: long/short <= 2x; no stall > 20 ms).

``--legacy`` writes the sessions as one whole-record JSON file each, the
format before the journal; run it with ``PYTHONPATH`` pointing at an older
checkout (and ``PYTHONDONTWRITEBYTECODE=1``) to measure the old store on
the same machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio
from trio_websocket import open_websocket_url

READY = "ahpd ready: "


def name(uri: str) -> str:
    return hashlib.sha256(uri.encode()).hexdigest()[:32]


def turn(n: int) -> dict:
    """About 2.2 KB, shaped like an agent's turn: many small parts rather than one long string."""
    parts = []
    for k in range(6):
        parts.append({"kind": "markdown", "id": f"p{n}-{k}", "content": f"Step {k} of the answer to {n}."})
        parts.append(
            {
                "kind": "toolCall",
                "toolCall": {
                    "toolCallId": f"c{n}-{k}",
                    "toolName": "read",
                    "displayName": "Read",
                    "status": "completed",
                    "invocationMessage": f"Reading src/module_{k}.py",
                    "success": True,
                    "pastTenseMessage": f"Read src/module_{k}.py",
                    "confirmed": "not-needed",
                    "toolInput": json.dumps({"path": f"src/module_{k}.py"}),
                    "content": [{"type": "text", "text": f"{k} lines"}],
                },
            }
        )
    return {
        "id": f"turn-{n}",
        "message": {"text": f"question {n}: what does the module do?", "origin": {"kind": "user"}},
        "responseParts": parts,
        "state": "complete",
        "usage": {"inputTokens": 1200 + n % 7, "outputTokens": 300, "model": "demo"},
    }


def write_session(sessions: Path, cwd: Path, count: int, legacy: bool) -> tuple[str, str]:
    uri, chat = f"ahp-session:/{uuid.uuid4()}", f"ahp-chat:/{uuid.uuid4()}"
    head = {
        "uri": uri,
        "provider": "demo",
        "cwd": str(cwd),
        "createdAt": "2026-12-01T00:00:00Z",
        "title": f"{count} turns",
        "status": 0,
        "config": None,
        "defaultChat": chat,
    }
    fields = {"resource": chat, "title": f"{count} turns", "status": 1, "modifiedAt": "2026-12-01T00:00:00Z"}
    if legacy:
        record = {
            **head,
            "chats": [{"uri": chat, "backendId": None, "state": {**fields, "turns": [turn(n) for n in range(count)]}}],
        }
        (sessions / f"{name(uri)}.json").write_text(json.dumps(record))
        return uri, chat
    from ahpd.ports import journal

    folder = sessions / name(uri)
    folder.mkdir()
    (folder / "session.json").write_text(json.dumps({**head, "chats": [{"uri": chat, "backendId": None}]}))
    with (folder / f"{name(chat)}.jsonl").open("wb") as f:
        for n in range(count):
            f.write(journal.turn_line(n, turn(n)))
        f.write(journal.chat_line(fields))
    return uri, chat


class Client:
    def __init__(self, ws) -> None:
        self.ws = ws
        self.next_id = 0

    async def call(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        ident = self.next_id
        await self.ws.send_message(
            json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}})
        )
        while True:
            frame = json.loads(await self.ws.get_message())
            if frame.get("id") == ident:
                return frame

    async def initialize(self, client_id: str) -> None:
        await self.call(
            "initialize", {"protocolVersions": ["1.0.0"], "clientId": client_id, "initialSubscriptions": []}
        )


async def pinger(url: str, stalls: list[float], stop: trio.Event) -> None:
    async with open_websocket_url(url) as ws:
        client = Client(ws)
        await client.initialize("pinger")
        while not stop.is_set():
            start = time.perf_counter()
            await client.call("ping")
            stalls.append(time.perf_counter() - start)
            await trio.sleep(0.005)


def kept_in(data: Path, uri: str, chat: str) -> Path:
    """The file a turn of ``chat`` lands in: its journal, or the older whole record."""
    journal_path = data / "sessions" / name(uri) / f"{name(chat)}.jsonl"
    return journal_path if journal_path.exists() else data / "sessions" / f"{name(uri)}.json"


async def on_disk(path: Path, turn_id: str) -> None:
    """Until the completed turn is in the file (its end: where a turn lands in either format)."""
    needle = f'"{turn_id}"'.encode()  # no record holds it before the turn ends (activeTurn is not kept)
    with trio.fail_after(30):
        while True:
            with path.open("rb") as f:
                f.seek(max(0, path.stat().st_size - 256 * 1024))  # noqa: ASYNC240 - the benchmark's own look at the store file
                end = f.read()
            if needle in end:
                return
            await trio.sleep(0.001)


async def one_turn(client: Client, chat: str, seq: int, turn_id: str) -> float:
    action = {
        "type": "chat/turnStarted",
        "turnId": turn_id,
        "startedAt": "2026-12-03T00:00:00Z",
        "message": {"text": "hello", "origin": {"kind": "user"}},
    }
    start = time.perf_counter()
    await client.ws.send_message(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "dispatchAction",
                "params": {"channel": chat, "clientSeq": seq, "action": action},
            }
        )
    )
    with trio.fail_after(60):
        while True:
            frame = json.loads(await client.ws.get_message())
            done = (frame.get("params") or {}).get("action", {})
            if (
                frame.get("method") == "action"
                and frame["params"].get("channel") == chat
                and done.get("type") in ("chat/turnComplete", "chat/error")
            ):
                assert done["type"] == "chat/turnComplete", done
                return time.perf_counter() - start


async def main(turns: int, legacy: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        (data / "sessions").mkdir(parents=True, mode=0o700)
        data.chmod(0o700)
        began = time.perf_counter()
        short = write_session(data / "sessions", Path(tmp), 100, legacy)
        long_ = write_session(data / "sessions", Path(tmp), 10_000, legacy)
        size = sum(p.stat().st_size for p in (data / "sessions").rglob("*") if p.is_file())
        print(
            f"wrote two sessions ({size / 1e6:.1f} MB, {'whole-record files' if legacy else 'journals'}) "
            f"in {time.perf_counter() - began:.1f} s"
        )
        env = {**os.environ, "CLAUDE_CONFIG_DIR": str(Path(tmp) / "claude"), "HOME": tmp}
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahpd", "run", "--port", "0", "--data-dir", str(data), "--sessions", "file"],
            stdout=subprocess.PIPE,
            stderr=None,
            env=env,
            cwd=tmp,
        )
        try:
            line = b""
            began = time.perf_counter()
            with trio.fail_after(600):  # the older store validates every stored turn at start
                while not line.endswith(b"\n"):
                    got = await process.stdout.receive_some(1)
                    if not got:
                        raise SystemExit(f"the daemon ended before its ready line (exit {await process.wait()})")
                    line += got
            url = line.decode()[len(READY) :].strip()
            print(f"daemon ready in {time.perf_counter() - began:.1f} s")
            async with open_websocket_url(url) as ws:
                client = Client(ws)
                await client.initialize("bench")
                times: dict[str, list[float]] = {"100 turns": [], "10,000 turns": []}
                stored: dict[str, list[float]] = {"100 turns": [], "10,000 turns": []}
                stalls: dict[str, list[float]] = {"100 turns": [], "10,000 turns": [], "idle": []}
                began = time.perf_counter()
                for _label, (_, chat) in (("100 turns", short), ("10,000 turns", long_)):
                    await client.call("subscribe", {"channel": chat})
                print(f"woke both chats (subscribe) in {time.perf_counter() - began:.2f} s")
                seq = 0
                for _label, (_, chat) in (("100 turns", short), ("10,000 turns", long_)):
                    seq += 1
                    await one_turn(client, chat, seq, f"warm-{seq}")  # starts its agent: not counted
                for _ in range(turns):
                    stop = trio.Event()  # the noise floor: pings with no turn running
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(pinger, url, stalls["idle"], stop)
                        await trio.sleep(0.5)
                        stop.set()
                    for label, (uri, chat) in (("100 turns", short), ("10,000 turns", long_)):
                        seq += 1
                        stop = trio.Event()
                        async with trio.open_nursery() as nursery:
                            nursery.start_soon(pinger, url, stalls[label], stop)
                            await trio.sleep(0.3)  # whatever the turn before left to write
                            path = kept_in(data, uri, chat)
                            turn_id = f"t-{uuid.uuid4().hex[:8]}"
                            start = time.perf_counter()
                            times[label].append(await one_turn(client, chat, seq, turn_id))
                            await on_disk(path, turn_id)
                            stored[label].append(time.perf_counter() - start)
                            await trio.sleep(0.3)  # the writes after the turn
                            stop.set()
        finally:
            process.terminate()
            await process.wait()
    print(f"\none turn ({turns} each, alternating), turnStarted -> turnComplete as the client sees it:")
    for label in times:
        t, s, d = times[label], sorted(stalls[label]), stored[label]
        print(
            f"  {label:>12}: median {statistics.median(t) * 1e3:7.1f} ms, worst {max(t) * 1e3:7.1f} ms;"
            f" until on disk: median {statistics.median(d) * 1e3:7.1f} ms, worst {max(d) * 1e3:7.1f} ms;\n"
            f"{'':>16}"
            f" ping round trip meanwhile p50 {s[len(s) // 2] * 1e3:.1f} ms, p99 {s[len(s) * 99 // 100] * 1e3:.1f} ms,"
            f" longest {s[-1] * 1e3:.1f} ms (of {len(s)} pings)"
        )
    s = sorted(stalls["idle"])
    print(
        f"  {'no turn':>12}: ping round trip p50 {s[len(s) // 2] * 1e3:.1f} ms,"
        f" p99 {s[len(s) * 99 // 100] * 1e3:.1f} ms,"
        f" longest {s[-1] * 1e3:.1f} ms (of {len(s)} pings): the machine's noise floor"
    )
    with open("/proc/loadavg") as f:  # noqa: ASYNC230 - /proc: answered at once
        print(f"  load average at the end: {f.read().split()[0]}")
    ratio = statistics.median(stored["10,000 turns"]) / statistics.median(stored["100 turns"])
    worst = max(max(stalls[label]) for label in times)
    print(f"\n  long / short, until on disk: {ratio:.2f}x (target <= 2x: {'met' if ratio <= 2 else 'NOT met'})")
    print(f"  longest stall: {worst * 1e3:.1f} ms (target <= 20 ms: {'met' if worst <= 0.020 else 'NOT met'})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--legacy", action="store_true")
    args = parser.parse_args()
    trio.run(main, args.turns, args.legacy)
