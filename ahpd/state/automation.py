"""Automation catalogue channel reducer.

The host owns every durable definition: clients only ask for changes, and
the host answers with `automation/set`. Request actions therefore leave the
catalogue unchanged; removal is the one request applied optimistically.
"""

from __future__ import annotations

from ._registry import Action, Registry, State
from ._util import index_of, upsert

registry = Registry("automation")
handles = registry.handles


@handles("automation/createRequested")
def create_requested(state: State, action: Action, **_: object) -> State:
    # Side-effect request: the host validates and persists the definition,
    # then publishes it with automation/set.
    return state


@handles("automation/updateRequested")
def update_requested(state: State, action: Action, **_: object) -> State:
    # Side-effect request: the host applies the patch to its authoritative
    # definition and publishes the result with automation/set.
    return state


@handles("automation/set")
def set_(state: State, action: Action, **_: object) -> State:
    return {**state, "entries": upsert(state["entries"], action["automation"], "resource")}


@handles("automation/removed")
def removed(state: State, action: Action, **_: object) -> State:
    idx = index_of(state["entries"], "resource", action["resource"])
    if idx < 0:
        return state
    entries = list(state["entries"])
    del entries[idx]
    return {**state, "entries": entries}


def reduce_automation(state: State, action: Action) -> State:
    """Apply one automation action to a wire-shaped `AutomationState`."""
    return registry.reduce(state, action)
