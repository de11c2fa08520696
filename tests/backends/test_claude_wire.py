"""The pure half of the Claude backend: SDK messages in, ACP-shaped updates out."""

from __future__ import annotations

from pathlib import Path

import pytest

sdk = pytest.importorskip("claude_agent_sdk")

from ahpd.backends.claude.offers import available_commands, models_from_init  # noqa: E402
from ahpd.backends.claude.wire import (  # noqa: E402
    StreamMapper,
    pending_edit,
    tool_title,
    usage_info,
)
from ahpd.protocol.strict_schema import validator  # noqa: E402


def _event(event: dict) -> sdk.StreamEvent:
    return sdk.StreamEvent(uuid="u", session_id="s", event=event)


def _assistant(*blocks: object, message_id: str = "m1") -> sdk.AssistantMessage:
    return sdk.AssistantMessage(content=list(blocks), model="claude-x", message_id=message_id)


def test_streamed_blocks_are_not_said_twice_and_unstreamed_ones_are_said_whole() -> None:
    mapper = StreamMapper()
    out = mapper.feed(_event({"type": "message_start", "message": {"id": "m1", "model": "claude-x"}}))
    out += mapper.feed(_event({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}))
    out += mapper.feed(
        _event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}})
    )
    out += mapper.feed(_assistant(sdk.TextBlock("Hi")))
    out += mapper.feed(_assistant(sdk.ThinkingBlock("unstreamed thought", "sig")))
    out += mapper.feed(_assistant(sdk.TextBlock("Another message"), message_id="m2"))
    assert out == [
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi"}},
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "unstreamed thought"}},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Another message"}},
    ]
    assert mapper.model == "claude-x"


def test_a_tool_call_is_announced_once_then_updated_then_completed() -> None:
    mapper = StreamMapper()
    mapper.feed(_event({"type": "message_start", "message": {"id": "m1"}}))
    start = mapper.feed(
        _event(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Grep", "input": {}},
            }
        )
    )
    block = mapper.feed(_assistant(sdk.ToolUseBlock("toolu_1", "Grep", {"pattern": "TODO"})))
    done = mapper.feed(sdk.UserMessage(content=[sdk.ToolResultBlock("toolu_1", [{"type": "text", "text": "a.py:1"}])]))
    failed = mapper.feed(sdk.UserMessage(content=[sdk.ToolResultBlock("toolu_2", "boom", is_error=True)]))
    assert [u["sessionUpdate"] for u in start + block + done] == ["tool_call", "tool_call_update", "tool_call_update"]
    assert start[0]["kind"] == "search" and start[0]["status"] == "pending"
    assert block[0]["title"] == "Search for TODO" and block[0]["rawInput"] == {"pattern": "TODO"}
    assert done[0]["status"] == "completed"
    assert done[0]["content"] == [{"type": "content", "content": {"type": "text", "text": "a.py:1"}}]
    # A result for a call nobody announced still draws a row.
    assert failed[0]["sessionUpdate"] == "tool_call" and failed[0]["status"] == "failed"


def test_compaction_becomes_a_system_notification() -> None:
    (update,) = StreamMapper().feed(
        sdk.SystemMessage(
            subtype="compact_boundary", data={"compact_metadata": {"trigger": "auto", "pre_tokens": 150000}}
        )
    )
    assert update["sessionUpdate"] == "system_notification"
    assert "150000 tokens" in update["content"]["text"]


@pytest.mark.parametrize(
    ("name", "tool_input", "title"),
    [
        ("Bash", {"command": "ls  -la\n"}, "Run ls -la"),
        ("Read", {"file_path": "/a/b.py"}, "Read /a/b.py"),
        ("MultiEdit", {"file_path": "/a/b.py"}, "Edit /a/b.py"),
        ("Glob", {"pattern": "**/*.py"}, "Search for **/*.py"),
        ("mcp__ahp__client1__openFile", {}, "client1__openFile"),
        ("Mystery", {}, "Mystery"),
    ],
)
def test_tool_titles(name: str, tool_input: dict, title: str) -> None:
    assert tool_title(name, tool_input) == title


def test_pending_edits(tmp_path: Path) -> None:
    existing = tmp_path / "a.txt"
    existing.write_text("x = 1\ny = 1\n")
    assert pending_edit("Write", {"file_path": "new.txt", "content": "hello"}, tmp_path) == {
        "type": "diff",
        "path": str(tmp_path / "new.txt"),
        "oldText": None,
        "newText": "hello",
    }
    multi = pending_edit(
        "MultiEdit",
        {
            "file_path": str(existing),
            "edits": [
                {"old_string": "1", "new_string": "2", "replace_all": True},
                {"old_string": "y", "new_string": "z"},
            ],
        },
        tmp_path,
    )
    assert multi is not None and multi["newText"] == "x = 2\nz = 2\n"
    assert (
        pending_edit("Edit", {"file_path": str(existing), "old_string": "absent", "new_string": "q"}, tmp_path) is None
    )
    assert pending_edit("Bash", {"command": "ls"}, tmp_path) is None


def test_usage_info_is_valid_with_little_or_much() -> None:
    small = usage_info({"input_tokens": 1, "output_tokens": 2})
    assert small == {"inputTokens": 1, "outputTokens": 2}
    full = usage_info(
        {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 4},
        cost_usd=0.5,
        model_usage={"claude-a": {"outputTokens": 2, "contextWindow": 1000}},
    )
    assert full is not None and full["model"] == "claude-a"
    assert full["_meta"]["ahpd.context"] == {"used": 8, "size": 1000}
    for info in (small, full):
        validator("/$defs/UsageInfo").validate(info)
    assert usage_info(None) is None


def test_models_and_commands_from_initialize() -> None:
    models = models_from_init(
        "claude",
        [
            {"value": "opus", "displayName": "Opus", "supportsEffort": True, "supportedEffortLevels": ["low", "xhigh"]},
            {"value": "plain", "displayName": "Plain"},
            {"displayName": "no id"},
        ],
    )
    for model in models:
        validator("/$defs/SessionModelInfo").validate(model)
    assert [m["id"] for m in models] == ["opus", "plain"]
    level = models[0]["configSchema"]["properties"]["thinkingLevel"]
    assert level["enum"] == ["low", "xhigh"] and level["enumLabels"] == ["Low", "Extra high"]
    assert available_commands([{"name": "compact", "description": "d", "argumentHint": "<x>"}, {"name": ""}]) == [
        {"name": "compact", "description": "d", "input": {"hint": "<x>"}}
    ]
