"""The demo agent's ACP side: sessions, turns, and the requests it makes of the client.

:class:`DemoAgent` implements the agent half of the Agent Client Protocol on
top of the ``agent-client-protocol`` library (asyncio, ``import acp``). What to
do with a prompt is decided by :mod:`ahpd.demo_agent.script` (plain functions);
this module carries it out over the wire and keeps the conversation in a
:class:`~ahpd.demo_agent.store.SessionStore`.

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
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from acp import PROTOCOL_VERSION, RequestError, text_block, tool_content, tool_diff_content, tool_terminal_ref
from acp.helpers import start_tool_call, update_tool_call
from acp.meta import AGENT_METHODS
from acp.schema import (
    AcceptElicitationResponse,
    AgentCapabilities,
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AvailableCommand,
    AvailableCommandInput,
    AvailableCommandsUpdate,
    CancelElicitationResponse,
    ClientCapabilities,
    CloseSessionResponse,
    CurrentModeUpdate,
    DeclineElicitationResponse,
    DeleteSessionRequest,
    DeleteSessionResponse,
    DeniedOutcome,
    ElicitationFormSessionMode,
    ElicitationSchema,
    ElicitationStringPropertySchema,
    EmbeddedResourceContentBlock,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
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
    ToolCallLocation,
    ToolCallStart,
    ToolCallUpdate,
    UnstructuredCommandInput,
    Usage,
    UserMessageChunk,
)
from acp.utils import normalize_result

from ahpd import __version__
from ahpd.demo_agent import mcp_calls
from ahpd.demo_agent import script as sc
from ahpd.demo_agent import settings as st
from ahpd.demo_agent.store import Message, SessionRecord, SessionStore, new_id, now, valid_session_id

log = logging.getLogger(__name__)

T = TypeVar("T")

AGENT_NAME = "ahpd-demo-agent"

#: Session modes: id, name, description. ``auto`` runs tools (the demo tool, ``write``,
#: ``run``) without asking.
MODES: tuple[tuple[str, str, str], ...] = (
    ("default", "Default", "Ask before the demo tool, a write or a command runs"),
    ("auto", "Auto", "Run tools, writes and commands without asking"),
)
DEFAULT_MODE = "default"

#: Permission options offered before a tool acts (ACP option kinds).
ALLOW_ONCE = PermissionOption(option_id="allow-once", name="Allow once", kind="allow_once")
REJECT_ONCE = PermissionOption(option_id="reject-once", name="Reject", kind="reject_once")

LIST_PAGE_SIZE = 50
TERMINAL_OUTPUT_LIMIT = 64 * 1024
CLEANUP_TIMEOUT = 5.0

SESSION_NOT_FOUND = -32002  # ACP's "resource not found"


class TurnCancelled(Exception):
    """The client answered a request of the turn with ``cancelled``."""


@dataclass(eq=False)
class _Session:
    record: SessionRecord
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    turn: asyncio.Task[PromptResponse] | None = None
    deleted: bool = False
    #: The MCP servers the client handed over (``mcp`` prompts call them: ``mcp_calls``).
    mcp_servers: list[Any] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.record.session_id


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
    except Exception:  # pragma: no cover - depends on the library's insides
        log.debug("cannot route session/delete", exc_info=True)
        return False
    return True


class DemoAgent:
    """A deterministic ACP agent; see the package docstring for what it does."""

    def __init__(self, store: SessionStore, *, slow_delay: float = sc.SLOW_DELAY_SECONDS) -> None:
        self._store = store
        self._slow_delay = slow_delay
        self._conn: Any = None
        self._client = ClientCapabilities()
        self._sessions: dict[str, _Session] = {}
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
        session = _Session(self._store.create(cwd))
        session.mcp_servers = list(mcp_servers or [])
        self._sessions[session.id] = session
        self._soon(self._announce(session.id))
        settings = self._settings_of(session.id, additional_directories)
        return NewSessionResponse(session_id=session.id, modes=_modes(session.record.mode),
                                  config_options=st.options(settings))

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
            chunk_type = UserMessageChunk if message.role == "user" else AgentMessageChunk
            update_name = "user_message_chunk" if message.role == "user" else "agent_message_chunk"
            await self._update(
                session.id,
                chunk_type(session_update=update_name, content=text_block(message.text), message_id=message.id),
            )
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

    async def _before_turn(self, session: _Session, text: str) -> None:
        """The settings' trigger words (``mode <id>``, ``settings``)."""
        mode = st.mode_asked(text)
        if mode is not None and mode in {m for m, _, _ in MODES} and mode != session.record.mode:
            session.record.mode = mode
            self._save(session)
            await self._update(session.id, CurrentModeUpdate(session_update="current_mode_update",
                                                             current_mode_id=mode))
        if st.settings_asked(text):
            line = st.describe(self._settings_of(session.id), session.record.mode, session.record.cwd)
            await self._update(session.id, AgentMessageChunk(session_update="agent_message_chunk",
                                                             content=text_block(line), message_id=new_id()))

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

    async def _turn(self, session: _Session, text: str, *, announce_title: bool) -> PromptResponse:
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
        self, session: _Session, script: sc.Script, reply_id: str, sent: list[str], announce_title: bool
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
            PlanEntry(content=step, priority="medium", status=status)  # type: ignore[arg-type]
            for step, status in zip(sc.PLAN_STEPS, sc.plan_statuses(stage))
        ]
        await self._update(session_id, AgentPlanUpdate(session_update="plan", entries=entries))

    # -- actions --------------------------------------------------------------------------

    async def _act(self, session: _Session, action: sc.Action) -> str:
        if action.kind == "permission":
            return await self._demo_tool(session)
        if action.kind == "read":
            return await self._read(session, action.target)
        if action.kind == "write":
            return await self._write(session, action.target, action.text)
        if action.kind == "run":
            return await self._run(session, action.target)
        return await self._ask(session)

    async def _demo_tool(self, session: _Session) -> str:
        sid = session.id
        title = "Run the demo tool"
        raw_input = {"command": "demo-tool --greet", "mode": session.record.mode}
        start = start_tool_call(new_call_id(), title, kind="execute", status="pending", raw_input=raw_input)
        async with self._tool_call(sid, start) as call_id:
            if not await self._allowed(session, start):
                await self._denied(sid, call_id, "the demo tool did not run")
                return "You rejected the demo tool, so it did not run."
            how = "ran without asking (auto mode)" if session.record.mode == "auto" else "ran with your permission"
            await self._update(sid, update_tool_call(call_id, status="in_progress"))
            output = "hello from the demo tool"
            await self._update(
                sid,
                update_tool_call(
                    call_id,
                    status="completed",
                    content=[tool_content(text_block(output))],
                    raw_output={"exitCode": 0, "stdout": output},
                ),
            )
        return f"The demo tool {how}: “{output}”."

    async def _allowed(self, session: _Session, start: ToolCallStart) -> bool:
        """Ask the client before a tool that acts (the demo tool, ``write``, ``run``).

        In ``auto`` mode nothing is asked. A request answered ``cancelled``
        ends the turn (:class:`TurnCancelled`).
        """
        if session.record.mode == "auto":
            return True
        request = ToolCallUpdate(
            tool_call_id=start.tool_call_id,
            title=start.title,
            kind=start.kind,
            status="pending",
            raw_input=start.raw_input,
            content=start.content,
            locations=start.locations,
        )
        answer = await self._conn.request_permission(
            session_id=session.id, tool_call=request, options=[ALLOW_ONCE, REJECT_ONCE]
        )
        if isinstance(answer.outcome, DeniedOutcome):
            raise TurnCancelled()
        return answer.outcome.option_id == ALLOW_ONCE.option_id

    async def _denied(self, session_id: str, call_id: str, what: str) -> None:
        await self._update(
            session_id,
            update_tool_call(
                call_id,
                status="failed",
                content=[tool_content(text_block(f"Permission denied: {what}."))],
                raw_output={"denied": True},
            ),
        )

    async def _read(self, session: _Session, target: str) -> str:
        if not (self._client.fs and self._client.fs.read_text_file):
            return f"I cannot read `{target}`: the client did not offer `fs/read_text_file`."
        sid = session.id
        path = _resolve(session.record.cwd, target)
        start = start_tool_call(
            new_call_id(),
            f"Read {target}",
            kind="read",
            status="pending",
            locations=[ToolCallLocation(path=path)],
            raw_input={"path": path},
        )
        async with self._tool_call(sid, start) as call_id:
            await self._update(sid, update_tool_call(call_id, status="in_progress"))
            try:
                answer = await self._conn.read_text_file(session_id=sid, path=path)
            except RequestError as exc:
                await self._failed(sid, call_id, f"Could not read {path}: {exc}")
                return f"I could not read `{target}`: {exc}."
            content = answer.content
            shown = "\n".join(content.splitlines()[:20])
            await self._update(
                sid, update_tool_call(call_id, status="completed", content=[tool_content(text_block(shown))])
            )
        lines = content.splitlines()
        if not lines:
            return f"`{target}` is empty."
        return f"The first line of `{target}` is: “{lines[0]}”."

    async def _write(self, session: _Session, target: str, text: str) -> str:
        if not (self._client.fs and self._client.fs.write_text_file):
            return f"I cannot write `{target}`: the client did not offer `fs/write_text_file`."
        sid = session.id
        path = _resolve(session.record.cwd, target)
        new_text = text + "\n"
        old_text = None
        if self._client.fs.read_text_file:
            with contextlib.suppress(RequestError):  # a new file
                old_text = (await self._conn.read_text_file(session_id=sid, path=path)).content
        start = start_tool_call(
            new_call_id(),
            f"Write {target}",
            kind="edit",
            status="pending",
            content=[tool_diff_content(path, new_text, old_text)],
            locations=[ToolCallLocation(path=path)],
            raw_input={"path": path, "content": new_text},
        )
        async with self._tool_call(sid, start) as call_id:
            if not await self._allowed(session, start):
                await self._denied(sid, call_id, f"{path} was not written")
                return f"You rejected writing `{target}`, so it was not written."
            await self._update(sid, update_tool_call(call_id, status="in_progress"))
            try:
                await self._conn.write_text_file(session_id=sid, path=path, content=new_text)
            except RequestError as exc:
                await self._failed(sid, call_id, f"Could not write {path}: {exc}")
                return f"I could not write `{target}`: {exc}."
            await self._update(sid, update_tool_call(call_id, status="completed"))
        verb = "Created" if old_text is None else "Updated"
        return f"{verb} `{target}` ({len(new_text)} characters)."

    async def _run(self, session: _Session, command: str) -> str:
        if not self._client.terminal:
            return f"I cannot run `{command}`: the client did not offer `terminal/*`."
        sid = session.id
        cwd = session.record.cwd
        start = start_tool_call(
            new_call_id(),
            f"Run {command}",
            kind="execute",
            status="pending",
            raw_input={"command": command, "cwd": cwd},
        )
        async with self._tool_call(sid, start) as call_id:
            if not await self._allowed(session, start):
                await self._denied(sid, call_id, "the command did not run")
                return f"You rejected running `{command}`, so it did not run."
            try:
                created = await self._conn.create_terminal(
                    session_id=sid,
                    command="sh",
                    args=["-c", command],
                    cwd=cwd,
                    output_byte_limit=TERMINAL_OUTPUT_LIMIT,
                )
            except RequestError as exc:
                await self._failed(sid, call_id, f"Could not start the command: {exc}")
                return f"I could not run `{command}`: {exc}."
            terminal_id = created.terminal_id
            exited = False
            try:
                await self._update(
                    sid, update_tool_call(call_id, status="in_progress", content=[tool_terminal_ref(terminal_id)])
                )
                status = await self._conn.wait_for_terminal_exit(session_id=sid, terminal_id=terminal_id)
                exited = True
                output = await self._conn.terminal_output(session_id=sid, terminal_id=terminal_id)
            except RequestError as exc:
                await self._failed(sid, call_id, f"The terminal failed: {exc}")
                return f"I could not finish running `{command}`: {exc}."
            finally:
                if not exited:
                    await _best_effort(self._conn.kill_terminal(session_id=sid, terminal_id=terminal_id))
                await _best_effort(self._conn.release_terminal(session_id=sid, terminal_id=terminal_id))
            await self._update(
                sid,
                update_tool_call(
                    call_id,
                    status="completed" if status.exit_code == 0 else "failed",
                    raw_output={
                        "exitCode": status.exit_code,
                        "signal": status.signal,
                        "output": output.output,
                        "truncated": output.truncated,
                    },
                ),
            )
        if status.exit_code is None:
            result = f"`{command}` was stopped by signal {status.signal}."
        else:
            result = f"`{command}` exited with code {status.exit_code}."
        first = output.output.strip().splitlines()[:1]
        if first:
            result += f" Its output begins: “{first[0]}”."
        return result

    async def _ask(self, session: _Session) -> str:
        sid = session.id
        elicitation = self._client.elicitation
        if elicitation is not None and elicitation.form is not None:
            schema = ElicitationSchema(
                type="object",
                title="A question from the demo agent",
                properties={
                    "answer": ElicitationStringPropertySchema(type="string", title="Your answer", enum=list(sc.ANSWERS))
                },
                required=["answer"],
            )
            try:
                answer = await self._conn.create_elicitation(
                    message=sc.QUESTION, mode=ElicitationFormSessionMode(session_id=sid, requested_schema=schema)
                )
            except RequestError as exc:
                if exc.code != -32601:  # anything but "method not found"
                    return f"I could not ask you: {exc}."
                log.info("the client offered elicitation but does not answer it; asking through a permission request")
            else:
                if isinstance(answer, AcceptElicitationResponse):
                    value = (answer.content or {}).get("answer")
                    return f"I asked “{sc.QUESTION}” and you answered **{value}**."
                if isinstance(answer, DeclineElicitationResponse):
                    return f"I asked “{sc.QUESTION}” and you declined to answer."
                if isinstance(answer, CancelElicitationResponse):
                    return f"I asked “{sc.QUESTION}” and you dismissed the question."
                return f"I asked “{sc.QUESTION}” and the client answered “{answer.action}”."
        return await self._ask_by_permission(session)

    async def _ask_by_permission(self, session: _Session) -> str:
        """``ask`` for clients without elicitation: a permission request with yes/no options."""
        sid = session.id
        title = f"Question: {sc.QUESTION}"
        yes = PermissionOption(option_id=sc.ANSWERS[0], name="Yes", kind="allow_once")
        no = PermissionOption(option_id=sc.ANSWERS[1], name="No", kind="reject_once")
        start = start_tool_call(
            new_call_id(), title, kind="other", status="pending", raw_input={"question": sc.QUESTION}
        )
        async with self._tool_call(sid, start) as call_id:
            request = ToolCallUpdate(tool_call_id=call_id, title=title, kind="other", status="pending")
            answer = await self._conn.request_permission(session_id=sid, tool_call=request, options=[yes, no])
            if isinstance(answer.outcome, DeniedOutcome):
                raise TurnCancelled()
            value = answer.outcome.option_id
            await self._update(
                sid,
                update_tool_call(
                    call_id, status="completed", content=[tool_content(text_block(f"Answer: {value}"))]
                ),
            )
        return f"I asked “{sc.QUESTION}” and you answered **{value}**."

    # -- helpers --------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _tool_call(self, session_id: str, start: ToolCallStart) -> AsyncIterator[str]:
        """Announce a tool call; if the turn is cancelled inside, mark it ``failed``."""
        await self._update(session_id, start)
        try:
            yield start.tool_call_id
        except (asyncio.CancelledError, TurnCancelled):
            await _best_effort(
                self._update(
                    session_id,
                    update_tool_call(
                        start.tool_call_id, status="failed", content=[tool_content(text_block("Cancelled."))]
                    ),
                )
            )
            raise

    async def _failed(self, session_id: str, call_id: str, message: str) -> None:
        await self._update(
            session_id, update_tool_call(call_id, status="failed", content=[tool_content(text_block(message))])
        )

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

    async def _update(self, session_id: str, update: Any) -> None:
        await self._conn.session_update(session_id=session_id, update=update)

    def _open(self, session_id: str, cwd: str) -> _Session:
        """The session for ``session/load`` or ``session/resume``, from memory or disk."""
        _require_absolute(cwd)
        session = self._sessions.get(session_id)
        if session is None:
            record = self._store.get(session_id) if valid_session_id(session_id) else None
            if record is None:
                raise not_found(session_id)
            session = self._sessions[session_id] = _Session(record)
        if session.record.cwd != cwd:
            session.record.cwd = cwd
            self._save(session)
        return session

    def _active(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is not None:
            return session
        if valid_session_id(session_id) and self._store.get(session_id) is not None:
            raise not_found(session_id, "session is not loaded; call session/load or session/resume first")
        raise not_found(session_id)

    def _save(self, session: _Session) -> None:
        if session.deleted:
            return
        session.record.updated_at = now()
        try:
            self._store.save(session.record)
        except OSError as exc:
            log.warning("cannot save session %s: %s", session.id, exc)

    def _cancel_turn(self, session: _Session) -> None:
        if session.turn is not None and not session.turn.done():
            session.turn.cancel()

    def _soon(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` after the current handler has answered."""

        async def guarded() -> None:
            try:
                await coro
            except ConnectionError:
                log.debug("connection closed before a deferred update was sent")
            except Exception:
                log.exception("deferred update failed")

        task = asyncio.get_running_loop().create_task(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def new_call_id() -> str:
    return "call_" + new_id()[:16]


def _modes(current: str) -> SessionModeState:
    return SessionModeState(
        current_mode_id=current,
        available_modes=[SessionMode(id=i, name=n, description=d) for i, n, d in MODES],
    )


def _require_absolute(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise RequestError.invalid_params({"details": f"cwd must be an absolute path, not {cwd!r}"})


def _resolve(cwd: str, target: str) -> str:
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(target)))


async def _best_effort(awaitable: Awaitable[T]) -> T | None:
    """Await a clean-up request, giving up quietly on errors or after a few seconds."""
    try:
        return await asyncio.wait_for(awaitable, CLEANUP_TIMEOUT)
    except Exception as exc:
        log.debug("clean-up request failed: %s", exc)
        return None
