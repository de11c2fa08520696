"""A chat: one channel (``ChatState``) and one agent conversation.

A chat's agent process starts at its first turn (never at
``createSession``), runs in its session's nursery under a supervisor, and
one that has had no turn for ``agentIdleTimeout`` seconds is stopped; the
next turn resumes the conversation by its own id (ACP ``session/load``,
Claude Code ``--resume``), or, for an ACP agent that cannot load one,
starts a new conversation handed the transcript so far. Clients see none
of it. What the agent says goes to the turn machinery, and what a feature
gives the agent at start, through ``SessionHooks``: the chat knows neither.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ahpd.backends.port import BackendError, Conversation
from ahpd.host.kernel.auth import token_for
from ahpd.host.kernel.supervise import run_supervised, spawn, supervised
from ahpd.host.sessions.common import default_chat_uri, session_id, transcript

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.chats.turns import TurnRunner
    from ahpd.host.sessions.chats.workers import Worker
    from ahpd.host.sessions.hooks import SessionHooks
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")


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
        self.workers: dict[str, Worker] = {}
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
        #: When its agent last had a turn (trio time), the oldest stopped first at ``agentProcessLimit``.
        self._last_turn = 0.0

    @property
    def host(self) -> Host:
        return self.session.manager.host

    @property
    def hooks(self) -> SessionHooks:
        return self.session.manager.hooks

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
        if await self._make_room():
            return await self.ensure_agent()  # time passed: look again
        self._starting = trio.Event()
        try:
            try:
                self.conversation = await self.session.nursery.start(
                    functools.partial(
                        run_supervised, f"the agent of {self.uri}", self._run_agent, report=self._agent_failed
                    )
                )
            except BackendError as err:
                if err.error_type != "AgentError":  # ChatClosed, AgentLimitReached: said as they are
                    raise
                # Named apart from a turn that failed, so a client can tell them (`ahpd chat`: status 8).
                said = err.message
                if "did not start" not in said:
                    said = f"the {self.session.provider} agent did not start: {said}"
                raise BackendError(said, "AgentDidNotStart") from None
            self.backend_id = self.conversation.backend_id
            for started in self.hooks.agent_started:
                started(self.session, self.conversation)
            spawn(
                self.session.nursery,
                f"the idle clock of {self.uri}",
                self._stop_when_idle,
                self.conversation,
                self._agent_ended,
            )
            self.session.save()
            return self.conversation
        finally:
            self._starting.set()
            self._starting = None

    async def _make_room(self) -> bool:
        """Hold the host to ``agentProcessLimit`` agent processes: at the
        limit, stop the agent that has had no turn for longest (True: one
        was stopped) or, if every one is busy, refuse with the reason."""
        limit = int(self.host.config("agentProcessLimit"))
        running = [
            chat
            for session in self.session.manager.sessions.values()
            for chat in session.chats.values()
            if chat.conversation is not None or chat._starting is not None
        ]
        if len(running) < limit:
            return False
        idle = [chat for chat in running if chat.conversation is not None and not chat._in_use()]
        if not idle:
            raise BackendError(
                f"{len(running)} agent processes are running, each with a turn, which is this host's limit "
                f"(root config agentProcessLimit {limit}); try again when one has finished",
                "AgentLimitReached",
            )
        oldest = min(idle, key=lambda chat: chat._last_turn)
        log.info("%s: %d agents run, the limit; stopping the idle one of %s first", self.uri, len(running), oldest.uri)
        await oldest.stop_agent()
        return True

    async def _run_agent(self, task_status: trio.TaskStatus[Conversation]) -> None:
        """The agent's task, supervised once it started: an agent that fails
        or goes away on its own ends its running turn with ``chat/error``,
        and the next turn starts it again."""
        ended = self._agent_ended = trio.Event()
        mine: Conversation | None = None
        on_its_own = False

        class Started(trio.TaskStatus[Conversation]):
            """The backend's ``task_status``: the conversation it started is
            noted as this task's before the nursery is told."""

            def started(self, value: Conversation | None = None) -> None:
                nonlocal mine
                if value is None:
                    raise TypeError("a backend says it started with the conversation it started")
                mine = value
                task_status.started(value)

        try:
            with trio.CancelScope() as scope:
                self.scope = scope
                await self.session.backend.run_conversation(
                    cwd=self.folder or self.session.cwd,
                    events=self._on_event,
                    resume_id=self.backend_id,
                    task_status=Started(),
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
                for gone in self.hooks.agent_gone:
                    gone(self)
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
        turn = self.turn
        with supervised(
            f"{self.uri}: handling the agent's {type(event).__name__}",
            lambda exc: turn.failed(exc) if turn is not None else None,
        ):
            self.hooks.agent_event(self, event)
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
        self._last_turn = trio.current_time()
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
        log.info(
            "%s: the agent had no turn for %g s; stopping it until the next turn",
            self.uri,
            float(self.host.config("agentIdleTimeout") or 0),
        )
        await self.stop_agent()

    def _resume_by_transcript(self) -> None:
        """An agent that cannot load a conversation starts a new one after
        an idle stop, handed what was said so far with its first prompt."""
        turns = self.session.older_turns.get(self.uri, []) + list(self.state().get("turns", []))
        self.backend_id = None
        if turns:
            self.preamble = "\n\n".join(
                filter(None, [self.preamble, "The conversation so far, for context:\n" + transcript(turns)])
            )
        self.session.save()

    async def stop_agent(self) -> None:
        """End the agent's process and wait until it is gone (and reaped);
        the next turn starts or resumes it again."""
        if self.scope is not None:
            self.scope.cancel()
        await self._agent_ended.wait()

    def _extras(self) -> dict[str, Any]:
        """What a backend that takes it is given beyond the port: the token
        a client lent for the resource it protects; for the first chat of a
        session a client named by a UUID, that id, so the agent keeps the
        conversation under the name the client will ask for; and what each
        feature adds (``SessionHooks.agent_extras``)."""
        accepts = inspect.signature(self.session.backend.run_conversation).parameters
        extras: dict[str, Any] = {}
        if "api_key" in accepts:
            resources = self.session.backend.agent_info().get("protectedResources") or []
            token = next((t for r in resources if (t := token_for(self.lender, r["resource"]))), None)
            if token:
                extras["api_key"] = token
        for contributor in self.hooks.agent_extras:
            extras.update(contributor(self, accepts))
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
