"""Session channel reducer.

A session is a catalogue of chats plus its lifecycle, metadata, tool
registry, working directories and customizations. Per-conversation activity
lives on chat channels; the session only mirrors blocking chat requests in
`inputNeeded`, whose content drives the InputNeeded activity bit of the
session `status`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _status as st
from ._registry import Action, Registry, State
from ._util import ABSENT, add_directory, assign, field, index_of, merge_config, remove_directory, upsert, without

registry = Registry("session")
handles = registry.handles

_MCP_SERVER = "mcpServer"
_PLUGIN = "plugin"
_TOOL_CLIENT_EXECUTION = "toolClientExecution"


# ── Helpers ──────────────────────────────────────────────────────────────────


def _awaits_user(request: dict[str, Any]) -> bool:
    # A tool running on a client is delegated work, not a question to the
    # user: counting it would show every client tool call as "input needed".
    return request.get("kind") != _TOOL_CLIENT_EXECUTION


def _input_needed_status(status: int, requests: list[dict[str, Any]]) -> int:
    if any(_awaits_user(r) for r in requests):
        return st.with_activity(status, st.INPUT_NEEDED)
    # Drop only the "needs input" bit: a blocked turn falls back to
    # InProgress, an idle session stays idle.
    return status & ~(st.INPUT_NEEDED & ~st.IN_PROGRESS)


def _find_customization(state: State, cid: str) -> tuple[int, int | None, dict[str, Any]] | None:
    """Locate a customization: top level first, then inside containers.

    Returns (top index, child index or None, entry).
    """
    items = state.get("customizations")
    if not items:
        return None
    top = index_of(items, "id", cid)
    if top >= 0:
        return top, None, items[top]
    for i, container in enumerate(items):
        if container.get("type") == _MCP_SERVER:
            continue
        children = container.get("children")
        if not children:
            continue
        child = index_of(children, "id", cid)
        if child >= 0:
            return i, child, children[child]
    return None


def _replace_customization(state: State, top: int, child: int | None, entry: dict[str, Any]) -> State:
    items = list(state["customizations"])
    if child is None:
        items[top] = entry
    else:
        children = list(items[top]["children"])
        children[child] = entry
        items[top] = {**items[top], "children": children}
    return {**state, "customizations": items}


def _update_mcp_server(state: State, cid: str, update: Callable[[dict[str, Any]], dict[str, Any]]) -> State:
    found = _find_customization(state, cid)
    if found is None:
        return state
    top, child, entry = found
    if entry.get("type") != _MCP_SERVER:
        return state
    updated = update(entry)
    if updated is entry:
        return state
    return _replace_customization(state, top, child, updated)


# ── Lifecycle ────────────────────────────────────────────────────────────────


@handles("session/ready")
def ready(state: State, action: Action, **_: object) -> State:
    # Only the lifecycle moves: a provisional session may already run its
    # first turn, and `status` is kept in step by the other actions.
    return {**state, "lifecycle": "ready"}


@handles("session/creationFailed")
def creation_failed(state: State, action: Action, **_: object) -> State:
    return {**state, "lifecycle": "failed", "creationError": action["error"]}


# ── Chat catalogue ───────────────────────────────────────────────────────────


@handles("session/chatAdded")
def chat_added(state: State, action: Action, **_: object) -> State:
    return {**state, "chats": upsert(state["chats"], action["summary"], "resource")}


@handles("session/chatRemoved")
def chat_removed(state: State, action: Action, **_: object) -> State:
    idx = index_of(state["chats"], "resource", action["chat"])
    if idx < 0:
        return state
    chats = list(state["chats"])
    del chats[idx]
    next_state = {**state, "chats": chats}
    if state.get("defaultChat") == action["chat"]:
        del next_state["defaultChat"]
    return next_state


@handles("session/chatUpdated")
def chat_updated(state: State, action: Action, **_: object) -> State:
    idx = index_of(state["chats"], "resource", action["chat"])
    if idx < 0:
        return state
    chats = list(state["chats"])
    chats[idx] = {**chats[idx], **without(action["changes"], "resource")}
    return {**state, "chats": chats}


@handles("session/chatsReordered")
def chats_reordered(state: State, action: Action, **_: object) -> State:
    # Not in any reducer version we could read; from the schema: `chats` is
    # the complete new order, summaries are kept, and an order that is not a
    # permutation of the current catalogue is ignored.
    order = action["chats"]
    by_uri = {c["resource"]: c for c in state["chats"]}
    if len(order) != len(state["chats"]) or set(order) != set(by_uri) or len(set(order)) != len(order):
        return state
    if order == [c["resource"] for c in state["chats"]]:
        return state
    return {**state, "chats": [by_uri[uri] for uri in order]}


@handles("session/defaultChatChanged")
def default_chat_changed(state: State, action: Action, **_: object) -> State:
    return assign(state, defaultChat=field(action, "defaultChat"))


# ── Metadata ─────────────────────────────────────────────────────────────────


@handles("session/titleChanged")
def title_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "title": action["title"]}


@handles("session/isReadChanged")
def is_read_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "status": st.with_flag(state["status"], st.IS_READ, action["isRead"])}


@handles("session/isArchivedChanged")
def is_archived_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "status": st.with_flag(state["status"], st.IS_ARCHIVED, action["isArchived"])}


@handles("session/activityChanged")
def activity_changed(state: State, action: Action, **_: object) -> State:
    return assign(state, activity=field(action, "activity"))


@handles("session/changesetsChanged")
def changesets_changed(state: State, action: Action, **_: object) -> State:
    changesets = action.get("changesets")
    return assign(state, changesets=ABSENT if changesets is None else changesets)


@handles("session/configChanged")
def config_changed(state: State, action: Action, **_: object) -> State:
    return merge_config(state, action)


@handles("session/metaChanged")
def meta_changed(state: State, action: Action, **_: object) -> State:
    return assign(state, _meta=field(action, "_meta"))


# ── Tools and active clients ─────────────────────────────────────────────────


@handles("session/serverToolsChanged")
def server_tools_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "serverTools": action["tools"]}


@handles("session/activeClientSet")
def active_client_set(state: State, action: Action, **_: object) -> State:
    clients = upsert(state["activeClients"], action["activeClient"], "clientId")
    return {**state, "activeClients": clients}


@handles("session/activeClientRemoved")
def active_client_removed(state: State, action: Action, **_: object) -> State:
    idx = index_of(state["activeClients"], "clientId", action["clientId"])
    if idx < 0:
        return state
    clients = list(state["activeClients"])
    del clients[idx]
    return {**state, "activeClients": clients}


# ── Working directories ──────────────────────────────────────────────────────


@handles("session/workingDirectorySet")
def working_directory_set(state: State, action: Action, **_: object) -> State:
    return add_directory(state, action["directory"])


@handles("session/workingDirectoryRemoved")
def working_directory_removed(state: State, action: Action, **_: object) -> State:
    return remove_directory(state, action["directory"])


@handles("session/workingDirectoryReplaced")
def working_directory_replaced(state: State, action: Action, **_: object) -> State:
    # Not in any reducer version we could read; from the schema: a
    # compare-and-swap that is a no-op without the target, then
    # de-duplicates keeping each URI's first position.
    dirs = state.get("workingDirectories")
    target = action["directory"]
    if not dirs or target not in dirs:
        return state
    swapped = [action["replacement"] if d == target else d for d in dirs]
    result: list[str] = []
    for d in swapped:
        if d not in result:
            result.append(d)
    if result == dirs:
        return state
    return {**state, "workingDirectories": result}


# ── Input needed ─────────────────────────────────────────────────────────────


@handles("session/inputNeededSet")
def input_needed_set(state: State, action: Action, **_: object) -> State:
    requests = upsert(state.get("inputNeeded") or [], action["request"], "id")
    return {
        **state,
        "inputNeeded": requests,
        "status": _input_needed_status(state["status"], requests),
    }


@handles("session/inputNeededRemoved")
def input_needed_removed(state: State, action: Action, **_: object) -> State:
    requests = state.get("inputNeeded")
    if requests is None:
        return state
    idx = index_of(requests, "id", action["id"])
    if idx < 0:
        return state
    remaining = list(requests)
    del remaining[idx]
    return assign(
        state,
        status=_input_needed_status(state["status"], remaining),
        inputNeeded=remaining if remaining else ABSENT,
    )


# ── Customizations ───────────────────────────────────────────────────────────


@handles("session/customizationsChanged")
def customizations_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "customizations": action["customizations"]}


@handles("session/customizationToggled")
def customization_toggled(state: State, action: Action, **_: object) -> State:
    # The newest reducer we could read still took a boolean `enabled`; the
    # schema now carries an `enablement` list. From its description: plugins
    # and MCP servers store the explicit decisions, every other entry gets
    # the effective value in `enabled` (the first, most specific decision,
    # enabled when there is none).
    found = _find_customization(state, action["id"])
    if found is None:
        return state
    top, child, entry = found
    enablement = action["enablement"]
    if entry.get("type") in (_PLUGIN, _MCP_SERVER):
        updated = {**entry, "enablement": enablement}
    else:
        updated = {**entry, "enabled": enablement[0]["enabled"] if enablement else True}
    return _replace_customization(state, top, child, updated)


@handles("session/customizationUpdated")
def customization_updated(state: State, action: Action, **_: object) -> State:
    items = state.get("customizations") or []
    return {**state, "customizations": upsert(items, action["customization"], "id")}


@handles("session/customizationRemoved")
def customization_removed(state: State, action: Action, **_: object) -> State:
    found = _find_customization(state, action["id"])
    if found is None:
        return state
    top, child, _entry = found
    items = list(state["customizations"])
    if child is None:
        del items[top]
    else:
        children = list(items[top]["children"])
        del children[child]
        items[top] = {**items[top], "children": children}
    return {**state, "customizations": items}


@handles("session/mcpServerStateChanged")
def mcp_server_state_changed(state: State, action: Action, **_: object) -> State:
    return _update_mcp_server(
        state,
        action["id"],
        lambda e: assign(e, state=action["state"], channel=field(action, "channel")),
    )


@handles("session/mcpServerStartRequested")
def mcp_server_start_requested(state: State, action: Action, **_: object) -> State:
    return _update_mcp_server(state, action["id"], lambda e: assign(e, state={"kind": "starting"}, channel=ABSENT))


@handles("session/mcpServerStopRequested")
def mcp_server_stop_requested(state: State, action: Action, **_: object) -> State:
    return _update_mcp_server(state, action["id"], lambda e: assign(e, state={"kind": "stopped"}, channel=ABSENT))


@handles("session/mcpServerBackgroundRequested")
def mcp_server_background_requested(state: State, action: Action, **_: object) -> State:
    # Not in any reducer version we could read; from the schema: only a
    # server that is `starting` with `blocking: true` changes, to
    # `blocking: false`; anything else is a no-op.
    def unblock(entry: dict[str, Any]) -> dict[str, Any]:
        server_state = entry.get("state") or {}
        if server_state.get("kind") != "starting" or server_state.get("blocking") is not True:
            return entry
        return {**entry, "state": {**server_state, "blocking": False}}

    return _update_mcp_server(state, action["id"], unblock)


def reduce_session(state: State, action: Action) -> State:
    """Apply one session action to a wire-shaped `SessionState`."""
    return registry.reduce(state, action)
