"""The event -> action translation, replayed over recorded event streams.

Each stream is what an ACP agent sent for one turn. The actions it becomes
must each fit the strict schema, and reduced through the chat reducer they
must build the turn a client would draw.
"""

from __future__ import annotations

import json

from ahpd import state
from ahpd.backends.port import PermissionOption, PermissionRequest
from ahpd.backends.translate import TurnTranslator
from tests.schema import fits

TURN = "t1"


def chat_with_active_turn() -> dict:
    chat = {
        "resource": "ahp-chat:/c",
        "title": "",
        "status": 1,
        "modifiedAt": "2026-01-01T00:00:00Z",
        "turns": [],
    }
    return state.reduce(
        "chat",
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": TURN,
            "startedAt": "2026-01-01T00:00:00Z",
            "message": {"text": "hi", "origin": {"kind": "user"}},
        },
    )


def replay(actions: list[dict], chat: dict | None = None) -> dict:
    chat = chat or chat_with_active_turn()
    for action in actions:
        fits("/actions/" + action["type"].replace("/", "~1"), action)
        new = state.reduce("chat", chat, action)
        assert new is not chat, f"{action['type']} changed nothing"
        chat = new
    return chat


def chunk(kind: str, text: str) -> dict:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


THOUGHT_THEN_REPLY = [
    chunk("agent_thought_chunk", "Thinking"),
    chunk("agent_thought_chunk", " about it."),
    chunk("agent_message_chunk", "Hello"),
    chunk("agent_message_chunk", ", world"),
    {"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "help", "description": "h"}]},
    chunk("agent_message_chunk", "!"),
]


def test_thought_then_reply_opens_each_part_once() -> None:
    t = TurnTranslator(TURN)
    actions = [a for u in THOUGHT_THEN_REPLY for a in t.feed(u)]
    assert [a["type"] for a in actions] == [
        "chat/responsePart",
        "chat/reasoning",
        "chat/responsePart",
        "chat/delta",
        "chat/delta",
    ]
    chat = replay(actions)
    parts = chat["activeTurn"]["responseParts"]
    assert [(p["kind"], p["content"]) for p in parts] == [
        ("reasoning", "Thinking about it."),
        ("markdown", "Hello, world!"),
    ]
    assert t.commands == [{"name": "help", "description": "h"}]


def test_the_same_stream_gives_the_same_actions() -> None:
    a = [x for u in THOUGHT_THEN_REPLY for x in TurnTranslator(TURN).feed(u)]
    b = [x for u in THOUGHT_THEN_REPLY for x in TurnTranslator(TURN).feed(u)]
    assert a == b


def test_a_tool_that_simply_runs() -> None:
    t = TurnTranslator(TURN)
    stream = [
        chunk("agent_message_chunk", "Let me look."),
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call-1",
            "title": "Read notes.txt",
            "kind": "read",
            "status": "pending",
            "rawInput": {"path": "notes.txt"},
        },
        {"sessionUpdate": "tool_call_update", "toolCallId": "call-1", "status": "in_progress"},
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "call-1",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "first line"}}],
        },
        chunk("agent_message_chunk", "Done."),
    ]
    actions = [a for u in stream for a in t.feed(u)]
    types = [a["type"] for a in actions]
    assert types == [
        "chat/responsePart",
        "chat/toolCallStart",
        "chat/toolCallReady",
        "chat/activityChanged",
        "chat/toolCallComplete",
        "chat/activityChanged",
        "chat/responsePart",
    ]
    assert actions[3]["activity"] == "Read notes.txt" and "activity" not in actions[5]
    assert actions[1]["_meta"] == {"toolKind": "read"}
    assert "activity" not in t.finish() and t.finish() == []  # already cleared
    assert actions[2]["confirmed"] == "not-needed"
    chat = replay(actions)
    parts = chat["activeTurn"]["responseParts"]
    call = parts[1]["toolCall"]
    assert call["status"] == "completed" and call["toolCallId"] == "call-1"
    assert call["success"] is True and call["confirmed"] == "not-needed"
    assert call["content"] == [{"type": "text", "text": "first line"}]
    fits("/$defs/ToolCallCompletedState", call)
    assert parts[2]["content"] == "Done."  # text after a tool opens a new part


def test_a_tool_that_asks_then_is_approved() -> None:
    t = TurnTranslator(TURN)
    actions = t.feed(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c2",
            "title": "Run ls",
            "kind": "execute",
            "status": "pending",
            "rawInput": {"command": "ls"},
        }
    )
    request = PermissionRequest(
        "r1",
        {"toolCallId": "c2", "title": "Run ls"},
        [
            PermissionOption("allow", "Allow once", "allow_once"),
            PermissionOption("deny", "Reject", "reject_once"),
        ],
    )
    actions += t.permission(request)
    ready = actions[-1]
    assert "confirmed" not in ready  # somebody is being asked
    assert [o["kind"] for o in ready["options"]] == ["approve", "deny"]
    confirm = {
        "type": "chat/toolCallConfirmed",
        "turnId": TURN,
        "toolCallId": "c2",
        "approved": True,
        "confirmed": "user-action",
        "selectedOptionId": "allow",
    }
    t.confirmed("c2", approved=True)
    actions.append(confirm)
    actions += t.feed({"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "in_progress"})
    actions += t.feed({"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "completed"})
    chat = replay(actions)
    call = chat["activeTurn"]["responseParts"][0]["toolCall"]
    assert call["status"] == "completed" and call["confirmed"] == "user-action"


def test_a_denied_tool_is_not_completed_again() -> None:
    t = TurnTranslator(TURN)
    actions = t.permission(
        PermissionRequest(
            "r",
            {"toolCallId": "c3", "title": "rm -rf"},
            [
                PermissionOption("a", "Allow", "allow_once"),
                PermissionOption("d", "Deny", "reject_once"),
            ],
        )
    )
    actions.append(
        {"type": "chat/toolCallConfirmed", "turnId": TURN, "toolCallId": "c3", "approved": False, "reason": "denied"}
    )
    t.confirmed("c3", approved=False)
    assert t.feed({"sessionUpdate": "tool_call_update", "toolCallId": "c3", "status": "failed"}) == []
    chat = replay(actions)
    assert chat["activeTurn"]["responseParts"][0]["toolCall"]["status"] == "cancelled"


def test_a_failed_tool_is_completed_unsuccessfully() -> None:
    t = TurnTranslator(TURN)
    actions = t.feed({"sessionUpdate": "tool_call", "toolCallId": "c4", "title": "Fetch", "status": "in_progress"})
    actions += t.feed(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c4",
            "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": "404"}}],
        }
    )
    complete = next(a for a in actions if a["type"] == "chat/toolCallComplete")
    assert complete["result"]["success"] is False and complete["result"]["error"]["message"] == "404"
    replay(actions)


def test_a_failed_command_without_words_says_its_title_failed() -> None:
    """A failed call whose content is only a terminal has no text to quote:
    its error names the call rather than the translator failing on it."""
    t = TurnTranslator(TURN)
    actions = t.feed({"sessionUpdate": "tool_call", "toolCallId": "c6", "title": "Run make", "status": "in_progress"})
    actions += t.feed(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c6",
            "status": "failed",
            "content": [{"type": "terminal", "terminalId": "ahp-terminal:/t1"}],
        }
    )
    complete = next(a for a in actions if a["type"] == "chat/toolCallComplete")
    assert complete["result"]["error"]["message"] == "Run make failed"
    assert complete["result"]["content"][0]["type"] == "terminal"
    replay(actions)


def test_an_update_for_a_call_never_started_starts_it() -> None:
    t = TurnTranslator(TURN)
    actions = t.feed({"sessionUpdate": "tool_call_update", "toolCallId": "c5", "title": "x", "status": "completed"})
    assert [a["type"] for a in actions] == ["chat/toolCallStart", "chat/toolCallReady", "chat/toolCallComplete"]
    replay(actions)


def test_a_plan_says_what_the_chat_is_doing() -> None:
    t = TurnTranslator(TURN)

    def plan(*statuses: str) -> dict:
        return {
            "sessionUpdate": "plan",
            "entries": [{"content": f"step {n}", "status": s, "priority": "medium"} for n, s in enumerate(statuses)],
        }

    actions = t.feed(plan("in_progress", "pending"))
    actions += t.feed(plan("in_progress", "pending"))  # nothing moved: nothing said
    actions += t.feed(plan("completed", "in_progress"))
    actions += t.feed(plan("completed", "completed"))
    assert [a.get("activity") for a in actions] == ["step 0", "step 1", None]
    chat = replay(actions)
    assert "activity" not in chat


def test_a_compaction_is_a_system_notification_part() -> None:
    t = TurnTranslator(TURN)
    actions = t.feed(chunk("agent_message_chunk", "before"))
    actions += t.feed(
        {
            "sessionUpdate": "system_notification",
            "content": {"type": "text", "text": "Compacted 12,000 tokens into 800"},
        }
    )
    actions += t.feed(chunk("agent_message_chunk", "after"))
    chat = replay(actions)
    parts = chat["activeTurn"]["responseParts"]
    assert [p["kind"] for p in parts] == ["markdown", "systemNotification", "markdown"]
    assert parts[1]["content"] == "Compacted 12,000 tokens into 800"


def test_an_agents_lone_surrogates_are_repaired_and_the_rest_kept() -> None:
    from ahpd.backends.translate import repair

    translator = TurnTranslator(TURN)
    actions = translator.feed(chunk("agent_message_chunk", "cut \ud83d here, joined \ud83d\ude00, kept é😀"))
    actions += translator.feed(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": "Read \udc00",
            "kind": "read",
            "status": "completed",
            "rawInput": {"p\ud800": ["\udfff"]},
        }
    )
    chat = replay(actions)
    assert chat["activeTurn"]["responseParts"][0]["content"] == "cut \ufffd here, joined \U0001f600, kept é😀"
    ready = next(a for a in actions if a["type"] == "chat/toolCallReady")
    assert ready["invocationMessage"] == "Read \ufffd"
    assert ready["toolInput"] == '{"p\ufffd": ["\ufffd"]}'
    for action in actions:
        json.dumps(action, ensure_ascii=False).encode("utf-8")  # every one has a JSON form
    clean = {"a": ["é", "x"], "b": "plain"}
    assert repair(clean) is clean  # nothing to repair: the very same object
