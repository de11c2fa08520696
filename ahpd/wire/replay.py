"""One connection's channels, rebuilt from the actions it was sent.

A snapshot is the host agreeing with itself; the actions are what every
client reduces. So each channel's state is reduced here from the actions the
connection received, through our reducers, and every later snapshot of that
channel is compared with it: a field under the wrong name, or beside its
action rather than in it, shows as a difference.

Timing: a snapshot is taken at ``fromSeq``, but actions numbered after it may
reach the wire before the reply that carries it. So while a subscribe is in
flight the actions on its channel are logged with the state after each, the
snapshot is compared with the state as of ``fromSeq``, and the actions after
``fromSeq`` are replayed on top of the snapshot. Outside that window only
the current state is kept, so memory stays flat however long the capture.
"""

from __future__ import annotations

from typing import Any

from ahpd import state as reducers

# Keys only one kind of state requires, to tell a snapshot's kind by its shape.
_KIND_BY_KEY = (
    ("agents", "root"), ("turns", "chat"), ("chats", "session"), ("claim", "terminal"),
    ("annotations", "annotations"), ("entries", "automation"), ("automation", "automationRun"),
    ("files", "changeset"), ("recursive", "resourceWatch"),
)

#: Fields the canonical reducer sets from the clock, which no capture holds.
CLOCK_FIELDS = {"chat": ("modifiedAt",)}


def kind_of_state(state: Any) -> str | None:
    if isinstance(state, dict):
        for key, kind in _KIND_BY_KEY:
            if key in state:
                return kind
    return None


def first_difference(expected: Any, actual: Any, path: str = "$") -> tuple[str, Any, Any] | None:
    """The JSON path of the first place two values differ, and both values there."""
    if expected == actual and type(expected) is type(actual):
        return None
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in list(expected) + [k for k in actual if k not in expected]:
            if key not in actual or key not in expected:
                return f"{path}.{key}", expected.get(key, "<absent>"), actual.get(key, "<absent>")
            found = first_difference(expected[key], actual[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        for i, (a, b) in enumerate(zip(expected, actual, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(expected) != len(actual):
            return f"{path}.length", len(expected), len(actual)
        return None
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)) and expected == actual:
        return None  # 1 and 1.0 are one JSON number
    return path, expected, actual


class Channel:
    """One subscribed channel: its kind, the state reduced so far, and while a
    subscribe is in flight, the log of ``(serverSeq, action, state after)``."""

    __slots__ = ("uri", "kind", "state", "log", "pending", "subscribed", "compared")

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.kind: str | None = None
        self.state: dict[str, Any] | None = None
        self.log: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = []
        self.pending = 0  # subscribes in flight
        self.subscribed = False
        self.compared = 0  # snapshots held against the reduced state

    def apply(self, seq: int, action: dict[str, Any]) -> Exception | None:
        """Reduce ``action`` onto the state; the reducer's exception, if it raised one."""
        if self.kind is None:
            self.kind = reducers.channel_of_action(str(action.get("type", "")))
        failure = None
        if self.state is not None and self.kind is not None:
            try:
                self.state = reducers.reduce(self.kind, self.state, action)
            except Exception as exc:  # noqa: BLE001 - a malformed action is reported, not fatal
                failure = exc
        if self.pending:
            self.log.append((seq, action, self.state))
        return failure

    def would_change(self, action: dict[str, Any]) -> bool | None:
        """Whether ``action`` would move the state; None when there is none to ask."""
        if self.state is None or self.kind is None:
            return None
        try:
            return reducers.reduce(self.kind, self.state, action) is not self.state
        except Exception:  # noqa: BLE001
            return None

    def expect(self) -> None:
        """A subscribe for this channel is in flight: start logging."""
        if not self.pending:
            self.log = [(-1, {}, self.state)]
        self.pending += 1

    def settle(self) -> None:
        """A subscribe ended without a snapshot (refused)."""
        self.pending = max(0, self.pending - 1)
        if not self.pending:
            self.log = []

    def snapshot(self, state: dict[str, Any], from_seq: int) -> tuple[str, Any, Any] | None:
        """Take a snapshot: compare it with the state as of ``from_seq``, then
        rebase on it. Returns the first difference, if any."""
        before = [entry for entry in self.log if entry[0] <= from_seq]
        expected = before[-1][2] if before else self.state
        self.kind = kind_of_state(state) or self.kind
        difference = None
        if expected is not None and self.kind is not None:
            self.compared += 1
            ignored = CLOCK_FIELDS.get(self.kind, ())
            difference = first_difference({k: v for k, v in expected.items() if k not in ignored},
                                          {k: v for k, v in state.items() if k not in ignored})
        after = [entry for entry in self.log if entry[0] > from_seq]
        self.state, self.subscribed = state, True
        self.pending = max(0, self.pending - 1)
        self.log = [(-1, {}, state)] if self.pending else []
        for seq, action, _ in after:
            self.apply(seq, action)  # a failure was reported when the action arrived
        return difference

    def drop(self) -> None:
        """Unsubscribed: what arrives from here on is not this client's business."""
        self.state, self.log, self.pending, self.subscribed = None, [], 0, False
