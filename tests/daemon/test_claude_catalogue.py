"""Past Claude Code sessions in the catalogue, offline.

Transcripts are made by the real bundled CLI against the fake Messages API
(in this process, as ``test_claude_e2e`` does), then a fresh daemon with the
same ``HOME`` lists them, a client opens one and sees its turns rebuilt in
the live shapes, the first new turn resumes it, and disposing deletes it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

from ahpd.backends.claude.backend import ClaudeBackend  # noqa: E402
from tests.backends.claude_fixtures import fake_api  # noqa: E402
from tests.backends.claude_fixtures.harness import conversation  # noqa: E402

from .helpers import (  # noqa: E402
    Rpc,
    daemon_in_process,
    dispatch,
    fits,
    is_action,
    listed_until,
    rpc,
    start_turn,
    until,
)
from .test_claude_sessions import _env  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    for name in fake_api.CREDENTIAL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(path))
    return path


async def _listed(client: Rpc, uri: str, present: bool = True) -> list[dict]:
    """listSessions once ``uri`` is (or is no longer) among the rows: the
    catalogue is read in the background, never while a client waits, and
    each row it adds or removes is said on the root channel."""

    def settled(rows: list[dict]) -> bool:
        fits("/commands/listSessions/result", {"items": rows})
        return any(r["resource"] == uri for r in rows) == present

    return await listed_until(client, settled)


async def test_a_past_session_is_listed_opened_resumed_and_disposed(
    tmp_path: Path,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    with fake_api.FakeAnthropic().running() as api:
        for name, value in fake_api.cli_env(api.url, str(home)).items():
            monkeypatch.setenv(name, value)
        api.add(
            fake_api.tool_use("toolu_past", "Bash", {"command": "touch past.txt"}, thought="A file."),
            fake_api.text("Done."),
            fake_api.text("Second answer."),
            fake_api.text("Another conversation."),
        )
        async with conversation(ClaudeBackend(), cwd) as (conv, rec):
            rec.on_permission = lambda req: "allow"
            await conv.prompt("first question")
            await conv.prompt("second question")
            kept = conv.backend_id
        async with conversation(ClaudeBackend(), cwd) as (conv, _):
            await conv.prompt("a conversation nobody opens")
            other = conv.backend_id
        assert (cwd / "past.txt").exists()

        uri, other_uri = f"claude:/{kept}", f"claude:/{other}"
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("reader")
                rows = await _listed(client, uri)
                row = next(r for r in rows if r["resource"] == uri)
                assert row["provider"] == "claude" and "question" in row["title"]
                assert row["workingDirectories"] == [cwd.resolve().as_uri()]
                assert row["createdAt"] <= row["modifiedAt"]
                assert other_uri in [r["resource"] for r in rows]

                session = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                fits("/$defs/SessionState", session)
                assert session["lifecycle"] == "ready" and session["workingDirectories"] == row["workingDirectories"]
                chat = session["defaultChat"]
                assert chat == row["defaultChat"]
                state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                fits("/$defs/ChatState", state)
                first, second = state["turns"]
                assert first["message"]["text"] == "first question" and first["state"] == "complete"
                kinds = [p["kind"] for p in first["responseParts"]]
                assert kinds == ["reasoning", "toolCall", "markdown"]
                call = first["responseParts"][1]["toolCall"]
                assert call["toolCallId"] == "toolu_past" and call["status"] == "completed"
                assert call["confirmed"] == "not-needed" and call["invocationMessage"] == "Run touch past.txt"
                assert call["success"] is True
                assert first["responseParts"][2]["content"] == "Done."
                assert first["usage"]["model"] == fake_api.MODEL and first["usage"]["inputTokens"] > 0
                assert second["responseParts"][-1]["content"] == "Second answer."
                # Opened, it is one row: the session's, not the catalogue's as well.
                rows = await _listed(client, uri)
                assert [r["resource"] for r in rows].count(uri) == 1

                # The first new turn resumes the conversation the transcript holds.
                api.add(fake_api.text("Resumed."))
                await dispatch(client, chat, start_turn("do you remember?"), 1)
                await until(client, is_action("chat/turnComplete", chat), timeout=90)
                said = repr(api.requests[-1]["messages"])
                assert "first question" in said and "do you remember?" in said
                state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                fits("/$defs/ChatState", state)
                assert len(state["turns"]) == 3

                # Disposing deletes the transcript, opened or not.
                assert (await client.call("disposeSession", {"channel": uri}, timeout=30))["result"] is None
                assert (await client.call("disposeSession", {"channel": other_uri}, timeout=30))["result"] is None
                rows = await _listed(client, uri, present=False)
                assert other_uri not in [r["resource"] for r in rows]
                assert (await client.call("subscribe", {"channel": other_uri}))["error"]["code"] == -32001
            daemon.terminate()
            assert await daemon.wait() == 0
    assert await ClaudeBackend().list_conversations() == []


async def test_a_past_subagent_is_opened_in_its_worker_chat(
    tmp_path: Path,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A conversation read back off its transcript gets the worker chats its
    subagents worked in, rebuilt from their own transcripts: the Task call
    links its worker, whose one turn is the prompt, the subagent's call and
    its report, read-only and naming the call that spawned it."""
    from .test_claude_subagents import worker_uri

    cwd = tmp_path / "work"
    cwd.mkdir()
    task = {
        "description": "Look around",
        "prompt": "look around the folder",
        "subagent_type": "general-purpose",
        "run_in_background": False,
    }
    with fake_api.FakeAnthropic().running() as api:
        for name, value in fake_api.cli_env(api.url, str(home)).items():
            monkeypatch.setenv(name, value)
        api.add(
            fake_api.tool_use("toolu_past_task", "Task", task),
            fake_api.tool_use("toolu_past_sub", "Bash", {"command": "echo hi", "description": "Say hi"}),
            fake_api.text("Nothing much here."),
            fake_api.text("All done."),
        )
        async with conversation(ClaudeBackend(), cwd) as (conv, rec):
            rec.on_permission = lambda req: "allow"
            await conv.prompt("delegate a look around")
            kept = conv.backend_id

        uri = f"claude:/{kept}"
        worker = worker_uri(uri, "toolu_past_task")
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("reader")
                await _listed(client, uri)
                session = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                fits("/$defs/SessionState", session)
                chat = session["defaultChat"]
                [row] = [c for c in session["chats"] if c["resource"] == worker]
                assert row["origin"] == {"kind": "tool", "chat": chat, "toolCallId": "toolu_past_task"}
                assert row["interactivity"] == "read-only" and row["title"] == "Look around"
                state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                [call] = [p["toolCall"] for p in state["turns"][0]["responseParts"] if p["kind"] == "toolCall"]
                assert call["toolCallId"] == "toolu_past_task" and call["_meta"]["subagentChatUri"] == worker
                assert {
                    "type": "subagent",
                    "resource": worker,
                    "title": "Look around",
                    "agentName": "general-purpose",
                    "description": "Look around",
                } in call["content"]
                inside = (await client.call("subscribe", {"channel": worker}))["result"]["snapshot"]["state"]
                fits("/$defs/ChatState", inside)
                [turn] = inside["turns"]
                assert turn["message"] == {"text": "look around the folder", "origin": {"kind": "agent"}}
                parts = turn["responseParts"]
                assert [p["toolCall"]["toolCallId"] for p in parts if p["kind"] == "toolCall"] == ["toolu_past_sub"]
                assert parts[-1]["kind"] == "markdown" and parts[-1]["content"] == "Nothing much here."
                # Read-only here too: nobody talks to a subagent that has finished.
                await client.call("subscribe", {"channel": worker})
                await dispatch(client, worker, start_turn("hello?"), 1)
                await until(
                    client,
                    lambda n: (
                        n.get("method") == "action"
                        and n["params"]["channel"] == worker
                        and "rejectionReason" in n["params"]
                    ),
                )
            daemon.terminate()
            assert await daemon.wait() == 0
