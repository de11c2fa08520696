"""A worker chat's URI is the reference host's ``buildSubagentChatUri``:
the session as its default chat encodes it, the call id as JavaScript's
``encodeURIComponent`` leaves it."""

from __future__ import annotations

from ahpd.host.sessions.common import default_chat_uri
from ahpd.host.sessions.chats.workers import chat_uri


def test_a_worker_is_named_after_its_session_and_its_call() -> None:
    session = "ahp-session:/3fa78392-4f13-4b9c-a98f-91f79b2f97b4"
    encoded = default_chat_uri(session).removeprefix("ahp-chat://default/")
    assert chat_uri(session, "toolu_01AbC") == f"ahp-chat://subagent/{encoded}/toolu_01AbC"
    # What encodeURIComponent keeps, and what it escapes.
    assert chat_uri(session, "a-b_c.d!e~f*g'h(i)j").endswith("/a-b_c.d!e~f*g'h(i)j")
    assert chat_uri(session, "a/b c?d#e&f%").endswith("/a%2Fb%20c%3Fd%23e%26f%25")
    assert chat_uri("claude:/x", "c") != chat_uri("claude:/y", "c")


def test_a_task_call_read_back_from_a_transcript_has_the_hints_and_no_worker_link() -> None:
    """A conversation opened from what the backend kept has no worker chats:
    its Task calls carry the subagent hints, never a link to nothing, and a
    subagent's own updates (tagged) stay out of the spawning chat."""
    from ahpd.backends.port import PARENT_CALL_META, HistoryTurn
    from ahpd.host.sessions.chats.history import rebuild_turns

    task = {"description": "Look around", "prompt": "look", "subagent_type": "Explore"}
    updates = [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "toolu_t",
            "title": "Look around",
            "kind": "think",
            "status": "pending",
            "rawInput": task,
            "_meta": {"claudeCode": {"toolName": "Task"}},
        },
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "toolu_s",
            "title": "Run ls",
            "kind": "execute",
            "status": "completed",
            "_meta": {"claudeCode": {"toolName": "Bash"}, PARENT_CALL_META: "toolu_t"},
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "toolu_t",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "found"}}],
        },
    ]
    [turn] = rebuild_turns([HistoryTurn(text="delegate", updates=updates)], prefix="t", at="2026-12-03T00:00:00Z")
    [call] = [p["toolCall"] for p in turn["responseParts"] if p["kind"] == "toolCall"]
    assert call["toolCallId"] == "toolu_t" and call["status"] == "completed"
    assert call["_meta"] == {
        "toolKind": "subagent",
        "subagentDescription": "Look around",
        "subagentAgentName": "Explore",
    }
    assert call["content"] == [{"type": "text", "text": "found"}]
