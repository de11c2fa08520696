"""Annotations channel reducer.

Annotations are review threads anchored to files of a session. Clients
assign the ids themselves and apply these actions optimistically, so every
action is an idempotent upsert or removal keyed by id.
"""

from __future__ import annotations

from ._registry import Action, Registry, State
from ._util import index_of, upsert

registry = Registry("annotations")
handles = registry.handles

# The annotation's own properties that `annotations/updated` may rewrite;
# entries, id and _meta are only replaced through `annotations/set`.
_UPDATABLE = ("origin", "resource", "range", "resolved")


@handles("annotations/set")
def set_(state: State, action: Action, **_: object) -> State:
    annotation = action["annotation"]
    return {**state, "annotations": upsert(state["annotations"], annotation, "id")}


@handles("annotations/updated")
def updated(state: State, action: Action, **_: object) -> State:
    annotations = state["annotations"]
    idx = index_of(annotations, "id", action["annotationId"])
    if idx < 0:
        return state
    changes = {key: action[key] for key in _UPDATABLE if key in action}
    annotations = list(annotations)
    annotations[idx] = {**annotations[idx], **changes}
    return {**state, "annotations": annotations}


@handles("annotations/removed")
def removed(state: State, action: Action, **_: object) -> State:
    idx = index_of(state["annotations"], "id", action["annotationId"])
    if idx < 0:
        return state
    annotations = list(state["annotations"])
    del annotations[idx]
    return {**state, "annotations": annotations}


@handles("annotations/entrySet")
def entry_set(state: State, action: Action, **_: object) -> State:
    idx = index_of(state["annotations"], "id", action["annotationId"])
    if idx < 0:
        return state
    annotation = state["annotations"][idx]
    annotations = list(state["annotations"])
    annotations[idx] = {**annotation, "entries": upsert(annotation["entries"], action["entry"], "id")}
    return {**state, "annotations": annotations}


@handles("annotations/entryRemoved")
def entry_removed(state: State, action: Action, **_: object) -> State:
    idx = index_of(state["annotations"], "id", action["annotationId"])
    if idx < 0:
        return state
    annotation = state["annotations"][idx]
    entry_idx = index_of(annotation["entries"], "id", action["entryId"])
    if entry_idx < 0:
        return state
    entries = list(annotation["entries"])
    del entries[entry_idx]
    annotations = list(state["annotations"])
    annotations[idx] = {**annotation, "entries": entries}
    return {**state, "annotations": annotations}


def reduce_annotations(state: State, action: Action) -> State:
    """Apply one annotations action to a wire-shaped `AnnotationsState`."""
    return registry.reduce(state, action)
