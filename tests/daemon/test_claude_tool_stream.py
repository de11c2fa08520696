"""A Claude turn's tool calls as every subscriber sees them, through a real
daemon and real WebSocket clients, the real bundled CLI against the fake
Messages API (offline):

* ``chat/toolCallStart`` as soon as the model names the tool, with the
  harness's own tool name, then ``chat/toolCallDelta`` with the arguments as
  they are written, then ``chat/toolCallReady`` with the parsed input;
* a ``mcp__<server>__<tool>`` call carries a ``ToolCallMcpContributor``;
* a subagent's progress on its running Task call, as
  ``chat/toolCallContentChanged`` with ``_meta.progressMessage``, taken off
  by the completion; the subagent's own tool calls stay out of the chat
  (they are its worker chat's: ``test_claude_subagents.py``);
* a Bash call left running in the background is ``chat/backgroundWorkSet``
  (``shell:<task_id>``) while it runs and ``chat/backgroundWorkRemoved`` once
  it stopped.

The capture of it all is clean under ``ahpd wire-check``.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest
import trio

pytest.importorskip("claude_agent_sdk")

from tests.backends.claude_fixtures import fake_api  # noqa: E402

from .helpers import (  # noqa: E402
    ROOT,
    Rpc,
    create,
    daemon_in_process,
    dispatch,
    eventually,
    fits,
    rpc,
    start_turn,
    wire_clean,
)
from .test_acp_tool_names import initialize, refused  # noqa: E402
from .test_claude_sessions import _env  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

SHELL = {"command": "sleep 4; echo slept", "description": "Sleep a while", "run_in_background": True}
TASK = {
    "description": "Look around",
    "prompt": "look around",
    "subagent_type": "general-purpose",
    "run_in_background": False,
}
SEARCH = {"query": "anything"}


async def collect(client: Rpc, chat: str, *kinds: str, timeout: float = 180) -> list[dict]:
    """The chat's actions this client is sent, until it has seen each of ``kinds``."""
    actions: list[dict] = []
    with trio.fail_after(timeout):
        while not all(any(a["type"] == kind for a in actions) for kind in kinds):
            note = client.notes.pop(0) if client.notes else json.loads(await client.ws.get_message())
            if note.get("method") == "action":
                fits("/notifications/action", note["params"])
                if note["params"]["channel"] == chat:
                    actions.append(note["params"]["action"])
    return actions


def _of(actions: list[dict], call_id: str) -> list[dict]:
    return [a for a in actions if a.get("toolCallId") == call_id]


async def test_tool_calls_stream_progress_and_background_shells(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    capture = tmp_path / "tools.jsonl"
    with fake_api.FakeAnthropic().running() as api:
        api.add(
            fake_api.tool_use("toolu_shell", "Bash", SHELL),
            fake_api.tool_use("toolu_task", "Task", TASK),
            # The subagent's own requests: a tool call of its own, then its report.
            fake_api.tool_use("toolu_sub", "Bash", {"command": "echo hi", "description": "Say hi"}),
            fake_api.text("Nothing much here."),
            fake_api.tool_use("toolu_mcp", "mcp__docs__search", SEARCH),
            fake_api.text("All done."),
        )
        async with daemon_in_process(
            tmp_path / "d", "--sessions", "memory", "--wire", str(capture), env=_env(api.url, str(home))
        ) as daemon:
            async with rpc(daemon.url) as client, rpc(daemon.url) as watcher:
                await initialize(client, "driver")
                await initialize(watcher, "watcher")
                uri, chat = await create(client, work, provider="claude")
                await watcher.call("subscribe", {"channel": chat})
                turn = start_turn("use your tools")
                await dispatch(client, chat, turn, 1)
                # Until the turn has ended and the shell has stopped, in whichever order.
                seen = {
                    name: await collect(each, chat, "chat/turnComplete", "chat/backgroundWorkRemoved")
                    for name, each in (("client", client), ("watcher", watcher))
                }
                state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            daemon.terminate()
            assert await daemon.wait() == 0

    # Every subscriber sees the same thing.
    assert seen["client"] == seen["watcher"]
    actions = seen["watcher"]

    # The Bash call: named at once, its arguments streamed, then ready with the whole input.
    shell = _of(actions, "toolu_shell")
    start = shell[0]
    assert start["type"] == "chat/toolCallStart"
    assert start["toolName"] == "Bash" and start["_meta"] == {"toolKind": "terminal"}
    deltas = [a for a in shell if a["type"] == "chat/toolCallDelta"]
    assert len(deltas) >= 2
    assert json.loads("".join(d["content"] for d in deltas)) == SHELL
    ready = next(i for i, a in enumerate(shell) if a["type"] == "chat/toolCallReady")
    assert all(a["type"] != "chat/toolCallDelta" for a in shell[ready:])
    assert json.loads(shell[ready]["toolInput"]) == SHELL and shell[ready]["confirmed"] == "not-needed"
    for action in shell:
        fits(f"/$defs/Chat{action['type'][5:6].upper()}{action['type'][6:]}Action", action)

    # The shell it left running: set while it runs, removed once it stopped.
    [work_set] = [a for a in actions if a["type"] == "chat/backgroundWorkSet"]
    fits("/$defs/ChatBackgroundWorkSetAction", work_set)
    entry = work_set["work"]
    assert entry["kind"] == "shell" and entry["id"].startswith("shell:") and len(entry["id"]) > len("shell:")
    assert entry["command"] == SHELL["command"] and entry["label"] == SHELL["description"]
    [removed] = [a for a in actions if a["type"] == "chat/backgroundWorkRemoved"]
    assert removed["id"] == entry["id"]
    assert actions.index(work_set) < actions.index(removed)
    assert "backgroundWork" not in state  # a chat running nothing has no key

    # The Task call: running, its subagent's progress on it, taken off by the completion.
    task = _of(actions, "toolu_task")
    assert task[0]["toolName"] == "Task" and task[0]["_meta"]["toolKind"] == "subagent"
    kinds = [a["type"] for a in task]
    assert kinds.index("chat/toolCallReady") < kinds.index("chat/toolCallContentChanged")
    [progress] = [a for a in task if a["type"] == "chat/toolCallContentChanged"]
    fits("/$defs/ChatToolCallContentChangedAction", progress)
    hints = {
        "toolKind": "subagent",
        "subagentDescription": TASK["description"],
        "subagentAgentName": TASK["subagent_type"],
        "subagentChatUri": task[0]["_meta"]["subagentChatUri"],
    }
    assert progress["_meta"] == {**hints, "progressMessage": "Running Say hi"} and progress["content"] == []
    complete = task[-1]
    assert complete["type"] == "chat/toolCallComplete" and complete["_meta"] == hints
    # The subagent's own call is drawn in its worker chat (tests/daemon/test_claude_subagents.py), not here.
    assert _of(actions, "toolu_sub") == []

    # The MCP call is the server's customization's.
    mcp_start = _of(actions, "toolu_mcp")[0]
    assert mcp_start["toolName"] == "mcp__docs__search"
    assert mcp_start["contributor"] == {"kind": "mcp", "customizationId": "claude.mcp:docs"}
    fits("/$defs/ChatToolCallStartAction", mcp_start)

    # The snapshot agrees.
    fits("/$defs/ChatState", state)
    calls = {
        p["toolCall"]["toolCallId"]: p["toolCall"]
        for p in state["turns"][0]["responseParts"]
        if p["kind"] == "toolCall"
    }
    assert set(calls) == {"toolu_shell", "toolu_task", "toolu_mcp"}
    assert calls["toolu_shell"]["toolName"] == "Bash" and calls["toolu_shell"]["status"] == "completed"
    assert "progressMessage" not in (calls["toolu_task"].get("_meta") or {})
    assert calls["toolu_mcp"]["contributor"]["kind"] == "mcp"

    wire_clean(capture)


async def test_only_the_running_client_streams_into_its_call(tmp_path: Path) -> None:
    """The client half of ``chat/toolCallContentChanged``: relayed from the
    client named in the call's contributor, refused from anyone else and for
    a call no client runs."""
    from .test_claude_client_tools import _announced_and_called

    home = tmp_path / "home"
    home.mkdir()
    owner_id = "editor-1"
    with fake_api.FakeAnthropic().running() as api:
        api.add(
            fake_api.tool_use("toolu_client", f"mcp__ahp__{owner_id}__openFile", {"path": "notes.txt"}),
            fake_api.text("Opened."),
        )
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as owner, rpc(daemon.url) as other:
                await initialize(owner, owner_id)
                await initialize(other, "someone-else")
                uri, chat = await create(owner, tmp_path, provider="claude")
                await other.call("subscribe", {"channel": chat})
                turn, _ = await _announced_and_called(owner, uri, chat, owner_id, "toolu_client")
                streamed = {
                    "type": "chat/toolCallContentChanged",
                    "turnId": turn["turnId"],
                    "toolCallId": "toolu_client",
                    "content": [{"type": "text", "text": "opening notes.txt"}],
                }

                words = await refused(other, chat, streamed, 1)
                assert owner_id in words and "only that client" in words
                words = await refused(owner, chat, {**streamed, "toolCallId": "toolu_nobody"}, 10)
                assert "not run by a client" in words

                await dispatch(owner, chat, streamed, 11)
                for each in (owner, other):
                    changed = [
                        a
                        for a in await collect(each, chat, "chat/toolCallContentChanged")
                        if a["type"] == "chat/toolCallContentChanged"
                    ]
                    assert changed == [streamed]
                state = (await other.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                [call] = [p["toolCall"] for p in state["activeTurn"]["responseParts"] if p["kind"] == "toolCall"]
                assert call["status"] == "running" and call["content"] == streamed["content"]

                await dispatch(
                    owner,
                    chat,
                    {
                        "type": "chat/toolCallComplete",
                        "turnId": turn["turnId"],
                        "toolCallId": "toolu_client",
                        "result": {"success": True, "pastTenseMessage": "Opened notes.txt"},
                    },
                    12,
                )
                await collect(other, chat, "chat/turnComplete")
            daemon.terminate()
            assert await daemon.wait() == 0


async def test_background_work_ends_with_the_agent_that_ran_it(tmp_path: Path) -> None:
    """When the agent process is stopped (here, to start again in a folder
    the session was given) the chat's list is emptied at once: a CLI
    started again knows nothing of what the last one ran, so nothing would
    ever say it stopped. While anything runs in the background the idle
    clock does not stop the agent under it."""
    home = tmp_path / "home"
    home.mkdir()
    work, more = tmp_path / "work", tmp_path / "more"
    work.mkdir()
    more.mkdir()
    marker = f"ahpd-test-{uuid.uuid4().hex}"
    long_shell = {"command": f"sleep 90 # {marker}", "description": "Sleep long", "run_in_background": True}
    try:
        await _runs_in_the_background(tmp_path, home, work, more, long_shell, marker)
    finally:
        _kill_marked(marker)  # a daemon killed on a failure leaves its CLI's shell behind


def _marked(marker: str) -> set[int]:
    return {
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and _cmdline(p) is not None and marker.encode() in _cmdline(p)
    }


def _cmdline(proc: Path) -> bytes | None:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return None


def _kill_marked(marker: str) -> None:
    """The shells whose command line carries ``marker``, and their children."""
    parents: dict[int, int] = {}
    marked: set[int] = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit():
                parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if marker.encode() in (proc / "cmdline").read_bytes():
                    marked.add(int(proc.name))
        except (OSError, ValueError, IndexError):
            pass
    for pid in marked | {p for p, parent in parents.items() if parent in marked}:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


async def _runs_in_the_background(
    tmp_path: Path, home: Path, work: Path, more: Path, long_shell: dict, marker: str
) -> None:
    with fake_api.FakeAnthropic().running() as api:
        api.add(fake_api.tool_use("toolu_long", "Bash", long_shell), fake_api.text("Left it running."))
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await initialize(client, "driver")
                await client.call("subscribe", {"channel": ROOT})
                await dispatch(client, ROOT, {"type": "root/configChanged", "config": {"agentIdleTimeout": 1}}, 1)
                uri, chat = await create(client, work, provider="claude")
                await dispatch(client, chat, start_turn("start something long"), 2)
                actions = await collect(client, chat, "chat/turnComplete", "chat/backgroundWorkSet")
                [work_set] = [a for a in actions if a["type"] == "chat/backgroundWorkSet"]
                assert _marked(marker), "the shell runs"
                # Well past the idle timeout, the shell is still listed: the agent was not stopped.
                await trio.sleep(4)
                state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                assert [w["id"] for w in state.get("backgroundWork") or []] == [work_set["work"]["id"]]
                assert not [
                    n
                    for n in client.notes
                    if (n.get("params") or {}).get("action", {}).get("type") == "chat/backgroundWorkRemoved"
                ]
                # The agent is stopped to start again in a new folder: its shell went with it.
                await client.call("subscribe", {"channel": uri})
                await dispatch(client, uri, {"type": "session/workingDirectorySet", "directory": more.as_uri()}, 2)
                removed = await collect(client, chat, "chat/backgroundWorkRemoved", timeout=120)
                assert [a["id"] for a in removed if a["type"] == "chat/backgroundWorkRemoved"] == [
                    work_set["work"]["id"]
                ]
                state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                assert "backgroundWork" not in state
                # And the shell itself ended with the CLI that ran it.
                await eventually(lambda: not _marked(marker))
            daemon.terminate()
            assert await daemon.wait() == 0
