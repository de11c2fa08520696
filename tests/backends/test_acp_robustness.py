"""The ACP backend against an agent of our own that misbehaves on demand
(``acp_agents/raw_agent.py``), and the finer points of terminals."""

from __future__ import annotations

import functools
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from ahpd.backends.acp.backend import AcpBackend
from ahpd.backends.port import BackendError
from tests.backends.acp_agents.harness import Recorder, conversation, raw_backend, reaped
from tests.waits import eventually


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def last_json(rec: Recorder) -> Any:
    return json.loads(rec.updates("agent_message_chunk")[-1]["content"]["text"])


async def test_many_updates_keep_their_order(cwd: Path) -> None:
    async with conversation(raw_backend(), cwd) as (conv, rec):
        assert (await conv.prompt("order 500")).stop_reason == "end_turn"
        assert [u["content"]["text"] for u in rec.updates()] == [str(i) for i in range(500)]


async def test_chatty_stderr_does_not_hang_and_is_logged(cwd: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ahpd.backends.acp.backend")
    async with conversation(raw_backend(), cwd) as (conv, rec):
        # Far more than a pipe holds (64 KiB): an unread stderr would block the agent.
        await conv.prompt("chatty 2000000")
        assert rec.text() == "still here"
    lines = [r.getMessage() for r in caplog.records if "stderr: chatter" in r.getMessage()]
    assert len(lines) > 1000


async def test_an_oversized_line_is_an_error_naming_the_limit(cwd: Path) -> None:
    backend = raw_backend(max_line_bytes=100_000)
    async with trio.open_nursery() as nursery:
        conv = await nursery.start(
            lambda task_status: backend.run_conversation(cwd=cwd, events=Recorder(), task_status=task_status)
        )
        with pytest.raises(BackendError) as caught:
            await conv.prompt("huge 300000")
        assert "100000 bytes" in caught.value.message
        assert "max_line_bytes" in caught.value.message
    # The nursery ended on its own: run_conversation returned, with the same reason.
    assert conv.end_reason == caught.value.message
    assert reaped(conv.pid)


async def test_an_agent_dying_mid_turn_fails_the_turn_and_the_conversation(cwd: Path) -> None:
    backend = raw_backend()
    async with trio.open_nursery() as nursery:
        rec = Recorder()
        conv = await nursery.start(
            lambda task_status: backend.run_conversation(cwd=cwd, events=rec, task_status=task_status)
        )
        with pytest.raises(BackendError) as caught:
            await conv.prompt("die")
        assert "exited with status 3" in caught.value.message
        assert "fatal: out of cheese" in caught.value.message
        assert rec.text() == "about to die"
    assert conv.end_reason is not None
    assert "exited with status 3" in conv.end_reason and "out of cheese" in conv.end_reason
    assert reaped(conv.pid)
    with pytest.raises(BackendError):
        await conv.prompt("anyone?")


async def test_lines_that_are_not_messages_are_skipped(cwd: Path) -> None:
    async with conversation(raw_backend(), cwd) as (conv, rec):
        assert (await conv.prompt("garbage")).stop_reason == "end_turn"
        assert rec.text() == "after the garbage"


async def test_no_load_session_is_a_clear_error(cwd: Path) -> None:
    backend = raw_backend("--no-load")
    async with trio.open_nursery() as nursery:
        with pytest.raises(BackendError) as caught:
            await nursery.start(
                lambda task_status: backend.run_conversation(
                    cwd=cwd, events=Recorder(), resume_id="old", task_status=task_status
                )
            )
    assert "loadSession" in caught.value.message
    # Neither list nor delete is offered by this agent.
    assert await backend.list_conversations() == []
    assert await backend.delete_conversation("old") is False


async def test_an_agent_that_cannot_start_is_a_backend_error(cwd: Path) -> None:
    backend = AcpBackend("nope", "/nonexistent/agent")
    async with trio.open_nursery() as nursery:
        with pytest.raises(BackendError) as caught:
            await nursery.start(
                lambda task_status: backend.run_conversation(cwd=cwd, events=Recorder(), task_status=task_status)
            )
    assert "/nonexistent/agent" in caught.value.message
    assert await backend.list_conversations() == []


async def test_a_stubborn_agent_and_its_children_are_killed(cwd: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    backend = raw_backend("--ignore-sigterm", "--pidfile", str(pidfile), shutdown_grace=0.3)
    rec = Recorder()
    async with trio.open_nursery() as nursery:
        conv = await nursery.start(
            lambda task_status: backend.run_conversation(cwd=cwd, events=rec, task_status=task_status)
        )
        nursery.start_soon(conv.prompt, "hang")
        await rec.until(lambda: rec.text() == "hanging")  # the prompt is with it
        nursery.cancel_scope.cancel()
    assert reaped(conv.pid)
    child = int(pidfile.read_text())
    # The child was in the agent's process group; it got SIGKILL (its parent reaps it, or init does).
    await eventually(lambda: not Path(f"/proc/{child}").exists() or "Z" in _state(child))  # noqa: ASYNC240 - /proc


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


# -- fs and terminals, request by request ------------------------------------------------------------


async def test_fs_requests_in_detail(cwd: Path, tmp_path: Path) -> None:
    (cwd / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    async with conversation(raw_backend(), cwd) as (conv, rec):

        async def call(method: str, params: dict[str, Any]) -> Any:
            await conv.prompt(f"call {method} {json.dumps(params)}")
            return last_json(rec)

        reply = await call("fs/read_text_file", {"path": str(cwd / "lines.txt"), "line": 3, "limit": 2})
        assert reply == {"result": {"content": "line 3\nline 4\n"}}
        reply = await call("fs/read_text_file", {"path": str(cwd / "missing.txt")})
        assert reply["error"]["code"] == -32002
        reply = await call("fs/read_text_file", {"path": "relative.txt"})
        assert "absolute" in reply["error"]["message"]
        reply = await call("fs/write_text_file", {"path": str(cwd / "a" / "b.txt"), "content": "héllo"})
        assert reply == {"result": {}}
        assert (cwd / "a" / "b.txt").read_text() == "héllo"
        reply = await call("fs/write_text_file", {"path": str(tmp_path / "out.txt"), "content": "x"})
        assert "outside the conversation's working directory" in reply["error"]["message"]
        assert not (tmp_path / "out.txt").exists()


async def test_terminal_under_a_pty_with_output_limit(cwd: Path) -> None:
    async with conversation(raw_backend(), cwd) as (conv, rec):
        script = "import sys; print(sys.stdout.isatty()); print('x' * 5000 + 'é' + 'tail'); sys.exit(4)"
        params = {"command": "python3", "args": ["-c", script], "outputByteLimit": 100}
        await conv.prompt(f"term {json.dumps(params)}")
        create, wait, output, release, after = last_json(rec)
        assert create["result"]["terminalId"]
        assert wait == {"result": {"exitCode": 4}}
        out = output["result"]
        assert out["truncated"] is True
        assert out["exitStatus"] == {"exitCode": 4}
        assert out["output"].endswith("étail\n") or out["output"].endswith("tail\n")
        assert len(out["output"].encode()) <= 100
        assert release == {"result": {}}
        assert "no such terminal" in after["error"]["message"]

        params = {"command": "python3", "args": ["-c", "import sys; print(sys.stdout.isatty())"]}
        await conv.prompt(f"term {json.dumps(params)}")
        assert last_json(rec)[2]["result"] == {"output": "True\n", "truncated": False, "exitStatus": {"exitCode": 0}}

        # Without args, the command is a shell line; the folder may be given, inside the cwd only.
        (cwd / "sub").mkdir()
        params = {"command": "pwd; echo $FOO", "cwd": str(cwd / "sub"), "env": [{"name": "FOO", "value": "bar"}]}
        await conv.prompt(f"term {json.dumps(params)}")
        assert last_json(rec)[2]["result"]["output"] == f"{(cwd / 'sub').resolve()}\nbar\n"
        await conv.prompt(f"term {json.dumps({'command': 'pwd', 'cwd': '/'})}")
        assert "outside the conversation's working directory" in last_json(rec)[0]["error"]["message"]


async def test_terminal_kill_reports_the_signal(cwd: Path) -> None:
    async with conversation(raw_backend(), cwd) as (conv, rec):
        await conv.prompt(f"termkill {json.dumps({'command': 'echo started; sleep 30'})}")
        create, output, kill, wait, final, release, _ = last_json(rec)
        assert output["result"]["output"] == "started\n"
        assert kill == {"result": {}}
        assert wait == {"result": {"signal": "SIGKILL"}}
        assert final["result"]["exitStatus"] == {"signal": "SIGKILL"}


async def test_terminals_die_with_the_conversation(cwd: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "term.pid"
    async with trio.open_nursery() as nursery:
        rec = Recorder()
        conv = await nursery.start(
            lambda task_status: raw_backend().run_conversation(cwd=cwd, events=rec, task_status=task_status)
        )
        params = {"command": f"echo $$ > {pidfile}; sleep 60"}
        nursery.start_soon(conv.prompt, f"term {json.dumps(params)}")  # waits for the exit
        await eventually(lambda: pidfile.exists() and pidfile.read_text().strip())  # the shell's, in a file
        nursery.cancel_scope.cancel()
    shell = int(pidfile.read_text())
    assert reaped(shell)
    assert reaped(conv.pid)


def _running_with(marker: str) -> list[int]:
    """The processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass
    return found


@pytest.mark.parametrize("module", ["probe", "catalogue"])
async def test_a_helper_stopped_by_sigterm_ends_its_agent(tmp_path: Path, module: str) -> None:
    """The boot probe's and the catalogue's helper process, stopped the way
    the daemon stops it (``trio.run_process`` cancelled: SIGTERM), ends the
    agent it started - here one that never answers - rather than leaving it
    running with nobody to reap it."""
    # Not ASCII, so the helper's own argument (JSON, escaped) does not hold it as the agent's does.
    marker = f"mute-agent-\u00e9-{tmp_path.name}-{module}"
    spec = {
        "provider": "mute",
        "command": sys.executable,
        "args": ["-c", f"import time; time.sleep(3600)  # {marker}"],
        "env": {},
        "call_timeout": 3600,
    }
    argv = [sys.executable, "-m", f"ahpd.backends.acp.{module}", json.dumps(spec)]
    if module == "catalogue":
        argv.append("list")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(trio.run_process, argv, capture_stdout=True, check=False))
        await eventually(lambda: _running_with(marker))  # the helper has started its agent
        nursery.cancel_scope.cancel()  # SIGTERM to the helper, which run_process then waits out
    assert _running_with(marker) == []
