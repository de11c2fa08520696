"""How fast ``ahpd wire-check`` reads a large capture.

Generates a capture of about ``--mb`` megabytes (default 100): one client
streaming turn after turn, each a turnStarted, a reasoning and a markdown
part, deltas, and a turnComplete; every twenty turns it subscribes to its
chat again, so a snapshot is compared with the reduced state, and moves on
to a new chat. Then times wire-check over it and prints
MB/s. The target: 100 MB in under a minute.

    .venv/bin/python benchmarks/wire_bench.py [--mb 100] [--keep FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
import time
from collections.abc import Callable

import orjson

from ahpd import state as reducers
from ahpd.wire.capture import capture_line
from ahpd.wire.cli import wire_check

CHAT = "ahp-chat:/00000000-0000-4000-8000-000000000001"
WORDS = "the quick brown fox jumps over the lazy dog while the agent explains its reasoning ".split()


def empty(chat: str) -> dict:
    return {"resource": chat, "title": "", "status": 1, "modifiedAt": "2026-01-01T00:00:00.000Z", "turns": []}


def generate(path: str, megabytes: float) -> int:
    """Write the capture; returns its size in bytes."""
    chat = CHAT
    state = empty(chat)
    seq, req, n = 0, 0, 0
    target = int(megabytes * 2**20)
    with open(path, "w") as out:

        def line(direction: str, msg: dict) -> None:
            nonlocal n
            n += 1
            out.write(
                capture_line(
                    json.dumps(msg, separators=(",", ":")),
                    direction,
                    "1",
                    transport="websocket",
                    client_id="bench",
                    ts=f"2026-01-01T00:{n // 60000 % 60:02d}:{n // 1000 % 60:02d}.{n % 1000:03d}Z",
                    trusted=True,
                )
            )

        def act(action: dict, origin: dict | None = None) -> None:
            nonlocal seq, state
            seq += 1
            params = {"channel": chat, "action": action, "serverSeq": seq}
            if origin:
                params["origin"] = origin
            line("s2c", {"jsonrpc": "2.0", "method": "action", "params": params})
            state = reducers.reduce("chat", state, action)

        def subscribe() -> None:
            nonlocal req
            req += 1
            line("c2s", {"jsonrpc": "2.0", "id": req, "method": "subscribe", "params": {"channel": chat}})
            line(
                "s2c",
                {
                    "jsonrpc": "2.0",
                    "id": req,
                    "result": {"snapshot": {"resource": chat, "state": state, "fromSeq": seq}},
                },
            )

        subscribe()
        turn = 0
        while out.tell() < target:
            turn += 1
            tid = f"turn-{turn}"
            started = {
                "type": "chat/turnStarted",
                "turnId": tid,
                "startedAt": "2026-01-01T00:00:00.000Z",
                "message": {"text": f"question {turn}", "origin": {"kind": "user"}},
            }
            line(
                "c2s",
                {
                    "jsonrpc": "2.0",
                    "method": "dispatchAction",
                    "params": {"channel": chat, "clientSeq": turn, "action": started},
                },
            )
            act(started, {"clientId": "bench", "clientSeq": turn})
            for kind, part in (("reasoning", "chat/reasoning"), ("markdown", "chat/delta")):
                act(
                    {
                        "type": "chat/responsePart",
                        "turnId": tid,
                        "part": {"kind": kind, "id": f"{kind}-{turn}", "content": ""},
                    }
                )
                for i in range(40):
                    text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(8)) + " "
                    act({"type": part, "turnId": tid, "partId": f"{kind}-{turn}", "content": text})
            act({"type": "chat/turnComplete", "turnId": tid, "duration": 1234})
            if len(state["turns"]) == 20:
                subscribe()  # compared with the 20 turns reduced from their actions
                chat = f"ahp-chat:/bench-{turn}"
                state = empty(chat)
                subscribe()
    return os.path.getsize(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--keep", metavar="FILE", help="write the capture here and keep it")
    args = parser.parse_args()
    path = args.keep or os.path.join(tempfile.mkdtemp(), "bench.jsonl")
    started = time.perf_counter()
    size = generate(path, args.mb)
    print(f"generated {size / 2**20:.1f} MB in {time.perf_counter() - started:.1f} s: {path}")
    mb = size / 2**20

    def each_line(loads: Callable[[bytes], object]) -> float:
        started = time.process_time()
        with open(path, "rb") as f:
            for raw in f:
                loads(raw)
        return mb / (time.process_time() - started)

    loads_rate, orjson_rate = each_line(json.loads), each_line(orjson.loads)
    wall, cpu = time.perf_counter(), time.process_time()
    out = io.StringIO()
    code = wire_check([path], out=out)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(out.getvalue().splitlines()[-1])
    print(
        f"wire-check: exit {code}, {mb / cpu:.1f} MB per CPU-second ({wall:.1f} s wall); per-line json.loads "
        f"{loads_rate:.1f}, orjson {orjson_rate:.1f}: {mb / cpu / loads_rate:.2f}x json.loads (target >= 0.5), "
        f"{mb / cpu / orjson_rate:.2f}x orjson"
    )
    if not args.keep:
        os.remove(path)


if __name__ == "__main__":
    main()
