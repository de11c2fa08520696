"""Start-up and the command line: how long until ``ahpd run`` says it is
ready, how long a cold ``ahpd chat "hello"`` takes against a running daemon
(with the demo agent), and how fast ``ahpd wire-check`` reads compared with
a bare per-line ``json.loads`` of the same file - all in one run.

    .venv/bin/python benchmarks/startup_bench.py [--runs 5] [--mb 20]

Targets: < 300 ms to the ready line; < 500 ms for the cold chat; wire-check
at >= 0.5 of the bare parse. Every process gets a temporary HOME, so nothing
of the user's is read or written. Each figure is the median of ``--runs``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from wire_bench import generate  # noqa: E402

from ahpd.wire.cli import wire_check  # noqa: E402

READY = "ahpd ready: "


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude")}


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_daemon(data: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], float, str]:
    """A daemon; the seconds from spawning it to its ready line; its URL."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ahpd",
            "run",
            "--port",
            "0",
            "--data-dir",
            str(data),
            "--sessions",
            "memory",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    took = time.perf_counter() - started
    if not line.startswith(READY):
        process.kill()
        raise SystemExit(f"no ready line: {line!r}")
    return process, took, line[len(READY) :].strip()


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def ready_line(runs: int, tmp: Path) -> tuple[list[float], list[float]]:
    """Wall seconds to the ready line, and the CPU seconds the daemon used by then
    (the figure a busy machine disturbs least)."""
    times, cpu = [], []
    for n in range(runs):
        env = _env(tmp / f"home-ready-{n}")
        Path(env["HOME"]).mkdir()
        process, took, _ = start_daemon(tmp / f"ready-{n}", env)
        cpu.append(cpu_seconds(process.pid))
        stop(process)
        times.append(took)
    return times, cpu


def cold_chat(runs: int, tmp: Path) -> tuple[list[float], list[float]]:
    """``ahpd chat --new "hello"``, each a new client process, against one
    running daemon (warmed by one chat first, so its boot probe has run)."""
    env = _env(tmp / "home-chat")
    Path(env["HOME"]).mkdir()
    work = tmp / "work"
    work.mkdir()
    data = tmp / "chat"
    process, _, _ = start_daemon(data, env)
    command = [
        sys.executable,
        "-m",
        "ahpd",
        "chat",
        "--data-dir",
        str(data),
        "--provider",
        "demo",
        "--cwd",
        str(work),
        "--new",
        "--dispose",
        "hello",
    ]
    times, cpu = [], []
    try:
        for n in range(runs + 1):
            before = os.times()
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
            took = time.perf_counter() - started
            after = os.times()
            if done.returncode != 0:
                raise SystemExit(f"ahpd chat failed ({done.returncode}): {done.stderr or done.stdout}")
            if n:  # the first one warms the daemon
                times.append(took)
                cpu.append(after.children_user + after.children_system - before.children_user - before.children_system)
    finally:
        stop(process)
    return times, cpu


def wire_check_rates(megabytes: float, tmp: Path) -> tuple[float, float, float]:
    """(wire-check MB/s, bare json.loads MB/s, their ratio) over one capture."""
    path = str(tmp / "capture.jsonl")
    size = generate(path, megabytes) / 2**20
    started = time.perf_counter()
    with open(path, "rb") as f:
        for raw in f:
            json.loads(raw)
    bare = size / (time.perf_counter() - started)
    out = io.StringIO()
    started = time.perf_counter()
    status = wire_check([path], out=out)
    checked = size / (time.perf_counter() - started)
    if status != 0:
        raise SystemExit(f"wire-check found problems in the generated capture: {out.getvalue()[-500:]}")
    return checked, bare, checked / bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mb", type=float, default=20.0)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ahpd-startup-") as folder:
        tmp = Path(folder)
        ready, ready_cpu = ready_line(args.runs, tmp)
        chat, chat_cpu = cold_chat(args.runs, tmp)
        checked, bare, ratio = wire_check_rates(args.mb, tmp)
    ms = [f"{t * 1000:.0f}" for t in ready]
    print(f"load average before the run: {load:.2f} on {os.cpu_count()} cores")
    print(
        f"ahpd run to the ready line: median {statistics.median(ready) * 1000:.0f} ms "
        f"(runs: {', '.join(ms)} ms; target < 300 ms); CPU used by then: median "
        f"{statistics.median(ready_cpu) * 1000:.0f} ms"
    )
    ms = [f"{t * 1000:.0f}" for t in chat]
    print(
        f'cold ahpd chat "hello" (demo agent): median {statistics.median(chat) * 1000:.0f} ms '
        f"(runs: {', '.join(ms)} ms; target < 500 ms); the client's own CPU: median "
        f"{statistics.median(chat_cpu) * 1000:.0f} ms"
    )
    print(f"wire-check {checked:.1f} MB/s, bare per-line json.loads {bare:.1f} MB/s: ratio {ratio:.2f} (target >= 0.5)")


if __name__ == "__main__":
    main()
