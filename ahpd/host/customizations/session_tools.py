"""The session tools: an agent lists, makes, messages, reads and removes sessions.

``list_sessions``, ``get_current_session``, ``create_session``,
``create_chat``, ``rename_chat``, ``send_message``, ``get_session_context``
and ``delete_session`` act through the same command handlers a client's
requests go through (``session_commands``, ``chat_commands``), as the agent
of the chat that calls them (``AgentPeer``). A session an agent makes is
marked with how many ``create_session`` calls deep it is, and one more
level than ``MAX_SPAWN_DEPTH`` is refused: an agent that makes sessions that
make sessions has no end. Cut out from the tools' calling
(``server_tools``) because these reach into the sessions core, and the
other tools do not.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ahpd.host.customizations.tool_args import AgentPeer, ToolError, dump, flag_arg, optional_text, text_arg
from ahpd.host.customizations.tool_schemas import (
    ARTIFACTS,
    MAX_SPAWN_DEPTH,
    SPAWN_DEPTH,
    STATUS_WORDS,
    TITLE_MAX,
    TRANSCRIPT_CAP,
    TRANSCRIPT_LIMIT,
)
from ahpd.host.sessions import session_commands, summaries
from ahpd.host.sessions.common import session_uri
from ahpd.host.sessions.chats import chat_commands, turns

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.session import Session


# -- listing ------------------------------------------------------------------------


def _status_words(status: int) -> list[str]:
    words = []
    if status & 24 == 24:
        words.append("inputNeeded")
    elif status & 8:
        words.append("inProgress")
    elif status & 1:
        words.append("idle")
    if status & 2:
        words.append("error")
    if status & 64:
        words.append("archived")
    return words


def _compact(row: dict[str, Any]) -> dict[str, Any]:
    meta = row.get("_meta") or {}
    out: dict[str, Any] = {
        "session": row["resource"],
        "title": row.get("title", ""),
        "provider": row.get("provider"),
        "status": _status_words(int(row.get("status", 1))),
        "unread": not int(row.get("status", 1)) & 32,
        "createdAt": row.get("createdAt"),
        "modifiedAt": row.get("modifiedAt"),
    }
    if row.get("workingDirectories"):
        out["workingDirectory"] = row["workingDirectories"][0]
    for key in ("activity", "defaultChat"):
        if row.get(key):
            out[key] = row[key]
    if row.get("chats"):
        out["chats"] = [{"chat": c["resource"], "title": c.get("title", "")} for c in row["chats"]]
    if meta.get("git"):
        out["git"] = meta["git"]
    if meta.get("github"):
        out["github"] = meta["github"]
    if meta.get(ARTIFACTS):
        out["artifacts"] = meta[ARTIFACTS]
    return out


def _rows(host: Host, peer: Any) -> list[dict[str, Any]]:
    return session_commands.list_sessions(host, peer, host.decode_params("listSessions", {}))["items"]


def _when(args: dict[str, Any], key: str) -> _dt.datetime | None:
    text = optional_text(args, key)
    if text is None:
        return None
    try:
        moment = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ToolError(f"{key} must be an ISO-8601 time, not {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=_dt.UTC)


def _folder(value: str) -> str:
    """A folder as the ``file:`` URI a row names it by."""
    if value.startswith("file:"):
        return value.rstrip("/") or value
    return Path(value).expanduser().resolve().as_uri()


async def list_sessions(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    rows = _rows(host, AgentPeer(chat))
    wanted = optional_text(args, "session")
    if wanted is not None:
        rows = [r for r in rows if r["resource"] == wanted or wanted in [c["resource"] for c in r.get("chats") or []]]
        if not rows:
            raise ToolError(f"no session {wanted}")
        return dump([_compact(r) for r in rows])
    statuses = args.get("status")
    if statuses is not None and (not isinstance(statuses, list) or any(s not in STATUS_WORDS for s in statuses)):
        raise ToolError(f"status must be a list of {', '.join(STATUS_WORDS)}")
    archived = flag_arg(args, "includeArchived") or "archived" in (statuses or [])
    workspace = optional_text(args, "workspace")
    after, before = _when(args, "createdAfter"), _when(args, "createdBefore")
    picked = []
    for row in rows:
        compact = _compact(row)
        if "archived" in compact["status"] and not archived:
            continue
        if statuses and not set(statuses) & set(compact["status"]):
            continue
        if workspace is not None and compact.get("workingDirectory", "").rstrip("/") != _folder(workspace):
            continue
        if flag_arg(args, "unread") and not compact["unread"]:
            continue
        if flag_arg(args, "withChanges") and not (compact.get("git") or {}).get("uncommittedChanges"):
            continue
        if flag_arg(args, "withPullRequest") and not (compact.get("github") or {}).get("pullRequestUrls"):
            continue
        created = _when({"c": row.get("createdAt")}, "c") if row.get("createdAt") else None
        if (after and (created is None or created < after)) or (before and (created is None or created > before)):
            continue
        picked.append(compact)
    return dump(picked)


async def get_current_session(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    return dump({**_compact(chat.session.summary()), "chat": chat.uri})


def _own_name(host: Host, uri: str) -> str:
    """The channel's own name for ``uri``, an open channel or another
    spelling of one (``ahp-session:/<id>`` for ``demo:/<id>``, and its chats)."""
    alias = host.bus.aliases.get(uri) if uri not in host.bus.channels else None
    return alias.target if alias is not None else uri


async def _target(host: Host, uri: str, *, to_message: bool = True) -> Chat:
    """The chat a session or chat URI names (a session's default chat)."""
    if host.sessions is None or not await host.ensure_channel(uri):
        raise ToolError(f"no session or chat {uri}")
    own = _own_name(host, uri)
    chat = host.sessions.chat_owner.get(own)
    if chat is not None:
        if to_message and chat.state().get("interactivity") == "read-only":
            raise ToolError(
                f"{uri} is read-only: a subagent's worker chat takes no messages; message the chat that spawned it"
            )
        return chat
    session = host.sessions.sessions.get(own)
    if session is None:
        raise ToolError(f"{uri} is neither a session nor a chat")
    default = session.state().get("defaultChat")
    chat = session.chats.get(default) if default else next(iter(session.chats.values()), None)
    if chat is None:
        raise ToolError(f"session {uri} has no chat to message")
    return chat


def _model(session: Session, wanted: str | None) -> dict[str, Any] | None:
    """The ``ModelSelection`` an agent asked for by id or by name, checked
    against what the session's backend offers before anything is made, so a
    typo is the tool's error rather than a session on the wrong model."""
    if wanted is None:
        return None
    offered = [m for m in session.backend.agent_info().get("models") or [] if isinstance(m.get("id"), str)]
    for model_info in offered:
        if wanted == model_info["id"]:
            return {"id": model_info["id"]}
    for model_info in offered:
        if wanted.casefold() == str(model_info.get("name") or "").casefold():
            return {"id": model_info["id"]}
    if not offered:
        raise ToolError(f"the {session.provider} agent offers no choice of model; leave `model` out")
    names = ", ".join(f"{m['id']} ({m['name']})" if m.get("name") else m["id"] for m in offered)
    raise ToolError(f"no model {wanted!r}: the {session.provider} agent offers {names}")


def _send(host: Host, sender: Chat, target: Chat, text: str, model_selection: dict[str, Any] | None = None) -> None:
    """Queue ``text`` on ``target``; it is taken up at once when the chat is free."""

    if sender.lender is not None:
        target.lender = sender.lender  # the turn is started for whom the sender acts, as a client's would be
    message: dict[str, Any] = {"text": text, "origin": {"kind": "agent"}}
    if model_selection is not None:
        message["model"] = model_selection  # the turn's model becomes the session's (session_config.from_message)
    host.bus.emit(
        target.uri,
        {"type": "chat/pendingMessageSet", "kind": "queued", "id": f"m-{uuid.uuid4().hex[:12]}", "message": message},
    )
    turns.take_up_queued(target)


async def rename_chat(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    title = " ".join(text_arg(args, "title").split())  # a blank one is refused by text_arg
    if len(title) > TITLE_MAX:
        raise ToolError(f"a title is at most {TITLE_MAX} characters; this one has {len(title)}")
    named, session_ref = optional_text(args, "chat"), optional_text(args, "session")
    ref = named or session_ref
    target = await _target(host, ref, to_message=False) if ref else chat
    if named and session_ref and session_ref != target.session.uri:
        raise ToolError(f"{named} is a chat of {target.session.uri}, not of {session_ref}")
    summaries.rename_chat(target, title)
    session = target.session
    if len(session.chats) == 1 and session.state().get("title") != title:
        # Its only chat: the session is what people look for, so it is named too.
        host.bus.emit(session.uri, {"type": "session/titleChanged", "title": title})
        host.sessions.notify_summary(session, {"title": title})
    return dump({"session": session.uri, "chat": target.uri, "title": title})


async def send_message(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    target = await _target(host, text_arg(args, "session"))
    _send(host, chat, target, text_arg(args, "message"))
    return dump({"session": target.session.uri, "chat": target.uri, "sent": True})


def spawn_depth(session: Session) -> int:
    """How many ``create_session`` calls deep ``session`` was made (0: by a person)."""
    value = (session.state().get("_meta") or {}).get(SPAWN_DEPTH)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


async def create_session(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    depth = spawn_depth(chat.session)
    if depth >= MAX_SPAWN_DEPTH:
        raise ToolError(
            f"no session is made {MAX_SPAWN_DEPTH + 1} levels deep: this one was itself made by an "
            f"agent {depth} level(s) down, and an agent that makes sessions that make sessions has no "
            f"end; do the work here, or open a chat with create_chat"
        )
    workspace, prompt = text_arg(args, "workspace"), text_arg(args, "prompt")
    folder = _folder(workspace)
    picked = _model(chat.session, optional_text(args, "model"))
    uri = session_uri(chat.session.provider, str(uuid.uuid4()))  # as the host lists it
    params = host.decode_params(
        "createSession", {"channel": uri, "provider": chat.session.provider, "workingDirectories": [folder]}
    )
    await session_commands.create_session(host, AgentPeer(chat), params)
    target = await _target(host, uri)
    summaries.set_meta(target.session, SPAWN_DEPTH, depth + 1)
    target.session.save()  # recorded, not derived: the bound holds across a restart
    _send(host, chat, target, prompt, picked)
    return dump({"session": uri, "chat": target.uri, "workingDirectory": folder})


async def create_chat(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    named = optional_text(args, "session") or chat.session.uri
    prompt = text_arg(args, "prompt")
    optional_text(args, "title")  # checked; a chat is named after its first message
    if host.sessions is None or not await host.ensure_channel(named):
        raise ToolError(f"no session {named}")
    session = host.sessions.named(named)
    if session is None:
        raise ToolError(f"no session {named}")
    picked = _model(session, optional_text(args, "model"))
    uri = f"ahp-chat:/{uuid.uuid4()}"
    params = host.decode_params("createChat", {"channel": session.uri, "chat": uri})
    await chat_commands.create_chat(host, AgentPeer(chat), params)
    target = host.sessions.chat_owner[uri]
    _send(host, chat, target, prompt, picked)
    return dump({"session": session.uri, "chat": uri})


def _turn_lines(turn: dict[str, Any], detail: str) -> dict[str, Any]:
    reply = "".join(p.get("content", "") for p in turn.get("responseParts", []) if p.get("kind") == "markdown")
    out: dict[str, Any] = {"message": (turn.get("message") or {}).get("text", "")}
    out["reply"] = reply if detail != "summary" or len(reply) <= 200 else reply[:200] + "…"
    if detail != "summary":
        calls = [p["toolCall"] for p in turn.get("responseParts", []) if p.get("kind") == "toolCall"]
        out["toolCalls"] = [
            {"name": c.get("toolName"), **({"input": c.get("toolInput")} if detail == "full" else {})} for c in calls
        ]
    if turn.get("state"):
        out["state"] = turn["state"]
    return out


async def get_session_context(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    target = await _target(host, text_arg(args, "session"), to_message=False)
    detail = args.get("detail", "summary")
    if detail not in ("summary", "digest", "full"):
        raise ToolError("detail must be summary, digest or full")
    limit = args.get("transcriptLimit", TRANSCRIPT_LIMIT)
    if not isinstance(limit, int | float) or isinstance(limit, bool) or limit < 1:
        raise ToolError("transcriptLimit must be a positive number")
    state = target.state()
    turns = list(state.get("turns") or [])[-min(int(limit), TRANSCRIPT_CAP) :]
    out = {
        "session": target.session.uri,
        "chat": target.uri,
        "title": state.get("title", ""),
        "status": _status_words(int(state.get("status", 1))),
        "turns": [_turn_lines(t, detail) for t in turns],
    }
    if state.get("activeTurn"):
        out["activeTurn"] = _turn_lines(state["activeTurn"], detail)
    return dump(out)


async def delete_session(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    uri = text_arg(args, "session")
    own = _own_name(host, uri) if await host.ensure_channel(uri) else uri
    if own == chat.session.uri or own in chat.session.chats:
        raise ToolError("delete_session refuses to delete the current session")
    params = host.decode_params("disposeSession", {"channel": own})
    await session_commands.dispose_session(host, AgentPeer(chat), params)
    return dump({"session": uri, "deleted": True})
