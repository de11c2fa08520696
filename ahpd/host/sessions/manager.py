"""Sessions and their chats: channels, agents, the catalogue and the store.

A session is a channel (``SessionState``) named by the URI its client chose,
with one or more chats, each a channel (``ChatState``) and one agent
conversation. Each session runs in a nursery of its own inside the host's,
and each chat's agent in a nursery inside its session's, so disposing a
chat, a session or the whole host ends exactly the agents it owns.

Agents run only while needed. A chat's agent process starts at its first
turn (never at ``createSession``), and one that has had no turn for
``agentIdleTimeout`` seconds is stopped; the next turn resumes the
conversation by its own id (ACP ``session/load``, Claude Code ``--resume``),
or, for an ACP agent that cannot load one, starts a new conversation handed
the transcript so far. Clients see none of it: no status or action changes.
What a composer needs before any turn (models, slash commands) is what the
backends' boot probes learned (see :meth:`SessionManager.probe_soon`).

A session read back from the store after a restart is *dormant*: its
channels are open and its turns are there, but no agent runs until somebody
starts a turn, and then the agent resumes the conversation by its own id.

The catalogue also offers what a backend keeps and the store does not know:
a past Claude Code conversation is a row ``claude:/<id>``, listed from the
backend's transcripts (a file read, cached per backend and refreshed at
the first hello and after each turn, so listing never waits on anything). Opening
one rebuilds its turns from the transcript, again without an agent, and the
first new turn resumes it under its own id.
"""

from __future__ import annotations

import base64
import functools
import inspect
import logging
import math
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import trio

from ahpd.backends.port import SKILL_META, Backend, BackendError, Conversation, StoredConversation
from ahpd.host.sessions import annotations
from ahpd.host.changesets import changesets
from ahpd.host.customizations import plugins
from ahpd.host.sessions.chats import rewind
from ahpd.host.kernel.bus import ROOT, utc_now
from ahpd.host.sessions.store import MemorySessionStore, SessionStore
from ahpd.host.kernel.supervise import run_supervised, spawn, supervised

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.chats.turns import TurnRunner

log = logging.getLogger("ahpd.host")

IDLE = 1
ERROR = 2
INPUT_NEEDED = 24
ACTIVITY_BITS = 1 | 2 | 8 | 16
TURN_WINDOW = 50
#: Seconds a new session waits for its agent's boot probe, if one is under way.
PROBE_WAIT = 60.0
IS_READ = 32
IS_ARCHIVED = 64


def session_id(uri: str) -> str:
    """Only the id inside a session URI is ever read: its last path segment."""
    parsed = urlparse(uri)
    return (parsed.path or parsed.netloc).rstrip("/").rsplit("/", 1)[-1]


def default_chat_uri(session_uri: str) -> str:
    encoded = base64.urlsafe_b64encode(session_uri.encode()).decode().rstrip("=")
    return f"ahp-chat://default/{encoded}"


def catalogue_uri(provider: str, backend_id: str) -> str:
    """A stored conversation's session URI: ``claude:/<id>``."""
    return f"{provider}:/{backend_id}"


def catalogue_row(provider: str, conversation: StoredConversation) -> dict[str, Any]:
    """The ``SessionSummary`` of a conversation a backend keeps."""
    uri = catalogue_uri(provider, conversation.backend_id)
    modified = conversation.modified_at or conversation.created_at or ""
    row: dict[str, Any] = {
        "resource": uri, "provider": provider, "title": conversation.title, "status": IDLE | IS_READ,
        "createdAt": conversation.created_at or modified, "modifiedAt": modified,
        "defaultChat": default_chat_uri(uri),
    }
    if conversation.cwd:
        folder = Path(conversation.cwd)
        row["workingDirectories"] = [folder.as_uri()]
        row["project"] = {"uri": folder.as_uri(), "displayName": folder.name or str(folder)}
    return row


_KIND_NAMES = {"prompt": "Commands", "skill": "Skills"}


def command_customizations(provider: str, commands: list[dict[str, Any]], cwd: Path,
                           dirs: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """An agent's slash commands as the session's customizations: one
    directory container per kind (prompts, skills), each command a child,
    because a prompt or a skill is never a top-level customization. The
    container is where a person would add one - the backend's convention
    (``.claude/commands`` for Claude Code) or the session's own folder - not
    a path read off disk: the agent says what it loaded, never where from.
    A command's argument hint is ``_meta["ahpd.argumentHint"]``, since
    neither child type declares one."""
    children: dict[str, list[dict[str, Any]]] = {"prompt": [], "skill": []}
    for command in commands:
        name = command.get("name")
        if not isinstance(name, str) or not name:
            continue
        kind = "skill" if (command.get("_meta") or {}).get(SKILL_META) else "prompt"
        children[kind].append(command)
    out = []
    for kind, entries in children.items():
        if not entries:
            continue
        relative = (dirs or {}).get(kind)
        folder = cwd / relative if relative else cwd
        container = folder.as_uri()
        items = []
        for command in entries:
            name = command["name"]
            if relative:
                uri = (folder / name / "SKILL.md" if kind == "skill" else folder / f"{name}.md").as_uri()
            else:
                uri = f"{container}#{kind}:{name}"
            child: dict[str, Any] = {"id": f"{provider}.{kind}:{name}", "uri": uri, "name": name, "type": kind,
                                     "enabled": True}
            if command.get("description"):
                child["description"] = command["description"]
            hint = (command.get("input") or {}).get("hint")
            if isinstance(hint, str) and hint:
                child["_meta"] = {"ahpd.argumentHint": hint}
            items.append(child)
        out.append({
            "id": f"{provider}.{kind}s", "uri": container, "name": _KIND_NAMES[kind], "type": "directory",
            "enabled": True, "contents": kind, "writable": False, "load": {"kind": "loaded"}, "children": items,
        })
    return out


def subagent_customizations(provider: str, subagents: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """The subagents a harness offers, as one container of ``agent`` children."""
    items = []
    for agent in subagents:
        name = agent.get("name") if isinstance(agent, dict) else None
        if not isinstance(name, str) or not name:
            continue
        child: dict[str, Any] = {"id": f"{provider}.agent:{name}", "uri": (folder / f"{name}.md").as_uri(),
                                 "name": name, "type": "agent", "enabled": True}
        if isinstance(agent.get("description"), str):
            child["description"] = agent["description"]
        items.append(child)
    if not items:
        return []
    return [{
        "id": f"{provider}.agents", "uri": folder.as_uri(), "name": "Agents", "type": "directory",
        "enabled": True, "contents": "agent", "writable": False, "load": {"kind": "loaded"}, "children": items,
    }]


def mcp_customizations(provider: str, servers: list[dict[str, Any]], config_file: Path) -> list[dict[str, Any]]:
    """A harness's MCP servers, each a top-level customization with its state
    in the protocol's words (``ahpd.host.customizations.customizations.mcp_state``)."""
    from ahpd.host.customizations.customizations import mcp_state

    return [{"id": f"{provider}.mcp:{s['name']}", "uri": f"{config_file.as_uri()}#mcp:{s['name']}", "name": s["name"],
             "type": "mcpServer", "state": mcp_state(s)}
            for s in servers if isinstance(s.get("name"), str) and s["name"]]


def path_of(file_uri: str) -> Path:
    parsed = urlparse(file_uri)
    if parsed.scheme != "file":
        raise ValueError(f"{file_uri} is not a file: URI")
    return Path(unquote(parsed.path))


class Chat:
    def __init__(self, session: Session, uri: str, backend_id: str | None = None) -> None:
        self.session = session
        self.uri = uri
        self.backend_id = backend_id
        #: The folder the chat's agent works in when it is not its session's
        #: (a chat moved from a session working elsewhere: ``ahpd.host.sessions.chats.chat_moves``).
        self.folder: Path | None = None
        self.conversation: Conversation | None = None
        self.scope: trio.CancelScope | None = None  # the agent's
        self.turn: TurnRunner | None = None
        #: The subagents its tool calls run now, by call id (``ahpd.host.sessions.chats.workers``).
        self.workers: dict[str, Any] = {}
        self.commands: list[dict[str, Any]] = []
        #: What the agent is handed on the first prompt only (a side chat's
        #: or a fork's source conversation).
        self.preamble: str | None = None
        #: The connection whose lent tokens this chat's agent starts with.
        self.lender: Any = None
        self.closed = False
        self._starting: trio.Event | None = None
        #: Set once the agent's task has ended (or none ever ran).
        self._agent_ended = trio.Event()
        self._agent_ended.set()
        self._gone: Conversation | None = None  # the conversation whose task ended last
        #: The idle clock's scope while an agent runs (see :meth:`rest`).
        self._idle: trio.CancelScope | None = None

    @property
    def host(self) -> Host:
        return self.session.manager.host

    def state(self) -> dict[str, Any]:
        return self.host.bus.channels[self.uri].state

    async def ensure_agent(self) -> Conversation:
        """The chat's live conversation, starting (or resuming) the agent once."""
        if self.scope is not None and self.scope.cancel_called and not self.closed:
            await self._agent_ended.wait()  # one being stopped is gone before its successor starts
        if self.conversation is not None:
            return self.conversation
        if self._starting is not None:
            await self._starting.wait()
            if self.conversation is None:
                raise RuntimeError("the agent did not start")
            return self.conversation
        if self.closed:
            raise BackendError("the chat was closed", "ChatClosed")
        self._starting = trio.Event()
        try:
            self.conversation = await self.session.nursery.start(functools.partial(
                run_supervised, f"the agent of {self.uri}", self._run_agent, report=self._agent_failed))
            self.backend_id = self.conversation.backend_id
            from ahpd.host.customizations import customizations

            customizations.agent_started(self.session, self.conversation)
            spawn(self.session.nursery, f"the idle clock of {self.uri}", self._stop_when_idle,
                  self.conversation, self._agent_ended)
            self.session.save()
            return self.conversation
        finally:
            self._starting.set()
            self._starting = None

    async def _run_agent(self, task_status: trio.TaskStatus[Conversation]) -> None:
        """The agent's task, supervised once it started: an agent that fails
        or goes away on its own ends its running turn with ``chat/error``,
        and the next turn starts it again."""
        ended = self._agent_ended = trio.Event()
        mine: Conversation | None = None
        on_its_own = False

        class Started:
            @staticmethod
            def started(conversation: Conversation) -> None:
                nonlocal mine
                mine = conversation
                task_status.started(conversation)

        try:
            with trio.CancelScope() as scope:
                self.scope = scope
                await self.session.backend.run_conversation(
                    cwd=self.folder or self.session.cwd,
                    events=self._on_event,
                    resume_id=self.backend_id,
                    task_status=Started,  # type: ignore[arg-type]
                    **self._extras(),
                )
                on_its_own = True
            if mine is None and scope.cancelled_caught:
                raise BackendError("the chat was closed while its agent started", "ChatClosed")
        finally:
            if self.scope is scope:
                self.scope = None
            if mine is not None and self.conversation is mine:
                self.conversation = None
            self._gone = mine
            if mine is not None:
                from ahpd.host.sessions.chats import background_work

                background_work.agent_gone(self)
            turn = self.turn
            while mine is not None and turn is not None:
                turn.agent_gone(mine, stopped=not on_its_own)
                turn = turn.previous
            ended.set()

    def _agent_failed(self, exc: Exception) -> None:
        """The agent's task failed: so did the turn that was talking to it."""
        turn = self.turn
        while turn is not None:
            if turn.conversation is not None and turn.conversation is self._gone:
                turn.failed(exc)
            turn = turn.previous

    def _on_event(self, event: Any) -> None:
        """An agent's event, handled under the turn's boundary: a fault in
        handling it ends the turn with ``chat/error``, not the agent's task."""
        from ahpd.host.sessions.chats.turns import on_event

        turn = self.turn
        with supervised(f"{self.uri}: handling the agent's {type(event).__name__}",
                        lambda exc: turn.failed(exc) if turn is not None else None):
            on_event(self, event)
            if turn is not None and turn.live and not turn.ended:
                turn.heard()

    def _busy(self) -> bool:
        """A turn is running, or a cancelled one still waits on its prompt."""
        return self.turn is not None and not self.turn.done.is_set()

    def _in_use(self) -> bool:
        """Busy, or the agent runs something in the background, which
        stopping its process for idleness would end."""
        channel = self.host.bus.channels.get(self.uri)
        return self._busy() or bool(channel is not None and channel.state.get("backgroundWork"))

    def rest(self) -> None:
        """(Re)start the idle clock: it runs while no turn does, for
        ``agentIdleTimeout`` seconds (a root config value; 0 stops it)."""
        if self._idle is None:
            return
        timeout = float(self.host.config("agentIdleTimeout") or 0)
        self._idle.deadline = math.inf if self._in_use() or timeout <= 0 else trio.current_time() + timeout

    async def _stop_when_idle(self, conversation: Conversation, ended: trio.Event) -> None:
        """Beside a running agent: stop its process once it has had no turn
        for ``agentIdleTimeout`` seconds. Nothing is said to clients - the
        chat is as it was - and the next turn resumes the conversation
        (:meth:`ensure_agent`: ACP ``session/load``, Claude by its id)."""
        while True:
            with trio.CancelScope() as idle:
                self._idle = idle
                self.rest()
                await ended.wait()
            if self._idle is idle:
                self._idle = None
            if not idle.cancelled_caught or self.conversation is not conversation:
                return
            if not self._in_use():
                break
        if not getattr(conversation, "resumable", True):
            self._resume_by_transcript()
        log.info("%s: the agent had no turn for %g s; stopping it until the next turn",
                 self.uri, float(self.host.config("agentIdleTimeout") or 0))
        await self.stop_agent()

    def _resume_by_transcript(self) -> None:
        """An agent that cannot load a conversation starts a new one after
        an idle stop, handed what was said so far with its first prompt."""
        from ahpd.host.sessions.chats.chat_commands import _transcript

        turns = self.session.older_turns.get(self.uri, []) + list(self.state().get("turns", []))
        self.backend_id = None
        if turns:
            self.preamble = "\n\n".join(filter(None, [
                self.preamble, "The conversation so far, for context:\n" + _transcript(turns)]))
        self.session.save()

    async def stop_agent(self) -> None:
        """End the agent's process and wait until it is gone (and reaped);
        the next turn starts or resumes it again."""
        if self.scope is not None:
            self.scope.cancel()
        await self._agent_ended.wait()

    def _extras(self) -> dict[str, Any]:
        """What a backend that takes it is given beyond the port: the token
        a client lent for the resource it protects, and, for the first chat
        of a session a client named by a UUID, that id, so the agent keeps
        the conversation under the name the client will ask for."""
        from ahpd.host.kernel.auth import token_for

        accepts = inspect.signature(self.session.backend.run_conversation).parameters
        extras: dict[str, Any] = {}
        if "api_key" in accepts:
            resources = self.session.backend.agent_info().get("protectedResources") or []
            token = next((t for r in resources if (t := token_for(self.lender, r["resource"]))), None)
            if token:
                extras["api_key"] = token
        if "client_tools" in accepts:
            from ahpd.host.sessions.chats.turns import announced_tools

            extras["client_tools"] = announced_tools(self)
        if "host_tools" in accepts:
            from ahpd.host.customizations.server_tools import AgentTools

            extras["host_tools"] = AgentTools(self.host, self.uri)
        if "terminals" in accepts and self.host.terminals is not None:
            from ahpd.host.terminals.terminals import AgentTerminals

            extras["terminals"] = AgentTerminals(self.host.terminals, self.session.uri, self.uri,
                                                 lambda: self.turn.turn_id if self.turn is not None else None)
        if "additional_directories" in accepts:
            from ahpd.host.sessions.directories import additional

            extras["additional_directories"] = additional(self)
        if "plugins" in accepts:
            from ahpd.host.customizations import plugins

            extras.update(plugins.for_agent(self.session))
        if "resume_at" in accepts and self.backend_id is not None:
            from ahpd.host.sessions.chats.rewind import pending_point

            if (point := pending_point(self)) is not None:
                extras["resume_at"] = point
        if "config" in accepts:
            from ahpd.host.sessions.session_config import desired

            extras["config"] = desired(self)
        if "session_id" in accepts and self.backend_id is None and self.uri == default_chat_uri(self.session.uri):
            try:
                extras["session_id"] = str(uuid.UUID(session_id(self.session.uri)))
            except ValueError:
                pass
        return extras

    def close(self) -> None:
        """The chat is gone: its agent and its turn end with it, and the
        secret its agent's MCP relay was given opens nothing any more."""
        self.closed = True
        bridge = getattr(self.host, "mcp_bridge", None)
        if bridge is not None:
            bridge.forget(self.uri)
        if self.scope is not None:
            self.scope.cancel()
        turn = self.turn
        while turn is not None:
            turn.scope.cancel()
            turn = turn.previous


class Session:
    def __init__(self, manager: SessionManager, record: dict[str, Any]) -> None:
        self.manager = manager
        self.uri: str = record["uri"]
        self.provider: str = record["provider"]
        self.cwd = Path(record["cwd"])
        self.created_at: str = record["createdAt"]
        self.chats: dict[str, Chat] = {}
        #: Turns older than a chat's loaded window, by chat URI, oldest first;
        #: fetchTurns pages them in.
        self.older_turns: dict[str, list[dict[str, Any]]] = {}
        self.nursery: trio.Nursery = None  # type: ignore[assignment] - set by run()
        self.scope: trio.CancelScope | None = None
        #: False while createSession is still announcing the session: what
        #: the agent says meanwhile is held, so that it always follows the
        #: announcement instead of racing it.
        self.announced = True
        self._held_commands: list[dict[str, Any]] | None = None
        self.disposed = False
        #: Why the session is in error (its nursery failed, or it cannot be
        #: saved); its summary carries the Error bit while this is set.
        self.failure: str | None = None

    def announce(self) -> None:
        self.announced = True
        if self._held_commands is not None:
            commands, self._held_commands = self._held_commands, None
            self.publish_commands(commands)

    @property
    def backend(self) -> Backend:
        return self.manager.backends[self.provider]

    @property
    def host(self) -> Host:
        return self.manager.host

    def state(self) -> dict[str, Any]:
        return self.host.bus.channels[self.uri].state

    async def run(self, task_status: trio.TaskStatus[None]) -> None:
        """The session's own nursery: its chats' agents and turns live here.

        It is also their last failure boundary: a fault that escapes one of
        them ends the nursery (and every agent in it), is reported as the
        session's error, and a fresh nursery takes over, so the next turn
        starts its agent again; the host never sees the fault."""
        started = False
        with trio.CancelScope() as scope:
            self.scope = scope
            while True:
                with supervised(f"session {self.uri}", self._failed):
                    async with trio.open_nursery() as nursery:
                        self.nursery = nursery
                        if not started:
                            started = True
                            task_status.started()
                        await trio.sleep_forever()

    def _failed(self, exc: Exception) -> None:
        for chat in self.chats.values():
            turn = chat.turn
            while turn is not None:
                turn.failed(exc)
                turn = turn.previous
        self.set_failure(f"the session failed: {type(exc).__name__}: {exc}")

    def set_failure(self, why: str | None) -> None:
        """Say (or, with None, lift) the session's error state on its summary."""
        if why == self.failure or self.disposed or self.uri not in self.host.bus.channels:
            self.failure = why
            return
        before = self.status()
        self.failure = why
        if self.status() != before:
            self.manager.notify_summary(self, {"status": self.status()})

    def customizations_of(self, commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from ahpd.host.customizations import customizations

        dirs = getattr(self.manager.backends.get(self.provider), "customization_dirs", None)
        return customizations.session_list(self, command_customizations(self.provider, commands, self.cwd, dirs))

    def publish_commands(self, commands: list[dict[str, Any]]) -> None:
        """The agent's commands as the session's customizations; said only
        when that changes what the session holds."""
        if not self.announced:
            self._held_commands = commands
            return
        customizations = self.customizations_of(commands)
        if customizations != (self.state().get("customizations") or []):
            self.host.bus.emit(self.uri, {"type": "session/customizationsChanged", "customizations": customizations})

    def summary(self) -> dict[str, Any]:
        """The catalogue row, built from the state a client would open."""
        state = self.state()
        row: dict[str, Any] = {
            "resource": self.uri,
            "provider": self.provider,
            "title": state["title"],
            "status": self.status(),
            "createdAt": self.created_at,
            "modifiedAt": max((self.host.bus.channels[c].state["modifiedAt"] for c in self.chats), default=self.created_at),
            "workingDirectories": list(state.get("workingDirectories") or []),
            "chats": [
                {"resource": c["resource"], "title": c["title"], "status": c["status"]}
                for c in state["chats"]
            ],
        }
        if state.get("defaultChat"):
            row["defaultChat"] = state["defaultChat"]
        if state.get("activity"):
            row["activity"] = state["activity"]
        if state.get("_meta"):
            row["_meta"] = dict(state["_meta"])  # _meta.git and the rest, as on the session
        marks = self.host.bus.channels.get(annotations.channel_of(self.uri))
        if marks is not None:
            row["annotations"] = annotations.summary(self.uri, marks.state)
        if state.get("origin"):
            row["origin"] = state["origin"]
        return row

    def status(self) -> int:
        """The session's status as its chats make it: the default chat's
        activity, promoted to InputNeeded or Error when any chat is; the read
        and archived bits are the session's own."""
        state = self.state()
        chats = [self.host.bus.channels[uri].state for uri in self.chats if uri in self.host.bus.channels]
        default = self.host.bus.channels.get(state.get("defaultChat") or "")
        lead = default.state if default is not None else (chats[0] if chats else {"status": IDLE})
        bits = lead.get("status", IDLE) & ACTIVITY_BITS
        if any(c.get("status", 0) & INPUT_NEEDED == INPUT_NEEDED for c in chats):
            bits = (bits & ~IDLE) | INPUT_NEEDED
        if self.failure is not None or any(c.get("status", 0) & ERROR for c in chats):
            bits |= ERROR
        return bits | (state["status"] & (IS_READ | IS_ARCHIVED))

    def record(self) -> dict[str, Any]:
        state = self.state()
        return {
            "uri": self.uri,
            "provider": self.provider,
            "cwd": str(self.cwd),
            "createdAt": self.created_at,
            "title": state["title"],
            "status": state["status"] & (IS_READ | IS_ARCHIVED),
            "config": state.get("config"),
            "workingDirectories": state.get("workingDirectories"),
            "_meta": state.get("_meta"),
            "annotations": self.host.bus.channels[annotations.channel_of(self.uri)].state["annotations"],
            "origin": state.get("origin"),
            "defaultChat": state.get("defaultChat"),
            "chats": [
                {
                    "uri": chat.uri,
                    "backendId": chat.backend_id,
                    **({"cwd": str(chat.folder)} if chat.folder is not None else {}),
                    **rewind.saved(chat),
                    "state": _resting(self.host.bus.channels[chat.uri].state, self.older_turns.get(chat.uri, [])),
                }
                for chat in self.chats.values()
            ],
            **changesets.record_of(self),
            **plugins.saved(self),
        }

    def save(self) -> None:
        """Write the session down. A disposed session has nothing to write;
        a write that fails is the session's error (its summary says so until
        a write works again), never its caller's."""
        if self.disposed or self.uri not in self.host.bus.channels:
            return
        try:
            self.manager.store.save(self.record())
        except Exception as exc:  # noqa: BLE001 - see above
            log.exception("session %s could not be saved", self.uri)
            self.set_failure(f"the session could not be saved: {type(exc).__name__}: {exc}")
        else:
            self.older_turns.clear()  # the store has them now
            if self.failure is not None and self.failure.startswith("the session could not be saved"):
                self.set_failure(None)


def _resting(chat_state: dict[str, Any], older: list[dict[str, Any]]) -> dict[str, Any]:
    """A chat as it is kept: none in flight, nobody being asked. Its turns
    are those it holds, after its cursor's count of older ones the store
    already keeps; those held here only (``older``) come first, whole."""
    drop = ("activeTurn", "activity", "turnsNextCursor") if older else ("activeTurn", "activity")
    state = {k: v for k, v in chat_state.items() if k not in drop}
    state["turns"] = older + list(chat_state.get("turns", []))
    state["status"] = (chat_state.get("status", IDLE) & (IS_READ | IS_ARCHIVED)) | IDLE
    return state


class SessionManager:
    def __init__(self, host: Host, backends: dict[str, Backend], store: SessionStore | None = None) -> None:
        self.host = host
        self.backends = backends
        self.store = store or MemorySessionStore()
        self.sessions: dict[str, Session] = {}
        self.chat_owner: dict[str, Chat] = {}
        self.nursery: trio.Nursery | None = None
        #: Rows of sessions that are stored but not open, by URI.
        self.dormant: dict[str, dict[str, Any]] = {r["uri"]: r for r in self.store.load_all()}
        #: What each browsable backend keeps, by provider then backend id:
        #: the last answer of its ``list_conversations``.
        self.catalogue: dict[str, dict[str, StoredConversation]] = {}
        self._refreshing: dict[str, bool] = {}  # provider -> asked again meanwhile
        self._listed_at: dict[str, float] = {}  # provider -> when its catalogue was last read
        self._waking: dict[str, trio.Event] = {}
        #: Whether the agents' boot probes were started (once, at the first hello).
        self._probes_started = False
        #: Set when that provider's boot probe has ended, by provider, while it runs.
        self._probing: dict[str, trio.Event] = {}
        #: What an edit waiting for approval would write, by the
        #: ``ahp-edit://pending/...`` URI its after side is served under:
        #: (tool call id, file path, new content). Gone once the call is settled.
        self.pending_edits: dict[str, tuple[str, str, str]] = {}

    @property
    def default_provider(self) -> str | None:
        return next(iter(self.backends), None)

    def agents(self) -> list[dict[str, Any]]:
        """``RootState.agents``: each backend's own description, with the
        harness-wide commands and skills it reported at start-up as its
        customizations, so a composer can offer them before any session."""
        agents = []
        for provider, backend in self.backends.items():
            info = backend.agent_info()
            commands = self.harness_commands(provider)
            subagents = getattr(backend, "subagents", None) or []
            servers = getattr(backend, "mcp_servers", None) or []
            if (commands or subagents or servers) and "customizations" not in info:
                dirs = getattr(backend, "customization_dirs", None) or {}
                customizations = command_customizations(provider, commands, Path.home(), dirs)
                folder = Path.home() / dirs.get("agent", ".")
                customizations += subagent_customizations(provider, list(subagents), folder)
                customizations += mcp_customizations(provider, list(servers), Path.home() / ".claude.json")
                info = {**info, "customizations": customizations}
            from ahpd.host.sessions.directories import advertise

            info = advertise(info)
            if self.host.users is not None:
                from ahpd.host.kernel.auth import USERS_RECORD

                info = {**info, "protectedResources": [*(info.get("protectedResources") or []), USERS_RECORD]}
            agents.append(info)
        return agents

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The host's nursery for sessions; cancelled, it ends every agent."""
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def probe_soon(self) -> None:
        """Start the agents' boot probes, and the first reading of what each
        backend keeps (the catalogue), once, when the first client says
        hello: a daemon nobody talks to starts no agent CLI, imports no agent
        library and sends nothing anywhere, and the answers still reach that
        client as ``root/agentsChanged`` and ``root/sessionAdded``."""
        if self.nursery is None or self._probes_started:
            return
        self._probes_started = True
        for provider in self.backends:
            self.refresh_catalogue_soon(provider)
        for provider, backend in self.backends.items():
            if hasattr(backend, "probe"):
                self._probing[provider] = trio.Event()
                spawn(self.nursery, f"probing {backend.provider}", self._probe, backend)

    async def probed(self, provider: str) -> None:
        """Wait (at most ``PROBE_WAIT`` seconds) for ``provider``'s boot probe
        if it is under way, so that a session opens with what it learned."""
        probing = self._probing.get(provider)
        if probing is not None:
            with trio.move_on_after(PROBE_WAIT):
                await probing.wait()

    async def _probe(self, backend: Any) -> None:
        """Ask an agent what it offers before any session needs it, and tell
        clients when the answer changed what they were shown."""
        try:
            changed = await backend.probe()
        except Exception:  # noqa: BLE001 - an agent that cannot be probed is still offered
            log.exception("probing %s failed", backend.provider)
            return
        finally:
            self._probing.pop(backend.provider, trio.Event()).set()
        if changed:
            self.host.bus.emit(ROOT, {"type": "root/agentsChanged", "agents": self.agents()})
        commands = self.harness_commands(backend.provider)
        for session in list(self.sessions.values()):
            if session.provider == backend.provider and commands and not session.state().get("customizations"):
                session.publish_commands(commands)

    def harness_commands(self, provider: str) -> list[dict[str, Any]]:
        """The harness-wide slash commands a backend reported before any
        session (Claude Code's boot probe), as ACP ``AvailableCommand``s."""
        commands = getattr(self.backends.get(provider), "commands", None)
        return list(commands) if isinstance(commands, list) else []

    # -- the catalogue of what backends keep ----------------------------------

    def _browsable(self, provider: str) -> bool:
        """Only a backend that can read its conversations back is catalogued:
        Claude Code's transcripts are files, and an ACP agent that lists them
        replays one in a short-lived process. Listing never waits on either
        (the answer is cached); opening waits only on that replay."""
        backend = self.backends.get(provider)
        return backend is not None and hasattr(backend, "read_history") and hasattr(backend, "list_conversations")

    def _fresh(self, provider: str) -> bool:
        """Whether ``provider``'s last listing still stands: a backend whose
        listing starts its agent says for how long (``relist_after``), and is
        not asked again after every turn or for every name it does not hold."""
        fresh_for = getattr(self.backends[provider], "relist_after", 0.0)
        return bool(fresh_for) and trio.current_time() < self._listed_at.get(provider, -math.inf) + fresh_for

    def refresh_catalogue_soon(self, provider: str) -> None:
        if self.nursery is None or not self._browsable(provider) or self._fresh(provider):
            return
        if provider in self._refreshing:
            self._refreshing[provider] = True  # once more when this one is done
            return
        self._refreshing[provider] = False
        spawn(self.nursery, f"refreshing the {provider} catalogue", self._refresh_loop, provider)

    async def _refresh_loop(self, provider: str) -> None:
        try:
            while True:
                await self.refresh_catalogue(provider)
                if not self._refreshing.get(provider):
                    return
                self._refreshing[provider] = False
        finally:
            self._refreshing.pop(provider, None)

    async def refresh_catalogue(self, provider: str) -> None:
        """Read what ``provider`` keeps again, and tell root subscribers about
        rows that came or went."""
        if not self._browsable(provider):
            return
        before = set(self._unknown(provider))
        try:
            listed = await self.backends[provider].list_conversations()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a catalogue that cannot be read is the one we had
            log.exception("%s: listing its conversations failed", provider)
            return
        self.catalogue[provider] = {c.backend_id: c for c in listed}
        self._listed_at[provider] = trio.current_time()
        after = self._unknown(provider)
        if ROOT not in self.host.bus.channels:
            return
        subscribers = self.host.bus.channels[ROOT].subscribers
        for backend_id, conversation in after.items():
            if backend_id not in before:
                self.host.bus.notify(subscribers, "root/sessionAdded", {
                    "channel": ROOT, "summary": catalogue_row(provider, conversation),
                })
        for backend_id in before - set(after):
            self.host.bus.notify(subscribers, "root/sessionRemoved", {
                "channel": ROOT, "session": catalogue_uri(provider, backend_id),
            })

    def _known_ids(self) -> set[str]:
        known = {chat.backend_id for chat in self.chat_owner.values() if chat.backend_id}
        for record in self.dormant.values():
            known.update(c["backendId"] for c in record.get("chats") or [] if c.get("backendId"))
        return known

    def _unknown(self, provider: str) -> dict[str, StoredConversation]:
        """The conversations ``provider`` keeps that no session here names."""
        known = self._known_ids()
        return {i: c for i, c in self.catalogue.get(provider, {}).items()
                if i not in known and catalogue_uri(provider, i) not in self.sessions}

    def catalogue_rows(self) -> list[dict[str, Any]]:
        return [catalogue_row(provider, conversation)
                for provider in self.catalogue for conversation in self._unknown(provider).values()]

    async def catalogue_entry(self, uri: str) -> tuple[str, StoredConversation] | None:
        """The stored conversation ``uri`` names - its row's URI or its default
        chat's - when no session here names it yet. A URI of a browsable
        provider that the cache does not hold reads the catalogue once more."""
        if uri.startswith("ahp-chat://default/"):
            encoded = uri.removeprefix("ahp-chat://default/")
            try:
                uri = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except (ValueError, UnicodeDecodeError):
                return None
        provider, sep, rest = uri.partition(":/")
        backend_id = rest.strip("/")
        if not sep or not backend_id or "/" in backend_id or not self._browsable(provider):
            return None
        if backend_id not in self.catalogue.get(provider, {}) and not self._fresh(provider):
            await self.refresh_catalogue(provider)
        conversation = self._unknown(provider).get(backend_id)
        return (provider, conversation) if conversation is not None else None

    async def _open_from_catalogue(self, provider: str, conversation: StoredConversation) -> None:
        """Open a stored conversation dormant: its turns rebuilt from what the
        backend recorded, no agent started, the backend id its own."""
        from ahpd.host.sessions.chats import workers
        from ahpd.host.sessions.chats.turns import rebuild_turns

        uri = catalogue_uri(provider, conversation.backend_id)
        backend = self.backends[provider]
        history = await backend.read_history(conversation.backend_id)  # type: ignore[attr-defined]
        read_subagents = getattr(backend, "read_subagents", None)
        subagents = await read_subagents(conversation.backend_id) if read_subagents is not None else {}
        at = conversation.modified_at or conversation.created_at or utc_now()
        cwd = Path(conversation.cwd) if conversation.cwd and Path(conversation.cwd).is_dir() else Path.home()
        chat_uri = default_chat_uri(uri)
        turns = rebuild_turns(history, prefix=f"turn-{conversation.backend_id[:8]}", at=at,
                              worker_chat=lambda call_id: workers.chat_uri(uri, call_id) if call_id in subagents else None)
        chat_state = {
            "resource": chat_uri, "title": conversation.title, "status": IDLE | IS_READ, "modifiedAt": at,
            "turns": turns,
        }
        await self.open({
            "uri": uri, "provider": provider, "cwd": str(cwd),
            "createdAt": conversation.created_at or at, "title": conversation.title, "status": IS_READ,
            "chats": [{"uri": chat_uri, "backendId": conversation.backend_id, "state": chat_state,
                       **rewind.from_history(turns, history)},
                      *workers.rebuilt(uri, chat_uri, turns, subagents, at)],
            "defaultChat": chat_uri,
        }, lifecycle="ready")

    # -- opening -------------------------------------------------------------

    async def open(self, record: dict[str, Any], *, lifecycle: str) -> Session:
        """Open the channels of a session and start its nursery."""
        if self.nursery is None:
            raise RuntimeError("the session manager is not running")
        session = Session(self, record)
        plugins.restore(session, record.get("pluginDecisions"))
        chats = record.get("chats") or [{"uri": default_chat_uri(session.uri)}]
        now = utc_now()
        summaries = []
        for chat_record in chats:
            chat = Chat(session, chat_record["uri"], chat_record.get("backendId"))
            chat.folder = Path(chat_record["cwd"]) if chat_record.get("cwd") else None
            rewind.restore(chat, chat_record.get("rewind"))
            chat_state = chat_record.get("state") or {
                "resource": chat.uri, "title": record.get("title", ""), "status": IDLE,
                "modifiedAt": now, "turns": [],
            }
            turns = chat_state.get("turns", [])
            if len(turns) > TURN_WINDOW:
                # The newest turns are in the snapshot; older ones wait for fetchTurns.
                session.older_turns[chat.uri] = turns[:-TURN_WINDOW]
                chat_state = {**chat_state, "turns": turns[-TURN_WINDOW:],
                              "turnsNextCursor": f"older:{len(turns) - TURN_WINDOW}"}
            self.host.bus.open(chat.uri, "chat", chat_state)
            session.chats[chat.uri] = chat
            self.chat_owner[chat.uri] = chat
            summaries.append({
                "resource": chat.uri, "title": chat_state["title"], "status": chat_state["status"],
                "modifiedAt": chat_state["modifiedAt"], **({"movable": True} if chat_state.get("movable") else {}),
                **{k: chat_state[k] for k in ("origin", "interactivity") if k in chat_state},
            })
        state: dict[str, Any] = {
            "provider": session.provider,
            "title": record.get("title", ""),
            "status": IDLE | (record.get("status", 0) & (IS_READ | IS_ARCHIVED)),
            "lifecycle": lifecycle,
            "activeClients": [],
            "chats": summaries,
            "defaultChat": record.get("defaultChat") or summaries[0]["resource"],
            "workingDirectories": record.get("workingDirectories") or [session.cwd.as_uri()],
            "project": {"uri": session.cwd.as_uri(), "displayName": session.cwd.name or str(session.cwd)},
        }
        if record.get("config"):
            state["config"] = record["config"]
        elif session.provider in self.backends:
            from ahpd.host.sessions.session_config import initial

            state["config"] = initial(self.backends[session.provider], None)
        if record.get("_meta"):
            state["_meta"] = record["_meta"]  # ahpd.owner: the store's, not the transcript's
        if record.get("origin"):
            state["origin"] = record["origin"]  # an automation's run made it
        # What the harness said at start-up (commands, MCP servers), before any agent of this session runs.
        listed = session.customizations_of(self.harness_commands(session.provider))
        if listed:
            state["customizations"] = listed
        self.host.bus.open(session.uri, "session", state)
        from ahpd.host.customizations import server_tools

        server_tools.publish(session)  # the host's tools for its agents (session/serverToolsChanged)
        self.host.bus.open(annotations.channel_of(session.uri), "annotations",
                           {"annotations": record.get("annotations") or []})
        self.sessions[session.uri] = session
        session.announced = lifecycle != "creating"
        changesets.restore(session, record)
        await self.nursery.start(session.run)
        session.nursery.start_soon(changesets.advertise, session)
        return session

    async def wake(self, uri: str) -> bool:
        """Open a stored session, or a conversation its backend keeps, when a
        client names it; True if it now exists. Two clients naming it at once
        open it once."""
        waking = self._waking.get(uri)
        if waking is not None:
            await waking.wait()
            return uri in self.host.bus.channels
        self._waking[uri] = waking = trio.Event()
        try:
            if await self._wake_stored(uri):
                return True
            entry = await self.catalogue_entry(uri)
            if entry is None:
                return False
            # Its row's URI and its chat's are two names for one conversation.
            row_uri = catalogue_uri(entry[0], entry[1].backend_id)
            if row_uri != uri and row_uri in self._waking:
                await self._waking[row_uri].wait()
            elif row_uri not in self.sessions:
                self._waking[row_uri] = row_waking = waking if row_uri == uri else trio.Event()
                try:
                    await self._open_from_catalogue(*entry)
                finally:
                    if row_waking is not waking:
                        del self._waking[row_uri]
                        row_waking.set()
            return uri in self.host.bus.channels
        finally:
            del self._waking[uri]
            waking.set()

    async def _wake_stored(self, uri: str) -> bool:
        record = self.dormant.get(uri) or self.dormant.get(uri.removesuffix(annotations.SUFFIX))
        if record is None:
            owner = next((r for r in self.dormant.values()
                          if any(c.get("uri") == uri for c in r.get("chats") or [])), None)
            if owner is None:
                return False
            record = owner
        del self.dormant[record["uri"]]
        if record["provider"] not in self.backends:
            log.warning("stored session %s names provider %s, which is not configured", record["uri"], record["provider"])
        await self.open(record, lifecycle="ready")
        return True

    # -- closing -------------------------------------------------------------

    def dispose(self, session: Session) -> None:
        changesets.close_session(self.host, session)
        session.disposed = True
        if self.host.terminals is not None:
            self.host.terminals.dispose_claimed_by(session.uri)
        for chat in session.chats.values():
            chat.close()
            self.host.bus.close(chat.uri)
            self.chat_owner.pop(chat.uri, None)
        if session.scope is not None:
            session.scope.cancel()
        self.host.bus.close(session.uri)
        self.host.bus.close(annotations.channel_of(session.uri))
        self.sessions.pop(session.uri, None)
        self.store.delete(session.uri)
        if self.host.automations is not None:
            self.host.automations.session_gone(session.uri)

    def sync_summary(self, chat: Chat) -> None:
        """Keep the catalogue rows of ``chat`` and its session in step with
        the chat's own state (``ahpd.host.sessions.summaries``)."""
        from ahpd.host.sessions.summaries import sync_chat

        sync_chat(chat)

    def notify_summary(self, session: Session, changes: dict[str, Any]) -> None:
        from ahpd.host.sessions.session_commands import notify_summary

        notify_summary(self.host, session, changes)

    def settle_edits(self, call_id: str) -> None:
        """A call was answered or its turn ended: its pending edits are no longer served."""
        for uri in [u for u, (c, _, _) in self.pending_edits.items() if c == call_id]:
            del self.pending_edits[uri]

    def client_gone(self, client_id: str) -> None:
        """``client_id`` has no connection left: the calls of its tools that
        agents wait on are answered as failed, so no turn waits for ever."""
        from ahpd.host.sessions.chats.turns import client_gone

        for session in list(self.sessions.values()):
            for chat in list(session.chats.values()):
                client_gone(chat, client_id)

    def count(self) -> int:
        return len(self.sessions) + len(self.dormant)

    def announce_count(self) -> None:
        self.host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": self.count()})

    def new_turn_id(self) -> str:
        return f"turn-{uuid.uuid4().hex[:12]}"
