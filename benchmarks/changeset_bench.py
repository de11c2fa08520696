"""The uncommitted changeset of a big repository against ``git status``.

A repository of FILES tracked files (50,000 by default) with CHANGED of them
modified, built with the ``git`` command in a temporary folder under a HOME
of its own. Then, in the same run:

* ``git status --porcelain``, the baseline (median of a few runs, warm);
* the git port's ``Repo.status()`` in this process (the read a changeset
  does each time), warm, median of the same number of runs;
* a real ``ahpd run`` with the demo agent: a session in the repository, a
  WebSocket client subscribing to ``<session>/changeset/uncommitted``, and
  the time from the subscribe to the first ``ready`` holding CHANGED rows;
* one more edit, staged with ``git add`` (the index moving is the trigger),
  and the time until the row arrives; this includes the watcher's poll
  interval (``ahpd.host.changesets.view.POLL``), which the port's read does not.

Numbers only; nothing is asserted. ``--files`` makes a smaller repository
when building 50,000 files takes too long on a loaded machine.

    .venv/bin/python benchmarks/changeset_bench.py [--files 50000] [--changed 200] [--runs 5]
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
import uuid
from pathlib import Path

import trio
from trio_websocket import open_websocket_url

from ahpd.host.changesets.view import POLL
from ahpd.ports import git as gitport


def _env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    config = home / ".gitconfig"
    config.write_text("[user]\n\tname = Bench\n\temail = bench@example.invalid\n[gc]\n\tauto = 0\n")
    return {**os.environ, "HOME": str(home), "GIT_CONFIG_GLOBAL": str(config), "GIT_CONFIG_NOSYSTEM": "1"}


def build(repo: Path, files: int, changed: int, env: dict[str, str]) -> None:
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, env=env, check=True)
    for n in range(files):
        folder = repo / f"d{n // 500:03d}"
        if n % 500 == 0:
            folder.mkdir()
        (folder / f"f{n:05d}.txt").write_text(f"file {n}\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "files"], cwd=repo, env=env, check=True)
    step = max(1, files // changed)
    for n in range(0, step * changed, step):
        (repo / f"d{n // 500:03d}" / f"f{n:05d}.txt").write_text(f"file {n}, changed\n")


def timed(fn, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def through_the_daemon(repo: Path, env: dict[str, str], changed: int, data: Path) -> tuple[float, float]:
    command = [
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
    ]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
    try:
        line = b""
        while not line.endswith(b"\n"):
            line += await process.stdout.receive_some(1)
        url = line.decode().split("ahpd ready: ", 1)[1].strip()
        async with open_websocket_url(url, max_message_size=2**28) as ws:
            ident = 0

            async def call(method: str, params: dict) -> dict:
                nonlocal ident
                ident += 1
                await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
                while True:
                    frame = json.loads(await ws.get_message())
                    if frame.get("id") == ident:
                        return frame

            await call("initialize", {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "bench"})
            session = f"ahp-session:/{uuid.uuid4()}"
            await call("createSession", {"channel": session, "workingDirectories": [repo.as_uri()]})
            channel = f"{session}/changeset/uncommitted"
            # Timed from a settled session: its _meta.git (one status read) is in first.
            while not (
                (await call("subscribe", {"channel": session}))["result"]["snapshot"]["state"].get("_meta") or {}
            ).get("git"):
                await trio.sleep(0.05)
            start = time.perf_counter()
            state = (await call("subscribe", {"channel": channel}))["result"]["snapshot"]["state"]
            from ahpd import state as reducers

            while not (state["status"] == "ready" and len(state["files"]) == changed):
                frame = json.loads(await ws.get_message())
                if frame.get("method") == "action" and frame["params"]["channel"] == channel:
                    state = reducers.reduce("changeset", state, frame["params"]["action"])
            first_ready = time.perf_counter() - start
            extra = repo / "one-more.txt"
            extra.write_text("one more\n")
            subprocess.run(["git", "add", "one-more.txt"], cwd=repo, env=env, check=True)  # noqa: ASYNC221 - setting up the benchmark, before it measures
            start = time.perf_counter()
            while len(state["files"]) != changed + 1:
                frame = json.loads(await ws.get_message())
                if frame.get("method") == "action" and frame["params"]["channel"] == channel:
                    state = reducers.reduce("changeset", state, frame["params"]["action"])
            reread = time.perf_counter() - start
            return first_ready, reread
    finally:
        process.kill()
        await process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--changed", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ahpd-changeset-bench-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        env = _env(root / "home")
        repo = root / "repo"
        start = time.perf_counter()
        build(repo, args.files, args.changed, env)
        print(f"built {args.files} tracked files, {args.changed} changed, in {time.perf_counter() - start:.1f} s")
        git_status = timed(
            lambda: subprocess.run(
                ["git", "status", "--porcelain"], cwd=repo, env=env, check=True, capture_output=True
            ),
            args.runs,
        )
        port = timed(lambda: gitport.Repo(repo).status(), args.runs)
        rows = len(gitport.Repo(repo).status())
        first_ready, reread = trio.run(through_the_daemon, repo, env, rows, root / "data")
        print(f"git status --porcelain (median of {args.runs}):        {git_status * 1000:8.1f} ms")
        print(
            f"git port Repo.status(), {rows} rows (median of {args.runs}): {port * 1000:8.1f} ms"
            f"   ratio {port / git_status:.2f}"
        )
        print(
            f"daemon: subscribe -> first ready:            {first_ready * 1000:8.1f} ms"
            f"   ratio {first_ready / git_status:.2f}"
        )
        print(
            f"daemon: git add of one more -> its row:      {reread * 1000:8.1f} ms"
            f"   ratio {reread / git_status:.2f} (includes up to a {POLL * 1000:.0f} ms poll)"
        )


if __name__ == "__main__":
    main()
