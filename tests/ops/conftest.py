"""Fixtures for the ops tests: real processes, real sockets, a fake daemon and a fake systemctl.

The only fake is systemctl's *user manager*: a test must never stop or disable
the ahpd service of the person running the tests, so systemctl is replaced by
a recording script on PATH (or removed from PATH).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ahpd.ops import commands
from ahpd.ops.runtime import read_runtime

REPO = Path(__file__).resolve().parents[2]

FAKE_DAEMON = '''
"""A stand-in for `ahpd run`: control socket, ahpd.json, graceful SIGTERM."""
import signal, sys
import trio
from ahpd.ops import control, runtime

data_dir, flags = sys.argv[1], sys.argv[2:]

async def main():
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            if "--no-control" not in flags:
                await nursery.start(control.serve_control, data_dir,
                                    lambda: {"connections": 2, "sessions": 5})
            runtime.write_runtime(data_dir, host="127.0.0.1", port=1234, url="ws://127.0.0.1:1234")
            async for _ in signals:
                if "--ignore-term" not in flags:
                    runtime.remove_runtime(data_dir)
                    nursery.cancel_scope.cancel()
                    break

trio.run(main)
'''


def py_env() -> dict[str, str]:
    """The environment for child Pythons: import this checkout's ahpd."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def run_cli(*argv: str) -> int:
    """Parse ``argv`` with a parser built like ahpd/cli.py will build it, and run it."""
    parser = argparse.ArgumentParser(prog="ahpd")
    sub = parser.add_subparsers(dest="command")
    commands.add_status_parser(sub)
    commands.add_stop_parser(sub)
    commands.add_service_parser(sub)
    args = parser.parse_args(list(argv))
    return args.func(args)


@pytest.fixture
def spawn_fake_daemon(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    """Start `ahpd-fake.py DATA_DIR [flags]` and wait until its ahpd.json is live."""
    script = tmp_path / "ahpd-fake.py"
    script.write_text(FAKE_DAEMON)
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(*flags: str) -> tuple[subprocess.Popen[bytes], Path]:
        data_dir = tmp_path / f"d{len(procs)}"
        log = open(tmp_path / f"fake{len(procs)}.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, str(script), str(data_dir), *flags], stdout=log, stderr=subprocess.STDOUT, env=py_env()
        )
        log.close()
        procs.append(proc)

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"fake daemon exited early: {(tmp_path / f'fake{len(procs) - 1}.log').read_text()}"
                )
            return read_runtime(data_dir) is not None

        wait_for(ready, what="the fake daemon's ahpd.json")
        return proc, data_dir

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated live process (`sleep 30`), reaped afterwards."""
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


@pytest.fixture
def fake_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Put a recording `systemctl` alone on PATH; returns the file its calls are logged to."""

    def install(exit_code: int = 0, output: str = "") -> Path:
        bindir = tmp_path / "bin"
        bindir.mkdir(exist_ok=True)
        calls = tmp_path / "systemctl.calls"
        exe = bindir / "systemctl"
        exe.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\nprintf "%s" "{output}" >&2\nexit {exit_code}\n')
        exe.chmod(0o755)
        monkeypatch.setenv("PATH", str(bindir))
        return calls

    return install


@pytest.fixture
def no_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
