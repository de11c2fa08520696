"""The demo agent's ACP side: sessions, turns, and the requests it makes of the client.

:class:`DemoAgent` implements the agent half of the Agent Client Protocol
(asyncio) with plain dicts on a small JSON-RPC layer of its own
(:mod:`ahpd.demo_agent.rpc`, :mod:`ahpd.demo_agent.shapes`; why not the
``agent-client-protocol`` library: its import cost, see ``rpc``). What to do
with a prompt is decided by :mod:`ahpd.demo_agent.script` (plain functions);
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
which time the connection has written the response (it writes without
yielding), so the client learns the session id before any update for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ahpd import __version__
from ahpd.demo_agent import mcp_calls
from ahpd.demo_agent import script as sc
from ahpd.demo_agent import settings as st
from ahpd.demo_agent.actions import Actions, LiveSession, TurnCancelled, new_call_id
from ahpd.demo_agent.client import Client
from ahpd.demo_agent.rpc import Connection, RequestError
from ahpd.demo_agent.shapes import (
    PROTOCOL_VERSION,
    Capabilities,
    Json,
    available_commands_update,
    current_mode_update,
    message_chunk,
    modes,
    optional,
    params_of,
    plan_update,
    prompt_text,
    required,
    session_info,
    session_info_update,
    usage,
)
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


def not_found(session_id: str, details: str = "no such session") -> RequestError:
    return RequestError(SESSION_NOT_FOUND, "Resource not found", {"sessionId": session_id, "details": details})


class DemoAgent(Actions):
    """A deterministic ACP agent; see the package docstring for what it does."""

    def __init__(self, store: SessionStore, *, slow_delay: float = sc.SLOW_DELAY_SECONDS) -> None:
        self._store = store
        self._slow_delay = slow_delay
        self._client = Capabilities()
        self._sessions: dict[str, LiveSession] = {}
        self._background: set[asyncio.Task[Any]] = set()
        #: Model, thinking level and directories, per session id (see ``settings``).
        self._settings: dict[str, st.Settings] = {}
        #: The requests the agent answers; any other is "method not found".
        self._requests: dict[str, Callable[[Json], Awaitable[Json]]] = {
            "initialize": self.initialize,
            "session/new": self.new_session,
            "session/load": self.load_session,
            "session/resume": self.resume_session,
            "session/list": self.list_sessions,
            "session/delete": self.delete_session,
            "session/close": self.close_session,
            "session/set_mode": self.set_session_mode,
            "session/set_config_option": self.set_config_option,
            "session/prompt": self.prompt,
        }

    # -- connection and handshake ---------------------------------------------------------

    def connect(self, conn: Connection) -> None:
        self._conn = Client(conn)

    async def on_request(self, method: Any, params: Any) -> Json:
        handler = self._requests.get(method)
        if handler is None:
            raise RequestError.method_not_found(method)
        return await handler(params_of(params))

    async def on_notification(self, method: Any, params: Any) -> None:
        if method == "session/cancel":
            await self.cancel(params_of(params))
        elif not (isinstance(method, str) and method.startswith("_")):  # extensions are ignored, as ACP says
            raise RequestError.method_not_found(method)

    async def initialize(self, params: Json) -> Json:
        protocol_version = required(params, "protocolVersion", int)
        self._client = Capabilities(params.get("clientCapabilities"))
        client_info = optional(params, "clientInfo", dict)
        if client_info is not None:
            log.info(
                "client %s %s, protocol version %s",
                client_info.get("name"),
                client_info.get("version"),
                protocol_version,
            )
        return {
            # Only version 1 exists; a client asking for another gets ours and decides.
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": False, "sse": False},
                "sessionCapabilities": {
                    "list": {},
                    "delete": {},
                    "additionalDirectories": {},
                    "resume": {},
                    "close": {},
                },
            },
            "authMethods": [],
            "agentInfo": {"name": AGENT_NAME, "title": "ahpd demo agent", "version": __version__},
        }

    # -- session lifecycle ----------------------------------------------------------------

    async def new_session(self, params: Json) -> Json:
        cwd = required(params, "cwd")
        additional_directories = optional(params, "additionalDirectories", list)
        mcp_servers = required(params, "mcpServers", list)
        _require_absolute(cwd)
        session = LiveSession(self._store.create(cwd))
        session.mcp_servers = list(mcp_servers)
        self._sessions[session.id] = session
        self._soon(self._announce(session.id))
        settings = self._settings_of(session.id, additional_directories)
        return {
            "sessionId": session.id,
            "modes": modes(session.record.mode, MODES),
            "configOptions": st.options(settings),
        }

    async def load_session(self, params: Json) -> Json:
        mcp_servers = required(params, "mcpServers", list)
        cwd = required(params, "cwd")
        additional_directories = optional(params, "additionalDirectories", list)
        session_id = required(params, "sessionId")
        session = self._open(session_id, cwd)
        session.mcp_servers = list(mcp_servers)
        for message in list(session.record.messages):
            kind = "user_message_chunk" if message.role == "user" else "agent_message_chunk"
            await self._update(session.id, message_chunk(kind, message.text, message.id))
        await self._announce(session.id)
        settings = self._settings_of(session.id, additional_directories)
        return {"modes": modes(session.record.mode, MODES), "configOptions": st.options(settings)}

    async def resume_session(self, params: Json) -> Json:
        session_id = required(params, "sessionId")
        cwd = required(params, "cwd")
        additional_directories = optional(params, "additionalDirectories", list)
        mcp_servers = optional(params, "mcpServers", list)
        session = self._open(session_id, cwd)
        session.mcp_servers = list(mcp_servers or [])
        await self._announce(session.id)
        settings = self._settings_of(session.id, additional_directories)
        return {"modes": modes(session.record.mode, MODES), "configOptions": st.options(settings)}

    async def list_sessions(self, params: Json) -> Json:
        cwd = optional(params, "cwd")
        cursor = optional(params, "cursor")
        if cwd is not None:
            _require_absolute(cwd)
        start = 0
        if cursor is not None:
            if not cursor.isdigit():
                raise RequestError.invalid_params({"details": f"invalid cursor {cursor!r}"})
            start = int(cursor)
        records = self._store.all(cwd)
        page = records[start : start + LIST_PAGE_SIZE]
        answer: Json = {"sessions": [session_info(r.session_id, r.cwd, r.title, r.updated_at) for r in page]}
        if start + LIST_PAGE_SIZE < len(records):
            answer["nextCursor"] = str(start + LIST_PAGE_SIZE)
        return answer

    async def delete_session(self, params: Json) -> Json:
        session_id = required(params, "sessionId")
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.deleted = True
            self._cancel_turn(session)
        if not self._store.delete(session_id) and session is None:
            raise not_found(session_id)
        return {}

    async def close_session(self, params: Json) -> Json:
        session_id = required(params, "sessionId")
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._cancel_turn(session)
        elif self._store.get(session_id) is None:
            raise not_found(session_id)
        return {}

    async def set_session_mode(self, params: Json) -> Json:
        session_id = required(params, "sessionId")
        mode_id = required(params, "modeId")
        session = self._active(session_id)
        if mode_id not in {mode for mode, _, _ in MODES}:
            raise RequestError.invalid_params({"details": f"unknown mode {mode_id!r}", "modeId": mode_id})
        session.record.mode = mode_id
        self._save(session)
        await self._update(session.id, current_mode_update(mode_id))
        return {}

    async def set_config_option(self, params: Json) -> Json:
        session_id = required(params, "sessionId")
        config_id = required(params, "configId")
        value = required(params, "value", bool if params.get("type") == "boolean" else str)
        session = self._active(session_id)
        settings = self._settings_of(session.id)
        refused = st.set_option(settings, config_id, value)
        if refused is not None:
            raise RequestError.invalid_params({"details": refused, "configId": config_id})
        return {"configOptions": st.options(settings)}

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
            await self._update(session.id, current_mode_update(mode))
        if st.settings_asked(text):
            line = st.describe(self._settings_of(session.id), session.record.mode, session.record.cwd)
            await self._update(session.id, message_chunk("agent_message_chunk", line, new_id()))

    # -- turns ----------------------------------------------------------------------------

    async def prompt(self, params: Json) -> Json:
        session_id = required(params, "sessionId")
        blocks = required(params, "prompt", list)
        session = self._active(session_id)
        text = prompt_text(blocks)
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
            return {"stopReason": "cancelled"}
        return turn.result()  # or raises the turn's error, e.g. for "fail"

    async def cancel(self, params: Json) -> None:
        session = self._sessions.get(required(params, "sessionId"))
        if session is not None:
            self._cancel_turn(session)

    async def _turn(self, session: LiveSession, text: str, *, announce_title: bool) -> Json:
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
    ) -> Json:
        sid = session.id
        if announce_title:
            await self._update(sid, session_info_update(session.record.title, session.record.updated_at))
        if script.plan:
            await self._plan(sid, 0)
        thinking = sc.thoughts(script)
        thought_id = new_id()
        for piece in thinking:
            await self._update(sid, message_chunk("agent_thought_chunk", piece, thought_id))
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
            await self._update(sid, message_chunk("agent_message_chunk", piece, reply_id))
            sent.append(piece)
        if script.plan:
            await self._plan(sid, 3)
        thought_words = sc.count_words(*thinking)
        return {
            "stopReason": "end_turn",
            "usage": usage(
                input_tokens=sc.count_words(script.prompt),
                output_tokens=sc.count_words(reply),
                thought_tokens=thought_words,
                total_tokens=sc.count_words(script.prompt, reply) + thought_words,
            ),
        }

    async def _plan(self, session_id: str, stage: int) -> None:
        statuses = sc.plan_statuses(stage)
        entries = [(step, "medium", status) for step, status in zip(sc.PLAN_STEPS, statuses, strict=True)]
        await self._update(session_id, plan_update(entries))

    # -- helpers --------------------------------------------------------------------------

    async def _announce(self, session_id: str) -> None:
        """Tell the client the slash commands (after ``session/new``, ``load``, ``resume``)."""
        await asyncio.sleep(0)
        if session_id in self._sessions:
            await self._update(session_id, available_commands_update(sc.SLASH_COMMANDS))

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


def _require_absolute(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise RequestError.invalid_params({"details": f"cwd must be an absolute path, not {cwd!r}"})
