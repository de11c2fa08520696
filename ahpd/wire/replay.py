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

A snapshot served to a connection that has no state of its own yet is held
against what *other* connections watching the same channel reduced up to
its ``fromSeq``: each channel's :class:`History` keeps the states their
actions reduced to, by serverSeq (references to states already held, for
the last ``HISTORY`` actions), for as long as somebody watches it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from ahpd import state as reducers

# Keys only one kind of state requires, to tell a snapshot's kind by its shape.
_KIND_BY_KEY = (
    ("agents", "root"),
    ("turns", "chat"),
    ("chats", "session"),
    ("claim", "terminal"),
    ("annotations", "annotations"),
    ("entries", "automation"),
    ("automation", "automationRun"),
    ("files", "changeset"),
    ("recursive", "resourceWatch"),
)

#: Each channel's reducer, looked up once (``apply`` runs for every action of a capture).
_REDUCERS: dict[str, Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]] = {}

#: How many of a channel's latest states its history keeps: a snapshot's
#: answer reaches the wire shortly after the actions before it.
HISTORY = 512


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


class History:
    """One channel's states by serverSeq, as reduced by whichever connections
    watch it (``holders``); forgotten once nobody does, since what happens
    next is seen by no one."""

    __slots__ = ("entries", "holders")

    def __init__(self) -> None:
        self.entries: deque[tuple[int, dict[str, Any]]] = deque(maxlen=HISTORY)
        self.holders: set[str] = set()

    def record(self, seq: int, state: dict[str, Any] | None) -> None:
        """The state after ``seq``; the first connection to say it is heard."""
        if state is not None and (not self.entries or seq > self.entries[-1][0]):
            self.entries.append((seq, state))

    def at(self, seq: int) -> dict[str, Any] | None:
        """The state as of ``seq``; None when the history begins after it."""
        found = None
        for at, state in self.entries:
            if at > seq:
                break
            found = state
        return found

    def hold(self, holder: str, seq: int, state: dict[str, Any]) -> None:
        if not self.holders:
            self.entries.clear()
            self.record(seq, state)
        self.holders.add(holder)

    def release(self, holder: str) -> None:
        self.holders.discard(holder)
        if not self.holders:
            self.entries.clear()


class Channel:
    """One subscribed channel: its kind, the state reduced so far, and while a
    subscribe is in flight, the log of ``(serverSeq, action, state after)``.
    ``history`` is the channel's, shared with every connection watching it."""

    __slots__ = ("uri", "kind", "state", "log", "pending", "subscribed", "compared", "owner", "history")

    def __init__(self, uri: str, owner: str = "", history: History | None = None) -> None:
        self.uri = uri
        self.kind: str | None = None
        self.state: dict[str, Any] | None = None
        self.log: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = []
        self.pending = 0  # subscribes in flight
        self.subscribed = False
        self.compared = 0  # snapshots held against the reduced state
        self.owner = owner
        self.history = history if history is not None else History()

    def apply(self, seq: int, action: dict[str, Any]) -> Exception | None:
        """Reduce ``action`` onto the state; the reducer's exception, if it raised one."""
        kind = self.kind
        if kind is None:
            kind = self.kind = reducers.channel_of_action(str(action.get("type", "")))
        failure = None
        state = self.state
        if state is not None and kind is not None:
            try:
                reduce = _REDUCERS.get(kind) or _REDUCERS.setdefault(kind, reducers.reducer(kind))
                state = self.state = reduce(state, action)
            except Exception as exc:  # noqa: BLE001 - a malformed action is reported, not fatal
                failure = exc
            history = self.history
            if self.owner in history.holders:
                # ``History.record`` written out: this runs for every action of a capture.
                entries = history.entries
                if state is not None and (not entries or seq > entries[-1][0]):
                    entries.append((seq, state))
        if self.pending:
            self.log.append((seq, action, state))
        return failure

    def would_change(self, action: dict[str, Any]) -> bool | None:
        """Whether ``action`` would move the state; None when there is none to ask."""
        if self.state is None or self.kind is None:
            return None
        try:
            return reducers.reduce(self.kind, self.state, action) is not self.state
        except Exception:  # noqa: BLE001 - cannot tell; apply() reports the reducer's failure
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

    def others(self, from_seq: int) -> tuple[dict[str, Any] | None, frozenset[str]]:
        """What the other connections watching this channel reduced as of
        ``from_seq``, and who they are."""
        others = frozenset(self.history.holders - {self.owner})
        return (self.history.at(from_seq) if others else None), others

    def snapshot(self, state: dict[str, Any], from_seq: int) -> tuple[tuple[str, Any, Any] | None, bool]:
        """Take a snapshot: compare it with the state as of ``from_seq``, then
        rebase on it. Returns the first difference, if any, and whether it was
        held against this connection's own state (else: against the others')."""
        before = [entry for entry in self.log if entry[0] <= from_seq]
        expected = before[-1][2] if before else self.state
        own = expected is not None
        if not own:
            expected, _ = self.others(from_seq)
        self.kind = kind_of_state(state) or self.kind
        difference = None
        if expected is not None and self.kind is not None:
            self.compared += 1
            difference = first_difference(expected, state)
        after = [entry for entry in self.log if entry[0] > from_seq]
        self.history.hold(self.owner, from_seq, state)
        self.state, self.subscribed = state, True
        self.pending = max(0, self.pending - 1)
        self.log = [(-1, {}, state)] if self.pending else []
        for seq, action, _ in after:
            self.apply(seq, action)  # a failure was reported when the action arrived
        return difference, own

    def drop(self) -> None:
        """Unsubscribed (or gone): what arrives from here on is not this client's business."""
        self.state, self.log, self.pending, self.subscribed = None, [], 0, False
        self.history.release(self.owner)
