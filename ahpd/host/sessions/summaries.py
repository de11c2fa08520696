"""What the catalogue says about a chat and its session, kept in step.

A chat inlines its summary fields (title, status, activity, movable); its
session holds the same row in ``SessionState.chats``, and the root's
catalogue row of the session carries the compact list, the status, the
activity and ``_meta``. The protocol asks a host to keep the three
consistent, and this module is where that is done, one rule each:

- a chat's row in its session moves (``session/chatUpdated``) only when a
  field of it actually moved - a summary re-sent per token is a list
  redrawn per token;
- ``movable`` is the host's own answer (:func:`movable`), said as
  ``chat/movableChanged`` when it changes, and the row follows;
- the session's activity is the activity of the chat driving it (the
  default chat first, then the first chat, in catalogue order, that is
  doing something), said as ``session/activityChanged``;
- the root row follows as ``root/sessionSummaryChanged``, carrying
  ``activity: null`` when the activity clears: the partial is spread over
  the row a client holds, so a key left off would keep the last tool call
  showing (served outside the protocol, whose type says string);
- a session's ``_meta`` is replaced whole (``session/metaChanged``), so every
  source of it goes through :func:`set_meta`, which rebuilds it from what
  the session holds rather than patching it: two sources each patching
  their own key would take each other's away.

Client rules for the read and archived bits and for titles live here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ahpd.backends.port import MODEL_META
from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.sessions.common import IS_ARCHIVED

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.session import Session

#: A chat's fields its session's row repeats, and moves with it.
ROW_FIELDS = ("title", "status", "modifiedAt")


def is_default(chat: Chat) -> bool:
    return chat.session.state().get("defaultChat") == chat.uri


def why_not_movable(chat: Chat) -> str | None:
    """Why ``chat`` may not be the source of a move now, or None. Default is
    a role, not a chat: the chat a session hands out never moves. Nor does
    one running a turn, or one whose agent cannot be asked for the
    conversation again by its own id."""
    if is_default(chat):
        return "it is its session's default chat"
    if (chat.state().get("origin") or {}).get("kind") == "tool":
        return "it is the worker chat of a tool call, and moves only with the chat that spawned it"
    if chat.turn is not None and not chat.turn.ended:
        return "a turn is running in it"
    if chat.conversation is not None and not getattr(chat.conversation, "resumable", True):
        return "its agent cannot load the conversation again by its id"
    return None


def movable(chat: Chat) -> bool:
    return why_not_movable(chat) is None


def chat_row(chat: Chat) -> dict[str, Any]:
    """The chat's ``ChatSummary`` as its session's catalogue holds it."""
    state = chat.state()
    kept = ("resource", *ROW_FIELDS, "activity", "origin", "interactivity", "workingDirectories")
    row = {k: state[k] for k in kept if k in state}
    if state.get("movable"):
        row["movable"] = True
    return row


def follow_movable(chat: Chat) -> None:
    """Say ``chat/movableChanged`` when the host's answer changed."""
    now = movable(chat)
    if bool(chat.state().get("movable")) != now:
        chat.host.bus.emit(chat.uri, {"type": "chat/movableChanged", "movable": now})


def sync_chat(chat: Chat) -> None:
    """Keep the session's row of ``chat``, the session's activity and the
    root row in step with the chat's own state; say only what moved."""
    session, host = chat.session, chat.host
    if chat.uri not in host.bus.channels or session.uri not in host.bus.channels or session.disposed:
        return
    follow_movable(chat)
    state = chat.state()
    row = next((c for c in session.state()["chats"] if c["resource"] == chat.uri), None)
    if row is None:
        return
    changes = {k: state[k] for k in ROW_FIELDS if k in state and row.get(k) != state[k]}
    if state.get("activity") is not None and row.get("activity") != state["activity"]:
        changes["activity"] = state["activity"]
    if bool(row.get("movable")) != bool(state.get("movable")):
        changes["movable"] = bool(state.get("movable"))
    if changes:
        host.bus.emit(session.uri, {"type": "session/chatUpdated", "chat": chat.uri, "changes": changes})
    activity_moved = follow_activity(session)
    if changes or activity_moved:
        notify_row(session, activity=activity_moved)


def session_activity(session: Session) -> str | None:
    """What the session is doing, from the chat driving it."""
    channels = session.host.bus.channels
    default = session.state().get("defaultChat")
    order = ([default] if default in session.chats else []) + [uri for uri in session.chats if uri != default]
    for uri in order:
        channel = channels.get(uri)
        if channel is not None and channel.state.get("activity"):
            return channel.state["activity"]
    return None


def follow_activity(session: Session) -> bool:
    """Say ``session/activityChanged`` when the driving chat's activity
    moved (absent to clear it); True when it did."""
    activity = session_activity(session)
    if session.state().get("activity") == activity:
        return False
    session.host.bus.emit(
        session.uri,
        {"type": "session/activityChanged", "activity": activity} if activity else {"type": "session/activityChanged"},
    )
    return True


def notify_row(session: Session, *, activity: bool = False, **more: Any) -> None:
    """``root/sessionSummaryChanged`` with the row's moving parts: status,
    modifiedAt and the compact chat list, and ``activity`` when it moved
    (``null`` when it cleared)."""
    summary = session.summary()
    changes: dict[str, Any] = {k: summary[k] for k in ("status", "modifiedAt") if k in summary}
    changes["chats"] = summary["chats"]
    if activity:
        changes["activity"] = summary.get("activity")
    changes.update(more)
    session.manager.notify_summary(session, changes)


def set_meta(session: Session, key: str, value: Any) -> None:
    """Put ``value`` under ``_meta[key]`` (None takes the key away): the
    whole ``_meta`` is rebuilt from what the session holds and said as
    ``session/metaChanged``, and the root row follows; nothing when it did
    not move. Writing it down is the caller's to decide: what is derived
    (the git facts, re-read at every open) is not, what was recorded (an
    agent's artifacts) is."""
    set_metas(session, {key: value})


def set_metas(session: Session, values: dict[str, Any]) -> None:
    """``set_meta`` for several keys that move together, said as one ``session/metaChanged``."""
    host = session.host
    if session.disposed or session.uri not in host.bus.channels:
        return
    before = session.state().get("_meta") or {}
    meta = {k: v for k, v in before.items() if k not in values}
    meta.update({k: v for k, v in values.items() if v is not None})
    if meta == before:
        return
    host.bus.emit(
        session.uri, {"type": "session/metaChanged", "_meta": meta} if meta else {"type": "session/metaChanged"}
    )
    session.manager.notify_summary(session, {"_meta": meta})


#: What an agent may put on its session's ``_meta`` itself, through an ACP
#: ``session_info_update``'s own ``_meta``: the model it runs on now.
AGENT_META = (MODEL_META,)


def agent_said_info(session: Session, update: Mapping[str, Any]) -> None:
    """An agent's ``session_info_update``: the keys of its ``_meta`` an agent
    may set (:data:`AGENT_META`) go onto the session's, each through
    :func:`set_meta`; the rest of the update is the agent's own business."""
    meta = update.get("_meta")
    if not isinstance(meta, Mapping):
        return
    for key in AGENT_META:
        if key in meta and (meta[key] is None or isinstance(meta[key], str)):
            set_meta(session, key, meta[key] or None)


# -- what clients dispatch ----------------------------------------------------------


def _chat(host: Host, channel: str) -> Chat | None:
    return host.sessions.chat_owner.get(channel) if host.sessions is not None else None


def _session(host: Host, channel: str) -> Session | None:
    return host.sessions.sessions.get(channel) if host.sessions is not None else None


def chat_is_read_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    """One chat's own bit, projected into its row and the root's list."""
    chat = _chat(host, channel)
    return Apply(action, after=(lambda: sync_chat(chat)) if chat is not None else None)


def chat_is_archived_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    """On the default chat this is the session being archived: said as
    ``session/isArchivedChanged`` on the session's channel, and nothing on
    the chat's, whose own bit stays as it was (the sender is answered with
    that bit, so it sets its copy back)."""
    chat = _chat(host, channel)
    if chat is None:
        return Apply(action)
    if not is_default(chat):
        return Apply(action, after=lambda: sync_chat(chat))
    session = chat.session
    wanted = bool(action["isArchived"])
    if bool(session.state()["status"] & IS_ARCHIVED) != wanted:
        host.bus.emit(session.uri, {"type": "session/isArchivedChanged", "isArchived": wanted})
        notify_row(session)
        session.save()
    own = bool(chat.state().get("status", 0) & IS_ARCHIVED)
    return Apply({**action, "isArchived": own})


def session_flag_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    """``session/isReadChanged`` and ``session/isArchivedChanged``: the
    session's own bits, and the root row follows."""
    session = _session(host, channel)
    return Apply(action, after=(lambda: notify_row(session)) if session is not None else None)


def rename_chat(chat: Chat, title: str) -> None:
    """One chat's own title: set on its state, and its row follows as
    ``session/chatUpdated``. No chat action carries a title, so the chat's
    subscribers hear of it through the session's catalogue."""
    channel = chat.host.bus.channels[chat.uri]
    if channel.state.get("title") != title:
        channel.state = {**channel.state, "title": title}
        sync_chat(chat)
        chat.session.save()


def title_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    """A session renamed; or, dispatched on a chat's channel, that one chat
    (the way the reference host reads it): the chat's title is set and its
    row follows as ``session/chatUpdated``. No chat action carries a title,
    so the chat's subscribers hear of it through the session's catalogue."""
    title = action["title"]
    if not title.strip():
        return Refuse("a blank title is refused: an untitled row is one nobody can find again")
    chat = _chat(host, channel)
    if chat is not None:
        rename_chat(chat, title)
        return Apply(action)  # the chat's reducer takes no session action: answered as it is
    session = _session(host, channel)
    if session is None:
        return Apply(action)
    return Apply(action, after=lambda: host.sessions.notify_summary(session, {"title": title}))


CLIENT_ACTIONS = {
    "chat/isReadChanged": chat_is_read_changed,
    "chat/isArchivedChanged": chat_is_archived_changed,
    "session/isReadChanged": session_flag_changed,
    "session/isArchivedChanged": session_flag_changed,
    "session/titleChanged": title_changed,
}
