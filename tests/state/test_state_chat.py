"""Chat reducer: turn lifecycle, streaming, tool calls, input, pending messages."""

from __future__ import annotations

from typing import Any

import pytest

from state_helpers import run, same

IDLE, ERROR, IN_PROGRESS, INPUT_NEEDED, IS_READ, IS_ARCHIVED = 1, 2, 8, 24, 32, 64
MSG = {"text": "hello", "kind": "user"}


def chat(**extra: Any) -> dict[str, Any]:
    base = {
        "resource": "ahp-chat:/c1",
        "title": "Chat",
        "status": IDLE,
        "modifiedAt": "2026-01-01T00:00:00.000Z",
        "turns": [],
    }
    return {**base, **extra}


def started(turn_id: str = "t1", **extra: Any) -> dict[str, Any]:
    return {
        "type": "chat/turnStarted",
        "turnId": turn_id,
        "startedAt": "2026-10-10T11:00:00.000Z",
        "message": MSG,
        **extra,
    }


def active(*parts: dict[str, Any], status: int = IN_PROGRESS, **extra: Any) -> dict[str, Any]:
    turn = {"id": "t1", "startedAt": "2026-10-10T11:00:00.000Z", "message": MSG, "responseParts": list(parts)}
    return chat(status=status, activeTurn=turn, **extra)


def md(pid: str, content: str = "") -> dict[str, Any]:
    return {"kind": "markdown", "id": pid, "content": content}


def tool(status: str, tid: str = "tc1", **fields: Any) -> dict[str, Any]:
    call = {"toolCallId": tid, "toolName": "shell", "displayName": "Shell", "status": status, **fields}
    return {"kind": "toolCall", "toolCall": call}


def parts(state: dict[str, Any]) -> list[dict[str, Any]]:
    return state["activeTurn"]["responseParts"]


def call(state: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return parts(state)[index]["toolCall"]


# ── Turn lifecycle ───────────────────────────────────────────────────────────


def test_turn_started_opens_a_turn_marks_unread_and_moves_modified_at_to_its_start() -> None:
    state = run("chat", chat(status=IDLE | IS_READ | IS_ARCHIVED), started())
    assert state["activeTurn"] == {
        "id": "t1",
        "startedAt": "2026-10-10T11:00:00.000Z",
        "message": MSG,
        "responseParts": [],
    }
    assert state["status"] == IN_PROGRESS | IS_ARCHIVED
    assert state["modifiedAt"] == "2026-10-10T11:00:00.000Z"


@pytest.mark.parametrize(
    ("started_at", "duration", "ended_at"),
    [
        ("2026-10-10T11:00:00.000Z", 1234, "2026-10-10T11:00:01.234Z"),
        ("2026-10-10T23:59:59.999Z", 2, "2026-10-11T00:00:00.001Z"),
        ("2026-10-10T13:00:00.5+02:00", 0, "2026-10-10T11:00:00.500Z"),  # read as JS reads it: UTC out
        ("2026-10-10T11:00:00.000Z", -50, "2026-10-10T11:00:00.000Z"),  # the clamped duration
        ("2026-10-10T11:00:00.000Z", 10.9, "2026-10-10T11:00:00.010Z"),
    ],
)
@pytest.mark.parametrize("ending", ["chat/turnComplete", "chat/turnCancelled", "chat/error"])
def test_a_turn_ends_at_its_start_plus_its_duration(started_at, duration, ended_at, ending) -> None:
    end = {"type": ending, "turnId": "t1", "duration": duration}
    if ending == "chat/error":
        end["part"] = {"kind": "error", "error": {"errorType": "x", "message": "m"}}
    state = run("chat", chat(), started(startedAt=started_at), end)
    assert state["modifiedAt"] == ended_at


def test_an_unreadable_start_leaves_modified_at_where_the_start_put_it() -> None:
    state = run(
        "chat", chat(), started(startedAt="yesterday"), {"type": "chat/turnComplete", "turnId": "t1", "duration": 5}
    )
    assert state["modifiedAt"] == "yesterday" and state["turns"][0]["duration"] == 5


def test_input_answers_truncation_and_resume_leave_modified_at_alone() -> None:
    request = {"id": "r1", "questions": [{"id": "q1", "kind": "text", "title": "Why?"}]}
    state = run("chat", chat(), started())
    moments = [state["modifiedAt"]]
    for action in (
        {"type": "chat/inputRequested", "request": request},
        {
            "type": "chat/inputAnswerChanged",
            "requestId": "r1",
            "questionId": "q1",
            "answer": {"kind": "text", "value": "because"},
        },
        {"type": "chat/inputCompleted", "requestId": "r1", "response": "accept"},
        {
            "type": "chat/error",
            "turnId": "t1",
            "duration": 60_000,
            "part": {"kind": "error", "error": {"errorType": "x", "message": "m"}, "resumable": True},
        },
        {"type": "chat/turnResume", "turnId": "t1"},
        {"type": "chat/truncated"},
    ):
        before = state
        state = run("chat", state, action)
        assert state is not before, action["type"]
        moments.append(state["modifiedAt"])
    assert moments == ["2026-10-10T11:00:00.000Z"] * 4 + ["2026-10-10T11:01:00.000Z"] * 3


def test_turn_started_from_a_queued_message_consumes_it() -> None:
    queued = [{"id": "q1", "message": MSG}, {"id": "q2", "message": MSG}]
    state = run("chat", chat(queuedMessages=queued), started(queuedMessageId="q1"))
    assert state["queuedMessages"] == [{"id": "q2", "message": MSG}]
    state = run("chat", chat(queuedMessages=queued[:1]), started(queuedMessageId="q1"))
    assert "queuedMessages" not in state


def test_turn_started_can_consume_the_steering_message() -> None:
    state = run("chat", chat(steeringMessage={"id": "s1", "message": MSG}), started(queuedMessageId="s1"))
    assert "steeringMessage" not in state


def test_turn_started_without_queued_id_keeps_pending_messages() -> None:
    pending = {"steeringMessage": {"id": "s1", "message": MSG}, "queuedMessages": [{"id": "q1", "message": MSG}]}
    state = run("chat", chat(**pending), started())
    assert state["steeringMessage"] == pending["steeringMessage"]
    assert state["queuedMessages"] == pending["queuedMessages"]


def test_delta_appends_to_the_markdown_part() -> None:
    state = run(
        "chat",
        active(),
        {"type": "chat/responsePart", "turnId": "t1", "part": md("p1")},
        {"type": "chat/delta", "turnId": "t1", "partId": "p1", "content": "Hel"},
        {"type": "chat/delta", "turnId": "t1", "partId": "p1", "content": "lo"},
    )
    assert parts(state) == [md("p1", "Hello")]


@pytest.mark.parametrize(
    "state",
    [
        chat(),  # no active turn
        active(md("p1")),
    ],
)
def test_delta_to_a_part_nobody_opened_is_a_no_op(state: dict[str, Any]) -> None:
    same("chat", state, {"type": "chat/delta", "turnId": "t1", "partId": "nope", "content": "x"})


def test_delta_with_a_wrong_turn_id_is_a_no_op() -> None:
    same("chat", active(md("p1")), {"type": "chat/delta", "turnId": "t0", "partId": "p1", "content": "x"})


def test_delta_naming_a_reasoning_part_is_a_no_op() -> None:
    state = active({"kind": "reasoning", "id": "r1", "content": "think"})
    same("chat", state, {"type": "chat/delta", "turnId": "t1", "partId": "r1", "content": "x"})


def test_delta_naming_a_tool_call_is_a_no_op() -> None:
    same("chat", active(tool("streaming")), {"type": "chat/delta", "turnId": "t1", "partId": "tc1", "content": "x"})


def test_delta_skips_parts_without_an_id() -> None:
    state = active({"kind": "contentRef", "uri": "file:///x"}, md("p1", "a"))
    state = run("chat", state, {"type": "chat/delta", "turnId": "t1", "partId": "p1", "content": "b"})
    assert parts(state)[1] == md("p1", "ab")


def test_reasoning_appends_to_the_reasoning_part_only() -> None:
    state = active({"kind": "reasoning", "id": "r1", "content": "a"}, md("p1", "m"))
    state = run("chat", state, {"type": "chat/reasoning", "turnId": "t1", "partId": "r1", "content": "b"})
    assert parts(state)[0]["content"] == "ab"
    same("chat", state, {"type": "chat/reasoning", "turnId": "t1", "partId": "p1", "content": "x"})


def test_response_part_needs_the_active_turn() -> None:
    same("chat", active(), {"type": "chat/responsePart", "turnId": "t0", "part": md("p1")})
    same("chat", chat(), {"type": "chat/responsePart", "turnId": "t1", "part": md("p1")})


def test_response_part_ignores_error_parts() -> None:
    part = {"kind": "error", "error": {"errorType": "x", "message": "boom"}}
    same("chat", active(), {"type": "chat/responsePart", "turnId": "t1", "part": part})


def test_usage_sets_usage_on_the_active_turn() -> None:
    usage = {"inputTokens": 10, "outputTokens": 5}
    state = run("chat", active(), {"type": "chat/usage", "turnId": "t1", "usage": usage})
    assert state["activeTurn"]["usage"] == usage
    same("chat", active(), {"type": "chat/usage", "turnId": "t2", "usage": usage})


def test_turn_complete_finalizes_the_turn() -> None:
    usage = {"inputTokens": 1, "outputTokens": 2}
    state = active(md("p1", "done"), status=IN_PROGRESS | IS_ARCHIVED)
    state["activeTurn"]["usage"] = usage
    state = run("chat", state, {"type": "chat/turnComplete", "turnId": "t1", "duration": 1234})
    assert "activeTurn" not in state
    assert state["turns"] == [
        {
            "id": "t1",
            "startedAt": "2026-10-10T11:00:00.000Z",
            "duration": 1234,
            "message": MSG,
            "responseParts": [md("p1", "done")],
            "usage": usage,
            "state": "complete",
        }
    ]
    assert state["status"] == IDLE | IS_ARCHIVED
    assert state["modifiedAt"] == "2026-10-10T11:00:01.234Z"


def test_turn_cancelled_finalizes_as_cancelled() -> None:
    state = run("chat", active(), {"type": "chat/turnCancelled", "turnId": "t1", "duration": 5})
    assert state["turns"][0]["state"] == "cancelled"
    assert state["status"] == IDLE


def test_error_appends_the_error_part_and_sets_error_status() -> None:
    part = {"kind": "error", "error": {"errorType": "rate", "message": "slow down"}, "resumable": True}
    state = run("chat", active(md("p1")), {"type": "chat/error", "turnId": "t1", "duration": 9, "part": part})
    turn = state["turns"][0]
    assert turn["state"] == "error"
    assert turn["responseParts"] == [md("p1"), part]
    assert "error" not in turn
    assert state["status"] == ERROR


@pytest.mark.parametrize("kind", ["chat/turnComplete", "chat/turnCancelled", "chat/error"])
def test_ending_a_turn_with_a_wrong_turn_id_is_a_no_op(kind: str) -> None:
    action = {
        "type": kind,
        "turnId": "t0",
        "duration": 1,
        "part": {"kind": "error", "error": {"errorType": "e", "message": "m"}},
    }
    same("chat", active(), action)
    same("chat", chat(), {**action, "turnId": "t1"})


def test_turn_duration_is_clamped_to_zero() -> None:
    state = run("chat", active(), {"type": "chat/turnComplete", "turnId": "t1", "duration": -50})
    assert state["turns"][0]["duration"] == 0


def test_turn_complete_force_cancels_in_progress_tool_calls() -> None:
    state = active(
        tool("streaming", "a", partialInput='{"x'),
        tool("running", "b", invocationMessage="Running", toolInput="ls", confirmed="not-needed"),
        tool("pending-confirmation", "c", invocationMessage="Run?", toolInput="rm", options=[]),
        tool(
            "auth-required",
            "d",
            invocationMessage="Auth",
            toolInput="q",
            contributor={"kind": "mcp", "customizationId": "m"},
            auth={"resource": "r"},
        ),
        tool("completed", "e", invocationMessage="Did", toolInput="", success=True, confirmed="not-needed"),
        tool("cancelled", "f", invocationMessage="No", reason="denied"),
        status=INPUT_NEEDED,
    )
    state = run("chat", state, {"type": "chat/turnComplete", "turnId": "t1", "duration": 3})
    calls = [p["toolCall"] for p in state["turns"][0]["responseParts"]]
    assert calls[0] == {
        "toolCallId": "a",
        "toolName": "shell",
        "displayName": "Shell",
        "status": "cancelled",
        "invocationMessage": "",
        "reason": "skipped",
    }
    assert calls[1] == {
        "toolCallId": "b",
        "toolName": "shell",
        "displayName": "Shell",
        "status": "cancelled",
        "invocationMessage": "Running",
        "toolInput": "ls",
        "reason": "skipped",
    }
    assert calls[2]["status"] == "cancelled" and calls[2]["reason"] == "skipped" and "options" not in calls[2]
    assert calls[3]["status"] == "cancelled" and calls[3]["contributor"] == {"kind": "mcp", "customizationId": "m"}
    assert "auth" not in calls[3]
    assert calls[4]["status"] == "completed" and calls[5]["reason"] == "denied"
    assert state["status"] == IDLE


def test_turn_resume_reopens_the_latest_resumable_errored_turn() -> None:
    err = {"kind": "error", "error": {"errorType": "net", "message": "x"}, "resumable": True}
    state = run(
        "chat",
        active(md("p1", "partial"), status=IN_PROGRESS | IS_READ),
        {"type": "chat/error", "turnId": "t1", "duration": 7, "part": err},
        {"type": "chat/isReadChanged", "isRead": True},
        {"type": "chat/turnResume", "turnId": "t1"},
    )
    assert state["turns"] == []
    assert state["activeTurn"] == {
        "id": "t1",
        "startedAt": "2026-10-10T11:00:00.000Z",
        "message": MSG,
        "responseParts": [md("p1", "partial"), err],
    }
    assert state["status"] == IN_PROGRESS
    # A second failure appends another error part in stream order.
    state = run("chat", state, {"type": "chat/error", "turnId": "t1", "duration": 1, "part": err})
    assert state["turns"][0]["responseParts"] == [md("p1", "partial"), err, err]


def _errored(resumable: Any = True, state: str = "error") -> dict[str, Any]:
    err = {"kind": "error", "error": {"errorType": "net", "message": "x"}}
    if resumable is not None:
        err["resumable"] = resumable
    turn = {"id": "t1", "message": MSG, "responseParts": [err], "state": state}
    return chat(status=ERROR, turns=[turn])


@pytest.mark.parametrize(
    "state",
    [
        _errored(resumable=False),
        _errored(resumable=None),
        _errored(state="complete"),
        {
            **_errored(),
            "turns": [*_errored()["turns"], {"id": "t2", "message": MSG, "responseParts": [], "state": "complete"}],
        },
        {**_errored(), "activeTurn": {"id": "t9", "message": MSG, "responseParts": []}},
        chat(),
    ],
)
def test_turn_resume_preconditions(state: dict[str, Any]) -> None:
    same("chat", state, {"type": "chat/turnResume", "turnId": "t1"})


def test_turn_resume_needs_the_error_part_last() -> None:
    state = _errored()
    state["turns"][0]["responseParts"].append(md("p9"))
    same("chat", state, {"type": "chat/turnResume", "turnId": "t1"})


def test_truncated_keeps_turns_up_to_the_named_turn_and_drops_the_active_one() -> None:
    turns = [{"id": f"t{i}", "message": MSG, "responseParts": [], "state": "complete"} for i in range(3)]
    state = run("chat", active(turns=turns, turnsNextCursor="c"), {"type": "chat/truncated", "turnId": "t1"})
    assert [t["id"] for t in state["turns"]] == ["t0", "t1"]
    assert "activeTurn" not in state and state["status"] == IDLE
    assert state["turnsNextCursor"] == "c"
    same("chat", state, {"type": "chat/truncated", "turnId": "unknown"})


def test_truncated_without_turn_id_clears_everything_and_the_cursor() -> None:
    turns = [{"id": "t0", "message": MSG, "responseParts": [], "state": "complete"}]
    state = run("chat", active(turns=turns, turnsNextCursor="c"), {"type": "chat/truncated"})
    assert state["turns"] == [] and "turnsNextCursor" not in state and "activeTurn" not in state


def test_turns_loaded_prepends_older_turns_and_dedupes() -> None:
    t = lambda i: {"id": f"t{i}", "message": MSG, "responseParts": [], "state": "complete"}  # noqa: E731
    state = run(
        "chat",
        chat(turns=[t(2), t(3)], turnsNextCursor="c1"),
        {"type": "chat/turnsLoaded", "turns": [t(0), t(1), t(2)], "turnsNextCursor": "c0"},
    )
    assert [x["id"] for x in state["turns"]] == ["t0", "t1", "t2", "t3"]
    assert state["turnsNextCursor"] == "c0"
    state = run("chat", state, {"type": "chat/turnsLoaded", "turns": []})
    assert "turnsNextCursor" not in state


# ── Tool calls ───────────────────────────────────────────────────────────────


def test_tool_call_full_lifecycle() -> None:
    options = [{"id": "once", "label": "Allow once", "group": "allow"}]
    state = run(
        "chat",
        active(),
        {
            "type": "chat/toolCallStart",
            "turnId": "t1",
            "toolCallId": "tc1",
            "toolName": "shell",
            "displayName": "Shell",
        },
        {
            "type": "chat/toolCallDelta",
            "turnId": "t1",
            "toolCallId": "tc1",
            "content": '{"cmd":',
            "invocationMessage": "Preparing",
        },
        {"type": "chat/toolCallDelta", "turnId": "t1", "toolCallId": "tc1", "content": '"ls"}'},
    )
    assert call(state) == {
        "toolCallId": "tc1",
        "toolName": "shell",
        "displayName": "Shell",
        "status": "streaming",
        "partialInput": '{"cmd":"ls"}',
        "invocationMessage": "Preparing",
    }
    state = run(
        "chat",
        state,
        {
            "type": "chat/toolCallReady",
            "turnId": "t1",
            "toolCallId": "tc1",
            "invocationMessage": "Run ls",
            "toolInput": '{"cmd":"ls"}',
            "options": options,
        },
    )
    assert call(state) == {
        "toolCallId": "tc1",
        "toolName": "shell",
        "displayName": "Shell",
        "status": "pending-confirmation",
        "invocationMessage": "Run ls",
        "toolInput": '{"cmd":"ls"}',
        "options": options,
    }
    assert state["status"] == INPUT_NEEDED
    state = run(
        "chat",
        state,
        {
            "type": "chat/toolCallConfirmed",
            "turnId": "t1",
            "toolCallId": "tc1",
            "approved": True,
            "confirmed": "user-action",
            "selectedOptionId": "once",
        },
    )
    assert call(state)["status"] == "running"
    assert call(state)["selectedOption"] == options[0]
    assert state["status"] == IN_PROGRESS
    state = run(
        "chat",
        state,
        {
            "type": "chat/toolCallContentChanged",
            "turnId": "t1",
            "toolCallId": "tc1",
            "content": [{"type": "text", "text": "a"}],
        },
    )
    assert call(state)["content"] == [{"type": "text", "text": "a"}]
    result = {"success": True, "pastTenseMessage": "Ran ls", "content": [{"type": "text", "text": "a\nb"}]}
    state = run("chat", state, {"type": "chat/toolCallComplete", "turnId": "t1", "toolCallId": "tc1", "result": result})
    assert call(state) == {
        "toolCallId": "tc1",
        "toolName": "shell",
        "displayName": "Shell",
        "status": "completed",
        "invocationMessage": "Run ls",
        "toolInput": '{"cmd":"ls"}',
        "confirmed": "user-action",
        "selectedOption": options[0],
        **result,
    }


def test_tool_call_ready_with_confirmed_goes_straight_to_running() -> None:
    state = run(
        "chat",
        active(tool("streaming")),
        {
            "type": "chat/toolCallReady",
            "turnId": "t1",
            "toolCallId": "tc1",
            "invocationMessage": "Go",
            "toolInput": "x",
            "confirmed": "not-needed",
        },
    )
    assert call(state) == {
        "toolCallId": "tc1",
        "toolName": "shell",
        "displayName": "Shell",
        "status": "running",
        "invocationMessage": "Go",
        "toolInput": "x",
        "confirmed": "not-needed",
    }
    assert state is not None and state["status"] == IN_PROGRESS


def test_tool_call_ready_sends_a_running_tool_back_to_confirmation() -> None:
    state = active(tool("running", invocationMessage="Go", toolInput="x", confirmed="not-needed"))
    state = run(
        "chat",
        state,
        {"type": "chat/toolCallReady", "turnId": "t1", "toolCallId": "tc1", "invocationMessage": "Needs write access"},
    )
    assert call(state)["status"] == "pending-confirmation"
    assert call(state)["toolInput"] == "x"
    assert call(state)["invocationMessage"] == "Needs write access"
    assert state["status"] == INPUT_NEEDED


def test_tool_call_ready_refreshes_a_pending_call_and_keeps_what_it_omits() -> None:
    risk = {"status": "loading"}
    state = active(
        tool(
            "pending-confirmation",
            invocationMessage="A",
            toolInput="x",
            confirmationTitle="Run",
            riskAssessment=risk,
            editable=False,
        ),
        status=INPUT_NEEDED,
    )
    done = {"status": "complete", "risk": "low"}
    state = run(
        "chat",
        state,
        {
            "type": "chat/toolCallReady",
            "turnId": "t1",
            "toolCallId": "tc1",
            "invocationMessage": "B",
            "riskAssessment": done,
        },
    )
    tc = call(state)
    assert tc["riskAssessment"] == done and tc["confirmationTitle"] == "Run" and tc["editable"] is False
    assert tc["invocationMessage"] == "B" and tc["toolInput"] == "x"


def test_tool_call_ready_ignores_finished_calls() -> None:
    for finished in (
        tool("completed", invocationMessage="x", success=True),
        tool("cancelled", invocationMessage="x", reason="denied"),
    ):
        same(
            "chat",
            active(finished),
            {"type": "chat/toolCallReady", "turnId": "t1", "toolCallId": "tc1", "invocationMessage": "again"},
        )


def test_tool_call_ready_refines_intention_and_contributor_without_changing_ownership() -> None:
    mcp = {"kind": "mcp", "customizationId": "srv"}
    state = run(
        "chat",
        active(tool("streaming", intention="early")),
        {
            "type": "chat/toolCallReady",
            "turnId": "t1",
            "toolCallId": "tc1",
            "invocationMessage": "Go",
            "contributor": mcp,
            "intention": "final",
        },
    )
    assert call(state)["contributor"] == mcp and call(state)["intention"] == "final"
    client = {"kind": "client", "clientId": "c1"}
    other = {"kind": "client", "clientId": "c2"}
    state = run(
        "chat",
        active(tool("streaming", contributor=client)),
        {
            "type": "chat/toolCallReady",
            "turnId": "t1",
            "toolCallId": "tc1",
            "invocationMessage": "Go",
            "contributor": other,
        },
    )
    assert call(state)["contributor"] == client
    state = run(
        "chat",
        active(tool("streaming")),
        {
            "type": "chat/toolCallReady",
            "turnId": "t1",
            "toolCallId": "tc1",
            "invocationMessage": "Go",
            "contributor": client,
        },
    )
    assert "contributor" not in call(state)


def test_tool_call_denied_is_cancelled_with_the_reason() -> None:
    options = [{"id": "no", "label": "Deny", "group": "deny"}]
    state = active(
        tool("pending-confirmation", invocationMessage="Run?", toolInput="x", options=options), status=INPUT_NEEDED
    )
    suggestion = {"text": "try y", "kind": "user"}
    state = run(
        "chat",
        state,
        {
            "type": "chat/toolCallConfirmed",
            "turnId": "t1",
            "toolCallId": "tc1",
            "approved": False,
            "reason": "denied",
            "reasonMessage": "no",
            "userSuggestion": suggestion,
            "selectedOptionId": "no",
        },
    )
    assert call(state) == {
        "toolCallId": "tc1",
        "toolName": "shell",
        "displayName": "Shell",
        "status": "cancelled",
        "invocationMessage": "Run?",
        "toolInput": "x",
        "reason": "denied",
        "reasonMessage": "no",
        "userSuggestion": suggestion,
        "selectedOption": options[0],
    }
    assert state["status"] == IN_PROGRESS


def test_edited_tool_input_replaces_inline_input_only() -> None:
    approve = {
        "type": "chat/toolCallConfirmed",
        "turnId": "t1",
        "toolCallId": "tc1",
        "approved": True,
        "confirmed": "user-action",
        "editedToolInput": "edited",
    }
    state = run("chat", active(tool("pending-confirmation", invocationMessage="m", toolInput="orig")), approve)
    assert call(state)["toolInput"] == "edited"
    ref = {"uri": "ahp-resource:/input"}
    state = run("chat", active(tool("pending-confirmation", invocationMessage="m", toolInput=ref)), approve)
    assert call(state)["toolInput"] == ref


def test_tool_call_complete_from_pending_confirmation_defaults_confirmed() -> None:
    state = run(
        "chat",
        active(tool("pending-confirmation", invocationMessage="m", toolInput="x")),
        {
            "type": "chat/toolCallComplete",
            "turnId": "t1",
            "toolCallId": "tc1",
            "result": {"success": False, "error": {"message": "nope"}},
        },
    )
    assert call(state)["status"] == "completed" and call(state)["confirmed"] == "not-needed"


def test_result_confirmation_approved_and_denied() -> None:
    options = [{"id": "o", "label": "Once", "group": "allow"}]
    running = active(
        tool("running", invocationMessage="m", toolInput="x", confirmed="user-action", selectedOption=options[0])
    )
    complete = {
        "type": "chat/toolCallComplete",
        "turnId": "t1",
        "toolCallId": "tc1",
        "requiresResultConfirmation": True,
        "result": {"success": True, "pastTenseMessage": "did"},
    }
    pending = run("chat", running, complete)
    assert call(pending)["status"] == "pending-result-confirmation"
    assert pending["status"] == INPUT_NEEDED
    approved = run(
        "chat", pending, {"type": "chat/toolCallResultConfirmed", "turnId": "t1", "toolCallId": "tc1", "approved": True}
    )
    assert call(approved) == {
        "toolCallId": "tc1",
        "toolName": "shell",
        "displayName": "Shell",
        "status": "completed",
        "invocationMessage": "m",
        "toolInput": "x",
        "confirmed": "user-action",
        "selectedOption": options[0],
        "success": True,
        "pastTenseMessage": "did",
    }
    assert approved["status"] == IN_PROGRESS
    denied = run(
        "chat",
        pending,
        {"type": "chat/toolCallResultConfirmed", "turnId": "t1", "toolCallId": "tc1", "approved": False},
    )
    assert call(denied) == {
        "toolCallId": "tc1",
        "toolName": "shell",
        "displayName": "Shell",
        "status": "cancelled",
        "invocationMessage": "m",
        "toolInput": "x",
        "reason": "result-denied",
        "selectedOption": options[0],
    }


@pytest.mark.parametrize(
    ("part", "action"),
    [
        (tool("running", invocationMessage="m"), {"type": "chat/toolCallDelta", "content": "x"}),
        (
            tool("running", invocationMessage="m"),
            {"type": "chat/toolCallConfirmed", "approved": True, "confirmed": "user-action"},
        ),
        (tool("streaming"), {"type": "chat/toolCallComplete", "result": {"success": True}}),
        (tool("running", invocationMessage="m"), {"type": "chat/toolCallResultConfirmed", "approved": True}),
        (tool("pending-confirmation", invocationMessage="m"), {"type": "chat/toolCallContentChanged", "content": []}),
        (tool("streaming"), {"type": "chat/toolCallAuthRequired", "auth": {}}),
        (tool("running", invocationMessage="m"), {"type": "chat/toolCallAuthResolved"}),
    ],
)
def test_tool_call_transitions_from_the_wrong_status_are_no_ops(part: dict[str, Any], action: dict[str, Any]) -> None:
    same("chat", active(part), {**action, "turnId": "t1", "toolCallId": "tc1"})


@pytest.mark.parametrize(
    "action",
    [
        {"type": "chat/toolCallDelta", "content": "x"},
        {"type": "chat/toolCallReady", "invocationMessage": "m"},
        {"type": "chat/toolCallConfirmed", "approved": True, "confirmed": "user-action"},
        {"type": "chat/toolCallComplete", "result": {"success": True}},
        {"type": "chat/toolCallContentChanged", "content": []},
    ],
)
def test_tool_call_actions_for_unknown_ids_or_turns_are_no_ops(action: dict[str, Any]) -> None:
    state = active(tool("streaming"))
    same("chat", state, {**action, "turnId": "t1", "toolCallId": "other"})
    same("chat", state, {**action, "turnId": "t0", "toolCallId": "tc1"})


def test_tool_call_start_needs_the_active_turn() -> None:
    same(
        "chat",
        active(),
        {"type": "chat/toolCallStart", "turnId": "t0", "toolCallId": "x", "toolName": "n", "displayName": "N"},
    )


def test_tool_call_actions_carry_meta() -> None:
    state = run(
        "chat",
        active(),
        {
            "type": "chat/toolCallStart",
            "turnId": "t1",
            "toolCallId": "tc1",
            "toolName": "n",
            "displayName": "N",
            "_meta": {"a": 1},
        },
        {
            "type": "chat/toolCallDelta",
            "turnId": "t1",
            "toolCallId": "tc1",
            "invocationMessage": "m",
            "_meta": {"a": 2},
        },
    )
    assert call(state)["_meta"] == {"a": 2} and "partialInput" not in call(state)
    state = run(
        "chat",
        state,
        {
            "type": "chat/toolCallReady",
            "turnId": "t1",
            "toolCallId": "tc1",
            "invocationMessage": "m",
            "confirmed": "setting",
        },
    )
    assert call(state)["_meta"] == {"a": 2}
    state = run(
        "chat",
        state,
        {"type": "chat/toolCallContentChanged", "turnId": "t1", "toolCallId": "tc1", "content": [], "_meta": {"a": 3}},
    )
    assert call(state)["_meta"] == {"a": 3}
    state = run(
        "chat",
        state,
        {
            "type": "chat/toolCallComplete",
            "turnId": "t1",
            "toolCallId": "tc1",
            "result": {"success": True},
            "_meta": {"a": 4},
        },
    )
    assert call(state)["_meta"] == {"a": 4}


def test_mcp_tool_call_auth_round_trip() -> None:
    mcp = {"kind": "mcp", "customizationId": "srv"}
    auth = {"resource": "https://api", "reason": "required"}
    state = active(
        tool(
            "running",
            contributor=mcp,
            invocationMessage="m",
            toolInput="x",
            confirmed="not-needed",
            content=[{"type": "text", "text": "so far"}],
        )
    )
    paused = run(
        "chat", state, {"type": "chat/toolCallAuthRequired", "turnId": "t1", "toolCallId": "tc1", "auth": auth}
    )
    assert call(paused)["status"] == "auth-required" and call(paused)["auth"] == auth
    assert call(paused)["content"] == [{"type": "text", "text": "so far"}]
    assert paused["status"] == INPUT_NEEDED
    resumed = run("chat", paused, {"type": "chat/toolCallAuthResolved", "turnId": "t1", "toolCallId": "tc1"})
    assert call(resumed) == call(state) and resumed["status"] == IN_PROGRESS


@pytest.mark.parametrize("contributor", [None, {"kind": "client", "clientId": "c"}])
def test_auth_required_only_applies_to_mcp_tools(contributor: Any) -> None:
    extra = {} if contributor is None else {"contributor": contributor}
    same(
        "chat",
        active(tool("running", invocationMessage="m", **extra)),
        {"type": "chat/toolCallAuthRequired", "turnId": "t1", "toolCallId": "tc1", "auth": {}},
    )


def test_completing_from_auth_required_only_accepts_a_failure() -> None:
    mcp = {"kind": "mcp", "customizationId": "srv"}
    state = active(
        tool(
            "auth-required",
            contributor=mcp,
            invocationMessage="m",
            confirmed="user-action",
            content=[{"type": "text", "text": "pre"}],
            auth={},
        ),
        status=INPUT_NEEDED,
    )
    same(
        "chat",
        state,
        {"type": "chat/toolCallComplete", "turnId": "t1", "toolCallId": "tc1", "result": {"success": True}},
    )
    done = run(
        "chat",
        state,
        {
            "type": "chat/toolCallComplete",
            "turnId": "t1",
            "toolCallId": "tc1",
            "requiresResultConfirmation": True,
            "result": {"success": False, "error": {"message": "cancelled"}},
        },
    )
    tc = call(done)
    assert tc["status"] == "completed" and tc["confirmed"] == "user-action"
    assert tc["content"] == [{"type": "text", "text": "pre"}] and "auth" not in tc
    assert done["status"] == IN_PROGRESS


# ── Input requests ───────────────────────────────────────────────────────────


REQUEST = {"id": "r1", "message": "Pick", "questions": [{"id": "q1", "kind": "text", "title": "Name"}]}


def test_input_request_lifecycle() -> None:
    state = run("chat", active(status=IN_PROGRESS | IS_READ), {"type": "chat/inputRequested", "request": REQUEST})
    assert parts(state) == [{"kind": "inputRequest", "request": REQUEST}]
    assert state["status"] == INPUT_NEEDED
    answer = {"state": "draft", "value": {"kind": "text", "value": "Bo"}}
    state = run(
        "chat", state, {"type": "chat/inputAnswerChanged", "requestId": "r1", "questionId": "q1", "answer": answer}
    )
    assert parts(state)[0]["request"]["answers"] == {"q1": answer}
    # Re-requesting keeps drafted answers.
    state = run("chat", state, {"type": "chat/inputRequested", "request": {**REQUEST, "message": "Pick again"}})
    assert parts(state)[0]["request"] == {**REQUEST, "message": "Pick again", "answers": {"q1": answer}}
    state = run("chat", state, {"type": "chat/inputAnswerChanged", "requestId": "r1", "questionId": "q1"})
    assert "answers" not in parts(state)[0]["request"]
    final = {"q1": {"state": "submitted", "value": {"kind": "text", "value": "Bob"}}}
    state = run(
        "chat", state, {"type": "chat/inputCompleted", "requestId": "r1", "response": "accept", "answers": final}
    )
    assert parts(state)[0] == {
        "kind": "inputRequest",
        "request": {**REQUEST, "message": "Pick again", "answers": final},
        "response": "accept",
    }
    assert state["status"] == IN_PROGRESS


def test_input_actions_without_a_matching_open_request_are_no_ops() -> None:
    same("chat", chat(), {"type": "chat/inputRequested", "request": REQUEST})
    state = active({"kind": "inputRequest", "request": REQUEST, "response": "decline"})
    same("chat", state, {"type": "chat/inputAnswerChanged", "requestId": "r1", "questionId": "q1"})
    same("chat", state, {"type": "chat/inputCompleted", "requestId": "r1", "response": "accept"})
    same(
        "chat",
        active({"kind": "inputRequest", "request": REQUEST}),
        {"type": "chat/inputCompleted", "requestId": "r2", "response": "accept"},
    )


def test_declined_request_stays_in_the_turn_record() -> None:
    state = run(
        "chat",
        active(),
        {"type": "chat/inputRequested", "request": REQUEST},
        {"type": "chat/inputCompleted", "requestId": "r1", "response": "decline"},
        {"type": "chat/turnComplete", "turnId": "t1", "duration": 1},
    )
    assert state["turns"][0]["responseParts"] == [{"kind": "inputRequest", "request": REQUEST, "response": "decline"}]


# ── Pending messages ─────────────────────────────────────────────────────────


def pm(mid: str, text: str = "m") -> dict[str, Any]:
    return {"id": mid, "message": {"text": text, "kind": "user"}}


def test_steering_message_set_replace_and_remove() -> None:
    state = run("chat", chat(), {"type": "chat/pendingMessageSet", "kind": "steering", **pm("s1")})
    assert state["steeringMessage"] == pm("s1")
    state = run("chat", state, {"type": "chat/pendingMessageSet", "kind": "steering", **pm("s2", "n")})
    assert state["steeringMessage"] == pm("s2", "n")
    same("chat", state, {"type": "chat/pendingMessageRemoved", "kind": "steering", "id": "s1"})
    state = run("chat", state, {"type": "chat/pendingMessageRemoved", "kind": "steering", "id": "s2"})
    assert "steeringMessage" not in state
    same("chat", state, {"type": "chat/pendingMessageRemoved", "kind": "steering", "id": "s2"})


def test_queued_messages_upsert_and_remove() -> None:
    state = run(
        "chat",
        chat(),
        {"type": "chat/pendingMessageSet", "kind": "queued", **pm("a")},
        {"type": "chat/pendingMessageSet", "kind": "queued", **pm("b")},
        {"type": "chat/pendingMessageSet", "kind": "queued", **pm("a", "edited")},
    )
    assert state["queuedMessages"] == [pm("a", "edited"), pm("b")]
    same("chat", state, {"type": "chat/pendingMessageRemoved", "kind": "queued", "id": "zzz"})
    state = run(
        "chat",
        state,
        {"type": "chat/pendingMessageRemoved", "kind": "queued", "id": "a"},
        {"type": "chat/pendingMessageRemoved", "kind": "queued", "id": "b"},
    )
    assert "queuedMessages" not in state
    same("chat", chat(queuedMessages=[]), {"type": "chat/pendingMessageRemoved", "kind": "queued", "id": "a"})


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        (["c", "a", "b"], ["c", "a", "b"]),
        (["c"], ["c", "a", "b"]),
        (["x", "b", "b", "y"], ["b", "a", "c"]),
        ([], ["a", "b", "c"]),
    ],
)
def test_queued_messages_reordered(order: list[str], expected: list[str]) -> None:
    state = run(
        "chat",
        chat(queuedMessages=[pm("a"), pm("b"), pm("c")]),
        {"type": "chat/queuedMessagesReordered", "order": order},
    )
    assert [m["id"] for m in state["queuedMessages"]] == expected


def test_reorder_without_queue_is_a_no_op() -> None:
    same("chat", chat(), {"type": "chat/queuedMessagesReordered", "order": ["a"]})


# ── Chat metadata ────────────────────────────────────────────────────────────


def test_activity_and_draft_set_and_clear() -> None:
    state = run(
        "chat",
        chat(),
        {"type": "chat/activityChanged", "activity": "Thinking"},
        {"type": "chat/draftChanged", "draft": MSG},
    )
    assert state["activity"] == "Thinking" and state["draft"] == MSG
    state = run("chat", state, {"type": "chat/activityChanged"}, {"type": "chat/draftChanged"})
    assert "activity" not in state and "draft" not in state


def test_chat_working_directories() -> None:
    state = run(
        "chat",
        chat(),
        {"type": "chat/workingDirectorySet", "directory": "file:///a"},
        {"type": "chat/workingDirectorySet", "directory": "file:///b"},
    )
    assert state["workingDirectories"] == ["file:///a", "file:///b"]
    same("chat", state, {"type": "chat/workingDirectorySet", "directory": "file:///a"})
    state = run("chat", state, {"type": "chat/workingDirectoryRemoved", "directory": "file:///a"})
    assert state["workingDirectories"] == ["file:///b"]
    same("chat", state, {"type": "chat/workingDirectoryRemoved", "directory": "file:///a"})
    same("chat", chat(), {"type": "chat/workingDirectoryRemoved", "directory": "file:///a"})


def test_chat_read_and_archived_flags_keep_the_activity() -> None:
    state = run(
        "chat",
        chat(status=IN_PROGRESS),
        {"type": "chat/isReadChanged", "isRead": True},
        {"type": "chat/isArchivedChanged", "isArchived": True},
    )
    assert state["status"] == IN_PROGRESS | IS_READ | IS_ARCHIVED
    state = run(
        "chat",
        state,
        {"type": "chat/isReadChanged", "isRead": False},
        {"type": "chat/isArchivedChanged", "isArchived": False},
    )
    assert state["status"] == IN_PROGRESS


def test_movable_changesets_and_canvases() -> None:
    changesets = [{"uri": "ahp-changeset:/x", "label": "Branch"}]
    state = run(
        "chat",
        chat(),
        {"type": "chat/movableChanged", "movable": True},
        {"type": "chat/changesetsChanged", "changesets": changesets},
        {"type": "chat/canvasesChanged", "canvases": [{"resource": "ahp-canvas:/1"}]},
    )
    assert (
        state["movable"] is True
        and state["changesets"] == changesets
        and state["canvases"] == [{"resource": "ahp-canvas:/1"}]
    )
    state = run("chat", state, {"type": "chat/changesetsChanged"}, {"type": "chat/canvasesChanged"})
    assert "changesets" not in state and "canvases" not in state


def test_background_work_upsert_and_remove() -> None:
    shell = {"kind": "shell", "id": "shell:1", "label": "npm run dev", "startedAt": "2026-10-10T11:00:00.000Z"}
    sub = {
        "kind": "subagent",
        "id": "subagent:2",
        "label": "Research",
        "chat": "ahp-chat:/w",
        "startedAt": "2026-10-10T11:00:01.000Z",
    }
    state = run(
        "chat",
        chat(),
        {"type": "chat/backgroundWorkSet", "work": shell},
        {"type": "chat/backgroundWorkSet", "work": sub},
    )
    assert state["backgroundWork"] == [shell, sub]
    renamed = {**shell, "label": "npm run dev -- --port 3"}
    state = run("chat", state, {"type": "chat/backgroundWorkSet", "work": renamed})
    assert state["backgroundWork"] == [renamed, sub]
    same("chat", state, {"type": "chat/backgroundWorkRemoved", "id": "unknown"})
    state = run(
        "chat",
        state,
        {"type": "chat/backgroundWorkRemoved", "id": "shell:1"},
        {"type": "chat/backgroundWorkRemoved", "id": "subagent:2"},
    )
    assert "backgroundWork" not in state
    same("chat", chat(), {"type": "chat/backgroundWorkRemoved", "id": "x"})


def test_background_work_survives_the_turn() -> None:
    shell = {"kind": "shell", "id": "s", "label": "l", "startedAt": "2026-10-10T11:00:00.000Z"}
    state = run(
        "chat",
        active(),
        {"type": "chat/backgroundWorkSet", "work": shell},
        {"type": "chat/turnComplete", "turnId": "t1", "duration": 1},
    )
    assert state["backgroundWork"] == [shell]


def test_full_turn_with_tool_calls_ends_idle_and_keeps_structure_shared() -> None:
    before = chat(turns=[{"id": "t0", "message": MSG, "responseParts": [], "state": "complete"}])
    state = run(
        "chat",
        before,
        started(),
        {"type": "chat/responsePart", "turnId": "t1", "part": md("p1")},
        {"type": "chat/delta", "turnId": "t1", "partId": "p1", "content": "Let me look."},
        {"type": "chat/toolCallStart", "turnId": "t1", "toolCallId": "tc1", "toolName": "read", "displayName": "Read"},
        {
            "type": "chat/toolCallReady",
            "turnId": "t1",
            "toolCallId": "tc1",
            "invocationMessage": "Read a",
            "toolInput": "a",
            "confirmed": "not-needed",
        },
        {
            "type": "chat/toolCallComplete",
            "turnId": "t1",
            "toolCallId": "tc1",
            "result": {"success": True, "pastTenseMessage": "Read a"},
        },
        {"type": "chat/turnComplete", "turnId": "t1", "duration": 42},
    )
    assert [t["id"] for t in state["turns"]] == ["t0", "t1"]
    assert state["turns"][0] is before["turns"][0]
    assert state["status"] == IDLE and "activeTurn" not in state
