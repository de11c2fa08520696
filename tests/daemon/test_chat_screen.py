"""What ``ahpd chat`` puts on the screen, in a pipe and as JSON (issue 27, items 6 and 12).

The screen tests drive the real client in a pseudoterminal through pexpect
against a real daemon process, as ``test_chat_client`` does; the redraw test
runs the client in this trio run with a terminal whose every write records
the thread that made it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from ahpd import cli
from ahpd.chat.app import run_chat

from .helpers import daemon_in_process, running_daemon
from .test_chat_client import ANSI, PROMPT, chat, ended


class _Terminal:
    """Standard output as a terminal that notes which thread wrote each piece."""

    def __init__(self) -> None:
        self.writes: list[tuple[int, str]] = []

    def write(self, text: str) -> int:
        self.writes.append((threading.get_ident(), text))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True

    @property
    def encoding(self) -> str:
        return "utf-8"


async def test_the_live_region_is_redrawn_by_the_chat_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A redraw from another thread can land between a reply printed above the
    live region and the region drawn under it, and move the cursor up by the
    region's old height: the tail of the reply is wiped (``/help`` lost five
    lines once), or a spinner line is left behind. So every write to the
    terminal comes from the thread the chat runs in."""
    terminal = _Terminal()
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setattr(sys, "stdout", terminal)
    data = tmp_path / "d"
    async with daemon_in_process(data, "--sessions", "memory"):
        args = cli.build_parser().parse_args(["chat", "--data-dir", str(data), "--cwd", str(tmp_path), "slow reply"])
        assert await run_chat(args) == 0
    shown = "".join(text for _, text in terminal.writes)
    assert "Streaming slowly: 1 2 3" in shown and "38 39 40." in shown
    redraws = [ident for ident, text in terminal.writes if "\x1b[2K" in text]  # a region erased to be drawn again
    assert len(redraws) > 3, "the slow reply streamed for seconds: the region was redrawn"
    assert {ident for ident, _ in terminal.writes} == {threading.get_ident()}


async def test_a_plan_a_denied_tool_and_a_question_are_each_said_once(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with running_daemon(data, "--sessions", "memory") as daemon:
        child = chat(data, tmp_path)
        child.expect(PROMPT)
        child.send(b"permission plan\r")
        child.expect("→ ".encode() + ANSI + b"Read the prompt")  # a plan's steps come as activity only
        child.expect("→ ".encode() + ANSI + b"Carry out the requested actions")
        child.expect(rb"Allow Run the demo tool\? \[y/N\]")
        child.send(b"n\r")
        child.expect("✗ ".encode() + ANSI + b"Run the demo tool: denied")
        child.expect("→ ".encode() + ANSI + b"Write the reply")
        child.expect(b"You rejected the demo tool")
        child.expect(PROMPT)
        child.send(b"ask\r")
        child.expect(rb"\(a number\) >")
        asked = child.before.decode()
        assert "Your answer" in asked and "Your answer: Your answer" not in asked
        child.send(b"2\r")
        child.expect(rb"you answered " + ANSI + b"no")
        child.expect(PROMPT)
        child.sendcontrol("d")  # the end of input, as in a shell
        assert ended(child) == 0
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_ctrl_c_is_not_echoed_into_the_reply(tmp_path: Path) -> None:
    """The terminal's own ``^C`` echo landed where the live region left the
    cursor ("^Ccancelling the turn…"); the client turns that echo off while it runs."""
    data = tmp_path / "d"
    async with running_daemon(data, "--sessions", "memory") as daemon:
        child = chat(data, tmp_path)
        child.expect(PROMPT)
        child.send(b"slow reply please\r")
        child.expect(b"Streaming slowly")
        child.sendintr()
        child.expect(b"turn cancelled")
        child.expect(PROMPT)
        child.sendcontrol("c")
        assert ended(child) == 130
        assert b"^C" not in child.logfile_read.getvalue()
        daemon.terminate()
        assert await daemon.wait() == 0


async def _chat_run(data: Path, cwd: Path, *args: str) -> trio.CompletedProcess:
    return await trio.run_process(
        [sys.executable, "-m", "ahpd", "chat", "--data-dir", str(data), "--cwd", str(cwd), *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        stdin=-3,  # DEVNULL
    )


async def test_a_pipe_gets_the_reply_as_written(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with daemon_in_process(data, "--sessions", "memory"):
        done = await _chat_run(data, tmp_path, "/help")
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert "| `plan` | shows a three-step plan |" in out  # the Markdown source, not a drawn table
    assert "\x1b" not in out
    padded = [line for line in out.splitlines() if line != line.rstrip()]
    assert not padded, padded


async def test_a_reader_that_closes_the_pipe_ends_the_chat_quietly(tmp_path: Path) -> None:
    """``ahpd chat … | head -1``: status 141, as a shell says SIGPIPE, and nothing on stderr
    (it was "cannot connect to the daemon: Broken pipe" with --json, an exception group without)."""
    data = tmp_path / "d"
    async with daemon_in_process(data, "--sessions", "memory"):
        for extra in ([], ["--json"]):
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "ahpd", "chat", "--data-dir", str(data), "--cwd", str(tmp_path), "--new", *extra]
                + ["slow reply"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            first = b""
            while not first.endswith(b"\n"):
                first += await process.stdout.receive_some(1)
            await process.stdout.aclose()  # the reader has seen enough
            errors = b""
            while chunk := await process.stderr.receive_some():
                errors += chunk
            assert await process.wait() == 141, (extra, errors.decode())
            assert errors == b"", (extra, errors.decode())
            assert b"session" in first


async def test_json_says_one_object_per_event(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with daemon_in_process(data, "--sessions", "memory"):
        denied = await _chat_run(data, tmp_path, "--json", "permission plan")
        allowed = await _chat_run(data, tmp_path, "--json", "--yes", "tool \x1b[31mred")
        failed = await _chat_run(data, tmp_path, "--json", "fail")
        listed = await _chat_run(data, tmp_path, "--json", "--list")
    for done in (denied, allowed, listed):
        assert done.returncode == 0, done.stderr.decode()
    assert failed.returncode == 1

    def events(done: trio.CompletedProcess) -> list[dict[str, Any]]:
        text = done.stdout.decode()
        assert text.isascii() and "\x1b" not in text  # escaped, never a terminal sequence
        return [json.loads(line) for line in text.splitlines()]

    first = events(denied)
    session = first[0]
    assert session["event"] == "session" and session["created"] is True and session["turns"] == 0
    assert session["provider"] == "demo" and session["cwd"] == str(tmp_path)
    said = [(e["event"], e.get("text") or e.get("status") or e.get("state")) for e in first[1:]]
    assert ("activity", "Read the prompt") in said and ("activity", "Write the reply") in said
    assert ("tool", "started") in said and ("tool", "denied") in said
    [decision] = [e for e in first if e["event"] == "decision"]
    assert decision["answer"] == "no" and decision["question"] == "Allow Run the demo tool?"
    [reply] = [e for e in first if e["event"] == "text" and e["kind"] == "markdown"]
    assert reply["text"].startswith("Demo agent here. You said: “permission plan”")
    assert first[-1] == {"event": "end", "state": "complete", "message": ""}

    second = events(allowed)
    assert second[0]["uri"] == session["uri"] and second[0]["turns"] == 1 and second[0]["created"] is False
    assert [e["status"] for e in second if e["event"] == "tool"] == ["started", "completed"]
    [reply] = [e for e in second if e["event"] == "text" and e["kind"] == "markdown"]
    assert "\x1b[31mred" in reply["text"]  # the text as the agent said it; the JSON escapes it

    third = events(failed)
    assert third[-1]["event"] == "end" and third[-1]["state"] == "error" and third[-1]["message"]

    rows = events(listed)
    assert [row["resource"] for row in rows] == [session["uri"]]
