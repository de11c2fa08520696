"""The session commands: createSession, disposeSession, listSessions.

``createSession`` starts no agent: the chat's agent starts at its first
turn. An agent whose command is not there is refused here, at once.

Registered into the command table by name, like every other command.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Aliased: ``annotations`` is also the name ``from __future__ import annotations`` binds.
from ahpd.host.sessions import annotations as session_annotations
from ahpd.host.kernel.auth import who
from ahpd.backends.port import BackendError
from ahpd.host.kernel.bus import ROOT, utc_now
from ahpd.host.kernel.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from ahpd.host.sessions import aliases, session_config, worktrees
from ahpd.host.sessions.common import IDLE, path_of, session_id
from ahpd.ports.git import GitError
from ahpd.protocol import model
from ahpd.protocol import codec

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer

log = logging.getLogger("ahpd.host")

SESSION_NOT_FOUND = -32001
PROVIDER_NOT_FOUND = -32002
SESSION_ALREADY_EXISTS = -32003


def _manager(host: Host):
    if host.sessions is None:
        raise RpcError(PROVIDER_NOT_FOUND, "this host runs no agents")
    return host.sessions


def _progress(host: Host, peer: Peer, token: str | None, progress: int, message: str) -> None:
    if token is None:
        return
    host.bus.notify(
        [peer],
        "root/progress",
        {
            "channel": ROOT,
            "progressToken": token,
            "progress": progress,
            "total": 2,
            "message": message,
        },
    )


def _working_directory(params: model.CreateSessionParams) -> Path:
    uris = params.workingDirectories or [Path.home().as_uri()]
    try:
        path = path_of(uris[0])
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, str(exc), {"path": "$.workingDirectories[0]"}) from None
    if not path.is_dir():
        raise RpcError(
            INVALID_PARAMS,
            f"working directory {path} does not exist or is not a directory",
            {"path": "$.workingDirectories[0]"},
        )
    return path


def _taken(host: Host, named: str, uri: str) -> bool:
    """Whether a session is already there under ``uri`` (its own name) or
    ``named`` (the client's), or any other spelling of that id."""
    sessions = _manager(host)
    held = any(u in host.bus.channels or u in sessions.dormant for u in (named, uri))
    return held or host.alias_of(named) is not None


async def create_session(host: Host, peer: Peer, params: model.CreateSessionParams) -> None:
    """The session is kept and listed as ``<provider>:/<id>`` whichever
    spelling of it the client named (``aliases.own_name``); the client
    goes on naming it as it did, and is answered in that name."""
    sessions = _manager(host)
    named = params.channel
    provider = params.provider or sessions.default_provider
    uri = aliases.own_name(named, provider or "", sessions.backends)
    if _taken(host, named, uri):
        raise RpcError(SESSION_ALREADY_EXISTS, f"session {named} already exists")
    if provider not in sessions.backends:
        raise RpcError(
            PROVIDER_NOT_FOUND,
            f"no agent provider {provider!r} here; this host has {', '.join(sessions.backends) or 'none'}",
        )
    cwd = _working_directory(params)
    more = _more_directories(params)
    preflight = getattr(sessions.backends[provider], "preflight", None)
    if preflight is not None:
        try:
            preflight()
        except BackendError as exc:
            log.warning("session %s: the %s agent cannot start: %s", uri, provider, exc.message)
            raise RpcError(INTERNAL_ERROR, f"the {provider} agent did not start: {exc.message}") from None
    _progress(host, peer, params.progressToken, 0, "preparing the session")
    await sessions.probed(provider)
    if _taken(host, named, uri):
        raise RpcError(SESSION_ALREADY_EXISTS, f"session {named} already exists")
    try:
        tree = await worktrees.prepare(session_id(uri), cwd, params.config, host.worktrees_root)
    except GitError as exc:
        raise RpcError(
            INVALID_PARAMS, f"the session's worktree could not be made: {exc}", {"path": "$.config.isolation"}
        ) from None
    record: dict[str, Any] = {
        "uri": uri,
        "provider": provider,
        "cwd": tree["path"] if tree else str(cwd),
        "createdAt": utc_now(),
        "title": "",
        **({"worktree": tree} if tree else {}),
    }
    if (owner := who(host, peer)) is not None:
        record["_meta"] = {"ahpd.owner": owner}
    record["config"] = session_config.initial(sessions.backends[provider], params.config)
    record["workingDirectories"] = [Path(record["cwd"]).as_uri(), *more]
    session = await sessions.open(record, lifecycle="creating")
    if params.activeClient is not None:
        client = {"clientId": peer.client_id, "tools": [], **_client_fields(params.activeClient)}
        host.bus.emit(uri, {"type": "session/activeClientSet", "activeClient": client})
    chat = next(iter(session.chats.values()))
    chat.lender = peer  # whose lent token the agent starts with, at the first turn
    _progress(host, peer, params.progressToken, 1, "chat opened")
    host.bus.emit(uri, {"type": "session/ready"})
    session.save()
    sessions.announce_count()
    host.bus.notify(
        host.bus.channels[ROOT].subscribers,
        "root/sessionAdded",
        {
            "channel": ROOT,
            "summary": session.summary(),
        },
    )
    session.announce()  # what the agent said while it was being announced follows now
    _progress(host, peer, params.progressToken, 2, "ready")
    return None


def _more_directories(params: model.CreateSessionParams) -> list[str]:
    """The directories granted beside the first one; each must be there."""
    more = list(params.workingDirectories or [])[1:]
    for index, uri in enumerate(more, 1):
        try:
            ok = path_of(uri).is_dir()
        except ValueError:
            ok = False
        if not ok:
            raise RpcError(
                INVALID_PARAMS,
                f"working directory {uri} is not a directory",
                {"path": f"$.workingDirectories[{index}]"},
            )
    return more


def _client_fields(active: model.SessionActiveClient) -> dict[str, Any]:
    fields = codec.encode(active)
    fields.pop("clientId", None)
    return fields


async def dispose_session(host: Host, peer: Peer, params: model.DisposeSessionParams) -> None:
    sessions = _manager(host)
    uri = params.channel
    session = sessions.sessions.get(uri)
    if session is None and uri in sessions.dormant:
        await sessions.wake(uri)
        session = sessions.sessions.get(uri)
    if session is None and (entry := await sessions.catalogue_entry(uri)) is not None:
        # A conversation only its backend keeps: nothing to open, only its copy to delete.
        provider, conversation = entry
        sessions.forget_conversation(provider, conversation.backend_id)
        if not await sessions.backends[provider].delete_conversation(conversation.backend_id):
            log.info("session %s: the %s agent kept its copy of the conversation", uri, provider)
            sessions.forget_conversation(provider, conversation.backend_id, deleted=False)
        sessions.catalogue.get(provider, {}).pop(conversation.backend_id, None)
        host.bus.notify(host.bus.channels[ROOT].subscribers, "root/sessionRemoved", {"channel": ROOT, "session": uri})
        return
    if session is None:
        raise RpcError(SESSION_NOT_FOUND, f"no session {uri}")
    backend = sessions.backends.get(session.provider)
    backend_ids = [chat.backend_id for chat in session.chats.values() if chat.backend_id]
    deleting = backend is not None and backend_ids and sessions.nursery is not None
    for backend_id in backend_ids if deleting else ():
        sessions.forget_conversation(session.provider, backend_id)  # before a listing in flight can offer it
    sessions.dispose(session)
    await worktrees.dispose(session.worktree)  # a dirty tree is kept, and logged
    sessions.announce_count()
    host.bus.notify(host.bus.channels[ROOT].subscribers, "root/sessionRemoved", {"channel": ROOT, "session": uri})
    if deleting:
        # The agent's own copy goes after the session does: an agent may need a
        # process of its own to delete it, and nobody should wait on that.
        sessions.nursery.start_soon(_delete_copies, sessions, backend, session.provider, uri, backend_ids)


async def _delete_copies(sessions: Any, backend: Any, provider: str, uri: str, backend_ids: list[str]) -> None:
    for backend_id in backend_ids:
        try:
            deleted = await backend.delete_conversation(backend_id)
        except Exception:  # noqa: BLE001 - the session is gone either way
            log.exception("session %s: deleting the agent's copy failed", uri)
            deleted = False
        if deleted:
            sessions.catalogue.get(provider, {}).pop(backend_id, None)
        else:
            sessions.forget_conversation(provider, backend_id, deleted=False)
            log.info("session %s: the %s agent keeps its own copy of the conversation", uri, provider)


def _row(record: dict[str, Any]) -> dict[str, Any]:
    """A stored session's row. A chat whose journal was set aside has no
    state (it starts empty when the session opens)."""
    chats = record.get("chats") or []
    states = {c["uri"]: c.get("state") or {} for c in chats}
    modified = max((s.get("modifiedAt") or "" for s in states.values()), default="") or record["createdAt"]
    row = {
        "resource": record["uri"],
        "provider": record["provider"],
        "title": record.get("title", ""),
        "status": IDLE | record.get("status", 0),
        "createdAt": record["createdAt"],
        "modifiedAt": modified,
        "workingDirectories": [Path(record["cwd"]).as_uri()],
    }
    if chats:
        row["chats"] = [
            {
                "resource": c["uri"],
                "title": states[c["uri"]].get("title", ""),
                "status": states[c["uri"]].get("status", IDLE),
            }
            for c in chats
        ]
        row["defaultChat"] = record.get("defaultChat") or chats[0]["uri"]
    if (record.get("_meta") or {}).get("ahpd.owner"):
        row["_meta"] = {"ahpd.owner": record["_meta"]["ahpd.owner"]}
    if (record.get("_meta") or {}).get("agentHost/sessionArtifacts"):  # what the agent recorded (server_tools)
        row.setdefault("_meta", {})["agentHost/sessionArtifacts"] = record["_meta"]["agentHost/sessionArtifacts"]
    row["annotations"] = session_annotations.summary(record["uri"], record)
    return row


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"ahpd:{offset}".encode()).decode()


def _offset(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
        if not text.startswith("ahpd:"):
            raise ValueError
        return int(text[5:])
    except (ValueError, UnicodeDecodeError):
        raise RpcError(INVALID_PARAMS, "cursor was not issued by this host", {"path": "$.cursor"}) from None


def list_sessions(host: Host, peer: Peer, params: model.ListSessionsParams) -> dict[str, Any]:
    sessions = host.sessions
    rows = (
        []
        if sessions is None
        else (
            [s.summary() for s in sessions.sessions.values()]
            + [_row(r) for r in sessions.dormant.values()]
            + sessions.catalogue_rows()
        )
    )
    rows.sort(key=lambda r: r["modifiedAt"], reverse=True)
    start = _offset(params.cursor) if params.cursor else 0
    if params.limit is None:
        return {"items": rows[start:]}
    limit = max(1, int(params.limit))
    page = rows[start : start + limit]
    result: dict[str, Any] = {"items": page}
    if start + limit < len(rows):
        result["nextCursor"] = _cursor(start + limit)
    return result


COMMANDS = {
    "createSession": create_session,
    "disposeSession": dispose_session,
    "listSessions": list_sessions,
}
