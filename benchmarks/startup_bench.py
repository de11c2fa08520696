"""Start-up and the command line: the CPU time and memory ``ahpd run`` has
used by its ready line, beside anchors measured the same way in the same
run (a bare ``python -c pass``, ``import trio, trio_websocket``, the Node
``ws`` server of ``node_ws/`` until it listens); how long a cold
``ahpd chat "hello"`` takes against a running daemon (with the demo agent);
the CPU time the demo agent (``python -m ahpd.demo_agent``, one per demo
session) has used when it answers ``initialize``, beside ``python -c pass``;
and how fast ``ahpd wire-check`` reads per CPU-second beside per-line
``json.loads`` and ``orjson.loads`` of the same file.

    .venv/bin/python benchmarks/startup_bench.py [--runs 5] [--mb 20] [--demo-agent-only]

Targets: <= 250 ms CPU and <= 40 MB RSS at the ready line, with or without
the ``claude`` extra; < 500 ms for the cold chat; the demo agent within 2x
``python -c "import asyncio"``, the floor of an asyncio agent (it was about
10x with the ``acp`` library); wire-check at >= 0.5 of
per-line ``json.loads``. Every process gets a temporary HOME, so nothing of
the user's is read or written; bytecode is cached as an installed package's
is (``PYTHONDONTWRITEBYTECODE`` is dropped, and one run warms it). Each
figure is the median of ``--runs``; CPU seconds, because the machine is
shared and wall time says more about the neighbours.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from wire_bench import generate  # noqa: E402

from ahpd.wire.cli import wire_check  # noqa: E402

READY = "ahpd ready: "


def _env(home: Path, hide_claude: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(HOME=str(home), CLAUDE_CONFIG_DIR=str(home / ".claude"))
    if hide_claude:  # as conformance/test_conformance.py does: the SDK fails to import
        hide = home / "hide" / "claude_agent_sdk"
        hide.mkdir(parents=True, exist_ok=True)
        (hide / "__init__.py").write_text('raise ImportError("hidden for the benchmark")\n')
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hide.parent), env.get("PYTHONPATH")]))
    return env


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


#: Prints the CPU seconds and the RSS (MB) of the interpreter that ran the code before it.
_SELF = (
    "import os, pathlib; t = os.times(); "
    "rss = [int(l.split()[1]) for l in pathlib.Path('/proc/self/status').read_text().splitlines() "
    "if l.startswith('VmRSS:')][0]; print(t.user + t.system, rss / 1024)"
)


def python_anchor(code: str, runs: int, tmp: Path) -> tuple[list[float], list[float]]:
    """CPU seconds and RSS of ``python -c code``, measured by the interpreter itself at its end."""
    cpu, rss = [], []
    env = _env(tmp / "home-anchor")
    Path(env["HOME"]).mkdir(exist_ok=True)
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", f"{code}\n{_SELF}"], capture_output=True, text=True, env=env, check=True
        )
        used, mb = done.stdout.split()[-2:]
        cpu.append(float(used))
        rss.append(float(mb))
    return cpu, rss


NODE_DIR = HERE / "node_ws"


def node_anchor(runs: int) -> tuple[list[float], list[float]] | str:
    """CPU seconds and RSS of the Node ``ws`` server (``node_ws/server.js``) once it listens; a
    string saying why not when there is no node or no ``ws``."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None:
        return "no node"
    if not (NODE_DIR / "node_modules" / "ws").is_dir():
        if npm is None:
            return "ws is not installed and there is no npm"
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent"], cwd=NODE_DIR, capture_output=True, text=True
        )
        if done.returncode != 0:
            return f"npm install failed: {done.stderr.strip()[-200:]}"
    cpu, rss = [], []
    for _ in range(runs):
        process = subprocess.Popen(
            [node, str(NODE_DIR / "server.js")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert process.stdout is not None
        process.stdout.readline()  # {"port": N}: listening
        cpu.append(cpu_seconds(process.pid))
        rss.append(rss_mb(process.pid))
        process.kill()
        process.wait()
    return cpu, rss


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
        cwd=data.parent,  # not the checkout's root: there ``-m ahpd`` would import the checkout's ahpd first
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


def ready_line(runs: int, tmp: Path, hide_claude: bool = False) -> tuple[list[float], list[float], list[float]]:
    """Wall seconds to the ready line, the CPU seconds the daemon used by then
    (the figure a busy machine disturbs least) and its RSS (MB) then."""
    times, cpu, rss = [], [], []
    tag = "demo" if hide_claude else "all"
    for n in range(runs + 1):  # the first one writes the bytecode caches
        home = tmp / f"home-ready-{tag}-{n}"
        home.mkdir()
        process, took, _ = start_daemon(tmp / f"ready-{tag}-{n}", _env(home, hide_claude))
        if n:
            cpu.append(cpu_seconds(process.pid))
            rss.append(rss_mb(process.pid))
            times.append(took)
        stop(process)
    return times, cpu, rss


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
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, cwd=tmp)
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


def demo_agent_start(runs: int, tmp: Path) -> list[float]:
    """CPU seconds a demo agent has used when its answer to ``initialize`` arrives."""
    env = _env(tmp / "home-demo-agent")
    Path(env["HOME"]).mkdir(exist_ok=True)
    request = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    cpu = []
    for n in range(runs + 1):  # the first one writes the bytecode caches
        process = subprocess.Popen(
            [sys.executable, "-m", "ahpd.demo_agent", "--home", str(tmp / "demo-agent")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp,
        )
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        answer = json.loads(process.stdout.readline())
        if "result" not in answer:
            raise SystemExit(f"the demo agent did not answer initialize: {answer}")
        if n:
            cpu.append(cpu_seconds(process.pid))
        process.stdin.close()
        process.wait(30)
    return cpu


def wire_check_rates(megabytes: float, tmp: Path) -> tuple[float, float, float]:
    """(wire-check, per-line json.loads, per-line orjson.loads) in MB per CPU-second over one capture."""
    path = str(tmp / "capture.jsonl")
    size = generate(path, megabytes) / 2**20

    def rate(work: Any) -> float:
        started = time.process_time()
        work()
        return size / (time.process_time() - started)

    def each_line(loads: Any) -> None:
        with open(path, "rb") as f:
            for raw in f:
                loads(raw)

    bare = rate(lambda: each_line(json.loads))
    fast = rate(lambda: each_line(orjson.loads))
    out = io.StringIO()
    statuses: list[int] = []
    checked = rate(lambda: statuses.append(wire_check([path], out=out)))
    if statuses != [0]:
        raise SystemExit(f"wire-check found problems in the generated capture: {out.getvalue()[-500:]}")
    return checked, bare, fast


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _print_demo_agent(cpu: list[float], bare: list[float], asyncio_anchor: list[float]) -> None:
    runs = ", ".join(f"{c * 1000:.0f}" for c in cpu)
    c, a = _median(cpu), _median(asyncio_anchor)
    print(
        f"demo agent to its initialize answer: CPU {c * 1000:.0f} ms (runs: {runs} ms); "
        f"anchors python -c pass {_median(bare) * 1000:.0f} ms, import asyncio {a * 1000:.0f} ms; "
        f"demo agent / import asyncio: {c / a:.2f}x (target <= 2x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mb", type=float, default=20.0)
    parser.add_argument("--demo-agent-only", action="store_true", help="measure the demo agent's start only")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ahpd-startup-") as folder:
        tmp = Path(folder)
        bare = python_anchor("pass", args.runs, tmp)
        asyncio_anchor = python_anchor("import asyncio", args.runs, tmp)
        demo_agent = demo_agent_start(args.runs, tmp)
        if args.demo_agent_only:
            print(f"load average before the run: {load:.2f} on {os.cpu_count()} cores")
            _print_demo_agent(demo_agent, bare[0], asyncio_anchor[0])
            return
        trio_ws = python_anchor("import trio, trio_websocket", args.runs, tmp)
        node = node_anchor(args.runs)
        ready, ready_cpu, ready_rss = ready_line(args.runs, tmp)
        _, demo_cpu, demo_rss = ready_line(args.runs, tmp, hide_claude=True)
        chat, chat_cpu = cold_chat(args.runs, tmp)
        checked, loads, fast = wire_check_rates(args.mb, tmp)
    print(f"load average before the run: {load:.2f} on {os.cpu_count()} cores")
    cpu, rss = _median(ready_cpu), _median(ready_rss)
    print(
        f"ahpd run to the ready line: CPU {cpu * 1000:.0f} ms (target <= 250), RSS {rss:.1f} MB (target <= 40); "
        f"wall {_median(ready) * 1000:.0f} ms"
    )
    print(
        f"  the same with the claude extra hidden: CPU {_median(demo_cpu) * 1000:.0f} ms, "
        f"RSS {_median(demo_rss):.1f} MB"
    )
    anchors = [("python -c pass", bare), ("import trio, trio_websocket", trio_ws)]
    if isinstance(node, str):
        print(f"  (Node ws anchor skipped: {node})")
    else:
        anchors.append(("Node ws server listening", node))
    for name, (a_cpu, a_rss) in anchors:
        c, r = _median(a_cpu), _median(a_rss)
        print(
            f"  anchor {name}: CPU {c * 1000:.0f} ms, RSS {r:.1f} MB; "
            f"ahpd run / anchor: CPU {f'{cpu / c:.2f}x' if c else 'n/a (under one 10 ms tick)'}, RSS {rss / r:.2f}x"
        )
    _print_demo_agent(demo_agent, bare[0], asyncio_anchor[0])
    ms = [f"{t * 1000:.0f}" for t in chat]
    print(
        f'cold ahpd chat "hello" (demo agent): median {_median(chat) * 1000:.0f} ms '
        f"(runs: {', '.join(ms)} ms; target < 500 ms); the client's own CPU: median "
        f"{_median(chat_cpu) * 1000:.0f} ms"
    )
    print(
        f"wire-check {checked:.1f} MB per CPU-second; per-line json.loads {loads:.1f}, orjson {fast:.1f}: "
        f"{checked / loads:.2f}x json.loads (target >= 0.5), {checked / fast:.2f}x orjson"
    )


if __name__ == "__main__":
    main()
