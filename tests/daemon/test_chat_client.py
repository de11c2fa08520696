"""``ahpd chat`` as people use it: in a real pseudoterminal, against a real daemon.

The chat process is driven through pexpect (a pty, so prompt_toolkit and
rich behave as in a terminal); what it did is checked both on screen and in
the protocol state the daemon reports to another client. pexpect waits by
blocking, so the daemon those tests talk to is a process of its own (one in
the test's trio run would not be served while pexpect waits).
"""

from __future__ import annotations

import os
import re
import sys
from io import BytesIO
from pathlib import Path
from typing import Any

import pexpect
import trio

from .helpers import daemon_in_process, rpc, running_daemon

HANG_GUARD = 60
PROMPT = b"you>"
ANSI = rb"(?:\x1b\[[0-9;?]*[A-Za-z])*"


def chat(data: Path, cwd: Path, *args: str) -> pexpect.spawn:
    env = {**os.environ, "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1", "COLUMNS": "200", "LINES": "50"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "ahpd", "chat", "--data-dir", str(data), "--cwd", str(cwd), *args],
        env=env,
        dimensions=(50, 200),
        timeout=HANG_GUARD,
    )
    child.logfile_read = BytesIO()  # everything shown, for the checks that look at all of it
    return child


def ended(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus if child.exitstatus is not None else 128 + child.signalstatus


async def chat_state(url: str, session_prefix: str = "") -> dict[str, Any]:
    """The one session's default chat, as a fresh client sees it."""
    async with rpc(url) as client:
        await client.initialize("observer")
        [row] = (await client.call("listSessions", {}))["result"]["items"]
        return (await client.call("subscribe", {"channel": row["defaultChat"]}))["result"]["snapshot"]["state"]


async def test_a_question_is_asked_and_answered_and_ctrl_d_leaves(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with running_daemon(data, "--sessions", "memory") as daemon:
        child = chat(data, tmp_path)
        child.expect(PROMPT)
        child.send(b"please ask me\r")
        child.expect(b"Shall the demo agent carry on")
        child.expect(rb"1\. yes")
        child.expect(b"a number")
        child.send(b"1\r")
        child.expect(rb"you answered " + ANSI + b"yes")
        child.expect(PROMPT)
        # Ctrl-C at a question cancels it, and the turn with it.
        child.send(b"ask again\r")
        child.expect(b"a number")
        child.sendcontrol("c")
        child.expect(b"turn cancelled")
        child.expect(PROMPT)
        child.sendcontrol("d")  # the end of input: status 0, as in a shell
        assert ended(child) == 0

        first, second = (await chat_state(daemon.url))["turns"]
        [asked] = [p for p in first["responseParts"] if p["kind"] == "inputRequest"]
        assert asked["response"] == "accept"
        assert asked["request"]["answers"]["answer"] == {
            "state": "submitted",
            "value": {"kind": "selected", "value": "yes"},
        }
        [dismissed] = [p for p in second["responseParts"] if p["kind"] == "inputRequest"]
        assert dismissed["response"] == "cancel" and second["state"] == "cancelled"
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_ctrl_c_cancels_the_turn_then_ctrl_c_at_the_prompt_exits(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with running_daemon(data, "--sessions", "memory") as daemon:
        child = chat(data, tmp_path)
        child.expect(PROMPT)
        child.send(b"slow reply please\r")
        child.expect(b"Streaming slowly")  # the slow reply has begun
        child.sendintr()
        child.expect(b"turn cancelled")
        child.expect(PROMPT)  # the prompt is back, and it still talks
        child.send(b"are you there\r")
        child.expect("You said: “are you there”".encode())
        child.expect(PROMPT)
        child.sendcontrol("c")  # no Enter needed
        assert ended(child) == 130

        turns = (await chat_state(daemon.url))["turns"]
        assert [t["state"] for t in turns] == ["cancelled", "complete"]

        # A second Ctrl-C while the first is still being honoured leaves at once.
        child = chat(data, tmp_path)
        child.expect(PROMPT)
        child.send(b"slow once more\r")
        child.expect(b"Streaming slowly")
        child.sendintr()
        child.expect(b"cancelling the turn")  # two signals too close together are one to the kernel
        child.sendintr()
        assert ended(child) == 130
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_escape_sequences_from_the_agent_are_neutralised(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with running_daemon(data, "--sessions", "memory") as daemon:
        hostile = "/echo title\x1b]0;PWNED\x07 colour\x1b[31mRED\x1b[0m query\x1b[6n bell\x07 csi\x9b2J end"
        child = chat(data, tmp_path, "--new", hostile)
        child.expect(b"end")
        assert ended(child) == 0
        shown = child.logfile_read.getvalue()
        for raw in (b"\x1b]0;PWNED", b"\x1b[31mRED", b"\x1b[6n", b"\x07", "\x9b".encode(), b"\xc2\x9b"):
            assert raw not in shown, raw
        # Neutralised, not hidden: the reader sees that something was there.
        assert "␛]0;PWNED␇".encode() in shown and "␛[31mRED".encode() in shown
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_sessions_are_continued_listed_and_only_created_when_asked(tmp_path: Path) -> None:
    data = tmp_path / "d"

    async def run(*args: str) -> str:
        done = await trio.run_process(
            [sys.executable, "-m", "ahpd", "chat", "--data-dir", str(data), "--cwd", str(tmp_path), *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=-3,
        )  # DEVNULL
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    async with daemon_in_process(data, "--sessions", "memory") as daemon:
        first = await run("hello")
        assert "You said: “hello”" in first and ", new)" in first
        again = await run("ask me")  # not a terminal: the question is declined, not left hanging
        assert "continued, 1 turn before" in again and "declined" in again
        listed = (await run("--list")).splitlines()
        assert len(listed) == 1
        uri = listed[0].split("\t")[0]
        assert uri in first and "\tdemo\t" in listed[0] and "\tidle\t" in listed[0]

        await run("--new", "fresh start")
        assert len((await run("--list")).splitlines()) == 2
        # The newest is the one remembered now; --session goes back to the first.
        await run("--session", uri, "back again")
        async with rpc(daemon.url) as client:
            await client.initialize("observer")
            rows = (await client.call("listSessions", {}))["result"]["items"]
            turns = {}
            for row in rows:
                state = (await client.call("subscribe", {"channel": row["defaultChat"]}))["result"]["snapshot"]["state"]
                turns[row["resource"]] = [t["message"]["text"] for t in state["turns"]]
        assert turns[uri] == ["hello", "ask me", "back again"]
        assert sorted(turns.values()) == [["fresh start"], ["hello", "ask me", "back again"]]

        missing = await trio.run_process(
            [sys.executable, "-m", "ahpd", "chat", "--data-dir", str(data), "--session", "ahp-session:/nope", "hi"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=-3,
        )
        assert missing.returncode == 2 and re.search(r"nope", missing.stderr.decode())  # a usage error (issue 27)
        refused = await trio.run_process(
            [sys.executable, "-m", "ahpd", "chat", "--url", daemon.url.split("?")[0] + "?tkn=wrong", "hi"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=-3,
        )
        assert refused.returncode == 7 and "HTTP 401" in refused.stderr.decode()
        assert "wrong" not in refused.stdout.decode() + refused.stderr.decode()  # a token is not printed back
        daemon.terminate()
        assert await daemon.wait() == 0


def test_neutralise_keeps_newlines_and_tabs_and_shows_every_other_control() -> None:
    from ahpd.chat.render import neutralise

    assert neutralise("a\x1b[31mb\tc\nd\re\x07f\x7f\x9b\u202eg") == "a␛[31mb\tc\nd␍e␇f␡\ufffd\ufffdg"
