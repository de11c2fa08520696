"""The pure pieces behind past sessions, customizations and pending edits:
no CLI, no daemon."""

from __future__ import annotations

from pathlib import Path

from ahpd.backends.claude.offers import available_commands
from ahpd.backends.port import HistoryTurn, PermissionOption, PermissionRequest
from ahpd.backends.translate import TurnTranslator, pending_edits
from ahpd.host.sessions.catalogue import command_customizations
from ahpd.host.sessions.chats.history import rebuild_turns
from tests.schema import fits


def test_skills_named_by_a_turns_init_are_marked() -> None:
    commands = [{"name": "compact", "description": "c", "argumentHint": "<x>"}, {"name": "my-skill"}]
    marked = available_commands(commands, skills=["my-skill", "not-a-command"])
    assert marked == [
        {"name": "compact", "description": "c", "input": {"hint": "<x>"}},
        {"name": "my-skill", "description": "", "_meta": {"ahpd.skill": True}},
    ]


def test_commands_become_one_container_per_kind(tmp_path: Path) -> None:
    commands = available_commands(
        [{"name": "compact", "description": "c", "argumentHint": "<x>"}, {"name": "my-skill", "description": "s"}],
        skills=["my-skill"],
    )
    dirs = {"prompt": ".claude/commands", "skill": ".claude/skills"}
    prompts, skills = command_customizations("claude", commands, tmp_path, dirs)
    for container in (prompts, skills):
        fits("/$defs/Customization", container)
        fits("/$defs/DirectoryCustomization", container)
    assert (prompts["contents"], skills["contents"]) == ("prompt", "skill")
    assert prompts["children"][0]["uri"] == (tmp_path / ".claude/commands/compact.md").as_uri()
    assert prompts["children"][0]["_meta"] == {"ahpd.argumentHint": "<x>"}
    assert skills["children"][0]["uri"] == (tmp_path / ".claude/skills/my-skill/SKILL.md").as_uri()
    # Without a convention, the session's folder holds them.
    [bare] = command_customizations("demo", [{"name": "help"}], tmp_path)
    assert bare["uri"] == tmp_path.as_uri() and bare["children"][0]["uri"].startswith(tmp_path.as_uri() + "#")
    assert command_customizations("demo", [], tmp_path) == []


def test_a_pending_edit_is_a_file_edit(tmp_path: Path) -> None:
    old, new = str(tmp_path / "a.txt"), str(tmp_path / "b.txt")
    content = [
        {"type": "diff", "path": old, "oldText": "x\n", "newText": "y\n"},
        {"type": "content", "content": {"type": "text", "text": "not a diff"}},
        {"type": "diff", "path": new, "oldText": None, "newText": "new\n"},
    ]
    (first_block, first), (_, second) = pending_edits("toolu_1", content)
    assert first_block["newText"] == "y\n"
    assert first["after"]["content"]["uri"] == "ahp-edit://pending/toolu_1"
    assert first["before"] == {"uri": Path(old).as_uri(), "content": {"uri": Path(old).as_uri()}}
    assert second["after"]["content"]["uri"] == "ahp-edit://pending/toolu_1/1" and "before" not in second
    for edit in (first, second):
        fits("/$defs/FileEdit", edit)

    translator = TurnTranslator("t1")
    actions = translator.permission(
        PermissionRequest(
            request_id="p1",
            options=[PermissionOption("allow", "Allow", "allow_once")],
            tool_call={"toolCallId": "toolu_1", "title": "Edit a.txt", "kind": "edit", "content": content[:1]},
        )
    )
    ready = actions[-1]
    fits("/$defs/ChatToolCallReadyAction", ready)
    assert ready["edits"] == {"items": [first]} and "confirmed" not in ready


def test_a_rebuilt_turn_has_the_live_shapes() -> None:
    usage = {"inputTokens": 3, "outputTokens": 2, "model": "m"}
    history = [
        HistoryTurn(
            text="first",
            usage=usage,
            updates=[
                {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}},
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "c1",
                    "title": "Run ls",
                    "kind": "execute",
                    "status": "pending",
                    "rawInput": {"command": "ls"},
                },
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "c1",
                    "status": "failed",
                    "content": [{"type": "content", "content": {"type": "text", "text": "no such dir"}}],
                },
                {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Sorry."}},
            ],
        ),
        # Interrupted mid-call: the call never finished.
        HistoryTurn(
            text="second",
            updates=[
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "c2",
                    "title": "Read x",
                    "kind": "read",
                    "status": "pending",
                },
            ],
        ),
    ]
    turns = rebuild_turns(history, prefix="turn-x", at="2026-01-01T00:00:00.000Z")
    fits("/$defs/ChatState", {"resource": "r", "title": "", "status": 1, "modifiedAt": "x", "turns": turns})
    first, second = turns
    assert [t["id"] for t in turns] == ["turn-x-1", "turn-x-2"] and first["usage"] == usage
    assert [p["kind"] for p in first["responseParts"]] == ["reasoning", "toolCall", "markdown"]
    call = first["responseParts"][1]["toolCall"]
    assert call["status"] == "completed" and call["success"] is False
    assert call["confirmed"] == "not-needed" and call["invocationMessage"] == "Run ls"
    assert second["responseParts"][0]["toolCall"]["status"] == "cancelled"
