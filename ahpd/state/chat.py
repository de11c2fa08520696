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

The tool-call state machine is :mod:`~ahpd.state._chat_tool_calls`, and
what both modules share (the registry, the status, locating parts) is
:mod:`~ahpd.state._chat_parts`; importing this module registers them all.
"""

from __future__ import annotations

from typing import Any

from . import _status as st
from ._chat_parts import (
    COMPLETED,
    CANCELLED,
    ERROR_PART,
    INPUT_REQUEST,
    MARKDOWN,
    REASONING,
    TOOL_CALL,
    Part,
    active_turn,
    after,
    handles,
    modified,
    part_id,
    registry,
    summary_status,
    unread_with_status,
    with_parts,
)
from ._chat_tool_calls import skipped
from ._registry import Action, State
from ._util import ABSENT, add_directory, assign, coalesce, compact, field, remove_directory, upsert, without


def _append_text(state: State, action: Action, kind: str) -> State:
    """Append streamed text to the first part named `partId`, if it is a `kind` part.

    Any other outcome (no such turn or part, or a part of another kind,
    e.g. a delta aimed at a reasoning part) changes nothing.
    """
    turn = active_turn(state, action["turnId"])
    if turn is None:
        return state
    parts = turn["responseParts"]
    for i, part in enumerate(parts):
        if part_id(part) == action["partId"]:
            if part.get("kind") != kind:
                return state
            parts = list(parts)
            parts[i] = {**part, "content": part["content"] + action["content"]}
            return with_parts(state, turn, parts)
    return state


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
    active = active_turn(state, action["turnId"])
    if active is None:
        return state
    parts: list[Part] = []
    for part in active["responseParts"]:
        tc = part.get("toolCall") if part.get("kind") == TOOL_CALL else None
        if tc is None or tc.get("status") in (COMPLETED, CANCELLED):
            parts.append(part)
            continue
        parts.append({"kind": TOOL_CALL, "toolCall": skipped(tc)})
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
    next_state = modified(
        {**without(state, "activeTurn"), "turns": [*state["turns"], turn]},
        after(active.get("startedAt"), turn["duration"]),
    )
    terminal = st.ERROR if turn_state == "error" else None
    return {**next_state, "status": summary_status(next_state, terminal)}


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
    next_state = unread_with_status({**state, "activeTurn": active})
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
    turn = active_turn(state, action["turnId"])
    if turn is None:
        return state
    if action["part"].get("kind") == ERROR_PART:
        # Newer than the reducers we could read; per the schema an error part
        # only enters through chat/error, which also ends the turn.
        return state
    return with_parts(state, turn, [*turn["responseParts"], action["part"]])


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
    return unread_with_status({**state, "turns": turns[:-1], "activeTurn": active})


@handles("chat/usage")
def usage(state: State, action: Action, **_: object) -> State:
    turn = active_turn(state, action["turnId"])
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
    return {**next_state, "status": summary_status(next_state)}


@handles("chat/turnsLoaded")
def turns_loaded(state: State, action: Action, **_: object) -> State:
    known = {t.get("id") for t in state["turns"]}
    older = [t for t in action["turns"] if t.get("id") not in known]
    return assign(
        state,
        turns=[*older, *state["turns"]],
        turnsNextCursor=field(action, "turnsNextCursor"),
    )


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
    return unread_with_status(with_parts(state, turn, parts))


@handles("chat/inputAnswerChanged")
def input_answer_changed(state: State, action: Action, **_: object) -> State:
    turn = state.get("activeTurn")
    if not turn:
        return state
    idx = _open_input_request(turn, action["requestId"])
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
    return with_parts(state, turn, parts)


@handles("chat/inputCompleted")
def input_completed(state: State, action: Action, **_: object) -> State:
    turn = state.get("activeTurn")
    if not turn:
        return state
    idx = _open_input_request(turn, action["requestId"])
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
    next_state = with_parts(state, turn, parts)
    return {**next_state, "status": summary_status(next_state)}


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
