"""What the chat reducer's modules share: the registry, the part and
tool-call vocabularies, the derived status, ``modifiedAt``, and finding a
part in the active turn.

The chat reducer is three modules registering on one :data:`registry`:
:mod:`~ahpd.state.chat` (turns, input requests, the chat's own fields),
:mod:`~ahpd.state._chat_tool_calls` (the tool-call state machine), and this
one, which both build on.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from . import _status as st
from ._registry import Registry, State

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


def has_open_input_request(state: State) -> bool:
    turn = state.get("activeTurn")
    if not turn:
        return False
    return any(p.get("kind") == INPUT_REQUEST and "response" not in p for p in turn["responseParts"])


def has_blocking_tool_call(state: State) -> bool:
    turn = state.get("activeTurn")
    if not turn:
        return False
    return any(p.get("kind") == TOOL_CALL and p["toolCall"].get("status") in _BLOCKING for p in turn["responseParts"])


def summary_status(state: State, terminal: int | None = None) -> int:
    if terminal is not None:
        activity = terminal
    elif has_open_input_request(state) or has_blocking_tool_call(state):
        activity = st.INPUT_NEEDED
    elif state.get("activeTurn"):
        activity = st.IN_PROGRESS
    else:
        activity = st.IDLE
    return st.with_activity(state["status"], activity)


def refresh_status(state: State) -> State:
    status = summary_status(state)
    return state if status == state["status"] else {**state, "status": status}


def unread_with_status(state: State) -> State:
    """Recompute status and mark unread: new activity the user has not seen."""
    return {**state, "status": st.with_flag(summary_status(state), st.IS_READ, False)}


# ── modifiedAt ───────────────────────────────────────────────────────────────

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MS = _dt.timedelta(milliseconds=1)


def after(started_at: Any, duration: Any) -> str | None:
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


def modified(state: State, at: str | None) -> State:
    return state if at is None else {**state, "modifiedAt": at}


# ── Locating parts ───────────────────────────────────────────────────────────


def active_turn(state: State, turn_id: str) -> dict[str, Any] | None:
    turn = state.get("activeTurn")
    return turn if turn and turn.get("id") == turn_id else None


def with_parts(state: State, turn: dict[str, Any], parts: list[Part]) -> State:
    return {**state, "activeTurn": {**turn, "responseParts": parts}}


def part_id(part: Part) -> Any:
    if part.get("kind") == TOOL_CALL:
        return part["toolCall"].get("toolCallId")
    return part.get("id")
