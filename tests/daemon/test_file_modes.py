"""Every file ahpd writes in its data directory is 0600, like the token: a real ``ahpd run``
(its stores, its log, SQLite's ``-wal``/``-shm`` while it runs) and a real ``ahpd chat`` in a
pseudoterminal (its history and remembered sessions), including files an older ahpd left 0644."""

from __future__ import annotations

import logging
import os
import stat
import sys
from pathlib import Path

import pexpect
import trio

from ahpd.ops import logs

from .helpers import dispatch, is_action, rpc, running_daemon, until

HANG_GUARD = 60


def modes(data: Path) -> dict[str, str]:
    """Each regular file under ``data`` (relative name) -> its mode, in octal."""
    found = {}
    for path in data.rglob("*"):
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(data))] = f"{stat.S_IMODE(path.lstat().st_mode):04o}"
    return found


def chat_a_line(data: Path, cwd: Path) -> None:
    """One message typed at ``ahpd chat``'s prompt (so it goes into the history), then Ctrl-D."""
    env = {**os.environ, "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1", "COLUMNS": "200", "LINES": "50"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "ahpd", "chat", "--data-dir", str(data), "--cwd", str(cwd)],
        env=env,
        dimensions=(50, 200),
        timeout=HANG_GUARD,
    )
    try:
        child.expect(b"you>")
        child.send(b"hello there\r")
        child.expect(b"You said")  # the demo agent's echo: the turn ran, and the prompt comes back
        child.expect(b"you>")
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


async def test_every_file_the_daemon_and_the_chat_write_is_private(tmp_path: Path) -> None:
    data = tmp_path / "d"
    work = tmp_path / "work"
    work.mkdir()
    # What an older ahpd left behind, open to the group and others.
    (data / "logs").mkdir(parents=True, mode=0o700)
    data.chmod(0o700)
    for name in ("logs/ahpd.log", "chat-history", "automations.sqlite3-wal"):
        (data / name).write_bytes(b"")
        (data / name).chmod(0o644)
    async with running_daemon(data, env={"HOME": str(tmp_path / "home")}) as daemon:
        async with rpc(daemon.url) as client:  # a value a user sets is written down (root-config.json)
            await client.initialize()
            await dispatch(
                client, "ahp-root://", {"type": "root/configChanged", "config": {"agentIdleTimeout": 900}}, 1
            )
            await until(client, is_action("root/configChanged"))
        await trio.to_thread.run_sync(chat_a_line, data, work)
        running = modes(data)
        daemon.terminate()
        assert await daemon.wait() == 0
    after = modes(data)
    for name in (
        "automations.sqlite3",
        "chat-history",
        "chat-sessions.json",
        "logs/ahpd.log",
        "root-config.json",
        "token",
        "serverSeq",
    ):
        assert name in after, (name, sorted(after))
    assert "hello there" in (data / "chat-history").read_text()
    assert any(name.endswith(".jsonl") for name in after)  # the chat's journal
    assert {name: mode for name, mode in running.items() if mode != "0600"} == {}
    assert {name: mode for name, mode in after.items() if mode != "0600"} == {}


def test_the_log_file_stays_private_across_a_rotation(tmp_path: Path) -> None:
    handler = logs.to_file(tmp_path)
    logger = logging.getLogger("ahpd.test_file_modes")
    try:
        for n in range(1200):  # a little over the 1 MiB at which it rotates; warnings pass any level set
            logger.warning("line %d %s", n, "x" * 1000)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    found = modes(tmp_path)
    assert {"logs/ahpd.log", "logs/ahpd.log.1"} <= set(found)
    assert set(found.values()) == {"0600"}, found
