"""The chat reducer's tool calls: one state machine per call, in its turn's parts.

A call streams (``toolCallStart``, ``toolCallDelta``), is made ready to run
or to be confirmed (``toolCallReady``), is confirmed or denied, may wait on
an MCP server's sign-in, completes (possibly pending a review of its
result) or is cancelled. Every transition is checked against the call's
status: an action that does not fit changes nothing and returns the very
same state. A call still in flight when its turn ends is :func:`skipped`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._chat_parts import (
    AUTH_REQUIRED,
    CANCELLED,
    COMPLETED,
    PENDING_CONFIRMATION,
    PENDING_RESULT_CONFIRMATION,
    RUNNING,
    STREAMING,
    TOOL_CALL,
    Part,
    ToolCall,
    active_turn,
    handles,
    refresh_status,
    with_parts,
)
from ._registry import Action, State
from ._util import ABSENT, assign, coalesce, compact, field, present


def update_tool_call(state: State, action: Action, update: Callable[[ToolCall], ToolCall]) -> State:
    """Apply `update` to the tool call `action.toolCallId` of turn `action.turnId`.

    `update` returns its argument unchanged to reject a transition; then
    the whole state is returned unchanged.
    """
    turn = active_turn(state, action["turnId"])
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
    return with_parts(state, turn, parts) if changed else state


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


def skipped(tc: ToolCall) -> ToolCall:
    """A call still in flight when its turn ends: it cannot finish after the
    turn, so it is recorded as cancelled (``skipped``)."""
    streaming = tc.get("status") == STREAMING
    return compact(
        {
            "status": CANCELLED,
            **_base(tc),
            "invocationMessage": tc.get("invocationMessage", "") if streaming else tc.get("invocationMessage", ABSENT),
            "toolInput": ABSENT if streaming else tc.get("toolInput", ABSENT),
            "reason": "skipped",
        }
    )


@handles("chat/toolCallStart")
def tool_call_start(state: State, action: Action, **_: object) -> State:
    turn = active_turn(state, action["turnId"])
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
    return with_parts(state, turn, [*turn["responseParts"], {"kind": TOOL_CALL, "toolCall": tool_call}])


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
        message = coalesce(field(action, "invocationMessage"), tc.get("invocationMessage", ABSENT))
        return assign(out, invocationMessage=message)

    return update_tool_call(state, action, stream)


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
        kept_input = ABSENT if status == STREAMING else tc.get("toolInput", ABSENT)
        tool_input = coalesce(field(action, "toolInput"), kept_input)
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

    return refresh_status(update_tool_call(state, action, ready))


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

    return refresh_status(update_tool_call(state, action, confirm))


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

    return refresh_status(update_tool_call(state, action, complete))


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

    return refresh_status(update_tool_call(state, action, review))


@handles("chat/toolCallContentChanged")
def tool_call_content_changed(state: State, action: Action, **_: object) -> State:
    def replace_content(tc: ToolCall) -> ToolCall:
        if tc.get("status") != RUNNING:
            return tc
        out = {**tc, "content": action["content"]}
        if "_meta" in action:
            out["_meta"] = action["_meta"]
        return out

    return update_tool_call(state, action, replace_content)


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

    return refresh_status(update_tool_call(state, action, pause))


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

    return refresh_status(update_tool_call(state, action, resume))
