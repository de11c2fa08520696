"""The chat commands: createChat, disposeChat, fetchTurns,
completions, and the session config pair resolveSessionConfig and
sessionConfigCompletions.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ahpd.backends.port import SKILL_META
from ahpd.host.sessions import session_config, worktrees
from ahpd.host.kernel.bus import utc_now
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.host.sessions.session_commands import PROVIDER_NOT_FOUND, SESSION_NOT_FOUND
from ahpd.host.sessions.chat import Chat
from ahpd.host.sessions.common import IDLE, path_of, transcript
from ahpd.protocol import codec, model
from ahpd.host.kernel.auth import signed
from ahpd.host.kernel.auth import who
from ahpd.host.sessions.chats import workers
from ahpd.host.sessions.chats.turns import start_turn
from ahpd.ports import threads

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")

ALREADY_EXISTS = -32010
NOT_FOUND = -32008
TURN_PAGE = 50
COMPLETION_LIMIT = 20
#: A file completion walks the session's folder in a thread for at most this
#: many seconds and entries, then answers with what it found so far.
WALK_SECONDS = 2.0
WALK_ENTRIES = 100_000


async def _session(host: Host, uri: str) -> Session:
    if host.sessions is None:
        raise RpcError(PROVIDER_NOT_FOUND, "this host runs no agents")
    await host.ensure_channel(uri)
    session = host.sessions.sessions.get(uri)
    if session is None:
        raise RpcError(SESSION_NOT_FOUND, f"no session {uri}")
    return session


async def _chat(host: Host, uri: str) -> Chat:
    if host.sessions is None:
        raise RpcError(PROVIDER_NOT_FOUND, "this host runs no agents")
    await host.ensure_channel(uri)
    chat = host.sessions.chat_owner.get(uri)
    if chat is None:
        raise RpcError(NOT_FOUND, f"no chat {uri}")
    return chat


def _through(chat_state: dict[str, Any], turn_id: str) -> list[dict[str, Any]] | None:
    turns = list(chat_state.get("turns", []))
    active = chat_state.get("activeTurn")
    ids = [t["id"] for t in turns]
    if turn_id in ids:
        return turns[: ids.index(turn_id) + 1]
    if active and active.get("id") == turn_id:
        return turns + [{"id": turn_id, "message": active["message"], "responseParts": active.get("responseParts", [])}]
    return None


async def create_chat(host: Host, peer: Peer, params: model.CreateChatParams) -> None:
    session = await _session(host, params.channel)
    uri = params.chat
    if uri in host.bus.channels or uri in host.sessions.chat_owner:
        raise RpcError(ALREADY_EXISTS, f"chat {uri} already exists")
    source = codec.encode(params.source) if params.source is not None else None
    origin: dict[str, Any] = {"kind": "user"}
    turns: list[dict[str, Any]] = []
    preamble = None
    if source is not None:
        owner = host.sessions.chat_owner.get(source["chat"])
        if owner is None or owner.session is not session:
            raise RpcError(
                INVALID_PARAMS,
                f"source chat {source['chat']} is not a chat of {session.uri}",
                {"path": "$.source.chat"},
            )
        history = _through(owner.state(), source["turnId"])
        if history is None or (
            source["kind"] == "fork" and source["turnId"] not in [t["id"] for t in owner.state().get("turns", [])]
        ):
            raise RpcError(
                INVALID_PARAMS,
                f"turn {source['turnId']} is not a completed turn of {source['chat']}",
                {"path": "$.source.turnId"},
            )
        origin = {k: v for k, v in source.items() if k in ("kind", "chat", "turnId", "selection")}
        if source["kind"] == "fork":
            turns = history
        preamble = (
            "The conversation so far, for context:\n"
            + transcript(history)
            + (f"\n\nThe user selected: {source['selection']['text']}" if source.get("selection") else "")
        )
    directories = params.workingDirectories
    session_dirs = session.state().get("workingDirectories") or []
    if directories and any(d not in session_dirs for d in directories):
        raise RpcError(
            INVALID_PARAMS, "a chat's working directories must be among its session's", {"path": "$.workingDirectories"}
        )
    now = utc_now()
    state: dict[str, Any] = {
        "resource": uri,
        "title": "",
        "status": IDLE,
        "modifiedAt": now,
        "turns": turns,
        "origin": origin,
        "movable": True,  # not its session's default, running nothing (ahpd.host.sessions.chats.chat_moves)
    }
    if directories:
        state["workingDirectories"] = list(directories)
    host.bus.open(uri, "chat", state)
    chat = Chat(session, uri)
    chat.preamble = preamble
    session.chats[uri] = chat
    host.sessions.chat_owner[uri] = chat
    summary = {"resource": uri, "title": "", "status": IDLE, "modifiedAt": now, "origin": origin, "movable": True}
    host.bus.emit(session.uri, {"type": "session/chatAdded", "summary": summary})
    session.save()
    if params.initialMessage is not None:
        message = codec.encode(params.initialMessage)
        turn_id = host.sessions.new_turn_id()
        action = signed(
            {"type": "chat/turnStarted", "turnId": turn_id, "startedAt": now, "message": message}, who(host, peer)
        )
        host.bus.emit(uri, action)
        start_turn(chat, turn_id, action["message"])


async def dispose_chat(host: Host, peer: Peer, params: model.DisposeChatParams) -> None:
    chat = await _chat(host, params.channel)
    session = chat.session
    # The chats its subagents worked in go with it: a worker is a view of one
    # of its calls, and outliving the chat that holds the call names nothing.
    spawned = workers.of(chat.uri, session)
    if len(session.chats) <= 1 + len(spawned):
        raise RpcError(INVALID_PARAMS, f"{chat.uri} is the last chat of {session.uri}: dispose the session instead")
    backend = host.sessions.backends.get(session.provider)
    for worker in spawned:
        worker.close()
        host.bus.close(worker.uri)
        del session.chats[worker.uri]
        host.sessions.chat_owner.pop(worker.uri, None)
        host.bus.emit(session.uri, {"type": "session/chatRemoved", "chat": worker.uri})
    chat.close()
    if backend is not None and chat.backend_id:
        try:
            if await backend.delete_conversation(chat.backend_id):
                host.sessions.catalogue.get(session.provider, {}).pop(chat.backend_id, None)
        except Exception:  # noqa: BLE001 - the agent's copy is its own: the chat goes either way
            log.exception("%s: deleting the agent's copy failed", chat.uri)
    was_default = session.state().get("defaultChat") == chat.uri
    host.bus.close(chat.uri)
    del session.chats[chat.uri]
    host.sessions.chat_owner.pop(chat.uri, None)
    host.bus.emit(session.uri, {"type": "session/chatRemoved", "chat": chat.uri})
    if was_default:
        successor = next(iter(session.chats.values()))
        host.bus.emit(session.uri, {"type": "session/defaultChatChanged", "defaultChat": successor.uri})
        host.sessions.sync_summary(successor)  # default is a role: the successor is not movable
    session.save()


async def fetch_turns(host: Host, peer: Peer, params: model.FetchTurnsParams) -> dict[str, Any]:
    chat = await _chat(host, params.channel)
    state = chat.state()
    cursor = state.get("turnsNextCursor")
    if params.cursor is None or params.cursor != cursor:
        if params.cursor is None and cursor is None:
            return {}  # everything is already loaded
        raise RpcError(INVALID_PARAMS, "cursor was not issued by this host for this chat", {"path": "$.cursor"})
    older = chat.session.older_turns.get(chat.uri)
    if older is not None:  # held here, not yet stored
        page, rest = older[-TURN_PAGE:], older[:-TURN_PAGE]
        chat.session.older_turns[chat.uri] = rest
        left = len(rest)
    else:  # read from the store, off the loop
        before = int(cursor.removeprefix("older:")) if cursor.startswith("older:") else 0
        page = await host.sessions.store.older_turns(chat.uri, before, TURN_PAGE)
        if chat.state().get("turnsNextCursor") != cursor:
            return {}  # somebody else paged meanwhile, or the chat was cut
        left = max(0, before - TURN_PAGE)
    action: dict[str, Any] = {"type": "chat/turnsLoaded", "turns": page}
    if left:
        action["turnsNextCursor"] = f"older:{left}"
    host.bus.emit(chat.uri, action)
    return {}


# -- completions ----------------------------------------------------------------


def _item(insert: str, attachment: dict[str, Any], start: int, end: int) -> dict[str, Any]:
    return {"insertText": insert, "rangeStart": start, "rangeEnd": end, "attachment": attachment}


def _word(text: str, offset: int) -> tuple[int, str]:
    start = offset
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return start, text[start:offset]


async def completions(host: Host, peer: Peer, params: model.CompletionsParams) -> dict[str, Any]:
    chat = await _chat(host, params.channel)
    offset = max(0, min(int(params.offset), len(params.text)))
    start, word = _word(params.text, offset)
    items: list[dict[str, Any]] = []
    if word.startswith("/"):
        for name, description, hint, skill in _slash_commands(chat):
            if name.lower().startswith(word[1:].lower()):
                meta: dict[str, Any] = {"command": name, "description": description}
                if hint:
                    meta["argumentHint"] = hint
                if skill:
                    meta["isSkill"] = True
                items.append(_item(f"/{name} ", {"type": "simple", "label": f"/{name}", "_meta": meta}, start, offset))
    elif word.startswith("#chat:") or (word.startswith("#") and "chat:".startswith(word[1:])):
        query = word[6:].lower() if word.startswith("#chat:") else ""
        for other in chat.session.chats.values():
            state = other.state()
            if other is chat or (state.get("origin") or {}).get("kind") == "tool":
                continue  # a chat a tool started is its tool's, not a thing to attach
            if query and query not in state.get("title", "").lower():
                continue
            attachment: dict[str, Any] = {
                "type": "chat",
                "label": state.get("title") or other.uri,
                "resource": other.uri,
                "_meta": {"command": "chat"},
            }
            if state.get("turns"):
                attachment["endTurn"] = state["turns"][-1]["id"]
            items.append(_item(f"#chat:{attachment['label']} ", attachment, start, offset))
        if not word.startswith("#chat:"):
            items += await _files(chat, word[1:], start, offset, "#")
    elif word.startswith("@") or word.startswith("#"):
        items += await _files(chat, word[1:], start, offset, word[0])
    answer = {"items": items[:COMPLETION_LIMIT] if not word.startswith("/") else items}
    # A session's chats are answered under the name this client knows the session by.
    named = [host.bus.aliases[u] for u in peer.subscriptions if u in host.bus.aliases and u not in host.bus.channels]
    alias = next((a for a in named if a.target == chat.session.uri), None)
    return alias.out(answer) if alias is not None else answer


def _slash_commands(chat: Chat) -> list[tuple[str, str, str | None, bool]]:
    """What ``/`` offers: (name, description, argument hint, is a skill).
    The session's own commands, read from the children of its containers;
    before the session was told any, the chat's agent's list, then the
    harness-wide one."""
    out = []
    for container in chat.session.state().get("customizations") or []:
        for child in container.get("children") or []:
            if child.get("type") in ("prompt", "skill") and child.get("enabled", True):
                hint = (child.get("_meta") or {}).get("ahpd.argumentHint")
                out.append((child["name"], child.get("description", ""), hint, child["type"] == "skill"))
    if out:
        return out
    commands = chat.commands or chat.host.sessions.harness_commands(chat.session.provider)
    return [
        (
            c.get("name", ""),
            c.get("description", ""),
            (c.get("input") or {}).get("hint"),
            bool((c.get("_meta") or {}).get(SKILL_META)),
        )
        for c in commands
        if c.get("name")
    ]


async def _files(chat: Chat, query: str, start: int, end: int, sigil: str) -> list[dict[str, Any]]:
    """Files under the session's directory whose relative path matches.

    The walk blocks, and a big folder takes long, so it runs in a thread and
    is bounded (``WALK_SECONDS``, ``WALK_ENTRIES``); the answer then holds
    what was found by then. The thread is abandoned, not awaited, if the
    request is cancelled, and stops by itself at its deadline.
    """
    found: list[str] = []
    deadline = time.monotonic() + WALK_SECONDS
    root = chat.session.cwd
    with trio.move_on_after(WALK_SECONDS + 1):  # in case one listing itself hangs
        await threads.run("search", _walk, root, query.lower(), deadline, found, abandon_on_cancel=True)
    out = []
    for relative in list(found[:COMPLETION_LIMIT]):
        uri = f"file://{os.path.join(root, relative)}"
        out.append(
            _item(
                f"{sigil}{relative} ",
                {
                    "type": "resource",
                    "label": relative,
                    "uri": uri,
                    "_meta": {"uri": uri, "command": "file"},
                },
                start,
                end,
            )
        )
    return out


def _walk(root: Path, query: str, deadline: float, found: list[str]) -> None:
    """Append to ``found`` the relative paths under ``root`` containing ``query``
    (hidden folders skipped), until ``COMPLETION_LIMIT`` matches, ``WALK_ENTRIES``
    entries seen or ``deadline`` passed."""
    seen = 0
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        seen += len(dirs) + len(files)
        for name in sorted(files):
            relative = os.path.relpath(os.path.join(directory, name), root)
            if query in relative.lower():
                found.append(relative)
                if len(found) >= COMPLETION_LIMIT:
                    return
        if seen >= WALK_ENTRIES or time.monotonic() > deadline:
            log.info("file completion under %s stopped after %d entries (%d matches)", root, seen, len(found))
            return


# -- session config -----------------------------------------------------------------

_SESSION_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


async def resolve_session_config(host: Host, peer: Peer, params: model.ResolveSessionConfigParams) -> dict[str, Any]:
    """The schema a session of that provider takes, and what has been answered
    so far (answers to keys it does not declare are dropped, not refused);
    in a repository, with this host's worktree properties, a value one of
    them cannot take refused naming it (as createSession would refuse it)."""
    if params.provider is not None and (host.sessions is None or params.provider not in host.sessions.backends):
        raise RpcError(PROVIDER_NOT_FOUND, f"no agent provider {params.provider!r} here")
    if params.workingDirectory is not None:
        try:
            path = path_of(params.workingDirectory)
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, str(exc), {"path": "$.workingDirectory"}) from None
        if not path.is_dir():
            raise RpcError(INVALID_PARAMS, f"{path} is not a directory", {"path": "$.workingDirectory"})
    schema = _SESSION_SCHEMA
    provider = params.provider or (host.sessions.default_provider if host.sessions is not None else None)
    agent: dict[str, Any] = {"schema": schema, "values": {}}
    if provider is not None:
        await host.sessions.probed(provider)
        agent = session_config.initial(host.sessions.backends[provider], params.config)
        schema = agent["schema"]
    if params.workingDirectory is not None:
        facts = await threads.run("git", worktrees.repository_facts, path)
        if facts is not None:
            schema = {**schema, "properties": {**schema["properties"], **worktrees.properties(*facts)}}
            worktrees.validate(dict(params.config or {}))  # a value it cannot take is refused by name
    # Iterative: what was answered comes back answered (the agent's keys only
    # when it takes the value), and what was not comes back as its default.
    values = {
        k: v
        for k, v in (params.config or {}).items()
        if k in schema["properties"] and k not in agent["schema"]["properties"]
    }
    return {"schema": schema, "values": {**values, **agent["values"]}}


async def session_config_completions(
    host: Host, peer: Peer, params: model.SessionConfigCompletionsParams
) -> dict[str, Any]:
    """``branch``, the one key of this host's with more values than a picker
    holds: matched on substring, most recently committed first."""
    if params.property != worktrees.BRANCH or params.workingDirectory is None:
        return {"items": []}
    try:
        folder = path_of(params.workingDirectory)
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, str(exc), {"path": "$.workingDirectory"}) from None
    found = await threads.run("git", worktrees.complete_branch, folder, params.query or "")
    return {"items": [{"value": b, "label": b} for b in found]}


COMMANDS = {
    "createChat": create_chat,
    "disposeChat": dispose_chat,
    "fetchTurns": fetch_turns,
    "completions": completions,
    "resolveSessionConfig": resolve_session_config,
    "sessionConfigCompletions": session_config_completions,
}
