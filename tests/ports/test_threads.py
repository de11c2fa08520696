"""Worker threads bounded per family: a family that holds all its threads
makes only itself wait, and nothing in the daemon takes a thread from
trio's shared default pool."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import trio

from ahpd.ports import threads

ROOT = Path(__file__).resolve().parents[2] / "ahpd"
#: The interactive client (``ahpd chat``) is a process of its own, not the daemon.
OUTSIDE_THE_DAEMON = {ROOT / "ports" / "threads.py", *(ROOT / "chat").rglob("*.py")}


def test_nothing_in_the_daemon_uses_the_shared_thread_pool() -> None:
    users = [
        f"{path.relative_to(ROOT.parent)}:{n}"
        for path in ROOT.rglob("*.py")
        if path not in OUTSIDE_THE_DAEMON
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bto_thread\.run_sync\b", line)
    ]
    assert users == [], "use ahpd.ports.threads.run(family, ...) instead"


async def test_a_family_that_holds_every_thread_it_has_makes_no_other_wait() -> None:
    release = threading.Event()
    held = threads.SIZES["git"]
    async with trio.open_nursery() as nursery:
        for _ in range(held):
            nursery.start_soon(threads.run, "git", release.wait)
        while threads.limiter("git").borrowed_tokens < held:  # noqa: ASYNC110 - the threads' own pace
            await trio.sleep(0.01)
        # git is full; a file read and a store write go straight to a thread of their own
        assert await threads.run("files", lambda: "read") == "read"
        assert await threads.run("store", lambda: "written") == "written"
        assert threads.limiter("git").statistics().tasks_waiting == 0
        release.set()
    assert threads.limiter("git").borrowed_tokens == 0
