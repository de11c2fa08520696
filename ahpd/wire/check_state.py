"""What the wire checker (``ahpd.wire.check``) keeps and reports: a problem
found, the turns and connections it follows, and the action vocabularies
it reasons with. Apart from the checking itself so that a reader of the
rules finds their words in one short place.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from ahpd.wire.replay import Channel, History

ANY_ACTION = {"type": "root/activeSessionsChanged", "activeSessions": 0}
ENDINGS = frozenset({"chat/turnComplete", "chat/turnCancelled", "chat/error"})
# Actions that append to a part, and the kind of part each needs.
APPENDS = {"chat/delta": "markdown", "chat/reasoning": "reasoning"}
TOOL_ACTIONS = frozenset(
    {
        "chat/toolCallDelta",
        "chat/toolCallReady",
        "chat/toolCallComplete",
        "chat/toolCallConfirmed",
        "chat/toolCallContentChanged",
    }
)


class Problem(NamedTuple):
    path: str  # the capture file
    line: int
    json_path: str
    excerpt: str
    rule: str
    message: str
    connection: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.message} at {self.json_path}: {self.excerpt}"

    def to_json(self) -> dict[str, Any]:
        return dict(self._asdict())


def clears_activity(params: Any) -> bool:
    changes = params.get("changes") if isinstance(params, dict) else None
    return isinstance(changes, dict) and "activity" in changes and changes["activity"] is None


def excerpt(value: Any, limit: int = 120) -> str:
    text = (
        value
        if isinstance(value, str) and value.startswith(("{", "["))
        else json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


def join_path(prefix: str, sub: str) -> str:
    return prefix + sub[1:] if sub.startswith("$") else f"{prefix}.{sub}"


class Turn:
    __slots__ = ("started", "ended", "parts")

    def __init__(self, started: int) -> None:
        self.started = started
        self.ended: int | None = None
        self.parts: dict[Any, str] = {}  # part id (or tool call id) -> kind


class Connection:
    """What the checker knows about one connection so far."""

    def __init__(self, name: str, path: str, histories: dict[str, History] | None = None) -> None:
        self.name = name
        self.path = path
        self.histories = histories if histories is not None else {}
        self.closed = False
        self.last_frame = 0  # the checker's count of frames at this connection's latest
        self.client_id: str | None = None
        self.requests: dict[Any, tuple[str, int, Any]] = {}  # c2s id -> (method, line, params)
        self.server_requests: dict[Any, tuple[str, int]] = {}  # s2c id -> (method, line)
        self.last_seq: float | None = None  # an int, unless a frame the schema refused said otherwise
        self.dispatched: dict[Any, dict[str, Any]] = {}  # clientSeq -> action
        self.channels: dict[str, Channel] = {}
        self.dropped: set[str] = set()
        # Actions on a channel whose first snapshot is still in flight: (serverSeq, action, path, line).
        self.deferred: dict[str, list[tuple[float, dict[str, Any], str, int]]] = {}
        # Turn and tool call ids below are as the capture has them: strings in a well-formed
        # action, anything (None, a number) in one the schema refused, which is followed all the same.
        self.turns: dict[tuple[str, Any], Turn] = {}
        self.running: dict[str, Any] = {}  # chat channel -> turn id running
        self.asked: dict[Any, tuple[int, str]] = {}  # toolCallId -> (line, excerpt) of a ready that asks
        self.answerable: set[Any] = set()  # toolCallIds somebody was asked about or answered

    def channel(self, uri: str) -> Channel:
        chan = self.channels.get(uri)
        if chan is None:
            history = self.histories.setdefault(uri, History())
            chan = self.channels[uri] = Channel(uri, self.name, history)
        return chan


def requested(method: str, params: Any) -> list[str]:
    """The channels a request asks to be subscribed to."""
    if not isinstance(params, dict):
        return []
    found = {
        "subscribe": [params.get("channel")],
        "initialize": params.get("initialSubscriptions"),
        "reconnect": params.get("subscriptions"),
    }.get(method) or []
    return [uri for uri in found if isinstance(uri, str)]


def part_key(part: dict[str, Any]) -> tuple[Any, str]:
    if part.get("kind") == "toolCall":
        return (part.get("toolCall") or {}).get("toolCallId"), "toolCall"
    return part.get("id"), part.get("kind", "?")


def identifiable(action: dict[str, Any]) -> bool:
    """Whether what an action names its turn, part and tool call by can be
    followed (kept as a key): a list or an object there cannot."""
    part = action.get("part")
    names = (action.get("turnId"), action.get("partId"), action.get("toolCallId"))
    try:
        hash((names, part_key(part) if isinstance(part, dict) else None))
    except TypeError:
        return False
    return True
