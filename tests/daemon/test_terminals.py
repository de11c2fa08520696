"""Terminals over a real daemon, real WebSocket clients and a real shell in a
real pseudoterminal: shell integration, resize, ^C, late subscribers,
disposal, and every refusal."""

from __future__ import annotations

import uuid

import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from ahpd import state as reducers

from .helpers import Rpc, action_of, daemon_in_process, eventually, fits, rpc, snapshot_until, until, wire_clean

BASH = shutil.which("bash")
ZSH = shutil.which("zsh")


def env_for(tmp_path: Path, shell: str | None = BASH) -> dict[str, str]:
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "SHELL": shell or "/bin/sh", "CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}


def output_of(state: dict[str, Any]) -> str:
    return "".join(p["output"] if p["type"] == "command" else p["value"] for p in state["content"])


class Watcher:
    """A client's mirror of one terminal, reduced from what it is sent."""

    def __init__(self, client: Rpc, uri: str) -> None:
        self.client = client
        self.uri = uri
        self.actions: list[dict[str, Any]] = []
        self.state: dict[str, Any] | None = None
        self.seq = 0

    async def subscribe(self) -> dict[str, Any]:
        reply = await self.client.call("subscribe", {"channel": self.uri})
        self.state = reply["result"]["snapshot"]["state"]
        fits("/$defs/TerminalState", self.state)
        return self.state

    def _absorb(self, note: dict) -> dict[str, Any] | None:
        """Reduce ``note`` into the mirror when it is an applied action on
        this terminal; the action, or None."""
        action = action_of(note)
        if action and note["params"]["channel"] == self.uri and "rejectionReason" not in note["params"]:
            self.actions.append(action)
            if self.state is not None:
                self.state = reducers.reduce("terminal", self.state, action)
            return action
        return None

    async def wait_for(self, predicate) -> dict[str, Any]:
        def seen(note: dict) -> bool:
            action = self._absorb(note)
            return action is not None and bool(predicate(action))

        notes = await until(self.client, seen)
        return action_of(notes[-1])

    async def refused(self) -> dict[str, Any]:
        """The next refusal's params. What the shell prints meanwhile is
        still reduced: a prompt that arrives while a test waits for a
        refusal must not be lost to a later ``ready``."""

        def seen(note: dict) -> bool:
            self._absorb(note)
            return note.get("method") == "action" and "rejectionReason" in note["params"]

        notes = await until(self.client, seen)
        return notes[-1]["params"]

    async def ready(self) -> None:
        """Until the shell's first prompt is out (its integration loaded)."""

        def prompted(_: Any = None) -> bool:
            prompt = output_of(self.state).rstrip(" ").endswith(("$", "#", "%"))
            return bool(self.state.get("supportsCommandDetection")) and prompt

        if not prompted():
            await self.wait_for(prompted)

    async def dispatch(self, action: dict[str, Any]) -> None:
        self.seq += 1
        await self.client.notify("dispatchAction", {"channel": self.uri, "clientSeq": self.seq, "action": action})

    async def type(self, text: str) -> None:
        await self.dispatch({"type": "terminal/input", "data": text})


def kind(name: str):
    return lambda action: action["type"] == name


async def refusal(client: Rpc) -> dict[str, Any]:
    notes = await until(client, lambda n: n.get("method") == "action" and "rejectionReason" in n["params"])
    return notes[-1]["params"]


def live_in_group(sid: int) -> list[int]:
    """Processes (zombies too) still in the terminal's session ``sid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid:
            found.append(int(entry))
    return found


async def gone(pgid: int) -> None:
    await eventually(lambda: not live_in_group(pgid))


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name: state, ppid, pgrp, session, tty_nr, tpgid..."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def shell_of(daemon: Any) -> int:
    """The daemon's one shell (its child running bash or zsh)."""
    [shell] = [pid for pid in daemon.children() if Path(f"/proc/{pid}/comm").read_text().strip() in ("bash", "zsh")]
    return shell


async def in_the_foreground(shell: int, command: str) -> None:
    """Until ``command`` runs as the terminal's foreground job: the tty's
    foreground process group (tpgid) is no longer the shell's, and its leader
    has exec'd ``command``. A ^C sent before then would reach the shell."""

    def running() -> bool:
        foreground = int(_stat(shell)[5])
        try:
            return foreground != shell and Path(f"/proc/{foreground}/comm").read_text().strip() == command
        except FileNotFoundError:
            return False

    await eventually(running)


async def open_terminal(client: Rpc, uri: str, cwd: Path, **extra: Any) -> Watcher:
    reply = await client.call(
        "createTerminal", {"channel": uri, "claim": {"kind": "client", "clientId": "ann"}, "cwd": cwd.as_uri(), **extra}
    )
    assert "result" in reply and reply["result"] is None, reply
    watcher = Watcher(client, uri)
    await watcher.subscribe()
    return watcher


async def pid_of(watcher: Watcher) -> int:
    """The shell's pid, read off the shell itself."""
    await watcher.type("echo PID=$$\r")
    action = await watcher.wait_for(lambda a: a["type"] == "terminal/commandFinished")
    assert action.get("exitCode") == 0
    text = output_of(watcher.state)
    return int(text.rsplit("PID=", 1)[1].split()[0])


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
async def test_bash_with_shell_integration(tmp_path) -> None:
    env = env_for(tmp_path)
    work = Path(env["HOME"]) / "work"
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
        async with rpc(daemon.url) as client:
            init = await client.initialize("ann")
            assert init["terminalCommandPrefix"] == "!"
            uri = "ahp-terminal:/one"
            term = await open_terminal(client, uri, work, name="build", cols=100, rows=30)
            assert term.state["title"] == "build" and term.state["claim"] == {"kind": "client", "clientId": "ann"}
            assert term.state["lifecycle"] == {"status": "running"}
            roots = [n for n in client.notes if action_of(n) and action_of(n)["type"] == "root/terminalsChanged"]
            assert roots and action_of(roots[-1])["terminals"] == [
                {
                    "resource": uri,
                    "title": "build",
                    "claim": {"kind": "client", "clientId": "ann"},
                    "lifecycle": {"status": "running"},
                }
            ]

            await term.ready()
            assert term.state["supportsCommandDetection"] is True
            assert term.state["cwd"] == work.resolve().as_uri()
            await term.type("pwd; cd /tmp; false\r")
            executed = await term.wait_for(kind("terminal/commandExecuted"))
            assert executed["commandLine"] == "pwd; cd /tmp; false"
            finished = await term.wait_for(kind("terminal/commandFinished"))
            assert finished["commandId"] == executed["commandId"]
            assert finished["exitCode"] == 1 and finished["durationMs"] >= 0
            await term.wait_for(lambda a: a["type"] == "terminal/cwdChanged" and a["cwd"] == "file:///tmp")
            command = next(p for p in term.state["content"] if p["type"] == "command")
            assert command["isComplete"] and command["exitCode"] == 1
            assert str(work.resolve()) in command["output"]
            assert "\x1b]133" not in output_of(term.state) and "\x1b]7;" not in output_of(term.state)
            fits("/$defs/TerminalState", term.state)

            # Resize: the kernel tells the shell; stty reads the size back.
            await term.dispatch({"type": "terminal/resized", "cols": 91, "rows": 37})
            await term.wait_for(kind("terminal/resized"))
            await term.type("stty size\r")
            await term.wait_for(kind("terminal/commandFinished"))
            last = [p for p in term.state["content"] if p["type"] == "command"][-1]
            assert last["commandLine"] == "stty size" and "37 91" in last["output"]

            # ^C interrupts what runs in the foreground.
            await term.type("sleep 100\r")
            executed_sleep = await term.wait_for(
                lambda a: a["type"] == "terminal/commandExecuted" and a["commandLine"] == "sleep 100"
            )
            await in_the_foreground(shell_of(daemon), "sleep")
            await term.type("\x03")
            stopped = await term.wait_for(kind("terminal/commandFinished"))
            # (what ran, and the last of the content, said when the ^C is not seen)
            assert stopped["exitCode"] == 130, (stopped, executed_sleep, term.state["content"][-3:])

            # A late subscriber sees what happened in its snapshot.
            async with rpc(daemon.url) as late:
                await late.initialize("bob")
                snap = (await late.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                fits("/$defs/TerminalState", snap)
                assert snap["supportsCommandDetection"] is True
                assert snap["cwd"] == "file:///tmp" and snap["cols"] == 91 and snap["rows"] == 37
                lines = [p["commandLine"] for p in snap["content"] if p["type"] == "command"]
                assert lines == ["pwd; cd /tmp; false", "stty size", "sleep 100"]
                # Bob may watch Ann's shell but not type into it.
                await late.notify(
                    "dispatchAction",
                    {"channel": uri, "clientSeq": 1, "action": {"type": "terminal/input", "data": "exit\r"}},
                )
                refused = await refusal(late)
                assert "held by client ann" in refused["rejectionReason"]
                denied = await late.call("disposeTerminal", {"channel": uri})
                assert denied["error"]["code"] == -32602

            # Cleared keeps size, title and claim.
            await term.dispatch({"type": "terminal/cleared"})
            await term.wait_for(kind("terminal/cleared"))
            await term.dispatch({"type": "terminal/titleChanged", "title": "renamed"})
            await term.wait_for(kind("terminal/titleChanged"))
            snap = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert snap["content"] == [] and snap["cols"] == 91 and snap["title"] == "renamed"
            assert snap["claim"] == {"kind": "client", "clientId": "ann"}

            # Dispose kills the whole group, a background child too.
            pid = await pid_of(term)
            await term.type("(sleep 300 &) ; sleep 200 &\r")
            await term.wait_for(kind("terminal/commandFinished"))
            assert len(live_in_group(pid)) >= 2
            assert (await client.call("disposeTerminal", {"channel": uri}))["result"] is None
            await gone(pid)
            root = (await client.call("subscribe", {"channel": "ahp-root://"}))["result"]["snapshot"]["state"]
            assert root["terminals"] == []
            again = await client.call("subscribe", {"channel": uri})
            assert again["error"]["code"] == -32008
        daemon.terminate()
        assert await daemon.wait() == 0


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.skipif(BASH is None, reason="bash is not installed")
async def test_a_daemon_that_ignores_signals_hands_on_none(tmp_path) -> None:
    """A daemon started from a script with ``&`` ignores SIGINT, and Python
    ignores SIGPIPE: a terminal's programs must still stop on a typed ^C and
    end quietly on a closed pipe (``yes`` killed by SIGPIPE, status 141), as in
    a person's own terminal. Before the child reset its signals, ``sleep``
    ran its 100 s through the ^C and ``yes`` said "Broken pipe", status 1."""
    ignored = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGQUIT)}
    try:
        env = env_for(tmp_path)
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("ann")
                term = await open_terminal(client, "ahp-terminal:/signals", Path(env["HOME"]) / "work")
                await term.ready()
                await term.type("yes | head -1; echo status=${PIPESTATUS[0]}\r")
                await term.wait_for(kind("terminal/commandFinished"))
                last = [p for p in term.state["content"] if p["type"] == "command"][-1]
                assert "status=141" in last["output"] and "Broken pipe" not in last["output"], last

                await term.type("sleep 100\r")
                await term.wait_for(
                    lambda a: a["type"] == "terminal/commandExecuted" and a["commandLine"] == "sleep 100"
                )
                await in_the_foreground(shell_of(daemon), "sleep")
                await term.type("\x03")
                stopped = await term.wait_for(kind("terminal/commandFinished"))
                assert stopped["exitCode"] == 130, (stopped, term.state["content"][-2:])
    finally:
        for signum, handler in ignored.items():
            signal.signal(signum, handler)


async def test_refusals_and_exit(tmp_path) -> None:
    env = env_for(tmp_path)
    home = Path(env["HOME"])
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ann")
            claim = {"kind": "client", "clientId": "ann"}

            async def create(**params: Any) -> dict[str, Any]:
                return await client.call("createTerminal", {"claim": claim, **params})

            missing = await create(channel="ahp-terminal:/a", cwd=(home / "nope").as_uri())
            assert missing["error"]["code"] == -32602 and "not a directory" in missing["error"]["message"]
            outside = await create(channel="ahp-terminal:/a", cwd=tmp_path.as_uri())
            assert outside["error"]["code"] == -32602 and "outside" in outside["error"]["message"]
            for cols, rows in ((0, 24), (80, 0), (100000, 24), (80, 2.5)):
                bad = await create(channel="ahp-terminal:/a", cols=cols, rows=rows)
                assert bad["error"]["code"] == -32602, (cols, rows, bad)
            other = await client.call(
                "createTerminal", {"channel": "ahp-terminal:/a", "claim": {"kind": "client", "clientId": "eve"}}
            )
            assert other["error"]["code"] == -32602 and "eve" in other["error"]["message"]
            nosession = await client.call(
                "createTerminal",
                {
                    "channel": "ahp-terminal:/a",
                    "claim": {"kind": "session", "session": "ahp-session:/none", "chat": "ahp-chat:/none"},
                },
            )
            assert nosession["error"]["code"] == -32602 and "no session" in nosession["error"]["message"]
            taken = await create(channel="ahp-root://")
            assert taken["error"]["code"] == -32602
            assert (await client.call("disposeTerminal", {"channel": "ahp-terminal:/zzz"}))["error"]["code"] == -32008

            assert (await create(channel="ahp-terminal:/a"))["result"] is None
            twice = await create(channel="ahp-terminal:/a")
            assert twice["error"]["code"] == -32602 and "already in use" in twice["error"]["message"]
            term = Watcher(client, "ahp-terminal:/a")
            await term.subscribe()
            assert term.state["cwd"] == home.resolve().as_uri()  # noqa: ASYNC240 - a test's look at a local path
            assert term.state["title"] == "bash"  # defaulted to the shell's name

            await term.dispatch({"type": "terminal/resized", "cols": 0, "rows": 5})
            assert "cols must be" in (await term.refused())["rejectionReason"]
            await term.dispatch(
                {
                    "type": "terminal/claimed",
                    "claim": {"kind": "session", "session": "ahp-session:/none", "chat": "ahp-chat:/none"},
                }
            )
            assert "no session" in (await term.refused())["rejectionReason"]
            await term.dispatch({"type": "terminal/data", "data": "forged"})
            assert "host's to say" in (await term.refused())["rejectionReason"]

            await term.ready()
            await term.type("exit 3\r")
            exited = await term.wait_for(kind("terminal/exited"))
            assert exited == {"type": "terminal/exited", "exitCode": 3}
            await until(client, lambda n: (action_of(n) or {}).get("type") == "root/terminalsChanged")
            root = (await client.call("subscribe", {"channel": "ahp-root://"}))["result"]["snapshot"]["state"]
            assert root["terminals"][0]["lifecycle"] == {"status": "exited", "exitCode": 3}
            await term.type("echo hi\r")
            assert "has exited" in (await term.refused())["rejectionReason"]
            # The daemon still serves everyone.
            assert "result" in await client.call("ping")
        daemon.terminate()
        assert await daemon.wait() == 0


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
async def test_shutdown_leaves_no_process(tmp_path) -> None:
    env = env_for(tmp_path)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ann")
            term = await open_terminal(client, "ahp-terminal:/s", Path(env["HOME"]))
            await term.ready()
            pid = await pid_of(term)
            await term.type("sleep 300 &\r")
            await term.wait_for(kind("terminal/commandFinished"))
            assert len(live_in_group(pid)) >= 2
        daemon.terminate()
        assert await daemon.wait() == 0
    await gone(pid)


@pytest.mark.skipif(ZSH is None, reason="zsh is not installed: its integration is not tested here")
async def test_zsh_with_shell_integration(tmp_path) -> None:
    env = env_for(tmp_path, ZSH)
    work = Path(env["HOME"]) / "work"
    (Path(env["HOME"]) / ".zshrc").write_text("PS1='z%# '\nexport FROM_USER_RC=yes\n")
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ann")
            term = await open_terminal(client, "ahp-terminal:/z", work)
            await term.ready()
            await term.type("echo $FROM_USER_RC; cd /tmp; false\r")
            executed = await term.wait_for(kind("terminal/commandExecuted"))
            assert executed["commandLine"] == "echo $FROM_USER_RC; cd /tmp; false"
            finished = await term.wait_for(kind("terminal/commandFinished"))
            assert finished["exitCode"] == 1
            await term.wait_for(lambda a: a["type"] == "terminal/cwdChanged" and a["cwd"] == "file:///tmp")
            assert "yes" in [p for p in term.state["content"] if p["type"] == "command"][0]["output"]
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_bang_command_in_a_chat(tmp_path) -> None:
    env = env_for(tmp_path)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
        await bang_commands(daemon, env)
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_a_queued_bang_command_runs_in_a_terminal(tmp_path) -> None:
    """A !command queued rather than started is taken up as a !command turn,
    not handed to the agent as a question."""
    from .helpers import create, dispatch, is_action, start_turn

    env = env_for(tmp_path)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ann")
            _, chat = await create(client, Path(env["HOME"]) / "work", channel=f"demo:/{uuid.uuid4()}")
            message = start_turn("!echo queued-$((6*7))")["message"]
            await dispatch(
                client, chat, {"type": "chat/pendingMessageSet", "kind": "queued", "id": "q1", "message": message}, 1
            )
            notes = await until(client, is_action("chat/turnComplete", chat))
            [started] = [action_of(n) for n in notes if is_action("chat/turnStarted", chat)(n)]
            assert started["queuedMessageId"] == "q1"
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            parts = state["turns"][-1]["responseParts"]
            assert [p["kind"] for p in parts] == ["toolCall", "markdown"]
            assert "queued-42" in parts[1]["content"] and not state.get("queuedMessages")
        daemon.terminate()
        assert await daemon.wait() == 0


async def bang_commands(daemon: Any, env: dict[str, str]) -> None:
    from .helpers import create, dispatch, is_action, start_turn

    work = Path(env["HOME"]) / "work"
    (work / "alpha.txt").write_text("a")
    (work / "beta.txt").write_text("b")
    if True:
        async with rpc(daemon.url) as client:
            await client.initialize("ann")
            session, chat = await create(client, work, channel=f"demo:/{uuid.uuid4()}")
            turn = start_turn("!ls")
            await dispatch(client, chat, turn, 1)
            notes = await until(client, is_action("chat/turnComplete", chat))
            actions = [action_of(n) for n in notes if action_of(n) and n["params"]["channel"] == chat]
            kinds = [a["type"] for a in actions]
            assert kinds[:4] == [
                "chat/turnStarted",
                "chat/toolCallStart",
                "chat/toolCallReady",
                "chat/toolCallContentChanged",
            ], kinds
            done = next(a for a in actions if a["type"] == "chat/toolCallComplete")
            assert done["result"]["success"] is True
            (content,) = done["result"]["content"]
            assert content["type"] == "terminal" and content["resource"].startswith("ahp-terminal:/")
            assert content["result"]["exitCode"] == 0
            assert "alpha.txt" in content["result"]["preview"] and "beta.txt" in content["result"]["preview"]
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            fits("/$defs/ChatState", state)
            parts = state["turns"][-1]["responseParts"]
            assert [p["kind"] for p in parts] == ["toolCall", "markdown"]
            assert "alpha.txt" in parts[1]["content"] and "exit code 0" in parts[1]["content"]

            # The terminal stays, exited, held by the session in the background.
            term = (await client.call("subscribe", {"channel": content["resource"]}))["result"]["snapshot"]["state"]
            fits("/$defs/TerminalState", term)
            assert term["lifecycle"] == {"status": "exited", "exitCode": 0}
            assert term["claim"] == {"kind": "session", "session": session, "chat": chat}
            assert "beta.txt" in output_of(term)

            failing = start_turn("!exit 4")
            await dispatch(client, chat, failing, 2)
            notes = await until(client, is_action("chat/turnComplete", chat))
            done = next(action_of(n) for n in notes if (action_of(n) or {}).get("type") == "chat/toolCallComplete")
            assert done["result"]["success"] is False and done["result"]["content"][0]["result"]["exitCode"] == 4

            # The next message reaches the agent, which is told what ran (the
            # demo agent says back what it was sent).
            await dispatch(client, chat, start_turn("hello"), 3)
            await until(client, is_action("chat/turnComplete", chat))
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            said = "".join(p.get("content", "") for p in state["turns"][-1]["responseParts"] if p["kind"] == "markdown")
            assert "The user ran `ls`" in said and "alpha.txt" in said and "`exit 4`" in said and "hello" in said

            await dispatch(client, chat, start_turn("!"), 4)
            assert "names a command" in (await refusal(client))["rejectionReason"]

            # Cancelling a !command's turn kills what it runs.
            slow = start_turn("!sleep 100")
            await dispatch(client, chat, slow, 5)
            notes = await until(client, is_action("chat/toolCallContentChanged", chat))
            running = action_of(notes[-1])["content"][0]["resource"]
            await dispatch(client, chat, {"type": "chat/turnCancelled", "turnId": slow["turnId"], "duration": 5}, 6)
            await until(client, is_action("chat/turnCancelled", chat))
            await snapshot_until(client, running, lambda state: state["lifecycle"]["status"] == "exited")
            await dispatch(client, chat, start_turn("!echo after"), 7)
            await until(client, is_action("chat/turnComplete", chat))

            root = (await client.call("subscribe", {"channel": "ahp-root://"}))["result"]["snapshot"]["state"]
            assert len(root["terminals"]) == 4
            assert (await client.call("disposeSession", {"channel": session}))["result"] is None
            root = (await client.call("subscribe", {"channel": "ahp-root://"}))["result"]["snapshot"]["state"]
            assert root["terminals"] == []


async def test_an_acp_agents_terminal_is_watched_and_typed_into(tmp_path) -> None:
    env = env_for(tmp_path)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
        await agent_terminal(daemon, env)
        daemon.terminate()
        assert await daemon.wait() == 0


async def agent_terminal(daemon: Any, env: dict[str, str]) -> None:
    from .helpers import create, dispatch, is_action, start_turn

    work = Path(env["HOME"]) / "work"
    if True:
        async with rpc(daemon.url) as client:
            await client.initialize("ann")
            session, chat = await create(client, work, channel=f"demo:/{uuid.uuid4()}")
            turn = start_turn("run read line; echo got:$line")
            await dispatch(client, chat, turn, 1)
            notes = await until(client, is_action("session/inputNeededSet", session))
            call_id = action_of(notes[-1])["request"]["toolCall"]["toolCallId"]
            await dispatch(
                client,
                chat,
                {
                    "type": "chat/toolCallConfirmed",
                    "turnId": turn["turnId"],
                    "toolCallId": call_id,
                    "approved": True,
                    "confirmed": "user-action",
                },
                2,
            )
            notes = await until(client, is_action("chat/toolCallContentChanged", chat))
            (reference,) = action_of(notes[-1])["content"]
            assert reference["type"] == "terminal" and reference["isPty"] is True
            uri = reference["resource"]
            term = Watcher(client, uri)
            await term.subscribe()
            if term.state["claim"].get("toolCallId") is None:
                await term.wait_for(kind("terminal/claimed"))
            assert term.state["claim"] == {
                "kind": "session",
                "session": session,
                "chat": chat,
                "turnId": turn["turnId"],
                "toolCallId": call_id,
            }
            assert term.state["lifecycle"] == {"status": "running"}  # it waits for us
            await term.type("hello\r")
            notes = await until(client, is_action("chat/turnComplete", chat))
            done = next(action_of(n) for n in notes if (action_of(n) or {}).get("type") == "chat/toolCallComplete")
            assert done["result"]["success"] is True
            assert [c["resource"] for c in done["result"]["content"] if c["type"] == "terminal"] == [uri]
            snap = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            fits("/$defs/TerminalState", snap)
            assert "got:hello" in output_of(snap)
            assert snap["lifecycle"] == {"status": "exited", "exitCode": 0}
            assert snap["claim"] == {"kind": "session", "session": session, "chat": chat}
            assert snap["title"] == "read line; echo got:$line"
            # The agent read the same output back.
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            said = "".join(p.get("content", "") for p in state["turns"][-1]["responseParts"] if p["kind"] == "markdown")
            assert "exited with code 0" in said


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
async def test_a_capture_of_terminals_is_clean_under_wire_check(tmp_path) -> None:
    """A shell, a !command and an agent's terminal, recorded with --wire:
    every frame fits the schema, every action reduces, the invariants hold."""
    env = env_for(tmp_path)
    capture = tmp_path / "terminals.jsonl"
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--wire", str(capture), env=env) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ann")
            term = await open_terminal(client, "ahp-terminal:/w", Path(env["HOME"]) / "work", cols=90, rows=20)
            await term.ready()
            await term.type("pwd; cd /tmp; false\r")
            await term.wait_for(kind("terminal/commandFinished"))
            await term.dispatch({"type": "terminal/resized", "cols": 100, "rows": 30})
            await term.type("sleep 100\r")
            await term.wait_for(kind("terminal/commandExecuted"))
            await in_the_foreground(shell_of(daemon), "sleep")
            await term.type("\x03")
            await term.wait_for(kind("terminal/commandFinished"))
            await term.dispatch({"type": "terminal/titleChanged", "title": "w"})
            await term.dispatch({"type": "terminal/cleared"})
            await term.dispatch({"type": "terminal/resized", "cols": 0, "rows": 30})
            await term.refused()
            await term.type("exit 2\r")
            await term.wait_for(kind("terminal/exited"))
            assert (await client.call("disposeTerminal", {"channel": "ahp-terminal:/w"}))["result"] is None
        await bang_commands(daemon, env)
        await agent_terminal(daemon, env)
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(capture)
    assert "terminal/commandFinished" in capture.read_text()


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
async def test_scrollback_is_capped_and_a_late_snapshot_keeps_the_end(tmp_path) -> None:
    env = env_for(tmp_path)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ann")
            await client.notify(
                "dispatchAction",
                {
                    "channel": "ahp-root://",
                    "clientSeq": 1,
                    "action": {"type": "root/configChanged", "config": {"terminalScrollback": 65536}},
                },
            )
            await until(client, lambda n: (action_of(n) or {}).get("type") == "root/configChanged")
            await client.notify(
                "dispatchAction",
                {
                    "channel": "ahp-root://",
                    "clientSeq": 2,
                    "action": {"type": "root/configChanged", "config": {"terminalScrollback": 10}},
                },
            )
            assert "terminalScrollback must be from 65536" in (await refusal(client))["rejectionReason"]
            term = await open_terminal(client, "ahp-terminal:/big", Path(env["HOME"]))
            await term.ready()
            await term.type("head -c 600000 /dev/zero | tr '\\0' x; echo; echo THE-END\r")
            await term.wait_for(kind("terminal/commandFinished"))
            assert output_of(term.state).count("x") >= 600000  # the watcher was sent every byte
            async with rpc(daemon.url) as late:
                await late.initialize("bob")
                snap = (await late.call("subscribe", {"channel": "ahp-terminal:/big"}))["result"]["snapshot"]["state"]
                fits("/$defs/TerminalState", snap)
                text = output_of(snap)
                assert len(text) <= 65536 and "THE-END" in text and text.count("x") > 10000
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_a_bang_command_is_refused_where_the_agent_cannot_be_told(tmp_path) -> None:
    """Claude's backend has no ``ran``: the !command is refused with the
    reason, not sent to the model as a question."""
    pytest.importorskip("claude_agent_sdk")
    from tests.backends.claude_fixtures import fake_api

    from .helpers import create, dispatch, start_turn

    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    env = {name: "" for name in fake_api.CREDENTIAL_VARS if name in os.environ}
    env.update(fake_api.cli_env("http://127.0.0.1:9", str(home), api_key=None))
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ann")
            _, chat = await create(client, home / "work", provider="claude")
            await dispatch(client, chat, start_turn("!ls"), 1)
            reason = (await refusal(client))["rejectionReason"]
            assert "cannot be told what a !command ran" in reason
            # Nor is one queued (or sent to steer) to reach the model later as a question.
            for seq, kind in ((2, "queued"), (3, "steering")):
                queued = {
                    "type": "chat/pendingMessageSet",
                    "kind": kind,
                    "id": f"m{seq}",
                    "message": start_turn("!ls")["message"],
                }
                await dispatch(client, chat, queued, seq)
                notes = await until(
                    client, lambda n, seq=seq: n.get("params", {}).get("origin", {}).get("clientSeq") == seq
                )
                assert "cannot be told what a !command ran" in notes[-1]["params"].get("rejectionReason", ""), notes[-1]
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert state["turns"] == [] and state.get("activeTurn") is None
            assert not state.get("queuedMessages") and not state.get("steeringMessage")
        daemon.terminate()
        assert await daemon.wait() == 0
