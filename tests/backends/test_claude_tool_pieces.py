"""The pure pieces of Claude's tool-call streaming: the SDK's messages in,
ACP-shaped updates out (:class:`StreamMapper`), and those into chat actions
(:class:`TurnTranslator`). The end-to-end half is
``tests/daemon/test_claude_tool_stream.py``."""

from __future__ import annotations

import pytest

sdk = pytest.importorskip("claude_agent_sdk")

from ahpd.backends.claude.wire import StreamMapper, mcp_contributor  # noqa: E402
from ahpd.backends.translate import TurnTranslator  # noqa: E402
from ahpd.protocol.strict_schema import validator  # noqa: E402


def _event(event: dict) -> sdk.StreamEvent:
    return sdk.StreamEvent(uuid="u", session_id="s", event=event)


def _system(subtype: str, **data: object) -> sdk.SystemMessage:
    return sdk.SystemMessage(subtype=subtype, data={"type": "system", "subtype": subtype, **data})


def _bash(mapper: StreamMapper, call_id: str, command: str) -> None:
    mapper.feed(
        sdk.AssistantMessage(
            content=[
                sdk.ToolUseBlock(
                    call_id, "Bash", {"command": command, "description": f"Run {command}", "run_in_background": True}
                )
            ],
            model="m",
        )
    )


def test_arguments_stream_as_deltas_of_the_call_being_written() -> None:
    mapper = StreamMapper()
    out = mapper.feed(_event({"type": "message_start", "message": {"id": "m1"}}))
    out += mapper.feed(
        _event(
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}},
            }
        )
    )
    out += mapper.feed(
        _event(
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '{"file_'},
            }
        )
    )
    out += mapper.feed(
        _event({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}})
    )
    out += mapper.feed(
        _event(
            {
                "type": "content_block_delta",
                "index": 0,  # no tool at that index
                "delta": {"type": "input_json_delta", "partial_json": "x"},
            }
        )
    )
    assert [u["sessionUpdate"] for u in out] == ["tool_call", "tool_call_input_delta"]
    assert out[1] == {"sessionUpdate": "tool_call_input_delta", "toolCallId": "toolu_1", "content": '{"file_'}

    translator = TurnTranslator("t1")
    actions = [a for u in out for a in translator.feed(u)]
    assert [a["type"] for a in actions] == ["chat/toolCallStart", "chat/toolCallDelta"]
    assert actions[0]["toolName"] == "Read" and actions[0]["_meta"] == {"toolKind": "read"}
    validator("/$defs/ChatToolCallDeltaAction").validate(actions[1])
    # Once the call is ready, its arguments are whole: no more deltas.
    translator.feed({"sessionUpdate": "tool_call_update", "toolCallId": "toolu_1", "status": "in_progress"})
    assert translator.feed({"sessionUpdate": "tool_call_input_delta", "toolCallId": "toolu_1", "content": "z"}) == []


def test_an_mcp_tool_is_its_servers_and_our_own_server_is_nobodys() -> None:
    assert mcp_contributor("mcp__docs__search") == {"kind": "mcp", "customizationId": "claude.mcp:docs"}
    assert mcp_contributor("mcp__docs__deep__search", "other") == {"kind": "mcp", "customizationId": "other.mcp:docs"}
    for name in ("Bash", "mcp__ahp__client__openFile", "mcp__docs", "mcp____x"):
        assert mcp_contributor(name) is None
    [start] = TurnTranslator("t1").feed(StreamMapper().announce("toolu_m", "mcp__docs__search", {"q": "x"}))
    assert start["toolName"] == "mcp__docs__search" and start["displayName"] == "search"
    assert start["contributor"] == {"kind": "mcp", "customizationId": "claude.mcp:docs"}
    validator("/$defs/ChatToolCallStartAction").validate(start)


def test_a_subagents_progress_is_a_line_on_its_running_call_said_once_and_taken_off() -> None:
    mapper = StreamMapper()
    translator = TurnTranslator("t1")

    def feed(message: object) -> list[dict]:
        return [a for u in mapper.feed(message) for a in translator.feed(u)]

    feed(sdk.AssistantMessage(content=[sdk.ToolUseBlock("toolu_task", "Task", {"description": "Look"})], model="m"))
    running = feed(
        _system("task_started", task_id="a1", tool_use_id="toolu_task", task_type="local_agent", description="Look")
    )
    assert [a["type"] for a in running] == ["chat/toolCallReady", "chat/activityChanged"]
    assert running[0]["confirmed"] == "not-needed"
    progress = feed(_system("task_progress", task_id="a1", tool_use_id="toolu_task", description="Running ls"))
    hints = {"toolKind": "subagent", "subagentDescription": "Look"}
    assert progress == [
        {
            "type": "chat/toolCallContentChanged",
            "turnId": "t1",
            "toolCallId": "toolu_task",
            "content": [],
            "_meta": {**hints, "progressMessage": "Running ls"},
        }
    ]
    assert feed(_system("task_progress", task_id="a1", tool_use_id="toolu_task", description="Running ls")) == []
    # The subagent's own calls are its worker chat's (ahpd.host.sessions.chats.workers), never this chat's.
    assert (
        feed(sdk.UserMessage(content=[sdk.ToolResultBlock("toolu_sub", "hi")], parent_tool_use_id="toolu_task")) == []
    )
    done = feed(sdk.UserMessage(content=[sdk.ToolResultBlock("toolu_task", "found it")]))
    assert done[0]["type"] == "chat/toolCallComplete" and done[0]["_meta"] == hints


def test_background_shells_follow_the_level_and_the_terminal_words() -> None:
    mapper = StreamMapper()
    _bash(mapper, "toolu_a", "sleep 9")
    _bash(mapper, "toolu_b", "make watch")
    # The level lists a task before its task_started says what it is: nothing to say yet.
    assert mapper.feed(_system("background_tasks_changed", tasks=[{"task_id": "ta", "task_type": "local_bash"}])) == []
    running, started = mapper.feed(
        _system("task_started", task_id="ta", tool_use_id="toolu_a", task_type="local_bash", description="Sleep")
    )
    assert running == {"sessionUpdate": "tool_call_update", "toolCallId": "toolu_a", "status": "in_progress"}
    assert started["sessionUpdate"] == "background_work_set"
    work = started["work"]
    assert work["id"] == "shell:ta" and work["command"] == "sleep 9" and work["label"] == "Sleep"
    validator("/$defs/BackgroundShellWork").validate(work)
    # A subagent and an ambient task are not listed here; the same level again says nothing.
    mapper.feed(_system("task_started", task_id="sub", task_type="local_agent", description="Agent"))
    mapper.feed(_system("task_started", task_id="tb", tool_use_id="toolu_b", task_type="local_bash", description="W"))
    level = [{"task_id": "ta"}, {"task_id": "sub"}, {"task_id": "tb", "ambient": True}]
    assert mapper.feed(_system("background_tasks_changed", tasks=level)) == []
    assert list(mapper.background) == ["shell:ta"]
    # A terminal word ends one whatever the level says, and is said once.
    ended = [
        _system("task_updated", task_id="ta", patch={"status": "completed"}),
        _system("task_notification", task_id="ta", status="completed"),
    ]
    assert mapper.feed(ended[0]) == [{"sessionUpdate": "background_work_removed", "id": "shell:ta"}]
    assert mapper.feed(ended[1]) == []
    assert mapper.feed(_system("background_tasks_changed", tasks=[])) == []
    assert mapper.background == {}


def test_the_rewind_point_is_the_main_chains_latest_entry() -> None:
    mapper = StreamMapper()
    mapper.feed(sdk.AssistantMessage(content=[sdk.TextBlock("hi")], model="m", uuid="a-1"))
    assert mapper.point == "a-1"
    mapper.feed(
        sdk.AssistantMessage(content=[sdk.TextBlock("sub")], model="m", uuid="s-1", parent_tool_use_id="toolu_task")
    )
    mapper.feed(
        sdk.UserMessage(content=[sdk.ToolResultBlock("toolu_x", "r")], uuid="s-2", parent_tool_use_id="toolu_task")
    )
    assert mapper.point == "a-1"
    mapper.feed(sdk.UserMessage(content=[sdk.ToolResultBlock("toolu_x", "r")], uuid="u-2"))
    assert mapper.point == "u-2"


def test_an_acp_tool_is_named_in_the_agents_words_and_its_kind_kept() -> None:
    [start] = TurnTranslator("t1").feed(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": "Read notes.txt",
            "kind": "read",
            "status": "pending",
        }
    )
    assert start["toolName"] == "Read notes.txt" and start["_meta"] == {"toolKind": "read"}
    [start] = TurnTranslator("t1").feed(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": "Run ls",
            "kind": "execute",
            "_meta": {"claudeCode": {"toolName": "Bash"}},
        }
    )
    assert start["toolName"] == "Bash" and start["_meta"] == {"toolKind": "terminal"}
    [start] = TurnTranslator("t1").feed({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Think"})
    assert start["toolName"] == "Think" and "_meta" not in start
