"""The pure pieces of a subagent's worker chat: the SDK's messages of a
subagent come out of :class:`StreamMapper` tagged with their spawning call,
a backgrounded one is a ``subagent:<task_id>`` entry, and
:class:`TurnTranslator` draws a Task call with the reference's subagent
hints and its worker link (and draws nothing of a tagged update). The
messages are the SDK's own classes, shaped as the bundled CLI sends them
(checked against it: a foreground subagent's report comes only as its
task's summary, a background one's also as its last message). The
end-to-end half is ``tests/daemon/test_claude_subagents.py``."""

from __future__ import annotations

import pytest

sdk = pytest.importorskip("claude_agent_sdk")

from ahpd.backends.claude.wire import StreamMapper  # noqa: E402
from ahpd.backends.port import PARENT_CALL_META  # noqa: E402
from ahpd.backends.translate import TurnTranslator, subagent_content, subagent_meta  # noqa: E402
from ahpd.protocol.strict_schema import validator  # noqa: E402

TASK = {"description": "Look around", "prompt": "look around", "subagent_type": "Explore"}
WORKER = "ahp-chat://subagent/abc/toolu_task"


def _system(subtype: str, **data: object) -> sdk.SystemMessage:
    return sdk.SystemMessage(subtype=subtype, data={"type": "system", "subtype": subtype, **data})


def _task(mapper: StreamMapper, tool_input: dict = TASK) -> list[dict]:
    return mapper.feed(sdk.AssistantMessage(content=[sdk.ToolUseBlock("toolu_task", "Task", tool_input)], model="m"))


def _parent(update: dict) -> str | None:
    return (update.get("_meta") or {}).get(PARENT_CALL_META)


def test_a_subagents_messages_come_out_tagged_with_the_call_that_runs_it() -> None:
    mapper = StreamMapper()
    _task(mapper)
    said = mapper.feed(sdk.UserMessage(content=[sdk.TextBlock("look around")], parent_tool_use_id="toolu_task"))
    said += mapper.feed(
        sdk.AssistantMessage(
            content=[sdk.ThinkingBlock("hmm", "sig"), sdk.ToolUseBlock("toolu_sub", "Bash", {"command": "ls"})],
            model="m",
            parent_tool_use_id="toolu_task",
            uuid="s-1",
        )
    )
    said += mapper.feed(
        sdk.UserMessage(
            content=[sdk.ToolResultBlock("toolu_sub", "a.txt")], parent_tool_use_id="toolu_task", uuid="s-2"
        )
    )
    assert [u["sessionUpdate"] for u in said] == ["agent_thought_chunk", "tool_call", "tool_call_update"]
    assert {_parent(u) for u in said} == {"toolu_task"}
    assert said[1]["_meta"]["claudeCode"] == {"toolName": "Bash"}  # its own meta is kept beside the tag
    assert said[2]["status"] == "completed"
    # The subagent's calls are announced in its own mapper: the conversation's knows nothing of them.
    assert "toolu_sub" not in mapper.announced and "toolu_sub" in mapper.workers["toolu_task"].announced
    assert mapper.point is None  # nothing of the main chain was said after the Task call's frame


def test_a_foreground_subagents_report_is_its_tasks_summary_said_once() -> None:
    mapper = StreamMapper()
    _task(mapper)
    mapper.feed(
        _system(
            "task_started",
            task_id="a1",
            tool_use_id="toolu_task",
            task_type="local_agent",
            description="Look around",
            is_backgrounded=False,
        )
    )
    [report] = mapper.feed(
        _system(
            "task_notification",
            task_id="a1",
            tool_use_id="toolu_task",
            status="completed",
            summary="Nothing much here.",
        )
    )
    assert report["sessionUpdate"] == "agent_message_chunk" and _parent(report) == "toolu_task"
    assert report["content"] == {"type": "text", "text": "Nothing much here."}
    # A background subagent streams its report first: the summary repeats it, and says nothing.
    mapper = StreamMapper()
    _task(mapper)
    mapper.feed(
        _system(
            "task_started",
            task_id="a2",
            tool_use_id="toolu_task",
            task_type="local_agent",
            description="Look around",
            is_backgrounded=True,
        )
    )
    [streamed] = mapper.feed(
        sdk.AssistantMessage(content=[sdk.TextBlock("Found it.")], model="m", parent_tool_use_id="toolu_task")
    )
    assert streamed["content"]["text"] == "Found it."
    notification = _system(
        "task_notification", task_id="a2", tool_use_id="toolu_task", status="completed", summary="Found it."
    )
    assert [u for u in mapper.feed(notification) if u["sessionUpdate"] == "agent_message_chunk"] == []
    # A shell's summary is no report.
    assert mapper.feed(_system("task_notification", task_id="zz", tool_use_id="toolu_x", summary="x")) == []


def test_a_backgrounded_subagent_is_listed_under_its_task_and_names_its_call() -> None:
    mapper = StreamMapper()
    _task(mapper, {**TASK, "run_in_background": True})
    # As the CLI says it: the level first, then what the task is.
    assert mapper.feed(_system("background_tasks_changed", tasks=[{"task_id": "a3", "task_type": "local_agent"}])) == []
    running, listed = mapper.feed(
        _system(
            "task_started",
            task_id="a3",
            tool_use_id="toolu_task",
            task_type="local_agent",
            description="Look around",
            is_backgrounded=True,
        )
    )
    assert running["status"] == "in_progress"
    assert listed["sessionUpdate"] == "background_work_set" and listed["toolCallId"] == "toolu_task"
    work = listed["work"]
    assert work["id"] == "subagent:a3" and work["kind"] == "subagent" and work["label"] == "Look around"
    validator("/$defs/BackgroundSubagentWork").validate({**work, "chat": WORKER})  # the host adds its chat
    assert mapper.feed(_system("task_updated", task_id="a3", patch={"status": "completed"})) == [
        {"sessionUpdate": "background_work_removed", "id": "subagent:a3"}
    ]
    # A subagent in the foreground is the call's, not background work.
    mapper.feed(
        _system(
            "task_started",
            task_id="a4",
            tool_use_id="toolu_task",
            task_type="local_agent",
            description="Look",
            is_backgrounded=False,
        )
    )
    assert mapper.feed(_system("background_tasks_changed", tasks=[{"task_id": "a4"}])) == []


def test_a_task_call_carries_the_subagent_hints_and_links_its_worker() -> None:
    mapper = StreamMapper()
    translator = TurnTranslator("t1")
    translator.worker_chat = lambda call_id: f"ahp-chat://subagent/abc/{call_id}"
    actions = [
        a
        for u in mapper.feed(
            sdk.StreamEvent(
                uuid="u",
                session_id="s",
                event={
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "tool_use", "id": "toolu_task", "name": "Task", "input": {}},
                },
            )
        )
        for a in translator.feed(u)
    ]
    [start] = actions
    # Named before its input exists: the kind and the worker's URI, nothing made up.
    assert start["_meta"] == {"toolKind": "subagent", "subagentChatUri": WORKER}
    validator("/$defs/ChatToolCallStartAction").validate(start)
    actions = [a for u in _task(mapper) for a in translator.feed(u)]
    actions += [
        a
        for u in mapper.feed(
            _system(
                "task_started",
                task_id="a1",
                tool_use_id="toolu_task",
                task_type="local_agent",
                description="Look around",
            )
        )
        for a in translator.feed(u)
    ]
    [ready] = [a for a in actions if a["type"] == "chat/toolCallReady"]
    hints = {
        "toolKind": "subagent",
        "subagentDescription": "Look around",
        "subagentAgentName": "Explore",
        "subagentChatUri": WORKER,
    }
    assert ready["_meta"] == hints
    validator("/$defs/ChatToolCallReadyAction").validate(ready)
    # The subagent's own words draw nothing here.
    assert (
        translator.feed(
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "x"},
                "_meta": {PARENT_CALL_META: "toolu_task"},
            }
        )
        == []
    )
    complete, _activity = translator.feed(
        mapper.feed(sdk.UserMessage(content=[sdk.ToolResultBlock("toolu_task", "done")]))[0]
    )
    validator("/$defs/ChatToolCallCompleteAction").validate(complete)
    assert complete["result"]["content"] == [
        {"type": "text", "text": "done"},
        {
            "type": "subagent",
            "resource": WORKER,
            "title": "Look around",
            "agentName": "Explore",
            "description": "Look around",
        },
    ]


def test_without_a_worker_chat_a_task_call_has_the_hints_and_no_link() -> None:
    """A turn read back from a transcript has no worker chat to link."""
    translator = TurnTranslator("t1")
    mapper = StreamMapper()
    actions = [a for u in _task(mapper) for a in translator.feed(u)]
    actions += translator.feed(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "toolu_task",
            "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": "boom"}}],
        }
    )
    assert actions[0]["_meta"] == {
        "toolKind": "subagent",
        "subagentDescription": "Look around",
        "subagentAgentName": "Explore",
    }
    complete = actions[-1]
    assert complete["result"] == {
        "success": False,
        "pastTenseMessage": "Look around",
        "content": [{"type": "text", "text": "boom"}],
        "error": {"message": "boom"},
    }


def test_the_pure_hint_builders() -> None:
    assert subagent_meta(None, None) == {"toolKind": "subagent"}
    assert subagent_meta({"description": "", "subagent_type": 3}, "u") == {
        "toolKind": "subagent",
        "subagentChatUri": "u",
    }
    assert subagent_content({"toolKind": "subagent"}, "Task") is None
    assert subagent_content({"subagentChatUri": "u"}, "Task") == {"type": "subagent", "resource": "u", "title": "Task"}
