"""A client's tools, run by that client: end to end through a real daemon, the
real bundled CLI and the fake Anthropic API, offline.

The client announces a tool on ``session/activeClientSet``; the model calls
``mcp__ahp__<clientId>__<name>``; the client sees the call running with
itself as the contributor and a ``toolClientExecution`` entry in the
session's ``inputNeeded``, answers with ``chat/toolCallComplete``, and the
model gets the result as the tool's output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

from tests.backends.claude_fixtures import fake_api  # noqa: E402

from .helpers import (  # noqa: E402
    action_of,
    create,
    daemon_in_process,
    dispatch,
    fits,
    is_action,
    rpc,
    start_turn,
    until,
)
from .test_claude_sessions import _env  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

TOOL = {
    "name": "openFile",
    "title": "Open a file",
    "description": "Open a file in the client's editor",
    "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}


def _announce(client_id: str, tools: list[dict]) -> dict:
    return {"type": "session/activeClientSet", "activeClient": {"clientId": client_id, "tools": tools}}


async def _announced_and_called(client, uri: str, chat: str, client_id: str, call_id: str) -> tuple[dict, list]:
    await dispatch(client, uri, _announce(client_id, [TOOL]), 1)
    await until(client, is_action("session/activeClientSet", uri))
    turn = start_turn("open the notes")
    await dispatch(client, chat, turn, 2)
    notes = await until(client, is_action("session/inputNeededSet", uri), timeout=90)
    return turn, notes


async def test_a_client_runs_its_own_tool(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    client_id = "editor-1"
    model_name = f"mcp__ahp__{client_id}__openFile"
    with fake_api.FakeAnthropic().running() as api:
        api.add(
            fake_api.tool_use("toolu_client", model_name, {"path": "notes.txt"}),
            fake_api.text("Opened."),
        )
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client, rpc(daemon.url) as other:
                await client.initialize(client_id)
                await other.initialize("someone-else")
                uri, chat = await create(client, tmp_path, provider="claude")
                turn, notes = await _announced_and_called(client, uri, chat, client_id, "toolu_client")
                # The model was offered the tool under the client's name (the CLI
                # defers MCP tools behind its tool search, and names them there).
                assert model_name in json.dumps(api.requests[0])

                chat_actions = [
                    action_of(n)
                    for n in notes
                    if is_action("chat/toolCallStart", chat)(n) or is_action("chat/toolCallReady", chat)(n)
                ]
                start = next(a for a in chat_actions if a["type"] == "chat/toolCallStart")
                ready = next(a for a in chat_actions if a["type"] == "chat/toolCallReady")
                contributor = {"kind": "client", "clientId": client_id}
                assert start["toolCallId"] == "toolu_client" and start["contributor"] == contributor
                assert ready["confirmed"] == "not-needed" and ready["contributor"] == contributor
                fits("/$defs/ToolCallClientContributor", contributor)
                request = action_of(notes[-1])["request"]
                fits("/$defs/SessionToolClientExecutionRequest", request)
                assert request["kind"] == "toolClientExecution" and request["clientId"] == client_id
                assert request["turnId"] == turn["turnId"] and request["chat"] == chat
                assert request["toolCall"]["toolCallId"] == "toolu_client"
                assert request["toolCall"]["status"] == "running"

                complete = {
                    "type": "chat/toolCallComplete",
                    "turnId": turn["turnId"],
                    "toolCallId": "toolu_client",
                    "result": {
                        "success": True,
                        "pastTenseMessage": "Opened notes.txt",
                        "content": [{"type": "text", "text": "notes.txt is open at line 1"}],
                    },
                }
                # Only the client the call was reported against may answer it.
                await other.call("subscribe", {"channel": chat})
                await dispatch(other, chat, complete, 1)
                refused = await until(other, lambda n: n.get("method") == "action" and "rejectionReason" in n["params"])
                assert client_id in refused[-1]["params"]["rejectionReason"]

                await dispatch(client, chat, complete, 3)
                notes = await until(client, is_action("chat/turnComplete", chat), timeout=90)
                answer = next(
                    n
                    for n in notes
                    if n.get("method") == "action" and (n["params"].get("origin") or {}).get("clientSeq") == 3
                )
                # Not applied as sent: the completion comes off the agent's tool result.
                assert "rejectionReason" in answer["params"]
                assert any(
                    is_action("session/inputNeededRemoved", uri)(n) and action_of(n)["id"] == request["id"]
                    for n in notes
                )
                completions = [
                    action_of(n)
                    for n in notes
                    if is_action("chat/toolCallComplete", chat)(n) and "rejectionReason" not in n["params"]
                ]
                assert len(completions) == 1
                assert completions[0]["result"]["success"] is True
                assert completions[0]["result"]["content"] == [{"type": "text", "text": "notes.txt is open at line 1"}]

                [result] = api.tool_results()
                assert result["tool_use_id"] == "toolu_client"
                assert "notes.txt is open at line 1" in str(result["content"])
                assert not result.get("is_error")
                state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                assert not state.get("inputNeeded")
            daemon.terminate()
            assert await daemon.wait() == 0


async def test_a_client_that_leaves_fails_its_calls(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    client_id = "editor-2"
    model_name = f"mcp__ahp__{client_id}__openFile"
    with fake_api.FakeAnthropic().running() as api:
        api.add(
            fake_api.tool_use("toolu_gone", model_name, {"path": "notes.txt"}),
            fake_api.text("The editor is gone."),
        )
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as watcher:
                await watcher.initialize("watcher")
                async with rpc(daemon.url) as client:
                    await client.initialize(client_id)
                    uri, chat = await create(client, tmp_path, provider="claude")
                    await watcher.call("subscribe", {"channel": uri})
                    await watcher.call("subscribe", {"channel": chat})
                    await _announced_and_called(client, uri, chat, client_id, "toolu_gone")
                # The client's connection is closed while its call is outstanding.
                notes = await until(
                    watcher,
                    lambda n: (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error"),
                    timeout=90,
                )
                assert action_of(notes[-1])["type"] == "chat/turnComplete", action_of(notes[-1])
                completion = next(action_of(n) for n in notes if is_action("chat/toolCallComplete", chat)(n))
                assert completion["toolCallId"] == "toolu_gone" and completion["result"]["success"] is False
                [result] = api.tool_results()
                assert result["tool_use_id"] == "toolu_gone" and result.get("is_error") is True
                assert "has left" in str(result["content"])
                state = (await watcher.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                assert not state.get("inputNeeded")
            daemon.terminate()
            assert await daemon.wait() == 0
