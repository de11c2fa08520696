"""Chat channel reducer.

A chat holds one conversation: completed `turns`, the streaming
`activeTurn` with its response parts and tool-call state machines, pending
messages, the draft, and inline input requests. The chat `status` activity
bits are derived from that content after every change that can affect them
(a blocking tool call or an open input request means InputNeeded), so
clients and the host agree on status without a separate status action.

`modifiedAt` follows from the actions alone, as in the canonical reducer
(0.9.0): a turn's start moves it to the turn's `startedAt`, its end to
`startedAt + duration`. Nothing else moves it (input requests, answers,
truncation, a resumed turn), and no clock is read, so the snapshot the host
serves equals the state every client reduced.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any

from . import _status as st
from ._registry import Action, Registry, State
from ._util import ABSENT, add_directory, assign, coalesce, compact, field, present, remove_directory, upsert, without

registry = Registry("chat")
handles = registry.handles

Part = dict[str, Any]
ToolCall = dict[str, Any]

# Tool call statuses
STREAMING = "streaming"
PENDING_CONFIRMATION = "pending-confirmation"
RUNNING = "running"
AUTH_REQUIRED = "auth-required"
PENDING_RESULT_CONFIRMATION = "pending-result-confirmation"
COMPLETED = "completed"
CANCELLED = "cancelled"

# Response part kinds
MARKDOWN = "markdown"
REASONING = "reasoning"
TOOL_CALL = "toolCall"
INPUT_REQUEST = "inputRequest"
ERROR_PART = "error"

_BLOCKING = (PENDING_CONFIRMATION, PENDING_RESULT_CONFIRMATION, AUTH_REQUIRED)


# ── Status ───────────────────────────────────────────────────────────────────


def _has_open_input_request(state: State) -> bool:
    turn = state.get("activeTurn")
    return bool(turn) and any(
        p.get("kind") == INPUT_REQUEST and "response" not in p for p in turn["responseParts"]
    )


def _has_blocking_tool_call(state: State) -> bool:
    turn = state.get("activeTurn")
    return bool(turn) and any(
        p.get("kind") == TOOL_CALL and p["toolCall"].get("status") in _BLOCKING
        for p in turn["responseParts"]
    )


def _summary_status(state: State, terminal: int | None = None) -> int:
    if terminal is not None:
        activity = terminal
    elif _has_open_input_request(state) or _has_blocking_tool_call(state):
        activity = st.INPUT_NEEDED
    elif state.get("activeTurn"):
        activity = st.IN_PROGRESS
    else:
        activity = st.IDLE
    return st.with_activity(state["status"], activity)


def _refresh_status(state: State) -> State:
    status = _summary_status(state)
    return state if status == state["status"] else {**state, "status": status}


def _unread_with_status(state: State) -> State:
    """Recompute status and mark unread: new activity the user has not seen."""
    return {**state, "status": st.with_flag(_summary_status(state), st.IS_READ, False)}


# ── modifiedAt ───────────────────────────────────────────────────────────────

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MS = _dt.timedelta(milliseconds=1)


def _after(started_at: Any, duration: Any) -> str | None:
    """`startedAt + duration` (milliseconds) as an ISO 8601 UTC timestamp
    with milliseconds, the way JavaScript's `toISOString` writes it; None
    when either cannot be read (then `modifiedAt` stays where it was)."""
    if not isinstance(started_at, str) or isinstance(duration, bool) or not isinstance(duration, (int, float)):
        return None
    try:
        start = _dt.datetime.fromisoformat(started_at)
        if start.tzinfo is None:
            start = start.replace(tzinfo=_dt.UTC)
        ms = (start - _EPOCH) // _MS + int(duration)
        return (_EPOCH + ms * _MS).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (ValueError, OverflowError):
        return None


def _modified(state: State, at: str | None) -> State:
    return state if at is None else {**state, "modifiedAt": at}


# ── Locating parts ───────────────────────────────────────────────────────────


def _active_turn(state: State, turn_id: str) -> dict[str, Any] | None:
    turn = state.get("activeTurn")
    return turn if turn and turn.get("id") == turn_id else None


def _with_parts(state: State, turn: dict[str, Any], parts: list[Part]) -> State:
    return {**state, "activeTurn": {**turn, "responseParts": parts}}


def _part_id(part: Part) -> Any:
    if part.get("kind") == TOOL_CALL:
        return part["toolCall"].get("toolCallId")
    return part.get("id")


def _append_text(state: State, action: Action, kind: str) -> State:
    """Append streamed text to the first part named `partId`, if it is a `kind` part.

    Any other outcome (no such turn or part, or a part of another kind,
    e.g. a delta aimed at a reasoning part) changes nothing.
    """
    turn = _active_turn(state, action["turnId"])
    if turn is None:
        return state
    parts = turn["responseParts"]
    for i, part in enumerate(parts):
        if _part_id(part) == action["partId"]:
            if part.get("kind") != kind:
                return state
            parts = list(parts)
            parts[i] = {**part, "content": part["content"] + action["content"]}
            return _with_parts(state, turn, parts)
    return state


def _update_tool_call(
    state: State, action: Action, update: Callable[[ToolCall], ToolCall]
) -> State:
    """Apply `update` to the tool call `action.toolCallId` of turn `action.turnId`.

    `update` returns its argument unchanged to reject a transition; then
    the whole state is returned unchanged.
    """
    turn = _active_turn(state, action["turnId"])
    if turn is None:
        return state
    changed = False
    parts: list[Part] = []
    for part in turn["responseParts"]:
        if part.get("kind") == TOOL_CALL and part["toolCall"].get("toolCallId") == action["toolCallId"]:
            updated = update(part["toolCall"])
            if updated is not part["toolCall"]:
                changed = True
                part = {**part, "toolCall": updated}
        parts.append(part)
    return _with_parts(state, turn, parts) if changed else state


def _base(tc: ToolCall, meta: Any = ABSENT) -> dict[str, Any]:
    """Fields every tool call state carries, with an optional `_meta` override."""
    return {
        "toolCallId": tc["toolCallId"],
        "toolName": tc.get("toolName", ABSENT),
        "displayName": tc.get("displayName", ABSENT),
        "intention": tc.get("intention", ABSENT),
        "contributor": tc.get("contributor", ABSENT),
        "_meta": coalesce(meta, tc.get("_meta", ABSENT)),
    }


def _optional(key: str, value: Any) -> dict[str, Any]:
    """`{key: value}` when the value exists (TS `...(v ? {k: v} : {})` on objects)."""
    return {key: value} if present(value) else {}


def _refine_contributor(current: Any, proposed: Any) -> Any:
    """Accept a ready-time contributor unless it changes execution ownership.

    A client-owned call keeps its `clientId`, and a call that did not start
    client-owned cannot become so.
    """
    if not present(proposed):
        return current
    if present(current) and current.get("kind") == "client":
        same = proposed.get("kind") == "client" and proposed.get("clientId") == current.get("clientId")
        return proposed if same else current
    if proposed.get("kind") == "client":
        return current
    return proposed


# ── Turn lifecycle ───────────────────────────────────────────────────────────


def _end_turn(
    state: State,
    action: Action,
    turn_state: str,
    error_part: Part | None = None,
) -> State:
    """Move the active turn into `turns`.

    Tool calls still in flight cannot finish after their turn, so they are
    recorded as cancelled (`skipped`). The producer-supplied duration is
    clamped to be non-negative.
    """
    active = _active_turn(state, action["turnId"])
    if active is None:
        return state
    parts: list[Part] = []
    for part in active["responseParts"]:
        tc = part.get("toolCall") if part.get("kind") == TOOL_CALL else None
        if tc is None or tc.get("status") in (COMPLETED, CANCELLED):
            parts.append(part)
            continue
        streaming = tc.get("status") == STREAMING
        cancelled = compact(
            {
                "status": CANCELLED,
                **_base(tc),
                "invocationMessage": tc.get("invocationMessage", "") if streaming else tc.get("invocationMessage", ABSENT),
                "toolInput": ABSENT if streaming else tc.get("toolInput", ABSENT),
                "reason": "skipped",
            }
        )
        parts.append({"kind": TOOL_CALL, "toolCall": cancelled})
    if error_part is not None:
        parts.append(error_part)
    turn = compact(
        {
            "id": active["id"],
            "startedAt": active.get("startedAt", ABSENT),
            "duration": max(0, action["duration"]),
            "message": active["message"],
            "responseParts": parts,
            "usage": active.get("usage", ABSENT),
            "state": turn_state,
        }
    )
    next_state = _modified({**without(state, "activeTurn"), "turns": [*state["turns"], turn]},
                           _after(active.get("startedAt"), turn["duration"]))
    terminal = st.ERROR if turn_state == "error" else None
    return {**next_state, "status": _summary_status(next_state, terminal)}


@handles("chat/turnStarted")
def turn_started(state: State, action: Action, **_: object) -> State:
    active = compact(
        {
            "id": action["turnId"],
            "startedAt": action.get("startedAt", ABSENT),
            "message": action["message"],
            "responseParts": [],
        }
    )
    next_state = _unread_with_status({**state, "activeTurn": active})
    if isinstance(action.get("startedAt"), str):
        next_state["modifiedAt"] = action["startedAt"]
    queued_id = action.get("queuedMessageId")
    if queued_id:
        steering = next_state.get("steeringMessage")
        if steering and steering.get("id") == queued_id:
            next_state = without(next_state, "steeringMessage")
        queued = next_state.get("queuedMessages")
        if queued is not None:
            remaining = [m for m in queued if m.get("id") != queued_id]
            next_state = assign(next_state, queuedMessages=remaining or ABSENT)
    return next_state


@handles("chat/delta")
def delta(state: State, action: Action, **_: object) -> State:
    return _append_text(state, action, MARKDOWN)


@handles("chat/reasoning")
def reasoning(state: State, action: Action, **_: object) -> State:
    return _append_text(state, action, REASONING)


@handles("chat/responsePart")
def response_part(state: State, action: Action, **_: object) -> State:
    turn = _active_turn(state, action["turnId"])
    if turn is None:
        return state
    if action["part"].get("kind") == ERROR_PART:
        # Newer than the reducers we could read; per the schema an error part
        # only enters through chat/error, which also ends the turn.
        return state
    return _with_parts(state, turn, [*turn["responseParts"], action["part"]])


@handles("chat/turnComplete")
def turn_complete(state: State, action: Action, **_: object) -> State:
    return _end_turn(state, action, "complete")


@handles("chat/turnCancelled")
def turn_cancelled(state: State, action: Action, **_: object) -> State:
    return _end_turn(state, action, "cancelled")


@handles("chat/error")
def error(state: State, action: Action, **_: object) -> State:
    # The newest reducer we could read stored `error` on the turn; the schema
    # now carries an ErrorResponsePart that is appended to the stream as the
    # turn ends (spec: chat-channel "Error recovery").
    return _end_turn(state, action, "error", error_part=action["part"])


@handles("chat/turnResume")
def turn_resume(state: State, action: Action, **_: object) -> State:
    # Not in any reducer version we could read; from the schema and the
    # chat-channel spec: only the latest turn, ended in `error` with a
    # resumable error part last, is reopened with its message, parts and
    # usage; like turnStarted it marks the chat unread and in progress.
    if state.get("activeTurn"):
        return state
    turns = state["turns"]
    last = turns[-1] if turns else None
    if last is None or last.get("id") != action["turnId"] or last.get("state") != "error":
        return state
    parts = last["responseParts"]
    if not parts or parts[-1].get("kind") != ERROR_PART or parts[-1].get("resumable") is not True:
        return state
    active = compact(
        {
            "id": last["id"],
            "startedAt": last.get("startedAt", ABSENT),
            "message": last["message"],
            "responseParts": parts,
            "usage": last.get("usage", ABSENT),
        }
    )
    return _unread_with_status({**state, "turns": turns[:-1], "activeTurn": active})


@handles("chat/usage")
def usage(state: State, action: Action, **_: object) -> State:
    turn = _active_turn(state, action["turnId"])
    if turn is None:
        return state
    return {**state, "activeTurn": {**turn, "usage": action["usage"]}}


@handles("chat/truncated")
def truncated(state: State, action: Action, **_: object) -> State:
    if "turnId" in action:
        ids = [t.get("id") for t in state["turns"]]
        if action["turnId"] not in ids:
            return state
        turns = state["turns"][: ids.index(action["turnId"]) + 1]
        next_state = {**without(state, "activeTurn"), "turns": turns}
    else:
        # Clearing everything also forgets the cursor to older history.
        next_state = {**without(state, "activeTurn", "turnsNextCursor"), "turns": []}
    return {**next_state, "status": _summary_status(next_state)}


@handles("chat/turnsLoaded")
def turns_loaded(state: State, action: Action, **_: object) -> State:
    known = {t.get("id") for t in state["turns"]}
    older = [t for t in action["turns"] if t.get("id") not in known]
    return assign(
        state,
        turns=[*older, *state["turns"]],
        turnsNextCursor=field(action, "turnsNextCursor"),
    )


# ── Tool calls ───────────────────────────────────────────────────────────────


@handles("chat/toolCallStart")
def tool_call_start(state: State, action: Action, **_: object) -> State:
    turn = _active_turn(state, action["turnId"])
    if turn is None:
        return state
    tool_call = compact(
        {
            "toolCallId": action["toolCallId"],
            "toolName": action.get("toolName", ABSENT),
            "displayName": action.get("displayName", ABSENT),
            "intention": action.get("intention", ABSENT),
            "contributor": action.get("contributor", ABSENT),
            "_meta": action.get("_meta", ABSENT),
            "status": STREAMING,
        }
    )
    return _with_parts(state, turn, [*turn["responseParts"], {"kind": TOOL_CALL, "toolCall": tool_call}])


@handles("chat/toolCallDelta")
def tool_call_delta(state: State, action: Action, **_: object) -> State:
    def stream(tc: ToolCall) -> ToolCall:
        if tc.get("status") != STREAMING:
            return tc
        out = dict(tc)
        if "_meta" in action:
            out["_meta"] = action["_meta"]
        if "content" in action:
            out["partialInput"] = tc.get("partialInput", "") + action["content"]
        return assign(out, invocationMessage=coalesce(field(action, "invocationMessage"), tc.get("invocationMessage", ABSENT)))

    return _update_tool_call(state, action, stream)


@handles("chat/toolCallReady")
def tool_call_ready(state: State, action: Action, **_: object) -> State:
    def ready(tc: ToolCall) -> ToolCall:
        status = tc.get("status")
        if status not in (STREAMING, RUNNING, PENDING_CONFIRMATION):
            return tc
        base = {
            **_base(tc, field(action, "_meta")),
            "contributor": _refine_contributor(tc.get("contributor", ABSENT), field(action, "contributor")),
            "intention": coalesce(field(action, "intention"), tc.get("intention", ABSENT)),
        }
        tool_input = coalesce(field(action, "toolInput"), ABSENT if status == STREAMING else tc.get("toolInput", ABSENT))
        if action.get("confirmed"):
            return compact(
                {
                    "status": RUNNING,
                    **base,
                    "invocationMessage": action["invocationMessage"],
                    "toolInput": tool_input,
                    "confirmed": action["confirmed"],
                }
            )
        # Re-readying a pending call refreshes it; what the action omits is kept.
        pending = tc if status == PENDING_CONFIRMATION else {}
        keep = {
            key: coalesce(field(action, key), pending.get(key, ABSENT))
            for key in ("confirmationTitle", "riskAssessment", "edits", "editable", "options")
        }
        return compact(
            {
                "status": PENDING_CONFIRMATION,
                **base,
                "invocationMessage": action["invocationMessage"],
                "toolInput": tool_input,
                **keep,
            }
        )

    return _refresh_status(_update_tool_call(state, action, ready))


def _selected_option(tc: ToolCall, option_id: Any) -> Any:
    options = tc.get("options")
    if not option_id or options is None:
        return ABSENT
    return next((o for o in options if o.get("id") == option_id), ABSENT)


@handles("chat/toolCallConfirmed")
def tool_call_confirmed(state: State, action: Action, **_: object) -> State:
    def confirm(tc: ToolCall) -> ToolCall:
        if tc.get("status") != PENDING_CONFIRMATION:
            return tc
        base = _base(tc, field(action, "_meta"))
        selected = _selected_option(tc, action.get("selectedOptionId"))
        if action.get("approved"):
            tool_input = tc.get("toolInput", ABSENT)
            # An edit replaces inline input only; referenced input is
            # rewritten by the host before it echoes the action.
            if "editedToolInput" in action and isinstance(tool_input, str):
                tool_input = action["editedToolInput"]
            return compact(
                {
                    "status": RUNNING,
                    **base,
                    "invocationMessage": tc.get("invocationMessage", ABSENT),
                    "toolInput": tool_input,
                    "confirmed": action.get("confirmed", ABSENT),
                    "selectedOption": selected,
                }
            )
        return compact(
            {
                "status": CANCELLED,
                **base,
                "invocationMessage": tc.get("invocationMessage", ABSENT),
                "toolInput": tc.get("toolInput", ABSENT),
                "reason": action.get("reason", ABSENT),
                "reasonMessage": action.get("reasonMessage", ABSENT),
                "userSuggestion": action.get("userSuggestion", ABSENT),
                "selectedOption": selected,
            }
        )

    return _refresh_status(_update_tool_call(state, action, confirm))


@handles("chat/toolCallComplete")
def tool_call_complete(state: State, action: Action, **_: object) -> State:
    def complete(tc: ToolCall) -> ToolCall:
        status = tc.get("status")
        if status not in (RUNNING, PENDING_CONFIRMATION, AUTH_REQUIRED):
            return tc
        result = action["result"]
        # From auth-required only a failed result (the client giving up on
        # the challenge) is valid: execution never resumed, so a success
        # could not have been produced.
        if status == AUTH_REQUIRED and result.get("success"):
            return tc
        was_confirmed = status in (RUNNING, AUTH_REQUIRED)
        fields = {
            **_base(tc, field(action, "_meta")),
            "invocationMessage": tc.get("invocationMessage", ABSENT),
            "toolInput": tc.get("toolInput", ABSENT),
            "confirmed": tc.get("confirmed", ABSENT) if was_confirmed else "not-needed",
            **_optional("selectedOption", tc.get("selectedOption") if was_confirmed else None),
            **_optional("content", tc.get("content") if status == AUTH_REQUIRED else None),
        }
        # Giving up on auth is terminal: there is no result to review.
        if action.get("requiresResultConfirmation") and status != AUTH_REQUIRED:
            return {**compact({"status": PENDING_RESULT_CONFIRMATION, **fields}), **result}
        return {**compact({"status": COMPLETED, **fields}), **result}

    return _refresh_status(_update_tool_call(state, action, complete))


@handles("chat/toolCallResultConfirmed")
def tool_call_result_confirmed(state: State, action: Action, **_: object) -> State:
    def review(tc: ToolCall) -> ToolCall:
        if tc.get("status") != PENDING_RESULT_CONFIRMATION:
            return tc
        base = _base(tc, field(action, "_meta"))
        common = {
            **base,
            "invocationMessage": tc.get("invocationMessage", ABSENT),
            "toolInput": tc.get("toolInput", ABSENT),
        }
        if action.get("approved"):
            kept = ("success", "pastTenseMessage", "content", "structuredContent", "error")
            return compact(
                {
                    "status": COMPLETED,
                    **common,
                    "confirmed": tc.get("confirmed", ABSENT),
                    **_optional("selectedOption", tc.get("selectedOption")),
                    **{key: tc.get(key, ABSENT) for key in kept},
                }
            )
        return compact(
            {
                "status": CANCELLED,
                **common,
                "reason": "result-denied",
                **_optional("selectedOption", tc.get("selectedOption")),
            }
        )

    return _refresh_status(_update_tool_call(state, action, review))


@handles("chat/toolCallContentChanged")
def tool_call_content_changed(state: State, action: Action, **_: object) -> State:
    def replace_content(tc: ToolCall) -> ToolCall:
        if tc.get("status") != RUNNING:
            return tc
        out = {**tc, "content": action["content"]}
        if "_meta" in action:
            out["_meta"] = action["_meta"]
        return out

    return _update_tool_call(state, action, replace_content)


@handles("chat/toolCallAuthRequired")
def tool_call_auth_required(state: State, action: Action, **_: object) -> State:
    def pause(tc: ToolCall) -> ToolCall:
        if tc.get("status") != RUNNING:
            return tc
        contributor = tc.get("contributor")
        # Only calls served by an MCP server can wait on its authentication.
        if not contributor or contributor.get("kind") != "mcp":
            return tc
        return compact(
            {
                "status": AUTH_REQUIRED,
                **_base(tc, field(action, "_meta")),
                "invocationMessage": tc.get("invocationMessage", ABSENT),
                "toolInput": tc.get("toolInput", ABSENT),
                "confirmed": tc.get("confirmed", ABSENT),
                **_optional("selectedOption", tc.get("selectedOption")),
                **_optional("content", tc.get("content")),
                "auth": action["auth"],
            }
        )

    return _refresh_status(_update_tool_call(state, action, pause))


@handles("chat/toolCallAuthResolved")
def tool_call_auth_resolved(state: State, action: Action, **_: object) -> State:
    def resume(tc: ToolCall) -> ToolCall:
        if tc.get("status") != AUTH_REQUIRED:
            return tc
        return compact(
            {
                "status": RUNNING,
                **_base(tc, field(action, "_meta")),
                "invocationMessage": tc.get("invocationMessage", ABSENT),
                "toolInput": tc.get("toolInput", ABSENT),
                "confirmed": tc.get("confirmed", ABSENT),
                **_optional("selectedOption", tc.get("selectedOption")),
                **_optional("content", tc.get("content")),
            }
        )

    return _refresh_status(_update_tool_call(state, action, resume))


# ── Input requests ───────────────────────────────────────────────────────────


def _open_input_request(turn: dict[str, Any], request_id: str) -> int:
    for i, part in enumerate(turn["responseParts"]):
        if part.get("kind") == INPUT_REQUEST and "response" not in part and part["request"].get("id") == request_id:
            return i
    return -1


@handles("chat/inputRequested")
def input_requested(state: State, action: Action, **_: object) -> State:
    turn = state.get("activeTurn")
    if not turn:
        return state
    request = action["request"]
    parts = list(turn["responseParts"])
    idx = _open_input_request(turn, request["id"])
    if idx >= 0:
        # Re-requesting keeps the answers drafted so far unless new ones come.
        answers = coalesce(request.get("answers", ABSENT), parts[idx]["request"].get("answers", ABSENT))
        parts[idx] = {"kind": INPUT_REQUEST, "request": assign(request, answers=answers)}
    else:
        parts.append({"kind": INPUT_REQUEST, "request": request})
    return _unread_with_status(_with_parts(state, turn, parts))


@handles("chat/inputAnswerChanged")
def input_answer_changed(state: State, action: Action, **_: object) -> State:
    turn = state.get("activeTurn")
    idx = _open_input_request(turn, action["requestId"]) if turn else -1
    if idx < 0:
        return state
    part = turn["responseParts"][idx]
    answers = dict(part["request"].get("answers") or {})
    if "answer" in action:
        answers[action["questionId"]] = action["answer"]
    else:
        answers.pop(action["questionId"], None)
    parts = list(turn["responseParts"])
    parts[idx] = {**part, "request": assign(part["request"], answers=answers or ABSENT)}
    return _with_parts(state, turn, parts)


@handles("chat/inputCompleted")
def input_completed(state: State, action: Action, **_: object) -> State:
    turn = state.get("activeTurn")
    idx = _open_input_request(turn, action["requestId"]) if turn else -1
    if idx < 0:
        return state
    part = turn["responseParts"][idx]
    answers = {**(part["request"].get("answers") or {}), **(action.get("answers") or {})}
    parts = list(turn["responseParts"])
    parts[idx] = {
        **part,
        "request": assign(part["request"], answers=answers or ABSENT),
        "response": action["response"],
    }
    next_state = _with_parts(state, turn, parts)
    return {**next_state, "status": _summary_status(next_state)}


# ── Pending messages ─────────────────────────────────────────────────────────


@handles("chat/pendingMessageSet")
def pending_message_set(state: State, action: Action, **_: object) -> State:
    entry = {"id": action["id"], "message": action["message"]}
    if action["kind"] == "steering":
        return {**state, "steeringMessage": entry}
    return {**state, "queuedMessages": upsert(state.get("queuedMessages") or [], entry, "id")}


@handles("chat/pendingMessageRemoved")
def pending_message_removed(state: State, action: Action, **_: object) -> State:
    if action["kind"] == "steering":
        steering = state.get("steeringMessage")
        if not steering or steering.get("id") != action["id"]:
            return state
        return without(state, "steeringMessage")
    queued = state.get("queuedMessages")
    if queued is None:
        return state
    remaining = [m for m in queued if m.get("id") != action["id"]]
    if len(remaining) == len(queued):
        return state
    return assign(state, queuedMessages=remaining or ABSENT)


@handles("chat/queuedMessagesReordered")
def queued_messages_reordered(state: State, action: Action, **_: object) -> State:
    queued = state.get("queuedMessages")
    if queued is None:
        return state
    by_id = {m["id"]: m for m in queued}
    ordered: list[str] = []
    for mid in action["order"]:
        if mid in by_id and mid not in ordered:
            ordered.append(mid)
    # Messages the client did not mention keep their relative order at the
    # end, so a stale view of the queue never drops anything.
    rest = [m for m in queued if m["id"] not in ordered]
    return {**state, "queuedMessages": [by_id[mid] for mid in ordered] + rest}


# ── Chat metadata ────────────────────────────────────────────────────────────


@handles("chat/activityChanged")
def activity_changed(state: State, action: Action, **_: object) -> State:
    return assign(state, activity=field(action, "activity"))


@handles("chat/draftChanged")
def draft_changed(state: State, action: Action, **_: object) -> State:
    return assign(state, draft=field(action, "draft"))


@handles("chat/workingDirectorySet")
def working_directory_set(state: State, action: Action, **_: object) -> State:
    return add_directory(state, action["directory"])


@handles("chat/workingDirectoryRemoved")
def working_directory_removed(state: State, action: Action, **_: object) -> State:
    return remove_directory(state, action["directory"])


# The handlers below are newer than every reducer version we could read;
# their behaviour follows the action descriptions in actions.schema.json.


@handles("chat/isReadChanged")
def is_read_changed(state: State, action: Action, **_: object) -> State:
    # Same flag arithmetic as session/isReadChanged, on this chat only.
    return {**state, "status": st.with_flag(state["status"], st.IS_READ, action["isRead"])}


@handles("chat/isArchivedChanged")
def is_archived_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "status": st.with_flag(state["status"], st.IS_ARCHIVED, action["isArchived"])}


@handles("chat/movableChanged")
def movable_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "movable": action["movable"]}


@handles("chat/changesetsChanged")
def changesets_changed(state: State, action: Action, **_: object) -> State:
    # Full replacement; an absent list clears the catalogue.
    changesets = action.get("changesets")
    return assign(state, changesets=ABSENT if changesets is None else changesets)


@handles("chat/canvasesChanged")
def canvases_changed(state: State, action: Action, **_: object) -> State:
    # Full replacement; an absent list clears the collection. Canvas channels
    # themselves are experimental and not reduced here.
    canvases = action.get("canvases")
    return assign(state, canvases=ABSENT if canvases is None else canvases)


@handles("chat/backgroundWorkSet")
def background_work_set(state: State, action: Action, **_: object) -> State:
    # Upsert by id, independent of turns.
    return {**state, "backgroundWork": upsert(state.get("backgroundWork") or [], action["work"], "id")}


@handles("chat/backgroundWorkRemoved")
def background_work_removed(state: State, action: Action, **_: object) -> State:
    # Unknown ids are a no-op; the list is dropped once empty, as only
    # active work is listed (the same convention as queuedMessages).
    work = state.get("backgroundWork")
    if not work:
        return state
    remaining = [w for w in work if w.get("id") != action["id"]]
    if len(remaining) == len(work):
        return state
    return assign(state, backgroundWork=remaining or ABSENT)


def reduce_chat(state: State, action: Action) -> State:
    """Apply one chat action to a wire-shaped `ChatState`."""
    return registry.reduce(state, action)
