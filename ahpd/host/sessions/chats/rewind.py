"""Rewinding a chat's agent: ``chat/truncated`` and ``chat/turnResume``.

Both drop part of what the agent was told. ``chat/truncated`` drops the
turns after a named one - the edit-and-resend flow - and is served as a
rewind, because dropping them from the screen alone would leave the agent
answering the messages that were edited away. ``chat/turnResume`` runs the
latest errored turn again, with its message, under its own id.

Only a backend that can be resumed at a point of its conversation does
either (Claude Code: the CLI resumed at an entry of its transcript, the
session id kept, so a later resume reaches the rewound conversation). The
point of each turn is the backend's name for where the conversation stood
when that turn ended: recorded as this process watches the turn run, or,
for a turn read back off a transcript, read there with it (the turn's last
main-chain entry). A turn whose point cannot be found - one a store kept
before points were kept, one past the newest :data:`KEPT` - is refused
rather than half rewound. An ACP agent has no such moment, and both actions
are refused for it, saying so.

The rewind itself waits for the next turn: the action is applied when it is
validated, and the agent is started again at the kept point just before the
next prompt (a failure there ends that turn with ``chat/error``).

The points and a rewind still pending are kept with the chat in the session
store (:func:`saved`, :func:`restore`), so a restart neither forgets where a
turn can be rewound to nor a truncation a client was already told of: the
next turn after it resumes the truncated conversation, not the whole one.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ahpd.backends.port import BackendError
from ahpd.host.kernel.dispatch import Apply, Refuse

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat

#: What is remembered per chat: turn id -> its rewind point, and the point
#: the agent is to be started again at before its next prompt.
_RECORDS: weakref.WeakKeyDictionary[Chat, _Record] = weakref.WeakKeyDictionary()
#: The rewind point "before the first prompt": the conversation begun again.
START = ""
#: The points of a chat's newest turns the store keeps: a chat's head is
#: written whole when one changes, so a long chat must not make it grow for ever.
KEPT = 100


class _Record:
    def __init__(self) -> None:
        self.points: dict[str, str] = {}
        self.pending: str | None = None  # a point, START, or nothing to do


def _record(chat: Chat) -> _Record:
    record = _RECORDS.get(chat)
    if record is None:
        record = _RECORDS[chat] = _Record()
    return record


def rewinds(chat: Chat) -> bool:
    """Whether the chat's backend can be resumed at a point of its conversation."""
    backend = chat.host.sessions.backends.get(chat.session.provider) if chat.host.sessions else None
    return bool(getattr(backend, "rewinds", False))


def remember(chat: Chat, turn_id: str, conversation: Any) -> None:
    """A turn ended: where its conversation stood then is that turn's point."""
    point = getattr(conversation, "rewind_point", None)
    if isinstance(point, str) and point:
        _record(chat).points[turn_id] = point


def saved(chat: Chat) -> dict[str, Any]:
    """What the store keeps of the chat's rewinds (``Session.record``), or nothing."""
    record = _RECORDS.get(chat)
    if record is None or (not record.points and record.pending is None):
        return {}
    kept: dict[str, Any] = {"points": dict(list(record.points.items())[-KEPT:])}
    if record.pending is not None:
        kept["pending"] = record.pending
    return {"rewind": kept}


def restore(chat: Chat, kept: Any) -> None:
    """The chat's rewinds as the store kept them (:func:`saved`) or as a
    transcript named them (:func:`from_history`); what is not of that shape
    is left out, as if never kept."""
    if not isinstance(kept, dict):
        return
    points = kept.get("points")
    record = _record(chat)
    if isinstance(points, dict):
        record.points.update({t: p for t, p in points.items() if isinstance(p, str) and p})
    if isinstance(kept.get("pending"), str):
        record.pending = kept["pending"]


def from_history(turns: list[dict[str, Any]], history: list[Any]) -> dict[str, Any]:
    """The points of turns rebuilt from a backend's record (one turn per
    ``HistoryTurn``, in order), as :func:`restore` takes them."""
    points = {turn["id"]: past.point for turn, past in zip(turns, history, strict=False) if past.point}
    return {"rewind": {"points": points}} if points else {}


async def catch_up(chat: Chat, conversation: Any) -> None:
    """Before a prompt: a rewind a client asked for is made now. Raises
    :class:`BackendError` when the agent cannot be started again there."""
    record = _RECORDS.get(chat)
    if record is None or record.pending is None:
        return
    if record.pending and getattr(conversation, "resumed_at", None) == record.pending:
        record.pending = None  # the agent was started there (see pending_point): nothing left to do
        chat.session.save()
        return
    rewind = getattr(conversation, "rewind", None)
    if rewind is None:
        raise BackendError("this chat's agent cannot be rewound", "RewindFailed")
    await rewind(record.pending or None)
    record.pending = None
    chat.session.save()  # done: a restart now must not rewind again


def pending_point(chat: Chat) -> str | None:
    """The point a truncation still waits to rewind to, for an agent about
    to start: started there at once rather than resumed whole and then
    started again (as after a restart with a truncation pending)."""
    record = _RECORDS.get(chat)
    return record.pending if record is not None and record.pending else None


def point_before(chat: Chat, turns: list[dict[str, Any]]) -> str | None:
    """Where a turn that follows ``turns`` starts: the last one's point,
    :data:`START` before the chat's first turn, None when unknown."""
    if not turns:
        return START if not chat.session.older_turns.get(chat.uri) else None
    return _record(chat).points.get(turns[-1]["id"])


def resume_at(chat: Chat, point: str) -> None:
    """The next time the chat's agent starts, it starts at ``point``."""
    _record(chat).pending = point


def resumable(chat: Chat) -> bool:
    """Whether the chat's running turn, should it fail, can be run again:
    its backend rewinds, and where the conversation stood before it is known."""
    channel = chat.host.bus.channels.get(chat.uri)
    if channel is None or not rewinds(chat):
        return False  # a chat being disposed runs nothing again
    return point_before(chat, list(channel.state.get("turns") or [])) is not None


def _chat(host: Host, channel: str) -> Chat | None:
    return host.sessions.chat_owner.get(channel) if host.sessions else None


def _running(chat: Chat) -> bool:
    return chat.state().get("activeTurn") is not None or (chat.turn is not None and not chat.turn.ended)


def truncated(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    chat = _chat(host, channel)
    if chat is None:
        return Refuse(f"{channel} is not a chat this host runs")
    if not rewinds(chat):
        return Refuse(
            "truncating is refused: the agent behind this chat cannot be rewound to an earlier turn, and dropping "
            "turns from the screen alone would leave it answering the messages that were edited away"
        )
    if "turnId" not in action:
        return Refuse(
            "clearing every turn is refused: as a rewind it is a cut before the first prompt, which names "
            "no point of the agent's conversation; name the turn to keep"
        )
    if _running(chat):
        return Refuse("a turn is running in this chat: cancel it before truncating")
    turn_id = action["turnId"]
    ids = [t.get("id") for t in chat.state().get("turns") or []]
    if turn_id not in ids:
        return Refuse(f"turn {turn_id} is not a turn of this chat")
    dropped = ids[ids.index(turn_id) + 1 :]
    if not dropped:
        return Apply(action)  # nothing after it: nothing to rewind
    record = _record(chat)
    point = record.points.get(turn_id)
    if point is None:
        return Refuse(
            f"turn {turn_id} has no rewind point: where the agent's conversation stood after it was "
            "not recorded, nor found in its transcript, so the agent cannot be started again there"
        )

    def after() -> None:
        record.pending = point
        for gone in dropped:
            record.points.pop(gone, None)

    return Apply(action, after=after)


CLIENT_ACTIONS = {
    "chat/truncated": truncated,
}


# -- what the sessions core asks (ahpd.host.table.SESSION_HOOKS) -----------------------------


def chat_created(chat: Chat, record: dict[str, Any]) -> None:
    restore(chat, record.get("rewind"))


def agent_extras(chat: Chat, accepts: Collection[str]) -> dict[str, Any]:
    """An agent with a truncation pending is started at the kept point."""
    if "resume_at" not in accepts or chat.backend_id is None:
        return {}
    point = pending_point(chat)
    return {"resume_at": point} if point is not None else {}
