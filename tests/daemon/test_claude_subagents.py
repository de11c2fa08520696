"""A Claude subagent's worker chat, as every subscriber sees it, through a
real daemon and real WebSocket clients, the real bundled CLI against the
fake Messages API (offline):

* the Task call carries ``_meta.toolKind: "subagent"``, the reference's
  ``subagentDescription``/``subagentAgentName`` and ``subagentChatUri`` on
  the wire and in the snapshot, and its result links the worker chat
  (``ToolResultSubagentContent``);
* the worker chat is announced with ``session/chatAdded``, carrying
  ``origin: {kind: "tool"}`` and ``interactivity: "read-only"``; it holds one
  turn whose message is the Task's prompt and whose parts are what the
  subagent did (its own tool call, its report); a client's message to it is
  refused; it is kept across a daemon restart;
* a backgrounded Task is ``subagent:<task_id>`` background work on the
  spawning chat, naming the same worker chat, until the subagent stops.

The capture of it is clean under ``ahpd wire-check``.
"""

from __future__ import annotations

import uuid

import base64
import json
from pathlib import Path

import pytest
import trio

pytest.importorskip("claude_agent_sdk")

from tests.backends.claude_fixtures import fake_api  # noqa: E402

from .helpers import Rpc, create, daemon_in_process, dispatch, fits, rpc, start_turn, wire_clean  # noqa: E402
from .test_acp_tool_names import initialize, refused  # noqa: E402
from .test_claude_sessions import _env  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

#: In the foreground: the bundled CLI backgrounds a subagent unless told not to.
TASK = {
    "description": "Look around",
    "prompt": "look around the folder",
    "subagent_type": "general-purpose",
    "run_in_background": False,
}
HINTS = {"toolKind": "subagent", "subagentDescription": "Look around", "subagentAgentName": "general-purpose"}


def worker_uri(session: str, call_id: str) -> str:
    """The reference's ``buildSubagentChatUri``, written out independently."""
    encoded = base64.urlsafe_b64encode(session.encode()).decode().rstrip("=")
    return f"ahp-chat://subagent/{encoded}/{call_id}"


async def collect(client: Rpc, done: object, timeout: float = 180) -> list[dict]:
    """Every action this client is sent, (channel, action), until ``done(actions)``."""
    seen: list[dict] = []
    with trio.fail_after(timeout):
        while not done(seen):
            note = client.notes.pop(0) if client.notes else json.loads(await client.ws.get_message())
            if note.get("method") == "action":
                fits("/notifications/action", note["params"])
                seen.append({"channel": note["params"]["channel"], **note["params"]["action"]})
    return seen


def on(seen: list[dict], channel: str, kind: str | None = None) -> list[dict]:
    return [
        {k: v for k, v in a.items() if k != "channel"}
        for a in seen
        if a["channel"] == channel and (kind is None or a["type"] == kind)
    ]


async def test_a_subagent_runs_in_a_read_only_worker_chat(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    capture = tmp_path / "subagents.jsonl"
    with fake_api.FakeAnthropic().running() as api:
        api.add(
            fake_api.tool_use("toolu_task", "Task", TASK),
            # The subagent's own requests: a tool call of its own, then its report.
            fake_api.tool_use("toolu_sub", "Bash", {"command": "echo hi", "description": "Say hi"}),
            fake_api.text("Nothing much here."),
            fake_api.text("All done."),
        )
        env = _env(api.url, str(home))
        async with daemon_in_process(tmp_path / "d", "--sessions", "file", "--wire", str(capture), env=env) as daemon:
            async with rpc(daemon.url) as client, rpc(daemon.url) as watcher:
                await initialize(client, "driver")
                await initialize(watcher, "watcher")
                uri, chat = await create(client, work, provider="claude")
                await watcher.call("subscribe", {"channel": uri})
                await watcher.call("subscribe", {"channel": chat})
                worker = worker_uri(uri, "toolu_task")
                await dispatch(client, chat, start_turn("delegate it"), 1)
                seen = {}
                for name, each in (("client", client), ("watcher", watcher)):
                    seen[name] = await collect(each, lambda s: bool(on(s, chat, "chat/turnComplete")))
                state = (await watcher.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                session = (await watcher.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                snapshot = (await watcher.call("subscribe", {"channel": worker}))["result"]["snapshot"]["state"]

                # Nobody talks to a worker: the subagent is its only speaker.
                words = await refused(client, worker, start_turn("hello?"), 2)
                assert "read-only" in words and "toolu_task" in words
                words = await refused(
                    client,
                    worker,
                    {
                        "type": "chat/pendingMessageSet",
                        "kind": "queued",
                        "id": "q1",
                        "message": {"text": "later", "origin": {"kind": "user"}},
                    },
                    3,
                )
                assert "read-only" in words
                # A chat a tool started is not offered to attach.
                other = "ahp-chat:/side"
                await client.call("createChat", {"channel": uri, "chat": other})
                offered = (
                    await client.call(
                        "completions", {"channel": other, "kind": "userMessage", "text": "#chat:", "offset": 6}
                    )
                )["result"]
                assert [i["attachment"]["resource"] for i in offered["items"]] == [chat]
                # Nor does it move on its own.
                moved = await client.call(
                    "moveChat", {"channel": worker, "destination": {"kind": "session", "session": uri}}
                )
                assert moved["error"]["code"] == -32602, moved
            daemon.terminate()
            assert await daemon.wait() == 0

        # Every subscriber saw the same thing.
        assert on(seen["client"], chat) == on(seen["watcher"], chat)
        actions = seen["watcher"]

        # The spawning call: the hints from its first action, whole once its input is.
        task = [a for a in on(actions, chat) if a.get("toolCallId") == "toolu_task"]
        start = task[0]
        assert start["type"] == "chat/toolCallStart" and start["toolName"] == "Task"
        assert start["_meta"]["toolKind"] == "subagent" and start["_meta"]["subagentChatUri"] == worker
        [ready] = [a for a in task if a["type"] == "chat/toolCallReady"]
        assert ready["_meta"] == {**HINTS, "subagentChatUri": worker}
        complete = task[-1]
        assert complete["type"] == "chat/toolCallComplete" and complete["result"]["success"] is True
        link = {
            "type": "subagent",
            "resource": worker,
            "title": "Look around",
            "agentName": "general-purpose",
            "description": "Look around",
        }
        assert complete["result"]["content"][-1] == link
        for action in task:
            fits(f"/$defs/Chat{action['type'][5:6].upper()}{action['type'][6:]}Action", action)
        # The subagent's own call is drawn in its chat, not here.
        assert [a for a in on(actions, chat) if a.get("toolCallId") == "toolu_sub"] == []

        # The worker is announced like any chat, as a read-only one a tool started.
        [added] = [a for a in on(actions, uri, "session/chatAdded")]
        origin = {"kind": "tool", "chat": chat, "toolCallId": "toolu_task"}
        assert added["summary"]["resource"] == worker and added["summary"]["origin"] == origin
        assert added["summary"]["interactivity"] == "read-only" and added["summary"]["title"] == "Look around"
        fits("/$defs/SessionChatAddedAction", added)
        assert actions.index({"channel": uri, **added}) < actions.index({"channel": chat, **complete})
        # Its row follows its turn, as any chat's does.
        updates = on(actions, uri, "session/chatUpdated")
        assert any(u["chat"] == worker for u in updates)

        # Its one turn: the Task's prompt, then what the subagent did.
        fits("/$defs/ChatState", snapshot)
        assert snapshot["origin"] == origin and snapshot["interactivity"] == "read-only"
        assert "activeTurn" not in snapshot and "movable" not in snapshot
        [turn] = snapshot["turns"]
        assert turn["message"]["text"] == TASK["prompt"] and turn["message"]["origin"] == {"kind": "agent"}
        kinds = [p["kind"] for p in turn["responseParts"]]
        assert kinds == ["toolCall", "markdown"], turn["responseParts"]
        call = turn["responseParts"][0]["toolCall"]
        assert call["toolCallId"] == "toolu_sub" and call["toolName"] == "Bash" and call["status"] == "completed"
        assert call["success"] is True and call["content"] == [{"type": "text", "text": "hi"}]
        # Its report, which the CLI hands back only as the task's summary.
        assert turn["responseParts"][1]["content"] == "Nothing much here."

        # The spawning chat's snapshot agrees with the wire.
        fits("/$defs/ChatState", state)
        [spawned] = [
            p["toolCall"]
            for p in state["turns"][0]["responseParts"]
            if p["kind"] == "toolCall" and p["toolCall"]["toolCallId"] == "toolu_task"
        ]
        assert spawned["_meta"] == {**HINTS, "subagentChatUri": worker}
        assert spawned["status"] == "completed" and spawned["content"][-1] == link
        [row] = [c for c in session["chats"] if c["resource"] == worker]
        assert row["origin"] == origin and row["interactivity"] == "read-only"

        wire_clean(capture)

        # The worker is kept like any chat: a restarted daemon serves it again.
        async with daemon_in_process(tmp_path / "d", "--sessions", "file", env=env) as daemon:
            async with rpc(daemon.url) as client:
                await initialize(client, "again")
                kept = (await client.call("subscribe", {"channel": worker}))["result"]["snapshot"]["state"]
                assert kept["turns"] == snapshot["turns"] and kept["interactivity"] == "read-only"
                session = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                [row] = [c for c in session["chats"] if c["resource"] == worker]
                assert row["origin"] == origin and row["interactivity"] == "read-only"
                words = await refused(client, worker, start_turn("hello?"), 1)
                assert "read-only" in words
            daemon.terminate()
            assert await daemon.wait() == 0


async def test_a_backgrounded_subagent_is_background_work_naming_its_worker(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    reports = ("Nothing much here.", "All done.")
    with fake_api.FakeAnthropic().running() as api:
        # The subagent and the spawning turn ask at once: which reply each gets is the CLI's race.
        api.add(
            fake_api.tool_use("toolu_bg", "Task", {**TASK, "run_in_background": True}),
            *(fake_api.text(r) for r in reports),
        )
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await initialize(client, "driver")
                uri, chat = await create(client, work, provider="claude")
                worker = worker_uri(uri, "toolu_bg")
                await dispatch(client, chat, start_turn("delegate it in the background"), 1)
                # The worker's turn ends as its entry is removed (not watched here: read below).
                actions = await collect(
                    client,
                    lambda s: bool(on(s, chat, "chat/turnComplete") and on(s, chat, "chat/backgroundWorkRemoved")),
                )
                state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                snapshot = (await client.call("subscribe", {"channel": worker}))["result"]["snapshot"]["state"]
            daemon.terminate()
            assert await daemon.wait() == 0

    [work_set] = on(actions, chat, "chat/backgroundWorkSet")
    fits("/$defs/ChatBackgroundWorkSetAction", work_set)
    entry = work_set["work"]
    assert entry["kind"] == "subagent" and entry["id"].startswith("subagent:") and entry["chat"] == worker
    assert entry["label"] == "Look around"
    [removed] = on(actions, chat, "chat/backgroundWorkRemoved")
    assert removed["id"] == entry["id"]
    # The call linked the same chat, and finished long before its subagent did.
    [complete] = [a for a in on(actions, chat, "chat/toolCallComplete") if a["toolCallId"] == "toolu_bg"]
    assert complete["result"]["content"][-1]["resource"] == worker
    assert "backgroundWork" not in state
    [turn] = snapshot["turns"]
    said = [p["content"] for p in turn["responseParts"] if p["kind"] == "markdown"]
    assert len(said) == 1 and said[0] in reports  # its report, said once


async def test_a_chat_moved_to_another_session_takes_its_workers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    with fake_api.FakeAnthropic().running() as api:
        api.add(
            fake_api.tool_use("toolu_mv", "Task", TASK), fake_api.text("Nothing much here."), fake_api.text("All done.")
        )
        async with daemon_in_process(tmp_path / "d", "--sessions", "file", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await initialize(client, "driver")
                # As listed: a worker keeps the name it was given in the session that spawned it.
                first, _ = await create(client, work, provider="claude", channel=f"claude:/{uuid.uuid4()}")
                second, _ = await create(client, work, provider="claude", channel=f"claude:/{uuid.uuid4()}")
                side = "ahp-chat:/side-with-a-worker"
                await client.call("createChat", {"channel": first, "chat": side})
                await client.call("subscribe", {"channel": side})
                worker = worker_uri(first, "toolu_mv")  # named in the session it was spawned in, and kept
                await dispatch(client, side, start_turn("delegate it"), 1)
                await collect(client, lambda s: bool(on(s, side, "chat/turnComplete")))
                before = (await client.call("subscribe", {"channel": worker}))["result"]["snapshot"]["state"]

                moved = await client.call(
                    "moveChat", {"channel": side, "destination": {"kind": "session", "session": second}}, timeout=120
                )
                assert moved.get("result") == {"session": second}, moved
                said = await collect(
                    client,
                    lambda s: (
                        len(on(s, second, "session/chatAdded")) == 2 and len(on(s, first, "session/chatRemoved")) == 2
                    ),
                )
                src = (await client.call("subscribe", {"channel": first}))["result"]["snapshot"]["state"]
                dst = (await client.call("subscribe", {"channel": second}))["result"]["snapshot"]["state"]
                after = (await client.call("subscribe", {"channel": worker}))["result"]["snapshot"]["state"]

                # Disposing the chat disposes the worker its call spawned.
                client.notes.clear()
                assert "error" not in await client.call("disposeChat", {"channel": side})
                gone = await collect(client, lambda s: len(on(s, second, "session/chatRemoved")) == 2)
                left = (await client.call("subscribe", {"channel": second}))["result"]["snapshot"]["state"]
                lost = await client.call("subscribe", {"channel": worker})
            daemon.terminate()
            assert await daemon.wait() == 0

    assert {a["chat"] for a in on(gone, second, "session/chatRemoved")} == {side, worker}
    assert [c["resource"] for c in left["chats"]] == [left["defaultChat"]]
    assert "error" in lost, lost
    assert [c["resource"] for c in src["chats"]] == [src["defaultChat"]]
    assert [c["resource"] for c in dst["chats"]] == [side, worker, dst["defaultChat"]]  # first, its worker after it
    [row] = [c for c in dst["chats"] if c["resource"] == worker]
    assert row["origin"] == {"kind": "tool", "chat": side, "toolCallId": "toolu_mv"}  # provenance is never rewritten
    assert row["interactivity"] == "read-only"
    assert after["turns"] == before["turns"]
    assert worker in [a["chat"] for a in on(said, first, "session/chatRemoved")]
    assert worker in [a["summary"]["resource"] for a in on(said, second, "session/chatAdded")]


async def test_a_subagents_question_is_asked_and_answered_in_its_worker_chat(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    target = work / "found.txt"
    with fake_api.FakeAnthropic().running() as api:
        api.add(
            fake_api.tool_use("toolu_ask", "Task", TASK),
            fake_api.tool_use("toolu_write", "Write", {"file_path": str(target), "content": "found\n"}),
            fake_api.text("Wrote it."),
            fake_api.text("All done."),
        )
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await initialize(client, "driver")
                uri, chat = await create(client, work, provider="claude")
                worker = worker_uri(uri, "toolu_ask")
                await dispatch(client, chat, start_turn("delegate a write"), 1)
                seen = await collect(client, lambda s: bool(on(s, uri, "session/inputNeededSet")))
                [asked] = on(seen, uri, "session/inputNeededSet")
                fits("/$defs/SessionInputNeededSetAction", asked)
                request = asked["request"]
                assert request["chat"] == worker and request["kind"] == "toolConfirmation"
                assert request["toolCall"]["toolCallId"] == "toolu_write"
                assert request["toolCall"]["status"] == "pending-confirmation"
                # Nothing of it in the spawning chat.
                assert [a for a in on(seen, chat) if a.get("toolCallId") == "toolu_write"] == []
                waiting = (await client.call("subscribe", {"channel": worker}))["result"]["snapshot"]["state"]
                assert waiting["activeTurn"]["responseParts"][-1]["toolCall"]["toolCallId"] == "toolu_write"
                # The one thing a client says in a worker: the answer (on the spawning chat it names no call).
                answer = {
                    "type": "chat/toolCallConfirmed",
                    "turnId": request["turnId"],
                    "toolCallId": "toolu_write",
                    "approved": True,
                    "confirmed": "user-action",
                }
                assert "not waiting" in await refused(client, chat, answer, 2)
                await dispatch(client, worker, answer, 3)
                seen = await collect(client, lambda s: bool(on(s, chat, "chat/turnComplete")))
                done = (await client.call("subscribe", {"channel": worker}))["result"]["snapshot"]["state"]
            daemon.terminate()
            assert await daemon.wait() == 0

    assert target.read_text() == "found\n"
    assert [a["id"] for a in on(seen, uri, "session/inputNeededRemoved")] == [request["id"]]
    [turn] = done["turns"]
    [call] = [p["toolCall"] for p in turn["responseParts"] if p["kind"] == "toolCall"]
    assert call["toolCallId"] == "toolu_write" and call["status"] == "completed" and call["success"] is True
    assert call["confirmed"] == "user-action"
