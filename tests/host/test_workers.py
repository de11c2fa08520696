"""A worker chat's URI is the reference host's ``buildSubagentChatUri``:
the session as its default chat encodes it, the call id as JavaScript's
``encodeURIComponent`` leaves it."""

from __future__ import annotations

from ahpd.host.sessions import default_chat_uri
from ahpd.host.workers import chat_uri


def test_a_worker_is_named_after_its_session_and_its_call() -> None:
    session = "ahp-session:/3fa78392-4f13-4b9c-a98f-91f79b2f97b4"
    encoded = default_chat_uri(session).removeprefix("ahp-chat://default/")
    assert chat_uri(session, "toolu_01AbC") == f"ahp-chat://subagent/{encoded}/toolu_01AbC"
    # What encodeURIComponent keeps, and what it escapes.
    assert chat_uri(session, "a-b_c.d!e~f*g'h(i)j").endswith("/a-b_c.d!e~f*g'h(i)j")
    assert chat_uri(session, "a/b c?d#e&f%").endswith("/a%2Fb%20c%3Fd%23e%26f%25")
    assert chat_uri("claude:/x", "c") != chat_uri("claude:/y", "c")
