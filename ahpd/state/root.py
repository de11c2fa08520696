"""Root channel reducer.

Root state is the host-wide catalogue (agents, session count, terminals,
host config). Every root action is a full replacement of one field, except
config, which merges like the session config does.
"""

from __future__ import annotations

from ._registry import Action, Registry, State
from ._util import merge_config

registry = Registry("root")
handles = registry.handles


@handles("root/agentsChanged")
def agents_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "agents": action["agents"]}


@handles("root/activeSessionsChanged")
def active_sessions_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "activeSessions": action["activeSessions"]}


@handles("root/terminalsChanged")
def terminals_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "terminals": action["terminals"]}


@handles("root/configChanged")
def config_changed(state: State, action: Action, **_: object) -> State:
    return merge_config(state, action)


def reduce_root(state: State, action: Action) -> State:
    """Apply one root action to a wire-shaped `RootState`."""
    return registry.reduce(state, action)
