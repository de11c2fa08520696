"""The host's own tools for agents: ``SessionState.serverTools``.

What a session's agent gets from this host beyond what its harness has is
the reference host's set, under the same names and input schemas, so a
skill written for VS Code's agent host runs here:

* the session tools (``list_sessions``, ``get_current_session``,
  ``create_session``, ``create_chat``, ``send_message``,
  ``get_session_context``, ``delete_session``), which act through the same
  command handlers a client's requests go through;
* the artifact three (``add_artifact_or_reference``,
  ``remove_artifact_or_reference``, ``list_artifacts_and_references``),
  which keep what the agent recorded under
  ``_meta['agentHost/sessionArtifacts']`` on the session and its catalogue
  row - the session store keeps ``_meta``, so they survive a restart - and
  answer in the reference's words;
* ``ahp_resource``, one tool for the ``resource*`` family, routed exactly as
  a client's request is (``ahpd.host.resources.resources``): a ``file:`` URI through
  the filesystem port, ``<scheme>://<clientId>/...`` forwarded to that
  connected client. So an agent reads a client's unsaved buffer the way a
  client does. ``createResourceWatch`` is not offered: a watch is a channel,
  and an agent subscribes to none.

The set is told to every session as ``session/serverToolsChanged`` (a full
replacement) when it opens and whenever :func:`set_tools` changes it. How an
agent reaches the tools is its backend's business: Claude Code through the
in-process MCP server ``ahp``, an ACP agent through the MCP server the host
passes in ``session/new`` (``ahpd.host.customizations.mcp_bridge``). Both end in
:func:`call`, which answers an MCP ``CallToolResult``: a refusal is an
error result naming what was wrong, never an exception the agent cannot read.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ahpd.host.kernel import jsonrpc
from ahpd.host.kernel.commands import SESSION_NOT_FOUND
from ahpd.host.sessions import session_commands, summaries
from ahpd.host.sessions.chats import chat_commands, turns
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError, string_param
from ahpd.protocol import codec, model

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")

#: Where a session's artifacts and references are kept (session ``_meta`` and its row).
ARTIFACTS = "agentHost/sessionArtifacts"
ARTIFACT_TYPES = ("pullRequest", "issue", "commit", "website", "file", "resource")
_LINKED = ("pullRequest", "issue", "commit", "website")
_BY_URI = ("file", "resource")
#: The ``resource*`` commands ``ahp_resource`` carries (every one but the watch).
RESOURCE_METHODS = ("resourceRead", "resourceList", "resourceResolve", "resourceWrite", "resourceDelete",
                    "resourceMkdir", "resourceMove", "resourceCopy", "resourceRequest")
STATUS_WORDS = ("idle", "inProgress", "inputNeeded", "error", "archived")
TRANSCRIPT_LIMIT, TRANSCRIPT_CAP = 10, 50
#: The tools a harness that asks before a tool runs asks about (the reference's four).
CONFIRMED = frozenset({"create_session", "create_chat", "send_message", "delete_session"})


class ToolError(Exception):
    """A call refused: its message is the tool's error result."""


#: The session ``_meta`` key saying how many ``create_session`` calls deep a
#: session was made (the reference host's key), and how deep one may be.
SPAWN_DEPTH = "agentHost/sessionSpawnDepth"
MAX_SPAWN_DEPTH = 3
#: The longest title ``rename_chat`` takes (the reference schema's bound).
TITLE_MAX = 200


def _s(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **more}


def _b(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


_SESSION_REF = "a session URI from `list_sessions`"

SESSION_TOOLS: list[dict[str, Any]] = [
    {"name": "list_sessions", "title": "List Sessions",
     "description": "The sessions on this host, one short record each: status, what it is doing, its folder, "
                    "project, git facts and times. `session` narrows it to one. Archived sessions appear only "
                    "when asked for.",
     "inputSchema": {"type": "object", "properties": {
         "session": _s("One session by its URI; the other filters are then ignored."),
         "status": {"type": "array", "items": {"type": "string", "enum": list(STATUS_WORDS)},
                    "description": "Keep sessions in any of these states (asking for `archived` "
                                   "also turns on `includeArchived`)."},
         "workspace": _s("Keep sessions working in this folder (a path from the root, or a URI)."),
         "withChanges": _b("Keep sessions whose tree has changes nobody committed."),
         "unread": _b("Keep sessions with news the user has not read."),
         "withPullRequest": _b("Keep sessions tied to a pull request."),
         "includeArchived": _b("List archived sessions too (off unless set)."),
         "createdAfter": _s("Keep sessions begun no earlier than this ISO-8601 time."),
         "createdBefore": _s("Keep sessions begun no later than this ISO-8601 time."),
     }},
     "annotations": {"readOnlyHint": True}},
    {"name": "get_current_session", "title": "Get Current Session",
     "description": "The record of the session you are running in.",
     "inputSchema": {"type": "object", "properties": {}},
     "annotations": {"readOnlyHint": True}},
    {"name": "create_session", "title": "Create Session",
     "description": "Open a new session in a folder and give it its first message.",
     "inputSchema": {"type": "object", "properties": {
         "workspace": _s("Where it works: a folder path from the root, a workspace URI, or a folder another session works in."),
         "prompt": _s("The first message the new session receives."),
         "model": _s("A model to use, by id or by name (optional)."),
     }, "required": ["workspace", "prompt"]},
     "annotations": {"readOnlyHint": False}},
    {"name": "create_chat", "title": "Create Chat",
     "description": "Open another chat in a session (yours unless `session` names one) and give it its first "
                    "message.",
     "inputSchema": {"type": "object", "properties": {
         "session": _s(f"The session to open it in: {_SESSION_REF}. Yours when left out."),
         "prompt": _s("The first message the new chat receives."),
         "title": _s("A title for the chat (optional)."),
         "model": _s("A model to use, by id or by name; the session's when left out."),
     }, "required": ["prompt"]},
     "annotations": {"readOnlyHint": False}},
    {"name": "rename_chat", "title": "Rename Chat",
     "description": "Give a chat a short title it can be found by, a few words (yours unless `chat` names "
                    "another). A session that has no chat but its default one takes the title too.",
     "inputSchema": {"type": "object", "properties": {
         "session": _s(f"The session the chat is in: {_SESSION_REF}. Given with `chat`, it must be that chat's."),
         "chat": _s("The chat to rename: a chat URI, or a session's (its default chat). Yours when left out."),
         "title": {**_s("The new title, a few words."), "maxLength": TITLE_MAX},
     }, "required": ["title"]},
     "annotations": {"readOnlyHint": False}},
    {"name": "send_message", "title": "Send Message",
     "description": "Say something to another session or chat: it starts a turn there, or waits behind the one "
                    "running. Returns at once; the answer is not awaited.",
     "inputSchema": {"type": "object", "properties": {
         "session": _s(f"Who to tell: {_SESSION_REF}, or a chat URI."),
         "message": _s("What to say."),
     }, "required": ["session", "message"]},
     "annotations": {"readOnlyHint": False}},
    {"name": "get_session_context", "title": "Get Session Context",
     "description": "The latest turns of a session or chat, as a shortened transcript.",
     "inputSchema": {"type": "object", "properties": {
         "session": _s(f"Whose turns: {_SESSION_REF}, or a chat URI."),
         "detail": {"type": "string", "enum": ["summary", "digest", "full"],
                    "description": "How much of each turn: `summary` (the default) gives the message and the "
                                   "start of the answer, `digest` the whole answer and the tools called, "
                                   "`full` the tools' inputs as well."},
         "transcriptLimit": {"type": "number",
                             "description": "How many of the newest turns (10 unless set, 50 at most)."},
     }, "required": ["session"]},
     "annotations": {"readOnlyHint": True}},
    {"name": "delete_session", "title": "Delete Session",
     "description": "Remove a session and everything stored for it, for good. Your own session cannot be "
                    "removed.",
     "inputSchema": {"type": "object", "properties": {
         "session": _s(f"The session to remove: {_SESSION_REF}."),
     }, "required": ["session"]},
     "annotations": {"readOnlyHint": False, "destructiveHint": True}},
]

_ARTIFACT_ITEM = {"type": "object", "properties": {
    "type": _s("What it is; `resource` is for what fits no other kind.",
               enum=list(ARTIFACT_TYPES)),
    "label": _s("A few words the user sees."),
    "isArtifact": _b("Always given: `true` when this session made or changed it (an artifact), "
                     "`false` for something that already existed and is worth a look (a reference)."),
    "link": _s("Its URL, needed for a pull request, issue, commit or website."),
    "uri": _s("Its full URI with the scheme (`file:///...` for a file here), needed for the `file` "
              "and `resource` kinds."),
    "commitHash": _s("The commit's hash, needed for the `commit` kind."),
}, "required": ["type", "label", "isArtifact"]}

ARTIFACT_TOOLS: list[dict[str, Any]] = [
    {"name": "add_artifact_or_reference", "title": "Add Artifact or Reference",
     "description": "Note things this session made or found, so the user sees them beside the chat input. "
                    "Give related ones together. Only results worth keeping belong here, not scratch "
                    "files.",
     "inputSchema": {"type": "object", "properties": {
         "items": {"type": "array", "minItems": 1, "items": _ARTIFACT_ITEM,
                   "description": "What to note."},
     }, "required": ["items"]},
     "annotations": {"readOnlyHint": False}},
    {"name": "remove_artifact_or_reference", "title": "Remove Artifact or Reference",
     "description": "Take a noted artifact or reference off this session, by its id.",
     "inputSchema": {"type": "object", "properties": {
         "id": _s("Its id, as `add_artifact_or_reference` or `list_artifacts_and_references` gave it."),
     }, "required": ["id"]},
     "annotations": {"readOnlyHint": False, "destructiveHint": True}},
    {"name": "list_artifacts_and_references", "title": "List Artifacts and References",
     "description": "What this session has noted, each with its id.",
     "inputSchema": {"type": "object", "properties": {}},
     "annotations": {"readOnlyHint": True}},
]

AHP_RESOURCE: dict[str, Any] = {
    "name": "ahp_resource", "title": "AHP Resource",
    "description": "Reach a resource through the agent host, the way its clients do: `method` is one of the "
                   "AHP resource commands and `params` its params (`uri`, ...). A `file:` URI is this "
                   "machine's file; `<scheme>://<clientId>/...` is a resource a connected client publishes "
                   "(an editor's unsaved buffer, a plugin's virtual file). Answers the command's result as JSON.",
    "inputSchema": {"type": "object", "properties": {
        "method": _s("The resource command.", enum=list(RESOURCE_METHODS)),
        "params": {"type": "object", "description": "The command's params, e.g. {\"uri\": \"file:///tmp/a\"}."},
    }, "required": ["method", "params"]},
    "annotations": {"readOnlyHint": False},
}

#: Said to an agent whose harness takes it (Claude Code's system prompt append).
ARTIFACT_INSTRUCTION = (
    "This agent host shows notable results beside the chat input. When you create, or work to fix, change or "
    "unblock, a pull request or an issue, or produce a deliverable the user asked for (a report, a plan), record "
    "it with the `add_artifact_or_reference` tool as an artifact; record an existing resource the user should "
    "look at because of this task as a reference. Recording is optional: do not record routine, scratch or "
    "intermediate files, nor sessions and chats you created with the session tools, and never make a file only "
    "to record it. Batch related entries in one call."
)

DEFAULT_TOOLS: list[dict[str, Any]] = [*SESSION_TOOLS, *ARTIFACT_TOOLS, AHP_RESOURCE]


def tools(host: Host) -> list[dict[str, Any]]:
    """The set offered now (``SessionState.serverTools``)."""
    return getattr(host, "server_tools", None) or DEFAULT_TOOLS


def publish(session: Session) -> None:
    """Tell ``session`` the set, when it does not hold it already."""
    offered = tools(session.host)
    if session.state().get("serverTools") != offered:
        session.host.bus.emit(session.uri, {"type": "session/serverToolsChanged", "tools": offered})


Runner = Callable[["Host", "Chat", dict[str, Any]], Awaitable[str]]


def set_tools(host: Host, definitions: list[dict[str, Any]], runners: dict[str, Runner] | None = None) -> None:
    """Replace the set (the embedder's ``setTools``): every running session is
    told. ``runners`` carries the embedder's own tools (name -> an async
    ``(host, chat, arguments) -> text``, raising :class:`ToolError` to refuse);
    a name without one is this host's."""
    host.server_tools = [dict(d) for d in definitions]
    host.server_tool_runners = dict(runners or {})
    for session in list(host.sessions.sessions.values()) if host.sessions else []:
        if not session.disposed:
            publish(session)


# -- calling ------------------------------------------------------------------------------


class AgentPeer:
    """The agent of a chat, asking the host as a client would: what it lends
    (tokens) and who it acts for are those of whoever started its turn."""

    def __init__(self, chat: Chat) -> None:
        self.chat = chat
        lender = chat.lender
        self.client_id: str | None = None
        self.user = getattr(lender, "user", None)
        self.tokens = getattr(lender, "tokens", {})
        self.subscriptions: set[str] = set()

    @property
    def name(self) -> str:
        return f"the agent of {self.chat.uri}"

    def send(self, text: str, size: int | None = None) -> bool:
        return True  # nothing is sent to an agent this way (a progress note, say)


def result(text: str, *, error: bool = False) -> dict[str, Any]:
    """An MCP ``CallToolResult`` (wire JSON)."""
    return {"content": [{"type": "text", "text": text}], "isError": error}


async def call(host: Host, chat_uri: str, name: str, arguments: Any) -> dict[str, Any]:
    """Run the host tool ``name`` for the agent of ``chat_uri``; an MCP result."""
    chat = host.sessions.chat_owner.get(chat_uri) if host.sessions else None
    if chat is None or chat.session.disposed:
        return result(f"{name}: the chat {chat_uri} this agent runs in is gone", error=True)
    run = getattr(host, "server_tool_runners", {}).get(name) or _RUNNERS.get(name)
    if run is None or not any(t.get("name") == name for t in tools(host)):
        return result(f"{name} is not a tool this host offers", error=True)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return result(f"{name} takes an object of arguments", error=True)
    try:
        return result(await run(host, chat, arguments))
    except ToolError as exc:
        return result(str(exc), error=True)
    except RpcError as exc:
        return result(f"{name}: {exc.message} (error {exc.code})", error=True)
    except Exception as exc:  # noqa: BLE001 - a fault answers one call, as a failed result
        log.exception("%s: the host tool %s failed", chat_uri, name)
        return result(f"{name} failed: {type(exc).__name__}: {exc}", error=True)


def _text(args: dict[str, Any], key: str, *, required: bool = True) -> str | None:
    value = args.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{key} must be a non-empty string")
    return value


def _flag(args: dict[str, Any], key: str) -> bool:
    value = args.get(key, False)
    if not isinstance(value, bool):
        raise ToolError(f"{key} must be true or false")
    return value


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1)


# -- the session tools ------------------------------------------------------------------------


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
        "session": row["resource"], "title": row.get("title", ""), "provider": row.get("provider"),
        "status": _status_words(int(row.get("status", 1))), "unread": not int(row.get("status", 1)) & 32,
        "createdAt": row.get("createdAt"), "modifiedAt": row.get("modifiedAt"),
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
    text = _text(args, key, required=False)
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
    wanted = _text(args, "session", required=False)
    if wanted is not None:
        rows = [r for r in rows if r["resource"] == wanted or wanted in [c["resource"] for c in r.get("chats") or []]]
        if not rows:
            raise ToolError(f"no session {wanted}")
        return _dump([_compact(r) for r in rows])
    statuses = args.get("status")
    if statuses is not None and (not isinstance(statuses, list) or any(s not in STATUS_WORDS for s in statuses)):
        raise ToolError(f"status must be a list of {', '.join(STATUS_WORDS)}")
    archived = _flag(args, "includeArchived") or "archived" in (statuses or [])
    workspace = _text(args, "workspace", required=False)
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
        if _flag(args, "unread") and not compact["unread"]:
            continue
        if _flag(args, "withChanges") and not (compact.get("git") or {}).get("uncommittedChanges"):
            continue
        if _flag(args, "withPullRequest") and not (compact.get("github") or {}).get("pullRequestUrls"):
            continue
        created = _when({"c": row.get("createdAt")}, "c") if row.get("createdAt") else None
        if (after and (created is None or created < after)) or (before and (created is None or created > before)):
            continue
        picked.append(compact)
    return _dump(picked)


async def get_current_session(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    return _dump({**_compact(chat.session.summary()), "chat": chat.uri})


async def _target(host: Host, uri: str, *, to_message: bool = True) -> Chat:
    """The chat a session or chat URI names (a session's default chat)."""
    if host.sessions is None or not await host.ensure_channel(uri):
        raise ToolError(f"no session or chat {uri}")
    chat = host.sessions.chat_owner.get(uri)
    if chat is not None:
        if to_message and chat.state().get("interactivity") == "read-only":
            raise ToolError(f"{uri} is read-only: a subagent's worker chat takes no messages; "
                            f"message the chat that spawned it")
        return chat
    session = host.sessions.sessions.get(uri)
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
    host.bus.emit(target.uri, {"type": "chat/pendingMessageSet", "kind": "queued", "id": f"m-{uuid.uuid4().hex[:12]}",
                               "message": message})
    turns.take_up_queued(target)


async def rename_chat(host: Host, chat: Chat, args: dict[str, Any]) -> str:

    title = " ".join((_text(args, "title") or "").split())  # a blank one is refused by _text
    if len(title) > TITLE_MAX:
        raise ToolError(f"a title is at most {TITLE_MAX} characters; this one has {len(title)}")
    named, session_ref = _text(args, "chat", required=False), _text(args, "session", required=False)
    target = await _target(host, named or session_ref, to_message=False) if (named or session_ref) else chat
    if named and session_ref and session_ref != target.session.uri:
        raise ToolError(f"{named} is a chat of {target.session.uri}, not of {session_ref}")
    summaries.rename_chat(target, title)
    session = target.session
    if len(session.chats) == 1 and session.state().get("title") != title:
        # Its only chat: the session is what people look for, so it is named too.
        host.bus.emit(session.uri, {"type": "session/titleChanged", "title": title})
        host.sessions.notify_summary(session, {"title": title})
    return _dump({"session": session.uri, "chat": target.uri, "title": title})


async def send_message(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    target = await _target(host, _text(args, "session"))
    _send(host, chat, target, _text(args, "message"))
    return _dump({"session": target.session.uri, "chat": target.uri, "sent": True})


def spawn_depth(session: Session) -> int:
    """How many ``create_session`` calls deep ``session`` was made (0: by a person)."""
    value = (session.state().get("_meta") or {}).get(SPAWN_DEPTH)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


async def create_session(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    depth = spawn_depth(chat.session)
    if depth >= MAX_SPAWN_DEPTH:
        raise ToolError(f"no session is made {MAX_SPAWN_DEPTH + 1} levels deep: this one was itself made by an "
                        f"agent {depth} level(s) down, and an agent that makes sessions that make sessions has no "
                        f"end; do the work here, or open a chat with create_chat")
    workspace, prompt = _text(args, "workspace"), _text(args, "prompt")
    folder = _folder(workspace)
    picked = _model(chat.session, _text(args, "model", required=False))
    uri = f"ahp-session:/{uuid.uuid4()}"
    params = model.CreateSessionParams(channel=uri, provider=chat.session.provider, workingDirectories=[folder])
    await session_commands.create_session(host, AgentPeer(chat), params)
    target = await _target(host, uri)
    summaries.set_meta(target.session, SPAWN_DEPTH, depth + 1)
    target.session.save()  # recorded, not derived: the bound holds across a restart
    _send(host, chat, target, prompt, picked)
    return _dump({"session": uri, "chat": target.uri, "workingDirectory": folder})


async def create_chat(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    session_uri = _text(args, "session", required=False) or chat.session.uri
    prompt = _text(args, "prompt")
    _text(args, "title", required=False)  # checked; a chat is named after its first message
    if host.sessions is None or not await host.ensure_channel(session_uri) or session_uri not in host.sessions.sessions:
        raise ToolError(f"no session {session_uri}")
    picked = _model(host.sessions.sessions[session_uri], _text(args, "model", required=False))
    uri = f"ahp-chat:/{uuid.uuid4()}"
    await chat_commands.create_chat(host, AgentPeer(chat), model.CreateChatParams(channel=session_uri, chat=uri))
    target = host.sessions.chat_owner[uri]
    _send(host, chat, target, prompt, picked)
    return _dump({"session": session_uri, "chat": uri})


def _turn_lines(turn: dict[str, Any], detail: str) -> dict[str, Any]:
    reply = "".join(p.get("content", "") for p in turn.get("responseParts", []) if p.get("kind") == "markdown")
    out: dict[str, Any] = {"message": (turn.get("message") or {}).get("text", "")}
    out["reply"] = reply if detail != "summary" or len(reply) <= 200 else reply[:200] + "…"
    if detail != "summary":
        calls = [p["toolCall"] for p in turn.get("responseParts", []) if p.get("kind") == "toolCall"]
        out["toolCalls"] = [{"name": c.get("toolName"), **({"input": c.get("toolInput")} if detail == "full" else {})}
                            for c in calls]
    if turn.get("state"):
        out["state"] = turn["state"]
    return out


async def get_session_context(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    target = await _target(host, _text(args, "session"), to_message=False)
    detail = args.get("detail", "summary")
    if detail not in ("summary", "digest", "full"):
        raise ToolError("detail must be summary, digest or full")
    limit = args.get("transcriptLimit", TRANSCRIPT_LIMIT)
    if not isinstance(limit, int | float) or isinstance(limit, bool) or limit < 1:
        raise ToolError("transcriptLimit must be a positive number")
    state = target.state()
    turns = list(state.get("turns") or [])[-min(int(limit), TRANSCRIPT_CAP):]
    out = {"session": target.session.uri, "chat": target.uri, "title": state.get("title", ""),
           "status": _status_words(int(state.get("status", 1))),
           "turns": [_turn_lines(t, detail) for t in turns]}
    if state.get("activeTurn"):
        out["activeTurn"] = _turn_lines(state["activeTurn"], detail)
    return _dump(out)


async def delete_session(host: Host, chat: Chat, args: dict[str, Any]) -> str:

    uri = _text(args, "session")
    if uri == chat.session.uri or uri in chat.session.chats:
        raise ToolError("delete_session refuses to delete the current session")
    await session_commands.dispose_session(host, AgentPeer(chat), model.DisposeSessionParams(channel=uri))
    return _dump({"session": uri, "deleted": True})


# -- artifacts ------------------------------------------------------------------------------


def artifacts_of(session: Session) -> list[dict[str, Any]]:
    return [dict(a) for a in (session.state().get("_meta") or {}).get(ARTIFACTS) or []]


def keep_artifacts(session: Session, held: list[dict[str, Any]]) -> None:
    """``_meta`` rebuilt whole with ``held`` (the key gone when none is left),
    told to the session and its row, and written down."""

    summaries.set_meta(session, ARTIFACTS, held or None)
    session.save()


def _noun(entry: dict[str, Any]) -> str:
    return "artifact" if entry.get("isArtifact") else "reference"


def _describe(entry: dict[str, Any]) -> str:
    value = entry.get("link") or entry.get("uri") or entry.get("commitHash") or ""
    return f"{entry['id']} ({entry['type']}, {_noun(entry)}) {entry['label']}" + (f" — {value}" if value else "")


def _artifact_input(item: Any, at: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise ToolError(f"{at} must be an object")
    kind = item.get("type")
    if kind not in ARTIFACT_TYPES:
        raise ToolError(f"{at}.type must be one of {', '.join(ARTIFACT_TYPES)}")
    label = item.get("label")
    if not isinstance(label, str) or not label.strip():
        raise ToolError(f"{at}.label must be a non-empty string")
    if not isinstance(item.get("isArtifact"), bool):
        raise ToolError(f"{at}.isArtifact must be true or false")
    entry: dict[str, Any] = {"type": kind, "label": label.strip(), "isArtifact": item["isArtifact"]}
    for key in ("link", "uri", "commitHash"):
        value = item.get(key)
        if value is not None:
            if not isinstance(value, str) or not value.strip():
                raise ToolError(f"{at}.{key} must be a non-empty string")
            entry[key] = value.strip()
    if kind in _LINKED and "link" not in entry:
        raise ToolError(f"{at}.link is required for a {kind}")
    if kind in _BY_URI:
        if "uri" not in entry:
            raise ToolError(f"{at}.uri is required for a {kind}")
        if not urlsplit(entry["uri"]).scheme or len(urlsplit(entry["uri"]).scheme) < 2:
            raise ToolError(f"{at}.uri must be an absolute URI with its scheme (file:///...), not {entry['uri']!r}")
    if kind == "commit" and "commitHash" not in entry:
        raise ToolError(f"{at}.commitHash is required for a commit")
    return entry


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["type"] == b["type"] and all(a.get(k) == b.get(k) for k in ("link", "uri", "commitHash"))


async def add_artifact_or_reference(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    items = args.get("items")
    if not isinstance(items, list) or not items:
        raise ToolError("items must be a non-empty list")
    entries = [_artifact_input(item, f"items[{n}]") for n, item in enumerate(items)]
    held = artifacts_of(chat.session)
    said = []
    for entry in entries:
        known = next((a for a in held if _same(a, entry)), None)
        if known is None:
            entry = {"id": str(uuid.uuid4()), **entry}
            held.append(entry)
            said.append(f"Added {_noun(entry)}: {_describe(entry)}")
        elif entry["isArtifact"] and not known.get("isArtifact"):
            known["isArtifact"] = True  # a reference the session then worked on is its artifact
            said.append(f"Added artifact: {_describe(known)}")
        else:
            said.append(f"Already recorded: {_describe(known)}")
    keep_artifacts(chat.session, held)
    return "\n".join(said)


def remove_artifact(session: Session, artifact_id: str) -> dict[str, Any] | None:
    held = artifacts_of(session)
    gone = next((a for a in held if a.get("id") == artifact_id), None)
    if gone is not None:
        keep_artifacts(session, [a for a in held if a is not gone])
    return gone


async def remove_artifact_or_reference(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    artifact_id = _text(args, "id")
    gone = remove_artifact(chat.session, artifact_id)
    if gone is None:
        return f"No artifact or reference with id {artifact_id}."
    return f"Removed {_noun(gone)}: {_describe(gone)}"


async def list_artifacts_and_references(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    held = artifacts_of(chat.session)
    if not held:
        return "No artifacts or references recorded for this session."
    return "\n".join(_describe(a) for a in held)


# -- ahp_resource -------------------------------------------------------------------------------


async def ahp_resource(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    method = args.get("method")
    if method not in RESOURCE_METHODS:
        raise ToolError(f"method must be one of {', '.join(RESOURCE_METHODS)}")
    params = args.get("params")
    if not isinstance(params, dict):
        raise ToolError("params must be an object (the command's params)")
    decoded = host.decode_params(method, params)
    answer = await host.commands[method](host, AgentPeer(chat), decoded)  # the resources feature's, as joined
    if isinstance(answer, jsonrpc.Encoded):  # a read answered in its JSON form already
        answer = json.loads("".join(answer.parts))
    return _dump(answer if answer is None or isinstance(answer, dict) else codec.encode(answer))


_RUNNERS: dict[str, Runner] = {
    "list_sessions": list_sessions,
    "get_current_session": get_current_session,
    "create_session": create_session,
    "create_chat": create_chat,
    "rename_chat": rename_chat,
    "send_message": send_message,
    "get_session_context": get_session_context,
    "delete_session": delete_session,
    "add_artifact_or_reference": add_artifact_or_reference,
    "remove_artifact_or_reference": remove_artifact_or_reference,
    "list_artifacts_and_references": list_artifacts_and_references,
    "ahp_resource": ahp_resource,
}


# -- vscode/removeSessionArtifact -----------------------------------------------------------


async def remove_session_artifact(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    """The window takes an artifact pill off: ``{session, artifactId}``."""
    uri = string_param(params, "session")
    artifact_id = string_param(params, "artifactId")
    if host.sessions is None or not await host.ensure_channel(uri) or uri not in host.sessions.sessions:
        raise RpcError(SESSION_NOT_FOUND, f"no session {uri}", {"session": uri})
    if remove_artifact(host.sessions.sessions[uri], artifact_id) is None:
        raise RpcError(INVALID_PARAMS, f"session {uri} records no artifact {artifact_id}",
                       {"path": "$.artifactId"})
    return {}


COMMANDS = {
    "vscode/removeSessionArtifact": remove_session_artifact,
}


def session_opened(session: Session, record: dict[str, Any]) -> None:
    """A session opens knowing the host's tools (``session/serverToolsChanged``)."""
    publish(session)


def capabilities_of(host: Any) -> dict[str, Any]:
    """``InitializeResult._meta``: an artifact pill can be taken off."""
    return {"_meta": {"vscode.removeSessionArtifact": True}}
