"""``moveChat``: a chat reordered in its session, or carried to another one.

The source is the chat named by ``channel``; only a chat that advertises
``movable`` is taken (:func:`ahpd.host.sessions.summaries.why_not_movable`: never the
default chat, nor one running a turn, nor one whose agent cannot load the
conversation again by its id). Each refusal is ``-32602`` with the reason,
and nothing changes.

- Within its own session the chat is placed after the anchor (first when
  there is none): ``session/chatsReordered`` with the whole order, written
  to the stored chat list so a restart rebuilds it.
- To another session this host runs (of the same provider, on the same
  ``config.computer``): the chat, its turns, what the store keeps of it (its
  journal file moves to the destination's folder) and the folder its agent
  works in all go with it. Its agent is closed and started again under the
  destination, on the backend id it is held under; an agent that will not
  take the conversation there leaves the chat where it was, answered with
  the agent's own error.
- To a new session: one whose id is the chat's backend id, with the moved
  chat, under the URI it already had, as its non-movable default chat. Its
  agent is started there before the session is announced; one that will not
  start undoes the move (the session made for it disposed unannounced, the
  chat back at its place), answered with the agent's own error.

Ownership and order are committed and written before anything is said, so
a client is never told the chat is in two places or in none: the source is
told ``session/chatRemoved``, the destination ``session/chatAdded`` (and
``session/chatsReordered`` when the chat is not last), and both root rows
move.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ahpd.backends.port import BackendError
from ahpd.host.sessions import summaries
from ahpd.host.sessions.chats import workers
from ahpd.host.kernel.bus import ROOT, utc_now
from ahpd.host.sessions.chats.chat_commands import _chat
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.host.sessions.session_commands import SESSION_ALREADY_EXISTS
from ahpd.protocol import codec, model

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")


def _refuse(why: str, path: str = "$.channel") -> RpcError:
    return RpcError(INVALID_PARAMS, why, {"path": path})


def _check_source(chat: Chat) -> None:
    why = summaries.why_not_movable(chat)
    if why is not None:
        raise _refuse(f"{chat.uri} cannot be moved: {why}")


def _computer(session: Session) -> Any:
    return ((session.state().get("config") or {}).get("values") or {}).get("computer")


async def move_chat(host: Host, peer: Peer, params: model.MoveChatParams) -> dict[str, Any]:
    chat = await _chat(host, params.channel)
    _check_source(chat)
    destination = codec.encode(params.destination)
    if destination["kind"] == "newSession":
        return {"session": await _to_new_session(host, chat)}
    target_uri, after = destination["session"], destination.get("after")
    await host.ensure_channel(target_uri)
    # A destination named by another spelling (ahp-session:/<id> for demo:/<id>):
    # its anchor is read in the session's own names, and the answer in the client's.
    alias = host.bus.aliases.get(target_uri) if target_uri not in host.bus.channels else None
    target = host.sessions.sessions.get(alias.target if alias is not None else target_uri)
    if target is None:
        raise _refuse(f"no session {target_uri} runs on this host", "$.destination.session")
    if alias is not None and after is not None:
        after = alias.into(after)
    _check_anchor(chat, target, after)
    if target is chat.session:
        _reorder(chat, after)
        return {"session": target_uri}
    source = chat.session
    if target.provider != source.provider:
        raise _refuse(
            f"{target.uri} runs the {target.provider} agent and {chat.uri} the {source.provider} "
            "agent: a chat moves only between sessions of the same agent",
            "$.destination.session",
        )
    if _computer(target) != _computer(source):
        raise _refuse(
            f"{target.uri} runs on computer {_computer(target)!r} and {source.uri} on "
            f"{_computer(source)!r}: a chat moves only between sessions on the same computer",
            "$.destination.session",
        )
    await chat.stop_agent()  # closed here, started again under the destination
    _check_source(chat)  # a turn may have started meanwhile
    if target.disposed or source.disposed:
        raise _refuse(
            f"{target.uri if target.disposed else source.uri} was disposed meanwhile", "$.destination.session"
        )
    _check_anchor(chat, target, after)
    await _transfer(host, chat, source, target, after)
    return {"session": target_uri}


def _check_anchor(chat: Chat, target: Session, after: str | None) -> None:
    if after is None:
        return
    if after == chat.uri:
        raise _refuse(f"{chat.uri} cannot be placed after itself", "$.destination.after")
    if after not in target.chats:
        raise _refuse(f"{after} is not a chat of {target.uri}", "$.destination.after")


def _placed(order: list[str], uri: str, after: str | None) -> list[str]:
    rest = [u for u in order if u != uri]
    at = rest.index(after) + 1 if after is not None else 0
    return rest[:at] + [uri] + rest[at:]


def _set_order(session: Session, order: list[str]) -> None:
    session.chats = {uri: session.chats[uri] for uri in order}


def _reorder(chat: Chat, after: str | None) -> None:
    session = chat.session
    order = _placed(list(session.chats), chat.uri, after)
    if order == list(session.chats):
        return
    _set_order(session, order)
    session.save()
    _say_order(session)
    summaries.notify_row(session)


def _say_order(session: Session) -> None:
    """``session/chatsReordered`` when the session's row order is not the
    order the host holds (the reducer sends nothing for an order it has)."""
    order = list(session.chats)
    if [c["resource"] for c in session.state()["chats"]] != order:
        session.host.bus.emit(session.uri, {"type": "session/chatsReordered", "chats": order})


def _attach(chat: Chat, target: Session, after: str | None, older: list[dict[str, Any]] | None) -> None:
    source = chat.session
    target.chats[chat.uri] = chat
    _set_order(target, _placed(list(target.chats), chat.uri, after))
    if older:
        target.older_turns[chat.uri] = older
    if chat.folder is None and source.cwd != target.cwd:
        chat.folder = source.cwd  # the folder it was working in goes with it
    elif chat.folder == target.cwd:
        chat.folder = None
    chat.session = target


def _detach(chat: Chat) -> tuple[list[str], list[dict[str, Any]] | None]:
    """Take ``chat`` out of its session's own bookkeeping; what it held there."""
    source = chat.session
    order = list(source.chats)
    del source.chats[chat.uri]
    return order, source.older_turns.pop(chat.uri, None)


def _words(exc: Exception) -> str:
    """Why an agent did not start: a backend's own words, or what failed."""
    return exc.message if isinstance(exc, BackendError) else f"{type(exc).__name__}: {exc}"


def _give_back(chat: Chat, source: Session, target: Session, order: list[str], folder: Any) -> None:
    """A move that did not take: the chat back in ``source`` at the place
    ``order`` had it, with the folder it worked in, and the store told the
    journal is the source's again (the caller saves)."""
    target.chats.pop(chat.uri, None)
    older = target.older_turns.pop(chat.uri, None)
    if older:
        source.older_turns[chat.uri] = older
    if chat.scope is not None:
        chat.scope.cancel()  # an agent begun under the destination (a request given up mid-start) goes too
    chat.session, chat.folder = source, folder
    source.chats[chat.uri] = chat
    _set_order(source, [u for u in order if u in source.chats])
    source.manager.store.move_chat(chat.uri, target.uri, source.uri)


async def _started_or_undone(chat: Chat, undo: Callable[[], None]) -> str | None:
    """Start the moved chat's agent where it now is. If it will not start
    (or the request is given up meanwhile) the move is undone, nothing said:
    the agent's words, or None once it runs there."""
    if chat.backend_id is None:
        return None
    try:
        await chat.ensure_agent()
    except BaseException as exc:
        undo()
        if not isinstance(exc, Exception):
            raise
        return _words(exc)
    return None


async def _transfer(host: Host, chat: Chat, source: Session, target: Session, after: str | None) -> None:
    store = host.sessions.store
    order, older = _detach(chat)
    folder = chat.folder
    _attach(chat, target, after, older)
    store.move_chat(chat.uri, source.uri, target.uri)
    source.save()  # the source lets go first: a crash between the two loses the chat from neither
    target.save()

    def undo() -> None:
        _give_back(chat, source, target, order, folder)
        target.save()
        source.save()

    why = await _started_or_undone(chat, undo)
    if why is not None:
        raise RpcError(
            INVALID_PARAMS, f"{target.uri} did not take {chat.uri}: {why}", {"path": "$.destination.session"}
        )
    workers.carry(chat, source, target)
    host.bus.emit(source.uri, {"type": "session/chatRemoved", "chat": chat.uri})
    host.bus.emit(target.uri, {"type": "session/chatAdded", "summary": summaries.chat_row(chat)})
    _say_order(target)
    summaries.follow_activity(source)
    summaries.notify_row(source, activity=True)
    summaries.notify_row(target)
    log.info("%s moved from %s to %s", chat.uri, source.uri, target.uri)


async def _to_new_session(host: Host, chat: Chat) -> str:
    """A session whose id is the chat's backend id, with the chat as its
    default: under the URI the chat already had, so every subscription to
    it holds."""
    sessions, source = host.sessions, chat.session
    uri = f"{source.provider}:/{chat.backend_id or uuid.uuid4()}"
    if uri in host.bus.channels or uri in sessions.dormant:
        raise RpcError(
            SESSION_ALREADY_EXISTS,
            f"session {uri}, the one {chat.uri} would move to, already exists",
            {"path": "$.destination"},
        )
    await chat.stop_agent()
    _check_source(chat)
    if uri in host.bus.channels or uri in sessions.dormant or source.disposed:
        raise _refuse(f"session {uri} was made meanwhile, or {source.uri} disposed", "$.destination")
    order, older = _detach(chat)
    state = {k: v for k, v in chat.state().items() if k not in ("movable", "activeTurn")}
    record: dict[str, Any] = {
        "uri": uri,
        "provider": source.provider,
        "cwd": str(chat.folder or source.cwd),
        "createdAt": utc_now(),
        "title": state.get("title") or source.state().get("title", ""),
        "chats": [{"uri": chat.uri, "backendId": chat.backend_id, "state": state}],
        "defaultChat": chat.uri,
    }
    if source.state().get("config"):
        record["config"] = source.state()["config"]
    channel = host.bus.channels.pop(chat.uri)  # kept whole: its subscribers stay
    try:
        target = await sessions.open(record, lifecycle="ready")
    except BaseException:
        host.bus.channels[chat.uri] = channel
        source.chats[chat.uri] = chat
        _set_order(source, [u for u in order if u in source.chats])
        if older:
            source.older_turns[chat.uri] = older
        raise
    host.bus.channels[chat.uri] = channel
    target.chats[chat.uri] = chat  # in place of the one opening made from the record
    sessions.chat_owner[chat.uri] = chat
    if older:
        target.older_turns[chat.uri] = older
    folder, chat.session, chat.folder = chat.folder, target, None
    sessions.store.move_chat(chat.uri, source.uri, uri)
    source.save()
    target.save()

    def undo() -> None:
        _give_back(chat, source, target, order, folder)
        source.save()
        sessions.dispose(target)  # never announced: no client knows it, and the backend keeps its conversation

    # Started again under its new session before anyone is told of it: an
    # agent that will not take the conversation there undoes the move, and
    # nobody ever sees the new session.
    why = await _started_or_undone(chat, undo)
    if why is not None:
        log.warning("%s: its agent did not start in a new session (%s); it stays in %s", chat.uri, why, source.uri)
        raise RpcError(
            INVALID_PARAMS,
            f"a new session did not take {chat.uri}, which stays in {source.uri}: {why}",
            {"path": "$.destination"},
        )
    workers.carry(chat, source, target)
    host.bus.emit(source.uri, {"type": "session/chatRemoved", "chat": chat.uri})
    summaries.follow_movable(chat)  # the default chat of its session now
    sessions.announce_count()
    host.bus.notify(
        host.bus.channels[ROOT].subscribers,
        "root/sessionAdded",
        {
            "channel": ROOT,
            "summary": target.summary(),
        },
    )
    summaries.follow_activity(source)
    summaries.notify_row(source, activity=True)
    log.info("%s moved from %s to a new session %s", chat.uri, source.uri, uri)
    return uri


COMMANDS = {"moveChat": move_chat}
