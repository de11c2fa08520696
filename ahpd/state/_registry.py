"""Per-channel handler tables.

Each channel module registers one small function per wire action type, so a
reader finds any action's handler by searching for its type string.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

State = dict[str, Any]
Action = dict[str, Any]
Handler = Callable[..., State]


class Registry:
    """Maps wire action types of one channel to their handlers."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.handlers: dict[str, Handler] = {}

    def handles(self, action_type: str) -> Callable[[Handler], Handler]:
        """Register the decorated function as the handler of `action_type`."""
        prefix = f"{self.channel}/"
        if not action_type.startswith(prefix):
            raise ValueError(f"{action_type!r} is not a {self.channel} action")

        def register(fn: Handler) -> Handler:
            if action_type in self.handlers:
                raise ValueError(f"{action_type!r} already has a handler")
            self.handlers[action_type] = fn
            return fn

        return register

    def reduce(self, state: State, action: Action) -> State:
        """Apply `action`; an unknown type returns `state` itself."""
        handler = self.handlers.get(action.get("type", ""))
        if handler is None:
            return state
        return handler(state, action)
