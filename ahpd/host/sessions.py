"""Sessions and their chats: channels, agents, the catalogue and the store.

A session is a channel (``SessionState``) named by the URI its client chose,
with one or more chats, each a channel (``ChatState``) and one agent
conversation. Each session runs in a nursery of its own inside the host's,
and each chat's agent in a nursery inside its session's, so disposing a
chat, a session or the whole host ends exactly the agents it owns.

A session read back from the store after a restart is *dormant*: its
channels are open and its turns are there, but no agent runs until somebody
starts a turn, and then the agent resumes the conversation by its own id.
"""

from __future__ import annotations

import base64
import inspect
import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import trio

from ahpd.backends.port import Backend, Conversation
from ahpd.host.bus import ROOT, utc_now
from ahpd.host.store import MemorySessionStore, SessionStore

if TYPE_CHECKING:
    from ahpd.host.host import Host
    from ahpd.host.turns import TurnRunner

log = logging.getLogger("ahpd.host")

IDLE = 1
ERROR = 2
INPUT_NEEDED = 24
ACTIVITY_BITS = 1 | 2 | 8 | 16
TURN_WINDOW = 50
IS_READ = 32
IS_ARCHIVED = 64


def session_id(uri: str) -> str:
    """Only the id inside a session URI is ever read: its last path segment."""
    parsed = urlparse(uri)
    return (parsed.path or parsed.netloc).rstrip("/").rsplit("/", 1)[-1]


def default_chat_uri(session_uri: str) -> str:
    encoded = base64.urlsafe_b64encode(session_uri.encode()).decode().rstrip("=")
    return f"ahp-chat://default/{encoded}"


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
        self.conversation: Conversation | None = None
        self.scope: trio.CancelScope | None = None  # the agent's
        self.turn: TurnRunner | None = None
        self.commands: list[dict[str, Any]] = []
        #: What the agent is handed on the first prompt only (a side chat's
        #: or a fork's source conversation).
        self.preamble: str | None = None
        #: The connection whose lent tokens this chat's agent starts with.
        self.lender: Any = None
        self._starting: trio.Event | None = None

    @property
    def host(self) -> Host:
        return self.session.manager.host

    def state(self) -> dict[str, Any]:
        return self.host.bus.channels[self.uri].state

    async def ensure_agent(self) -> Conversation:
        """The chat's live conversation, starting (or resuming) the agent once."""
        if self.conversation is not None:
            return self.conversation
        if self._starting is not None:
            await self._starting.wait()
            if self.conversation is None:
                raise RuntimeError("the agent did not start")
            return self.conversation
        self._starting = trio.Event()
        try:
            self.conversation = await self.session.nursery.start(self._run_agent)
            self.backend_id = self.conversation.backend_id
            self.session.save()
            return self.conversation
        finally:
            self._starting.set()
            self._starting = None

    async def _run_agent(self, task_status: trio.TaskStatus[Conversation]) -> None:
        from ahpd.host.turns import on_event

        with trio.CancelScope() as scope:
            self.scope = scope
            try:
                await self.session.backend.run_conversation(
                    cwd=self.session.cwd,
                    events=lambda event: on_event(self, event),
                    resume_id=self.backend_id,
                    task_status=task_status,
                    **self._extras(),
                )
            finally:
                self.conversation = None
                self.scope = None
                if self.turn is not None:
                    self.turn.agent_gone()

    def _extras(self) -> dict[str, Any]:
        """What a backend that takes it is given beyond the port: the token
        a client lent for the resource it protects, and, for the first chat
        of a session a client named by a UUID, that id, so the agent keeps
        the conversation under the name the client will ask for."""
        from ahpd.host.auth import token_for

        accepts = inspect.signature(self.session.backend.run_conversation).parameters
        extras: dict[str, Any] = {}
        if "api_key" in accepts:
            resources = self.session.backend.agent_info().get("protectedResources") or []
            token = next((t for r in resources if (t := token_for(self.lender, r["resource"]))), None)
            if token:
                extras["api_key"] = token
        if "session_id" in accepts and self.backend_id is None and self.uri == default_chat_uri(self.session.uri):
            try:
                extras["session_id"] = str(uuid.UUID(session_id(self.session.uri)))
            except ValueError:
                pass
        return extras

    def close(self) -> None:
        if self.scope is not None:
            self.scope.cancel()


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

    @property
    def backend(self) -> Backend:
        return self.manager.backends[self.provider]

    @property
    def host(self) -> Host:
        return self.manager.host

    def state(self) -> dict[str, Any]:
        return self.host.bus.channels[self.uri].state

    async def run(self, task_status: trio.TaskStatus[None]) -> None:
        """The session's own nursery: its chats' agents live here."""
        with trio.CancelScope() as scope:
            self.scope = scope
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                task_status.started()
                await trio.sleep_forever()

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
        if any(c.get("status", 0) & ERROR for c in chats):
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
            "defaultChat": state.get("defaultChat"),
            "chats": [
                {
                    "uri": chat.uri,
                    "backendId": chat.backend_id,
                    "state": _resting(self.host.bus.channels[chat.uri].state, self.older_turns.get(chat.uri, [])),
                }
                for chat in self.chats.values()
            ],
        }

    def save(self) -> None:
        self.manager.store.save(self.record())


def _resting(chat_state: dict[str, Any], older: list[dict[str, Any]]) -> dict[str, Any]:
    """A chat as it is kept: every turn, none in flight, nobody being asked."""
    state = {k: v for k, v in chat_state.items() if k not in ("activeTurn", "activity", "turnsNextCursor")}
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

    @property
    def default_provider(self) -> str | None:
        return next(iter(self.backends), None)

    def agents(self) -> list[dict[str, Any]]:
        return [backend.agent_info() for backend in self.backends.values()]

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The host's nursery for sessions; cancelled, it ends every agent."""
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            for backend in self.backends.values():
                if hasattr(backend, "probe"):
                    nursery.start_soon(self._probe, backend)
            task_status.started()
            await trio.sleep_forever()

    async def _probe(self, backend: Any) -> None:
        """Ask an agent what it offers before any session needs it, and tell
        clients when the answer changed what they were shown."""
        try:
            changed = await backend.probe()
        except Exception:  # noqa: BLE001 - an agent that cannot be probed is still offered
            log.exception("probing %s failed", backend.provider)
            return
        if changed:
            self.host.bus.emit(ROOT, {"type": "root/agentsChanged", "agents": self.agents()})

    # -- opening -------------------------------------------------------------

    async def open(self, record: dict[str, Any], *, lifecycle: str) -> Session:
        """Open the channels of a session and start its nursery."""
        if self.nursery is None:
            raise RuntimeError("the session manager is not running")
        session = Session(self, record)
        chats = record.get("chats") or [{"uri": default_chat_uri(session.uri)}]
        now = utc_now()
        summaries = []
        for chat_record in chats:
            chat = Chat(session, chat_record["uri"], chat_record.get("backendId"))
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
                "modifiedAt": chat_state["modifiedAt"],
            })
        state: dict[str, Any] = {
            "provider": session.provider,
            "title": record.get("title", ""),
            "status": IDLE | (record.get("status", 0) & (IS_READ | IS_ARCHIVED)),
            "lifecycle": lifecycle,
            "activeClients": [],
            "chats": summaries,
            "defaultChat": record.get("defaultChat") or summaries[0]["resource"],
            "workingDirectories": [session.cwd.as_uri()],
            "project": {"uri": session.cwd.as_uri(), "displayName": session.cwd.name or str(session.cwd)},
        }
        if record.get("config"):
            state["config"] = record["config"]
        self.host.bus.open(session.uri, "session", state)
        self.sessions[session.uri] = session
        await self.nursery.start(session.run)
        return session

    async def wake(self, uri: str) -> bool:
        """Open a stored session when a client names it; True if it now exists."""
        record = self.dormant.get(uri)
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
        for chat in session.chats.values():
            chat.close()
            self.host.bus.close(chat.uri)
            self.chat_owner.pop(chat.uri, None)
        if session.scope is not None:
            session.scope.cancel()
        self.host.bus.close(session.uri)
        self.sessions.pop(session.uri, None)
        self.store.delete(session.uri)

    def sync_summary(self, chat: Chat) -> None:
        """Keep the session's catalogue row of ``chat``, and the root catalogue
        row of its session, in step with the chat's own state. Only a row that
        actually moved is sent: a summary re-sent per token is a list redrawn
        per token."""
        session = chat.session
        state = chat.state()
        session_state = session.state()
        row = next((c for c in session_state["chats"] if c["resource"] == chat.uri), None)
        if row is None:
            return
        changes = {k: state[k] for k in ("title", "status", "modifiedAt") if k in state and row.get(k) != state[k]}
        if row.get("activity") != state.get("activity"):
            changes["activity"] = state.get("activity")
        changes = {k: v for k, v in changes.items() if v is not None}
        if not changes:
            return
        self.host.bus.emit(session.uri, {"type": "session/chatUpdated", "chat": chat.uri, "changes": changes})
        summary = session.summary()
        root_changes = {k: summary[k] for k in ("status", "modifiedAt") if k in summary}
        root_changes["chats"] = summary["chats"]
        self.notify_summary(session, root_changes)

    def notify_summary(self, session: Session, changes: dict[str, Any]) -> None:
        from ahpd.host.session_commands import notify_summary

        notify_summary(self.host, session, changes)

    def count(self) -> int:
        return len(self.sessions) + len(self.dormant)

    def announce_count(self) -> None:
        self.host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": self.count()})

    def new_turn_id(self) -> str:
        return f"turn-{uuid.uuid4().hex[:12]}"
