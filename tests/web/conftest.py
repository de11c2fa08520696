"""A real browser against a real ``ahpd run``: Debian's Chromium, driven by
Playwright for Python with ``executable_path`` (never a downloaded browser).

The tests skip, saying why, where Chromium or Playwright is absent. The
daemon is a process of its own (:class:`Daemon`), since Playwright's sync API
blocks the thread a trio loop would run in. Screenshots of each step are
kept under ``test-artifacts/web/`` at the top of the repository (git-ignored)
and the path is printed, so a person can look at what the test saw.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "web"
#: What a step may take on a loaded machine before the test fails (milliseconds).
WAIT_MS = 120_000
TOKEN = "web-console-test-token"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("chromium not found: apt install chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright not installed: pip install playwright (the test extra)")
    # Once trio_asyncio is imported (the Claude backend's tests, in this same xdist worker),
    # asyncio's new_event_loop() makes one of its loops, which Playwright's sync API cannot
    # drive and which leaves a trio run behind it. A policy set in this thread is the one
    # trio_asyncio then gets out of the way for: plain asyncio, as Playwright expects.
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    try:
        with sync_playwright() as p:
            # --no-sandbox: the suite may run as root in a container, where Chromium's sandbox cannot start
            launched = p.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
            try:
                yield launched
            finally:
                launched.close()
    finally:
        asyncio.set_event_loop_policy(None)


class Daemon:
    """``ahpd run`` as a person starts it, reading its two lines (ready and web console)."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir = data_dir
        self.args = args
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.web_url = ""

    def start(self, *extra: str) -> Daemon:
        command = [sys.executable, "-m", "ahpd", "run", "--data-dir", str(self.data_dir), *self.args, *extra]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        assert ready.startswith("ahpd ready: "), ready
        web = self.process.stdout.readline()
        assert web.startswith("ahpd web console: "), web
        self.url = ready.split(": ", 1)[1].strip()
        self.web_url = web.split(": ", 1)[1].strip()
        return self

    @property
    def port(self) -> int:
        return int(self.url.split(":")[2].split("/")[0])

    @property
    def web_port(self) -> int:
        return int(self.web_url.split(":")[2].split("/")[0])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    served = Daemon(tmp_path / "data", "--connection-token", TOKEN)
    try:
        yield served
    finally:
        served.stop()


class Shots:
    """Numbered screenshots of one test's steps."""

    def __init__(self, name: str) -> None:
        self.folder = ARTIFACTS / name
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.count = 0
        print(f"screenshots: {self.folder}")

    def __call__(self, page: Any, step: str) -> Path:
        self.count += 1
        path = self.folder / f"{self.count:02d}-{step}.png"
        page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Shots:
    return Shots(request.node.name)
