"""Any Agent Client Protocol agent, run as a subprocess: one per conversation.

The ``acp`` library (pydantic models, JSON-RPC over newline-delimited JSON)
is asyncio-only, so each conversation opens its own trio-asyncio loop inside
the chat's nursery. The split of work:

* **trio** owns the process and its pipes (``_acp_process``), the terminals
  (``_acp_terminals``), file access (in a worker thread, ``_acp_files``) and
  the conversation's lifetime: when ``run_conversation`` is cancelled it
  closes the connection, kills the terminals, and ends the agent's process
  group (SIGTERM, a grace period, SIGKILL), reaping everything;
* **asyncio** runs the library's ``Connection`` and our client-side handlers
  (:class:`_Client`). The library runs each incoming message in its own
  asyncio task; a ``session/update`` is handed to the event sink before the
  handler's first ``await``, so the tasks, started in arrival order, hand
  updates over in arrival order.

Trio code calls asyncio with ``aio_as_trio(..., loop=loop)`` (the loop is
named, because the host's tasks that call :class:`AcpConversation` do not
run inside it); asyncio handlers call trio with ``trio_as_aio``. Both
sides run on one thread, so the plain synchronous ``answer_permission`` and
``answer_input`` resolve an asyncio future directly.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

import ahpd
from ahpd.backends import _acp_catalogue, _acp_settings
from ahpd.backends._paths import ignore, scratch_root, working_root
from ahpd.backends.port import (
    BackendError,
    Conversation,
    Event,
    EventSink,
    HistoryTurn,
    InputRequest,
    PermissionOption,
    PermissionRequest,
    PromptResult,
    StoredConversation,
    Update,
    ran_note,
)

if TYPE_CHECKING:
    from acp.connection import Connection
    from acp.schema import InitializeResponse, PromptCapabilities, ToolCallUpdate
    from acp.schema import PermissionOption as AcpPermissionOption

    from ahpd.backends._acp_process import AgentProcess
    from ahpd.backends._acp_terminals import Terminals

log = logging.getLogger("ahpd.backends.acp")


def _load() -> None:
    """Import the ACP library (and pydantic, trio-asyncio) on first use, not
    with this module: they are half of a daemon's start-up, and a daemon
    whose clients never run an ACP agent never needs them. Every way in
    (:meth:`AcpBackend.run_conversation`, ``probe``, ``list_conversations``,
    ``delete_conversation``) calls this first."""
    global trio_asyncio, build_client_router, Connection, RequestError, AGENT_METHODS, PROTOCOL_VERSION
    global ElicitationFormRequestMode, ElicitationFormSessionMode, ElicitationUrlRequestMode
    global ElicitationUrlSessionMode, InitializeResponse, ListSessionsResponse, NewSessionResponse
    global PromptResponse, ValidationError, _acp_files, AgentProcess, Terminals
    global elicitation_content, elicitation_questions, models_from_config, prompt_blocks
    global rpc_error_message, stored_conversations, usage_info, wire
    if "wire" in globals():
        return  # loaded already
    import trio_asyncio
    from acp.client.router import build_client_router
    from acp.connection import Connection
    from acp.exceptions import RequestError
    from acp.meta import AGENT_METHODS, PROTOCOL_VERSION
    from acp.schema import (
        ElicitationFormRequestMode,
        ElicitationFormSessionMode,
        ElicitationUrlRequestMode,
        ElicitationUrlSessionMode,
        InitializeResponse,
        ListSessionsResponse,
        NewSessionResponse,
        PromptResponse,
    )
    from pydantic import ValidationError

    from ahpd.backends import _acp_files
    from ahpd.backends._acp_process import AgentProcess
    from ahpd.backends._acp_terminals import Terminals
    from ahpd.backends._acp_wire import (
        elicitation_content,
        elicitation_questions,
        models_from_config,
        prompt_blocks,
        rpc_error_message,
        stored_conversations,
        usage_info,
        wire,
    )


DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024

_CLIENT_CAPABILITIES = {
    "fs": {"readTextFile": True, "writeTextFile": True},
    "terminal": True,
    "elicitation": {"form": {}, "url": {}},
}
#: Seconds the boot probe waits for the commands a new conversation is offered.
PROBE_COMMANDS_WAIT = 2.0
#: Seconds a listing of the agent's stored conversations stays good: asking
#: again starts the agent, so it is not asked after every turn.
RELIST_AFTER = 300.0


class AcpBackend:
    """A configured ACP agent: ``command args...`` speaking ACP on stdio."""

    def __init__(
        self,
        provider: str,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        display_name: str | None = None,
        description: str | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        *,
        start_timeout: float = 60.0,
        call_timeout: float = 30.0,
        shutdown_grace: float = 2.0,
    ) -> None:
        self.provider = provider
        self.command = command
        self.args = tuple(args)
        self.env = dict(env or {})
        self.display_name = display_name or provider
        self.description = description or f"{self.display_name} (an ACP agent: {command})"
        self.max_line_bytes = max_line_bytes
        self.start_timeout = start_timeout
        self.call_timeout = call_timeout
        self.shutdown_grace = shutdown_grace
        self._models: list[dict[str, Any]] = []
        #: See :data:`RELIST_AFTER` (read by the session catalogue).
        self.relist_after = RELIST_AFTER
        #: Held by the boot probe and by a listing, so a listing never sees
        #: the conversation the probe makes and deletes again.
        self.probing = trio.Lock()
        #: What the agent keeps, as its boot probe listed it: (when, rows).
        self.probe_listing: tuple[float, list[StoredConversation]] | None = None
        self.listed: list[StoredConversation] | None = None  # the same, in the probe's own process
        #: The slash commands the boot probe's conversation was offered (ACP
        #: ``AvailableCommand`` wire JSON): what a session shows before its
        #: own agent runs.
        self.commands: list[dict[str, Any]] = []
        #: The session modes and config options (ACP wire JSON) the latest
        #: new conversation was offered: what a session can be set to.
        self.modes: dict[str, Any] | None = None
        self.config_options: list[dict[str, Any]] = []

    def config_properties(self) -> dict[str, dict[str, Any]]:
        """The session config this agent takes (``SessionConfigPropertySchema``s)."""
        return _acp_settings.properties(self.modes, self.config_options)

    def agent_info(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "displayName": self.display_name,
            "description": self.description,
            "models": [dict(m) for m in self._models],
        }

    def ran(self, command: str, output: str, exit_code: int | None) -> str:
        """What the agent is handed with its next prompt about a !command
        the person ran themselves (ACP has no message for it)."""
        return ran_note(command, output, exit_code)
    def preflight(self) -> None:
        """Refuse at once a session whose agent cannot start because its
        command is not there (no process is started to find that out)."""
        if os.sep in self.command:
            found = os.path.isfile(self.command) and os.access(self.command, os.X_OK)
        else:
            found = shutil.which(self.command, path=self.env.get("PATH", os.environ.get("PATH"))) is not None
        if not found:
            raise BackendError(f"cannot start the {self.provider} agent: command {self.command!r} "
                               "is not found or not executable")

    async def probe(self) -> bool:
        """The boot probe: what a composer shows before any session's agent
        runs - the models and slash commands a new conversation is offered
        (:meth:`learn`). It runs in a short-lived Python process of its own
        (``ahpd.backends._acp_probe``), so the ACP library is loaded there
        and not in the daemon, which holds it only once a turn needs it.
        True when :meth:`agent_info` or the commands changed. Failure is
        logged, never raised."""
        spec = {"provider": self.provider, "command": self.command, "args": list(self.args), "env": self.env,
                "call_timeout": self.call_timeout}
        try:
            with trio.fail_after(self.call_timeout + 30):
                async with self.probing:
                    done = await trio.run_process(
                        [sys.executable, "-m", "ahpd.backends._acp_probe", json.dumps(spec)],
                        capture_stdout=True, stderr=None, check=False,
                    )
                    learned = json.loads(done.stdout or b"null")
                    if done.returncode == 0:
                        _acp_catalogue.probe_listed(self, learned)
        except (OSError, ValueError, trio.TooSlowError) as exc:
            log.warning("%s: the boot probe failed: %s", self.provider, exc)
            return False
        if done.returncode != 0 or not isinstance(learned, dict):
            log.warning("%s: the boot probe failed (exit status %s)", self.provider, done.returncode)
            return False
        models = learned.get("models") or self._models
        commands = learned.get("commands") or []
        changed = models != self._models or commands != self.commands
        self._models, self.commands = models, commands
        self.modes = learned.get("modes") or self.modes
        self.config_options = learned.get("configOptions") or self.config_options
        return changed

    async def learn(self) -> bool:
        """Ask the agent, in this process, what a new conversation is offered.
        Only an agent that can delete a conversation is asked (``session/new``,
        the commands it announces, ``session/delete``), so the probe leaves
        nothing in its history."""
        _load()
        heard = trio.Event()
        commands: list[dict[str, Any]] = []

        def listen(event: Event) -> None:
            if isinstance(event, Update) and event.update.get("sessionUpdate") == "available_commands_update":
                commands[:] = list(event.update.get("availableCommands") or [])
                heard.set()

        root = scratch_root()
        try:
            with trio.fail_after(self.call_timeout):
                async with self._open_agent(root, listen) as link:
                    caps = (await link.initialize()).agent_capabilities
                    # What it keeps, asked while it runs anyway (and before the probe's own conversation).
                    self.listed = await _acp_catalogue.listed_by_probe(link, caps)
                    if not (caps and caps.session_capabilities and caps.session_capabilities.delete):
                        return False
                    answer = await link.call("session/new", {"cwd": str(root), "mcpServers": []}, "session/new")
                    new = NewSessionResponse.model_validate(answer)
                    link.client.session_id = new.session_id
                    with trio.move_on_after(PROBE_COMMANDS_WAIT):
                        await heard.wait()
                    await link.call(AGENT_METHODS["session_delete"], {"sessionId": new.session_id}, "session/delete")
        except (BackendError, ValidationError, trio.TooSlowError) as exc:
            log.warning("%s: the boot probe failed: %s", self.provider, _reason(exc))
            return False
        models = models_from_config(self.provider, new.config_options) or self._models
        changed = models != self._models or commands != self.commands
        self._models, self.commands = models, commands
        self._offered(answer)
        return changed

    def _offered(self, answer: Any) -> None:
        """Keep the modes and config options a conversation was offered."""
        if isinstance(answer, dict):
            if isinstance(answer.get("modes"), dict):
                self.modes = answer["modes"]
            if isinstance(answer.get("configOptions"), list):
                self.config_options = answer["configOptions"]

    # -- conversations ----------------------------------------------------------

    async def run_conversation(
        self,
        *,
        cwd: Path,
        events: EventSink,
        resume_id: str | None = None,
        task_status: trio.TaskStatus[Conversation] = trio.TASK_STATUS_IGNORED,
        terminals: Any = None,
        host_tools: Any = None,
        additional_directories: Sequence[Path] = (),
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """Start the agent in ``cwd`` with ``session/new`` (or ``session/load``
        of ``resume_id``, whose replayed history goes to ``events``), hand
        over the conversation, and keep the agent until cancelled.

        Raises :class:`BackendError` when the agent cannot start (before
        ``task_status.started``). Once started, an agent that dies on its own
        (or breaks the protocol) makes this *return*: a turn in progress has
        already raised :class:`BackendError` with the reason, which is also
        kept in ``conversation.end_reason`` and logged."""
        _load()
        root = working_root(cwd)
        async with self._open_agent(root, events, terminals) as link:
            try:
                with trio.fail_after(self.start_timeout):
                    init = await link.initialize()
                    caps = init.agent_capabilities
                    # The host's own tools, as the MCP server it serves them on (ahpd.host.customizations.mcp_bridge).
                    servers = [await host_tools.mcp_server()] if host_tools is not None else []
                    params: dict[str, Any] = {"cwd": str(root), "mcpServers": servers}
                    if additional_directories:
                        if caps and caps.session_capabilities and caps.session_capabilities.additional_directories:
                            params["additionalDirectories"] = [str(working_root(d)) for d in additional_directories]
                        else:
                            log.info("%s: the agent takes no additional directories; it works in %s only",
                                     self.provider, root)
                    if resume_id is not None:
                        if not (caps and caps.load_session):
                            raise BackendError(
                                f"the {self.provider} agent cannot load a conversation "
                                "(its ACP agent does not offer loadSession)"
                            )
                        link.client.session_id = resume_id
                        answer = await link.call("session/load", {**params, "sessionId": resume_id}, "session/load")
                        session_id = resume_id
                    else:
                        answer = await link.call("session/new", params, "session/new")
                        try:
                            new = NewSessionResponse.model_validate(answer)
                        except ValidationError:
                            raise BackendError("the agent answered session/new with an invalid result") from None
                        session_id = new.session_id
                        link.client.session_id = session_id
                        models = models_from_config(self.provider, new.config_options)
                        if models:
                            self._models = models
                    self._offered(answer)
            except trio.TooSlowError:
                raise BackendError(
                    f"the {self.provider} agent did not start its conversation within {self.start_timeout:g} s"
                ) from None
            prompt_caps = caps.prompt_capabilities if caps else None
            conversation = AcpConversation(link, session_id, prompt_caps)
            conversation.resumable = bool(caps and caps.load_session)
            conversation.offered(answer)
            if config:
                try:
                    await conversation.configure(config)
                except BackendError as err:
                    log.warning("%s: the agent kept its own settings: %s", link.agent.label, err.message)
            task_status.started(conversation)
            await link.agent.wait_exit()
            conversation.end_reason = link.agent.death_message()
            log.warning("%s: the conversation ended: %s", link.agent.label, conversation.end_reason)

    async def list_conversations(self) -> list[StoredConversation]:
        """``session/list``, when the agent offers it (a short-lived process, ``_acp_catalogue``)."""
        return await _acp_catalogue.list_conversations(self)

    async def read_history(self, backend_id: str) -> list[HistoryTurn]:
        """A stored conversation's turns, from ``session/load``'s replay (a short-lived process)."""
        return await _acp_catalogue.read_history(self, backend_id)

    async def delete_conversation(self, backend_id: str) -> bool:
        """``session/delete``, when the agent offers it (a short-lived process)."""
        _load()
        try:
            with trio.fail_after(self.call_timeout):
                async with self._open_agent(scratch_root(), ignore) as link:
                    init = await link.initialize()
                    caps = init.agent_capabilities
                    if not (caps and caps.session_capabilities and caps.session_capabilities.delete):
                        return False
                    await link.call(AGENT_METHODS["session_delete"], {"sessionId": backend_id}, "session/delete")
                    return True
        except (BackendError, trio.TooSlowError) as exc:
            log.warning("%s: deleting conversation %s failed: %s", self.provider, backend_id, _reason(exc))
            return False

    # -- the process ----------------------------------------------------------------

    @asynccontextmanager
    async def _open_agent(self, root: Path, events: EventSink, host_terminals: Any = None) -> AsyncIterator[_Link]:
        """A started agent and its connection, in their own asyncio loop;
        on the way out everything is closed, killed and reaped."""
        env = {**os.environ, **self.env}
        try:
            async with trio_asyncio.open_loop() as loop:
                try:
                    proc = await trio.lowlevel.open_process(
                        [self.command, *self.args],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        cwd=str(root),
                        env=env,
                        start_new_session=True,
                    )
                except OSError as exc:
                    raise BackendError(
                        f"cannot start the {self.provider} agent ({self.command}): {exc.strerror or exc}"
                    ) from None
                label = f"{self.provider}[{proc.pid}]"
                agent = AgentProcess(proc, loop=loop, label=label, max_line_bytes=self.max_line_bytes)
                try:
                    async with trio.open_nursery() as nursery:
                        agent.start(nursery)
                        terminals = Terminals(nursery, root, env, host=host_terminals)
                        client = _Client(loop=loop, events=events, root=root, terminals=terminals, label=label)
                        link = _Link(loop, agent, client)
                        await link.connect()
                        try:
                            yield link
                        finally:
                            with trio.CancelScope(shield=True):
                                client.cancel_pending()
                                await link.close()
                                await terminals.close()
                            nursery.cancel_scope.cancel()
                finally:
                    with trio.CancelScope(shield=True):
                        await agent.terminate(self.shutdown_grace)
        except BaseExceptionGroup as group:
            raise _unwrap(group) from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BackendError):
        return exc.message
    if isinstance(exc, trio.TooSlowError):
        return "the agent did not answer in time"
    return str(exc)


def _unwrap(group: BaseExceptionGroup) -> BaseException:
    """The single error of a strict nursery's group (or the group itself)."""
    while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
        group = group.exceptions[0]  # type: ignore[assignment]
    return group


class _Link:
    """One live connection: the loop, the process, the library's Connection."""

    def __init__(self, loop: Any, agent: AgentProcess, client: _Client) -> None:
        self.loop = loop
        self.agent = agent
        self.client = client
        self.conn: Connection | None = None

    async def connect(self) -> None:
        async def build() -> Connection:
            router = build_client_router(self.client, use_unstable_protocol=True)  # type: ignore[arg-type]
            return Connection(router, self.agent.transport)  # type: ignore[arg-type]

        self.conn = await trio_asyncio.aio_as_trio(build, loop=self.loop)()

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request; the agent's JSON-RPC error is raised as ``RequestError``,
        a dead or closed connection as :class:`BackendError`."""
        assert self.conn is not None
        try:
            return await trio_asyncio.aio_as_trio(self.conn.send_request, loop=self.loop)(method, params)
        except ConnectionError:
            raise BackendError(await self.agent.death_message_after_exit()) from None
        except RuntimeError as exc:  # the loop is closed: the conversation has ended
            raise BackendError(f"the conversation with the agent has ended ({exc})") from None

    async def call(self, method: str, params: dict[str, Any], what: str) -> Any:
        """As :meth:`request`, with the agent's error as :class:`BackendError`."""
        try:
            return await self.request(method, params)
        except RequestError as exc:
            raise BackendError(f"{what}: {rpc_error_message(exc)}") from None

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        assert self.conn is not None
        try:
            await trio_asyncio.aio_as_trio(self.conn.send_notification, loop=self.loop)(method, params)
        except (ConnectionError, RuntimeError) as exc:
            log.debug("%s: %s not sent: %s", self.agent.label, method, exc)

    async def initialize(self) -> InitializeResponse:
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": _CLIENT_CAPABILITIES,
            "clientInfo": {"name": "ahpd", "title": "ahpd", "version": ahpd.__version__},
        }
        answer = await self.call("initialize", params, "initialize")
        try:
            init = InitializeResponse.model_validate(answer)
        except ValidationError:
            raise BackendError("the agent answered initialize with an invalid result") from None
        if init.protocol_version != PROTOCOL_VERSION:
            raise BackendError(
                f"the agent speaks ACP version {init.protocol_version}; ahpd speaks {PROTOCOL_VERSION}"
            )
        return init

    async def close(self) -> None:
        if self.conn is None:
            return
        with trio.move_on_after(2):
            try:
                await trio_asyncio.aio_as_trio(self.conn.close, loop=self.loop)()
            except Exception:
                log.exception("%s: closing the connection failed", self.agent.label)


class AcpConversation:
    """One live ACP session. Methods are called from trio."""

    def __init__(self, link: _Link, session_id: str, prompt_caps: PromptCapabilities | None) -> None:
        self.backend_id = session_id
        #: Why the agent went away on its own (exit status, last stderr lines), once it has.
        self.end_reason: str | None = None
        self._link = link
        self._prompt_caps = prompt_caps
        self._cancelled = False
        #: Whether the agent can ``session/load`` this conversation after its
        #: process ended (set once the agent said at ``initialize``).
        self.resumable = False
        #: Its modes and config options as the agent last said them (wire JSON).
        self.modes: dict[str, Any] | None = None
        self.config_options: list[dict[str, Any]] = []

    @property
    def settings(self) -> dict[str, Any]:
        """The session config values the agent runs with, in the host's keys."""
        return _acp_settings.values(self.modes, self.config_options)

    def offered(self, answer: Any) -> None:
        if isinstance(answer, dict):
            if isinstance(answer.get("modes"), dict):
                self.modes = answer["modes"]
            if isinstance(answer.get("configOptions"), list):
                self.config_options = answer["configOptions"]

    def heard(self, update: Mapping[str, Any]) -> None:
        """The agent moved a setting on its own (``current_mode_update``,
        ``config_option_update``): keep what it now runs with."""
        kind = update.get("sessionUpdate")
        if kind == "current_mode_update" and self.modes is not None:
            self.modes = {**self.modes, "currentModeId": update.get("currentModeId")}
        elif kind == "config_option_update" and isinstance(update.get("configOptions"), list):
            self.config_options = list(update["configOptions"])

    async def configure(self, values: Mapping[str, Any]) -> bool:
        """Set what differs from what the agent runs with, live: a mode by
        ``session/set_mode``, anything else by ``session/set_config_option``.
        Raises :class:`BackendError` in the agent's words when it will not."""
        current = self.settings
        for key, value in values.items():
            if current.get(key) == value:
                continue
            request = _acp_settings.request(key, value, self.modes, self.config_options)
            if request is None:
                raise BackendError(f"the agent offers no setting {key!r}")
            method, params = request
            answer = await self._link.call(method, {"sessionId": self.backend_id, **params}, method)
            if method == "session/set_mode" and self.modes is not None:
                self.modes = {**self.modes, "currentModeId": value}
            elif isinstance(answer, dict) and isinstance(answer.get("configOptions"), list):
                self.config_options = answer["configOptions"]
        return True

    async def prompt(self, text: str, attachments: Sequence[dict[str, Any]] = ()) -> PromptResult:
        self._cancelled = False
        params = {"sessionId": self.backend_id, "prompt": prompt_blocks(text, attachments, self._prompt_caps)}
        try:
            answer = await self._link.request("session/prompt", params)
        except RequestError as exc:
            if self._cancelled:  # ACP asks agents to answer a cancelled turn with "cancelled"
                return PromptResult(stop_reason="cancelled")
            raise BackendError(rpc_error_message(exc)) from None
        try:
            response = PromptResponse.model_validate(answer)
        except ValidationError:
            raise BackendError("the agent answered session/prompt with an invalid result") from None
        return PromptResult(stop_reason=response.stop_reason, usage=usage_info(response.usage))

    async def cancel(self) -> None:
        self._cancelled = True
        self._link.client.cancel_pending()
        await self._link.notify("session/cancel", {"sessionId": self.backend_id})

    def answer_permission(self, request_id: str, option_id: str | None) -> None:
        self._link.client.answer_permission(request_id, option_id)

    def answer_input(self, request_id: str, response: str, answers: dict[str, Any] | None) -> None:
        self._link.client.answer_input(request_id, response, answers)

    @property
    def pid(self) -> int:
        """The agent's process id (for diagnostics and tests)."""
        return self._link.agent.proc.pid


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    """Resolve an asyncio future from trio (same thread); ignore a closed loop."""
    if future.done():
        return
    try:
        future.set_result(value)
    except RuntimeError:  # the loop closed under us: nobody is waiting any more
        pass


class _Client:
    """The client side of ACP: the agent's requests and notifications.

    asyncio-flavoured; the library's router calls these by name.
    """

    def __init__(self, *, loop: Any, events: EventSink, root: Path, terminals: Terminals, label: str) -> None:
        self.session_id: str | None = None
        self._loop = loop
        self._events = events
        self._root = root
        self._terminals = terminals
        self._label = label
        self._ids = itertools.count(1)
        self._permissions: dict[str, tuple[asyncio.Future[str | None], set[str]]] = {}
        self._inputs: dict[str, tuple[asyncio.Future[tuple[str, Any]], dict[str, str]]] = {}

    def _emit(self, event: Event) -> None:
        try:
            self._events(event)
        except Exception:
            log.exception("%s: the event sink failed on %r", self._label, type(event).__name__)

    def _trio(self, fn: Any, *args: Any) -> Any:
        return trio_asyncio.trio_as_aio(fn, loop=self._loop)(*args)

    def _ours(self, session_id: str, what: str) -> bool:
        if self.session_id is None or session_id == self.session_id:
            return True
        log.warning("%s: %s for unknown session %r ignored", self._label, what, session_id)
        return False

    # -- answers from the host (trio, synchronous) ------------------------------------

    def answer_permission(self, request_id: str, option_id: str | None) -> None:
        entry = self._permissions.get(request_id)
        if entry is None:
            log.debug("%s: permission %s is not pending", self._label, request_id)
            return
        future, allowed = entry
        if option_id is not None and option_id not in allowed:
            log.warning("%s: permission %s answered with unknown option %r", self._label, request_id, option_id)
            option_id = None
        _resolve(future, option_id)

    def answer_input(self, request_id: str, response: str, answers: dict[str, Any] | None) -> None:
        entry = self._inputs.get(request_id)
        if entry is None:
            log.debug("%s: input %s is not pending", self._label, request_id)
            return
        action = response if response in ("accept", "decline", "cancel") else "cancel"
        _resolve(entry[0], (action, answers))

    def cancel_pending(self) -> None:
        """A cancelled turn: every open question is answered ``cancelled``."""
        for future, _ in list(self._permissions.values()):
            _resolve(future, None)
        for future, _ in list(self._inputs.values()):
            _resolve(future, ("cancel", None))

    # -- session ---------------------------------------------------------------

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        # Synchronous up to here and in here: arrival order is kept.
        if self._ours(session_id, "session/update"):
            self._emit(Update(wire(update)))

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[AcpPermissionOption], **kwargs: Any
    ) -> dict[str, Any]:
        if not self._ours(session_id, "session/request_permission"):
            return {"outcome": {"outcome": "cancelled"}}
        request_id = f"permission-{next(self._ids)}"
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._permissions[request_id] = (future, {o.option_id for o in options})
        try:
            self._emit(
                PermissionRequest(
                    request_id=request_id,
                    tool_call=wire(tool_call),
                    options=[PermissionOption(o.option_id, o.name, o.kind) for o in options],
                )
            )
            option_id = await future
        finally:
            self._permissions.pop(request_id, None)
        if option_id is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": option_id}}

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> dict[str, Any]:
        if isinstance(mode, ElicitationFormSessionMode | ElicitationFormRequestMode):
            questions, kinds = elicitation_questions(mode.requested_schema)
        elif isinstance(mode, ElicitationUrlSessionMode | ElicitationUrlRequestMode):
            message = f"{message}\n{mode.url}" if message else mode.url
            questions, kinds = [], {}
        else:
            raise RequestError.invalid_params({"details": "unsupported elicitation mode"})
        request_id = f"input-{next(self._ids)}"
        future: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()
        self._inputs[request_id] = (future, kinds)
        try:
            self._emit(InputRequest(request_id=request_id, message=message, questions=questions))
            action, answers = await future
        finally:
            self._inputs.pop(request_id, None)
        if action == "accept":
            if kinds:
                return {"action": "accept", "content": elicitation_content(kinds, answers)}
            return {"action": "accept"}
        return {"action": action}

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        log.debug("%s: elicitation %s completed", self._label, elicitation_id)

    # -- files -------------------------------------------------------------------

    async def read_text_file(
        self, path: str, session_id: str, limit: int | None = None, line: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        content = await self._trio(trio.to_thread.run_sync, _acp_files.read_text, self._root, path, line, limit)
        return {"content": content}

    async def write_text_file(self, content: str, path: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        await self._trio(trio.to_thread.run_sync, _acp_files.write_text, self._root, path, content)
        return {}

    # -- terminals -------------------------------------------------------------------

    async def create_terminal(
        self,
        command: str,
        session_id: str,
        args: list[str] | None = None,
        cwd: str | None = None,
        env: list[Any] | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        terminal_id = await self._trio(self._terminals.create, command, args, env, cwd, output_byte_limit)
        return {"terminalId": terminal_id}

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        return self._terminals.output(terminal_id)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        return await self._trio(self._terminals.wait_for_exit, terminal_id)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        self._terminals.kill(terminal_id)
        return {}

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        self._terminals.release(terminal_id)
        return {}
