"""The memory of idle sessions: a real ``ahpd run`` daemon, ``--sessions``
of them created (100 by default) with the demo agent, none of them used,
then the resident memory (VmRSS) of the daemon and every process under it.

    .venv/bin/python benchmarks/idle_bench.py [--sessions 100]

Targets: the daemon <= 40 MB at its ready line, and <= 45 MB in all with
100 idle sessions, agents included (each session used to start its agent
at ``createSession``: ~45 MB apiece), with or without the ``claude`` extra
(whose boot probe and transcript catalogue run in child processes, so the
daemon loads the Claude Agent SDK only once a Claude conversation starts).
Anchors measured in the same run: a bare ``python -c pass`` and
``import trio, trio_websocket``, each as its own process. A second figure
runs one turn in a session and waits for its agent's idle stop
(``agentIdleTimeout`` set to 1 s for the run), to show the memory coming
back. ``--demo-only`` hides the Claude Agent SDK altogether; ``--git``
makes the sessions' folder a git repository: each session's git facts are
then read (with the ``git`` command; libgit2 is loaded only for a changeset).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio
from trio_websocket import open_websocket_url

READY = "ahpd ready: "


def anchor_rss(code: str) -> float:
    """The RSS (MB) of ``python -c code`` at its end, said by the interpreter itself."""
    probe = (
        f"{code}\nimport pathlib\nprint([int(l.split()[1]) for l in "
        "pathlib.Path('/proc/self/status').read_text().splitlines() if l.startswith('VmRSS:')][0])"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1]) / 1024


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").iterdir():
            try:
                children = [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
            out += children
            todo += children
    return out


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss(pid: int) -> tuple[int, int, int]:
    """(daemon KiB, children KiB, number of children)."""
    children = descendants(pid)
    return rss_kib(pid), sum(rss_kib(c) for c in children), len(children)


class Client:
    def __init__(self, ws) -> None:
        self.ws, self.next_id = ws, 0

    async def call(self, method: str, params: dict) -> dict:
        self.next_id += 1
        ident = self.next_id
        await self.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
        while True:
            frame = json.loads(await self.ws.get_message())
            if frame.get("id") == ident and "method" not in frame:
                if "error" in frame:
                    raise SystemExit(f"{method} failed: {frame['error']}")
                return frame.get("result") or {}

    async def until(self, kind: str, channel: str) -> None:
        while True:
            frame = json.loads(await self.ws.get_message())
            params = frame.get("params") or {}
            if (params.get("action") or {}).get("type") == kind and params.get("channel") == channel:
                return


async def drive(url: str, pid: int, sessions: int, work: Path, anchor: float) -> None:
    async with open_websocket_url(url, max_message_size=2**26) as ws:
        client = Client(ws)
        await client.call(
            "initialize",
            {
                "channel": "ahp-root://",
                "protocolVersions": ["1.0.0"],
                "clientId": "idle-bench",
                "initialSubscriptions": ["ahp-root://"],
            },
        )
        await client.ws.send_message(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "dispatchAction",
                    "params": {
                        "channel": "ahp-root://",
                        "clientSeq": 1,
                        "action": {"type": "root/configChanged", "config": {"agentIdleTimeout": 1}},
                    },
                }
            )
        )
        before = tree_rss(pid)
        # The first hello starts the boot probes, each in a child process of its own (Claude Code's
        # starts its CLI): idle means after they have answered, so wait for them to go.
        probing = time.perf_counter()
        with trio.move_on_after(120):
            while descendants(pid):
                await trio.sleep(0.2)
        print(
            f"boot probes' child processes gone after {time.perf_counter() - probing:.1f} s "
            f"({len(descendants(pid))} left); daemon {rss_kib(pid) / 1024:.1f} MB"
        )
        started = time.perf_counter()
        uris = []
        for _ in range(sessions):
            uri = f"ahp-session:/{uuid.uuid4()}"
            await client.call(
                "createSession", {"channel": uri, "provider": "demo", "workingDirectories": [work.as_uri()]}
            )
            uris.append(uri)
        took = time.perf_counter() - started
        await trio.sleep(1)
        daemon, agents, count = tree_rss(pid)
        print(f"daemon after the first hello: {before[0] / 1024:.1f} MB ({before[2]} child processes)")
        print(
            f"{sessions} idle sessions (created in {took:.2f} s): daemon {daemon / 1024:.1f} MB + "
            f"{count} child processes {agents / 1024:.1f} MB = {(daemon + agents) / 1024:.1f} MB "
            f"(target <= 45 MB); {(daemon + agents) / 1024 / anchor:.2f}x import trio, trio_websocket"
        )

        state = await client.call("subscribe", {"channel": uris[0]})
        chat = state["snapshot"]["state"]["defaultChat"]
        await client.call("subscribe", {"channel": chat})
        await client.ws.send_message(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "dispatchAction",
                    "params": {
                        "channel": chat,
                        "clientSeq": 2,
                        "action": {
                            "type": "chat/turnStarted",
                            "turnId": "t-1",
                            "startedAt": "2026-12-03T00:00:00Z",
                            "message": {"text": "hello", "origin": {"kind": "user"}},
                        },
                    },
                }
            )
        )
        await client.until("chat/turnComplete", chat)
        daemon, agents, count = tree_rss(pid)
        print(f"after one turn: daemon {daemon / 1024:.1f} MB + {count} agent {agents / 1024:.1f} MB")
        with trio.fail_after(60):
            while descendants(pid):
                await trio.sleep(0.2)
        daemon, agents, count = tree_rss(pid)
        print(
            f"after its idle stop (agentIdleTimeout 1 s): daemon {daemon / 1024:.1f} MB + "
            f"{count} child processes {agents / 1024:.1f} MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument(
        "--demo-only", action="store_true", help="hide the Claude Agent SDK, so the daemon offers the demo agent alone"
    )
    parser.add_argument(
        "--git", action="store_true", help="make the sessions' folder a git repository (sessions read git facts)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ahpd-idle-") as folder:
        tmp = Path(folder)
        (tmp / "home").mkdir()
        (tmp / "work").mkdir()
        if args.git:
            subprocess.run(["git", "init", "-q", str(tmp / "work")], check=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # cached, as installed
        env.update(HOME=str(tmp / "home"), CLAUDE_CONFIG_DIR=str(tmp / "home" / ".claude"))
        bare, trio_ws = anchor_rss("pass"), anchor_rss("import trio, trio_websocket")
        print(f"anchors: python -c pass {bare:.1f} MB, import trio, trio_websocket {trio_ws:.1f} MB")
        if args.demo_only:  # as conformance/test_conformance.py does: the SDK fails to import
            hide = tmp / "hide" / "claude_agent_sdk"
            hide.mkdir(parents=True)
            (hide / "__init__.py").write_text('raise ImportError("hidden for the benchmark")\n')
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hide.parent), env.get("PYTHONPATH")]))
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ahpd",
                "run",
                "--port",
                "0",
                "--data-dir",
                str(tmp / "d"),
                "--sessions",
                "memory",
                "--log-level",
                "warning",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=tmp,  # not the checkout's root, where ``-m ahpd`` would import the checkout's ahpd before PYTHONPATH's
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line.startswith(READY):
                raise SystemExit(f"no ready line: {line!r}")
            ready = rss_kib(process.pid) / 1024
            print(
                f"daemon at its ready line: {ready:.1f} MB (target <= 40 MB); "
                f"{ready / trio_ws:.2f}x import trio, trio_websocket, {ready / bare:.2f}x python -c pass"
            )
            trio.run(drive, line[len(READY) :].strip(), process.pid, args.sessions, tmp / "work", trio_ws)
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    main()
