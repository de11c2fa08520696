"""What the dev container relay costs the daemon per frame it carries.

    python benchmarks/relay_bench.py [--frames N] [--window W] [--rounds R]

A real ``ahpd run`` with the stand-in Dev Container CLI and engine of the
tests (``tests/daemon/fake_devcontainer.py``) on its PATH, so the "container"
is a real ``ahpd stdio`` started through the relay, as in
``tests/daemon/test_devcontainers.py``. One client connects a relay, sends
the host inside its ``initialize``, then N ``ping``s through
``vscode/devContainers/relaySend``, at most W unanswered at a time, and
reads each answer back as ``relayMessage``.

Each round trip is a frame each way through the relay (and the answer to
the ``relaySend`` itself). The anchor is the host inside, measured in the
same run over the same frames: it reads, parses, answers and writes each
ping; and so is a plain ``ping`` to the daemon itself, the cheapest request
it answers. Printed, per round trip: the daemon's CPU and the inner host's CPU
(both from ``/proc/<pid>/stat``, so the neighbours' load moves them less
than wall time), and their ratio. No pass/fail: the figures are for the
closing note.
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
from typing import Any

import trio
from trio_websocket import open_websocket_url

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "daemon" / "fake_devcontainer.py"
PREFIX = "vscode/devContainers/"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine(work: Path) -> dict[str, str]:
    bin_dir = work / "bin"
    bin_dir.mkdir()
    for role in ("devcontainer", "docker"):
        script = bin_dir / role
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" {role} "$@"\n')
        script.chmod(0o755)
    return {
        **os.environ,
        "HOME": str(work),
        "CLAUDE_CONFIG_DIR": str(work / "claude"),
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_DEVCONTAINER_STATE": str(work / "engine"),
        "FAKE_DEVCONTAINER_PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
    }


def inner_pid(work: Path) -> int:
    for record in (work / "engine" / "containers").glob("*.json"):
        for pid in json.loads(record.read_text())["pids"]:
            if Path(f"/proc/{pid}").exists():
                return int(pid)
    raise RuntimeError("no host is running inside the container")


async def round_trips(ws, frames: int, window: int, first_id: int) -> None:
    """Send ``frames`` pings through the relay, ``window`` at most in flight."""
    sent = answered = 0
    outer_id = 10_000_000
    while answered < frames:
        while sent < frames and sent - answered < window:
            outer_id += 1
            ping = {"jsonrpc": "2.0", "id": first_id + sent, "method": "ping", "params": {}}
            params = {"connectionId": "bench", "data": json.dumps(ping)}
            await ws.send_message(
                json.dumps({"jsonrpc": "2.0", "id": outer_id, "method": PREFIX + "relaySend", "params": params})
            )
            sent += 1
        frame = json.loads(await ws.get_message())
        if frame.get("method") == PREFIX + "relayMessage":
            answered += 1
        elif "error" in frame:
            raise RuntimeError(f"refused: {frame}")


def start_daemon(work: Path) -> tuple[subprocess.Popen[bytes], Any]:
    log = open(work / "stderr", "w+b")  # noqa: SIM115 - closed by main
    daemon = subprocess.Popen(
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
            "--without-connection-token",
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        env=machine(work),
    )
    return daemon, log


async def pings(ws, frames: int, window: int) -> None:
    """The anchor on the daemon's side: ``frames`` plain ``ping`` requests to it."""
    sent = answered = 0
    while answered < frames:
        while sent < frames and sent - answered < window:
            sent += 1
            request = {
                "jsonrpc": "2.0",
                "id": 20_000_000 + sent,
                "method": "ping",
                "params": {"channel": "ahp-root://"},
            }
            await ws.send_message(json.dumps(request))
        frame = json.loads(await ws.get_message())
        if "id" in frame:
            answered += 1


async def main(frames: int, window: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ahpd-relay-bench-") as tmp:
        work = Path(tmp)
        project = work / "project"
        (project / ".devcontainer").mkdir(parents=True)
        (project / ".devcontainer" / "devcontainer.json").write_text('{"image": "python:3.12"}')
        daemon, log = start_daemon(work)
        try:
            assert daemon.stdout is not None
            line = daemon.stdout.readline().decode()
            assert line.startswith("ahpd ready: "), line
            url = line.split(": ", 1)[1].strip()
            async with open_websocket_url(url, max_message_size=64 * 2**20) as ws:

                async def call(ident: int, method: str, params: dict) -> dict:
                    await ws.send_message(
                        json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
                    )
                    while True:
                        frame = json.loads(await ws.get_message())
                        if frame.get("method") == "vscode/requestWorkspaceTrust":  # the host asks first
                            trusted = {"jsonrpc": "2.0", "id": frame["id"], "result": {"trusted": True}}
                            await ws.send_message(json.dumps(trusted))
                        elif frame.get("id") == ident and "method" not in frame:
                            return frame

                init = {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "bench"}
                assert "result" in await call(1, "initialize", init)
                started = time.monotonic()
                connected = await call(
                    2, PREFIX + "connect", {"connectionId": "bench", "workspaceFolder": str(project), "name": "Bench"}
                )
                assert "result" in connected, connected
                print(f"connect (fake up, probe, ahpd stdio started): {time.monotonic() - started:.2f} s wall")
                inner = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {**init, "clientId": "inside"}}
                await call(3, PREFIX + "relaySend", {"connectionId": "bench", "data": json.dumps(inner)})
                while "relayMessage" not in json.loads(await ws.get_message()).get("method", ""):
                    pass
                pid = inner_pid(work)
                await round_trips(ws, 200, window, 100)  # warm both hosts
                outer_us, inner_us, ratios, ping_us = [], [], [], []
                for r in range(rounds):
                    o0 = cpu_seconds(daemon.pid)
                    await pings(ws, frames, window)
                    ping_us.append((cpu_seconds(daemon.pid) - o0) / frames * 1e6)
                    o0, i0, t0 = cpu_seconds(daemon.pid), cpu_seconds(pid), time.monotonic()
                    await round_trips(ws, frames, window, 1_000 + r * frames)
                    o1, i1, t1 = cpu_seconds(daemon.pid), cpu_seconds(pid), time.monotonic()
                    outer_us.append((o1 - o0) / frames * 1e6)
                    inner_us.append((i1 - i0) / frames * 1e6)
                    ratios.append((o1 - o0) / max(i1 - i0, 1e-9))
                    print(
                        f"round {r + 1}: {frames} round trips in {t1 - t0:.2f} s wall; daemon {outer_us[-1]:.0f} us, "
                        f"host inside {inner_us[-1]:.0f} us of CPU per round trip; relay / inside {ratios[-1]:.2f}; "
                        f"a plain ping costs the daemon {ping_us[-1]:.0f} us"
                    )
                daemon_us, inside_us = statistics.median(outer_us), statistics.median(inner_us)
                print(
                    f"median: daemon {daemon_us:.0f} us, host inside {inside_us:.0f} us per round trip; "
                    f"relay / host inside {statistics.median(ratios):.2f}; relay / plain ping on the daemon "
                    f"{daemon_us / statistics.median(ping_us):.2f} "
                    f"(window {window}, load average {os.getloadavg()[0]:.1f})"
                )
        finally:
            daemon.terminate()
            daemon.wait(30)
            log.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=5000)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trio.run(main, args.frames, args.window, args.rounds)
