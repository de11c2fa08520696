"""The pure pieces of a client's tools on Claude Code: the ``ahp`` server's
list, joining a handler to the call the frame opened, the result as MCP
content, and the contributor on the chat actions."""

from __future__ import annotations

import pytest
import trio

pytest.importorskip("claude_agent_sdk")

from ahpd.backends.claude.tools import (  # noqa: E402
    LEFT,
    PREFIX,
    ClientCall,
    ClientTools,
    announced_tools,
    mcp_result,
)
from ahpd.backends.translate import CONTRIBUTOR_META, TurnTranslator  # noqa: E402
from ahpd.protocol.strict_schema import validator  # noqa: E402

OPEN = {
    "name": "openFile",
    "title": "Open a file",
    "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
}


def _texts(result) -> list[str]:
    return [c.text for c in result.content]


def _is_error(result) -> bool:
    return bool(result.model_dump(by_alias=True, mode="json").get("isError"))


def test_the_set_is_named_per_client_and_changes_in_place() -> None:
    tools = ClientTools(lambda call: None)
    config = tools.server_config()
    assert config["type"] == "sdk" and config["name"] == "ahp"
    assert tools.set({"a": [OPEN], "b": [OPEN]}) is True
    assert [t.name for t in tools._tools] == ["a__openFile", "b__openFile"]
    assert tools.set({"a": [OPEN], "b": [OPEN]}) is False  # nothing moved
    listed = tools._tools
    assert tools.set({"b": [OPEN]}) is True
    assert listed is tools._tools and [t.name for t in listed] == ["b__openFile"]
    # A withdrawn tool's running call is still its client's.
    assert tools.owner(PREFIX + "a__openFile") == "a" and tools.owner("mcp__other__x") is None
    assert tools.title(PREFIX + "b__openFile") == "Open a file"


def test_announced_tools_reads_active_clients() -> None:
    assert announced_tools([{"clientId": "a", "tools": [OPEN]}, {"clientId": "b", "tools": []}]) == {"a": [OPEN]}


def test_mcp_result_text_and_failure() -> None:
    ok = mcp_result({"success": True, "pastTenseMessage": "did", "content": [{"type": "text", "text": "hi"}]})
    assert ok == {"content": [{"type": "text", "text": "hi"}], "isError": False}
    bad = mcp_result({"success": False, "pastTenseMessage": "failed", "error": {"message": "no such file"}})
    assert bad == {"content": [{"type": "text", "text": "no such file"}], "isError": True}


async def test_two_concurrent_calls_are_told_apart_by_input() -> None:
    joined: list[ClientCall] = []
    tools = ClientTools(joined.append)
    tools.set({"ed": [OPEN]})
    results: dict[str, object] = {}

    async def call(path: str) -> None:
        results[path] = await tools._run("ed__openFile", {"path": path})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "a.txt")
        nursery.start_soon(call, "b.txt")
        await trio.testing.wait_all_tasks_blocked()
        assert joined == []  # the handlers came first: they wait for the frame
        tools.opened("toolu_b", PREFIX + "ed__openFile", {"path": "b.txt"})
        tools.opened("toolu_a", PREFIX + "ed__openFile", {"path": "a.txt"})
        assert {c.call_id: c.arguments["path"] for c in joined} == {"toolu_b": "b.txt", "toolu_a": "a.txt"}
        assert all(c.client_id == "ed" for c in joined)
        assert tools.complete(
            "toolu_a", {"success": True, "pastTenseMessage": "x", "content": [{"type": "text", "text": "A"}]}
        )
        assert tools.fail_client("ed") == ["toolu_b"]
    assert _texts(results["a.txt"]) == ["A"] and _is_error(results["a.txt"]) is False
    assert _texts(results["b.txt"]) == [LEFT] and _is_error(results["b.txt"]) is True
    assert tools.calls == {}


async def test_the_frame_may_come_first_and_a_withdrawn_tool_fails_at_once() -> None:
    joined: list[ClientCall] = []
    tools = ClientTools(joined.append)
    tools.set({"ed": [OPEN]})
    tools.opened("toolu_1", PREFIX + "ed__openFile", {"path": "x"})
    tools.opened("toolu_2", "Bash", {"command": "ls"})  # not a client's: ignored
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tools._run, "ed__openFile", {"path": "x"})
        await trio.testing.wait_all_tasks_blocked()
        assert [c.call_id for c in joined] == ["toolu_1"]
        tools.fail_all()
    gone = await tools._run("zz__openFile", {})
    assert _is_error(gone) is True


def test_the_contributor_rides_start_and_ready() -> None:
    translator = TurnTranslator("t1")
    contributor = {"kind": "client", "clientId": "ed"}
    meta = {CONTRIBUTOR_META: contributor}
    actions = translator.feed(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": "Open a file",
            "kind": "other",
            "status": "pending",
            "_meta": meta,
        }
    )
    actions += translator.feed(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c1",
            "status": "in_progress",
            "rawInput": {"path": "x"},
            "_meta": meta,
        }
    )
    start, ready = actions[0], actions[1]
    assert start["type"] == "chat/toolCallStart" and start["contributor"] == contributor
    assert ready["type"] == "chat/toolCallReady" and ready["confirmed"] == "not-needed"
    assert ready["contributor"] == contributor
    validator("/$defs/ChatToolCallStartAction").validate(start)
    validator("/$defs/ChatToolCallReadyAction").validate(ready)
    done = translator.feed(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c1",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "ok"}}],
        }
    )
    assert [a["type"] for a in done if a["type"].startswith("chat/toolCall")] == ["chat/toolCallComplete"]
