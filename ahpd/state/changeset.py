"""Changeset channel reducer.

A changeset is a computed view of file changes. `error` fields follow their
`status`: they are present only while the status is `error`, so every
transition away from `error` drops the stale payload.
"""

from __future__ import annotations

from ._registry import Action, Registry, State
from ._util import assign, field, index_of, upsert, without

registry = Registry("changeset")
handles = registry.handles

_ERROR = "error"


@handles("changeset/statusChanged")
def status_changed(state: State, action: Action, **_: object) -> State:
    if action["status"] == _ERROR:
        return assign(state, status=action["status"], error=field(action, "error"))
    return {**without(state, "error"), "status": action["status"]}


@handles("changeset/fileSet")
def file_set(state: State, action: Action, **_: object) -> State:
    return {**state, "files": upsert(state["files"], action["file"], "id")}


@handles("changeset/fileRemoved")
def file_removed(state: State, action: Action, **_: object) -> State:
    idx = index_of(state["files"], "id", action["fileId"])
    if idx < 0:
        return state
    files = list(state["files"])
    del files[idx]
    return {**state, "files": files}


@handles("changeset/filesReviewChanged")
def files_review_changed(state: State, action: Action, **_: object) -> State:
    ids = set(action["files"])
    reviewed = action["reviewed"]
    changed = False
    files = []
    for entry in state["files"]:
        if entry.get("id") in ids and entry.get("reviewed") != reviewed:
            changed = True
            entry = {**entry, "reviewed": reviewed}
        files.append(entry)
    return {**state, "files": files} if changed else state


@handles("changeset/contentChanged")
def content_changed(state: State, action: Action, **_: object) -> State:
    next_state = {**state, "files": action["files"]}
    if "operations" in action:
        next_state["operations"] = action["operations"]
    if "error" in action:
        next_state["error"] = action["error"]
    else:
        next_state.pop("error", None)
    return next_state


@handles("changeset/operationsChanged")
def operations_changed(state: State, action: Action, **_: object) -> State:
    if "operations" not in action:
        return without(state, "operations")
    return {**state, "operations": action["operations"]}


@handles("changeset/operationStatusChanged")
def operation_status_changed(state: State, action: Action, **_: object) -> State:
    operations = state.get("operations")
    if operations is None:
        return state
    idx = index_of(operations, "id", action["operationId"])
    if idx < 0:
        return state
    current = operations[idx]
    if action["status"] == _ERROR:
        updated = {**current, "status": action["status"]}
        if "error" in action:
            updated["error"] = action["error"]
        else:
            updated.pop("error", None)
    else:
        updated = {**without(current, "error"), "status": action["status"]}
    operations = list(operations)
    operations[idx] = updated
    return {**state, "operations": operations}


@handles("changeset/cleared")
def cleared(state: State, action: Action, **_: object) -> State:
    if not state["files"]:
        return state
    return {**state, "files": []}


def reduce_changeset(state: State, action: Action) -> State:
    """Apply one changeset action to a wire-shaped `ChangesetState`."""
    return registry.reduce(state, action)
