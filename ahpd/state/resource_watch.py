"""Resource-watch channel reducer.

Watch events are delivered through the action stream itself; the state
keeps no change history, so the one action leaves state untouched.
"""

from __future__ import annotations

from ._registry import Action, Registry, State

registry = Registry("resourceWatch")
handles = registry.handles


@handles("resourceWatch/changed")
def changed(state: State, action: Action, **_: object) -> State:
    # Subscribers consume the batch off the stream; nothing is retained.
    return state


def reduce_resource_watch(state: State, action: Action) -> State:
    """Apply one resource-watch action to a wire-shaped `ResourceWatchState`."""
    return registry.reduce(state, action)
