"""The demo agent's ACP side: sessions, turns, and the requests it makes of the client.

:class:`DemoAgent` implements the agent half of the Agent Client Protocol on
top of the ``agent-client-protocol`` library (asyncio, ``import acp``). What to
do with a prompt is decided by :mod:`ahpd.demo_agent.script` (plain functions);
this module (with its base :class:`~ahpd.demo_agent.actions.Actions`, the
requests a turn makes of the client) carries it out over the wire and keeps
the conversation in a :class:`~ahpd.demo_agent.store.SessionStore`.

How a turn runs. ``session/prompt`` takes the session's lock (a second prompt
waits for the first), stores the user's message, and runs the turn in a task
of its own. ``session/cancel`` cancels that task: whatever the turn was
awaiting (a pause, a permission request, a terminal) is abandoned at once, tool
calls still open are marked ``failed``, and the prompt answers
``stopReason: cancelled``. A permission request answered ``cancelled`` by the
client ends the turn the same way. Whatever part of the reply was streamed is
stored, so ``session/load`` replays what the client saw.

Order on the wire. Every update and request of a turn is sent from the turn's
one task, awaited one after the other, so they leave in order. The
``available_commands_update`` that follows ``session/new`` is sent from a task
started by the handler: it can only run once the handler has returned, by
which time the library has queued the response (it queues without yielding),
so the client learns the session id before any update for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.meta import AGENT_METHODS
from acp.schema import (
    AgentCapabilities,
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AvailableCommand,
    AvailableCommandInput,
    AvailableCommandsUpdate,
    ClientCapabilities,
    CloseSessionResponse,
    CurrentModeUpdate,
    DeleteSessionRequest,
    DeleteSessionResponse,
    EmbeddedResourceContentBlock,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PlanEntry,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    ResumeSessionResponse,
    SessionAdditionalDirectoriesCapabilities,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionDeleteCapabilities,
    SessionInfo,
    SessionInfoUpdate,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    TextContentBlock,
    UnstructuredCommandInput,
    Usage,
    UserMessageChunk,
)
from acp.utils import normalize_result

from ahpd import __version__
from ahpd.demo_agent import mcp_calls
from ahpd.demo_agent.actions import Actions, LiveSession, TurnCancelled, new_call_id
from ahpd.demo_agent import script as sc
from ahpd.demo_agent import settings as st
from ahpd.demo_agent.store import Message, SessionStore, new_id, now, valid_session_id

log = logging.getLogger(__name__)

AGENT_NAME = "ahpd-demo-agent"

#: Session modes: id, name, description. ``auto`` runs tools (the demo tool, ``write``,
#: ``run``) without asking.
MODES: tuple[tuple[str, str, str], ...] = (
    ("default", "Default", "Ask before the demo tool, a write or a command runs"),
    ("auto", "Auto", "Run tools, writes and commands without asking"),
)
DEFAULT_MODE = "default"

LIST_PAGE_SIZE = 50

SESSION_NOT_FOUND = -32002  # ACP's "resource not found"


def prompt_text(blocks: list[Any]) -> str:
    """The prompt as one string: text as is, other content blocks as short markers."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            parts.append(f" [{block.name}]({block.uri}) ")
        elif isinstance(block, EmbeddedResourceContentBlock):
            parts.append(f" [{block.resource.uri}] ")
        else:
            parts.append(f" [{getattr(block, 'type', 'content')}] ")
    return "".join(parts).strip()


def not_found(session_id: str, details: str = "no such session") -> RequestError:
    return RequestError(SESSION_NOT_FOUND, "Resource not found", {"sessionId": session_id, "details": details})


def route_session_delete(conn: Any, agent: DemoAgent) -> bool:
    """Route ``session/delete`` to ``agent.delete_session``; ``False`` if that cannot be done.

    acp 0.12 knows ``session/delete`` (the method name, ``DeleteSessionRequest``
    and the ``sessionCapabilities.delete`` flag) but its agent router does not
    route it, so it would answer "method not found". The router is reached
    through the connection's private attributes; if they are not what this
    version has, delete is simply not offered.
    """
    try:
        from acp.router import MessageRouter

        router = conn._conn._handler
        if not isinstance(router, MessageRouter):
            return False
        router.route_request(
            AGENT_METHODS["session_delete"],
            DeleteSessionRequest,
            agent,
            "delete_session",
            adapt_result=normalize_result,
        )
    except Exception:  # noqa: BLE001 - the library's insides may differ: then delete is not offered  # pragma: no cover
        log.debug("cannot route session/delete", exc_info=True)
        return False
    return True


class DemoAgent(Actions):
    """A deterministic ACP agent; see the package docstring for what it does."""

    def __init__(self, store: SessionStore, *, slow_delay: float = sc.SLOW_DELAY_SECONDS) -> None:
        self._store = store
        self._slow_delay = slow_delay
        self._conn: Any = None
        self._client = ClientCapabilities()
        self._sessions: dict[str, LiveSession] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._delete_routed = False
        #: Model, thinking level and directories, per session id (see ``settings``).
        self._settings: dict[str, st.Settings] = {}

    # -- connection and handshake ---------------------------------------------------------

    def on_connect(self, conn: Any) -> None:
        self._conn = conn
        self._delete_routed = route_session_delete(conn, self)

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        self._client = client_capabilities or ClientCapabilities()
        if client_info is not None:
            log.info("client %s %s, protocol version %s", client_info.name, client_info.version, protocol_version)
        sessions = SessionCapabilities(
            list=SessionListCapabilities(),
            resume=SessionResumeCapabilities(),
            close=SessionCloseCapabilities(),
            additional_directories=SessionAdditionalDirectoriesCapabilities(),
        )
        if self._delete_routed:
            sessions.delete = SessionDeleteCapabilities()
        return InitializeResponse(
            # Only version 1 exists; a client asking for another gets ours and decides.
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(image=False, audio=False, embedded_context=True),
                mcp_capabilities=McpCapabilities(http=False, sse=False),
                session_capabilities=sessions,
            ),
            auth_methods=[],
            agent_info=Implementation(name=AGENT_NAME, title="ahpd demo agent", version=__version__),
        )

    # -- session lifecycle ----------------------------------------------------------------

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        _require_absolute(cwd)
        session = LiveSession(self._store.create(cwd))
        session.mcp_servers = list(mcp_servers or [])
        self._sessions[session.id] = session
        self._soon(self._announce(session.id))
        settings = self._settings_of(session.id, additional_directories)
        return NewSessionResponse(
            session_id=session.id, modes=_modes(session.record.mode), config_options=st.options(settings)
        )

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        session = self._open(session_id, cwd)
        session.mcp_servers = list(mcp_servers or [])
        for message in list(session.record.messages):
            chunk: UserMessageChunk | AgentMessageChunk
            if message.role == "user":
                chunk = UserMessageChunk(
                    session_update="user_message_chunk", content=text_block(message.text), message_id=message.id
                )
            else:
                chunk = AgentMessageChunk(
                    session_update="agent_message_chunk", content=text_block(message.text), message_id=message.id
                )
            await self._update(session.id, chunk)
        await self._announce(session.id)
        settings = self._settings_of(session.id, additional_directories)
        return LoadSessionResponse(modes=_modes(session.record.mode), config_options=st.options(settings))

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        session = self._open(session_id, cwd)
        session.mcp_servers = list(mcp_servers or [])
        await self._announce(session.id)
        settings = self._settings_of(session.id, additional_directories)
        return ResumeSessionResponse(modes=_modes(session.record.mode), config_options=st.options(settings))

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        if cwd is not None:
            _require_absolute(cwd)
        start = 0
        if cursor is not None:
            if not cursor.isdigit():
                raise RequestError.invalid_params({"details": f"invalid cursor {cursor!r}"})
            start = int(cursor)
        records = self._store.all(cwd)
        page = records[start : start + LIST_PAGE_SIZE]
        more = start + LIST_PAGE_SIZE < len(records)
        return ListSessionsResponse(
            sessions=[
                SessionInfo(session_id=r.session_id, cwd=r.cwd, title=r.title, updated_at=r.updated_at) for r in page
            ],
            next_cursor=str(start + LIST_PAGE_SIZE) if more else None,
        )

    async def delete_session(self, session_id: str, **kwargs: Any) -> DeleteSessionResponse:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.deleted = True
            self._cancel_turn(session)
        if not self._store.delete(session_id) and session is None:
            raise not_found(session_id)
        return DeleteSessionResponse()

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._cancel_turn(session)
        elif self._store.get(session_id) is None:
            raise not_found(session_id)
        return CloseSessionResponse()

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse:
        session = self._active(session_id)
        if mode_id not in {mode for mode, _, _ in MODES}:
            raise RequestError.invalid_params({"details": f"unknown mode {mode_id!r}", "modeId": mode_id})
        session.record.mode = mode_id
        self._save(session)
        await self._update(session.id, CurrentModeUpdate(session_update="current_mode_update", current_mode_id=mode_id))
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        session = self._active(session_id)
        settings = self._settings_of(session.id)
        refused = st.set_option(settings, config_id, value)
        if refused is not None:
            raise RequestError.invalid_params({"details": refused, "configId": config_id})
        return SetSessionConfigOptionResponse(config_options=st.options(settings))

    def _settings_of(self, session_id: str, additional: list[str] | None = None) -> st.Settings:
        settings = self._settings.setdefault(session_id, st.Settings())
        if additional is not None:
            settings.additional = list(additional)
        return settings

    async def _before_turn(self, session: LiveSession, text: str) -> None:
        """The settings' trigger words (``mode <id>``, ``settings``)."""
        mode = st.mode_asked(text)
        if mode is not None and mode in {m for m, _, _ in MODES} and mode != session.record.mode:
            session.record.mode = mode
            self._save(session)
            await self._update(
                session.id, CurrentModeUpdate(session_update="current_mode_update", current_mode_id=mode)
            )
        if st.settings_asked(text):
            line = st.describe(self._settings_of(session.id), session.record.mode, session.record.cwd)
            await self._update(
                session.id,
                AgentMessageChunk(session_update="agent_message_chunk", content=text_block(line), message_id=new_id()),
            )

    # -- turns ----------------------------------------------------------------------------

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._active(session_id)
        text = prompt_text(prompt)
        async with session.lock:
            new_title = session.record.title is None
            if new_title:
                session.record.title = sc.title_of(text) or "(empty prompt)"
            session.record.messages.append(Message("user", text))
            self._save(session)
            await self._before_turn(session, text)
            turn = asyncio.get_running_loop().create_task(self._turn(session, text, announce_title=new_title))
            session.turn = turn
            try:
                await asyncio.wait({turn})
            except asyncio.CancelledError:  # the connection is going away
                turn.cancel()
                raise
            finally:
                session.turn = None
        if turn.cancelled() or isinstance(turn.exception(), TurnCancelled):
            return PromptResponse(stop_reason="cancelled")
        return turn.result()  # or raises the turn's error, e.g. for "fail"

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            self._cancel_turn(session)

    async def _turn(self, session: LiveSession, text: str, *, announce_title: bool) -> PromptResponse:
        reply_id = new_id()
        sent: list[str] = []
        try:
            if mcp_calls.is_call(text):
                return await mcp_calls.turn(self, session, text, new_call_id(), reply_id, sent)
            return await self._play(session, sc.parse(text), reply_id, sent, announce_title)
        finally:
            if sent:
                session.record.messages.append(Message("agent", "".join(sent), id=reply_id))
            self._save(session)

    async def _play(
        self, session: LiveSession, script: sc.Script, reply_id: str, sent: list[str], announce_title: bool
    ) -> PromptResponse:
        sid = session.id
        if announce_title:
            info = SessionInfoUpdate(
                session_update="session_info_update", title=session.record.title, updated_at=session.record.updated_at
            )
            await self._update(sid, info)
        if script.plan:
            await self._plan(sid, 0)
        thinking = sc.thoughts(script)
        thought_id = new_id()
        for piece in thinking:
            thought = AgentThoughtChunk(
                session_update="agent_thought_chunk", content=text_block(piece), message_id=thought_id
            )
            await self._update(sid, thought)
        if script.fail:
            raise RequestError(-32603, "the demo agent was asked to fail", {"trigger": "fail"})
        if script.plan:
            await self._plan(sid, 1)
        results = [await self._act(session, action) for action in script.actions]
        if script.plan:
            await self._plan(sid, 2)
        reply = sc.reply(script, results)
        pieces = sc.even_chunks(reply, sc.SLOW_CHUNKS) if script.slow else sc.chunks(reply)
        for piece in pieces:
            if script.slow:
                await asyncio.sleep(self._slow_delay)
            message = AgentMessageChunk(
                session_update="agent_message_chunk", content=text_block(piece), message_id=reply_id
            )
            await self._update(sid, message)
            sent.append(piece)
        if script.plan:
            await self._plan(sid, 3)
        thought_words = sc.count_words(*thinking)
        usage = Usage(
            input_tokens=sc.count_words(script.prompt),
            output_tokens=sc.count_words(reply),
            thought_tokens=thought_words,
            total_tokens=sc.count_words(script.prompt, reply) + thought_words,
        )
        return PromptResponse(stop_reason="end_turn", usage=usage)

    async def _plan(self, session_id: str, stage: int) -> None:
        entries = [
            PlanEntry(content=step, priority="medium", status=status)
            for step, status in zip(sc.PLAN_STEPS, sc.plan_statuses(stage), strict=True)
        ]
        await self._update(session_id, AgentPlanUpdate(session_update="plan", entries=entries))

    # -- helpers --------------------------------------------------------------------------

    async def _announce(self, session_id: str) -> None:
        """Tell the client the slash commands (after ``session/new``, ``load``, ``resume``)."""
        await asyncio.sleep(0)
        commands = [
            AvailableCommand(
                name=name,
                description=description,
                input=AvailableCommandInput(UnstructuredCommandInput(hint=hint)) if hint else None,
            )
            for name, description, hint in sc.SLASH_COMMANDS
        ]
        if session_id in self._sessions:
            await self._update(
                session_id,
                AvailableCommandsUpdate(session_update="available_commands_update", available_commands=commands),
            )

    def _open(self, session_id: str, cwd: str) -> LiveSession:
        """The session for ``session/load`` or ``session/resume``, from memory or disk."""
        _require_absolute(cwd)
        session = self._sessions.get(session_id)
        if session is None:
            record = self._store.get(session_id) if valid_session_id(session_id) else None
            if record is None:
                raise not_found(session_id)
            session = self._sessions[session_id] = LiveSession(record)
        if session.record.cwd != cwd:
            session.record.cwd = cwd
            self._save(session)
        return session

    def _active(self, session_id: str) -> LiveSession:
        session = self._sessions.get(session_id)
        if session is not None:
            return session
        if valid_session_id(session_id) and self._store.get(session_id) is not None:
            raise not_found(session_id, "session is not loaded; call session/load or session/resume first")
        raise not_found(session_id)

    def _save(self, session: LiveSession) -> None:
        if session.deleted:
            return
        session.record.updated_at = now()
        try:
            self._store.save(session.record)
        except OSError as exc:
            log.warning("cannot save session %s: %s", session.id, exc)

    def _cancel_turn(self, session: LiveSession) -> None:
        if session.turn is not None and not session.turn.done():
            session.turn.cancel()

    def _soon(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` after the current handler has answered."""

        async def guarded() -> None:
            try:
                await coro
            except ConnectionError:
                log.debug("connection closed before a deferred update was sent")
            except Exception:  # noqa: BLE001 - it runs after its handler answered: nobody else would see it fail
                log.exception("deferred update failed")

        task = asyncio.get_running_loop().create_task(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _modes(current: str) -> SessionModeState:
    return SessionModeState(
        current_mode_id=current,
        available_modes=[SessionMode(id=i, name=n, description=d) for i, n, d in MODES],
    )


def _require_absolute(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise RequestError.invalid_params({"details": f"cwd must be an absolute path, not {cwd!r}"})
