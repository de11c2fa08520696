"""Automation-run channel reducer.

A run is one execution of an automation: its lifecycle and the sessions it
spawned. `sessions` is an ordered set, and `primarySession` must stay one of
its members.
"""

from __future__ import annotations

from ._registry import Action, Registry, State
from ._util import assign, field, without

registry = Registry("automationRun")
handles = registry.handles


@handles("automationRun/lifecycleChanged")
def lifecycle_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "lifecycle": action["lifecycle"]}


@handles("automationRun/sessionSet")
def session_set(state: State, action: Action, **_: object) -> State:
    if action["session"] in state["sessions"]:
        return state
    return {**state, "sessions": [*state["sessions"], action["session"]]}


@handles("automationRun/sessionRemoved")
def session_removed(state: State, action: Action, **_: object) -> State:
    session = action["session"]
    if session not in state["sessions"]:
        return state
    sessions = list(state["sessions"])
    sessions.remove(session)
    next_state = {**state, "sessions": sessions}
    if state.get("primarySession") == session:
        next_state = without(next_state, "primarySession")
    return next_state


@handles("automationRun/primarySessionChanged")
def primary_session_changed(state: State, action: Action, **_: object) -> State:
    return assign(state, primarySession=field(action, "primarySession"))


@handles("automationRun/cancelRequested")
def cancel_requested(state: State, action: Action, **_: object) -> State:
    # Side-effect request: the outcome arrives later as lifecycleChanged.
    return state


def reduce_automation_run(state: State, action: Action) -> State:
    """Apply one automation-run action to a wire-shaped `AutomationRunState`."""
    return registry.reduce(state, action)
