"""A live ACP agent: its process, its asyncio loop, the library's connection.

Everything here runs with the ``acp`` library loaded (and pydantic and
trio-asyncio with it), which is why :mod:`~ahpd.backends.acp.backend` imports this
module only when a conversation, a boot probe's own process or a deletion
first needs it. :func:`open_agent` starts an agent and connects to it
(:class:`Link`); :func:`run_conversation`, :func:`learn` and
:func:`delete_conversation` are the work :class:`~ahpd.backends.acp.backend.AcpBackend`
hands over, on its own state; :class:`AcpConversation` is one live ACP
session, what the host drives a chat through.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
import trio_asyncio
from acp.client.router import build_client_router
from acp.connection import Connection
from acp.exceptions import RequestError
from acp.meta import AGENT_METHODS, PROTOCOL_VERSION
from acp.schema import AgentCapabilities, InitializeResponse, ListSessionsResponse, NewSessionResponse, PromptResponse
from pydantic import ValidationError

import ahpd
from ahpd.backends.acp import settings as _acp_settings
from ahpd.backends.acp.client import Client
from ahpd.backends.acp.process import AgentProcess, start_agent
from ahpd.backends.acp.terminals import Terminals
from ahpd.backends.acp.wire import (
    models_from_config,
    prompt_blocks,
    rpc_error_message,
    stored_conversations,
    usage_info,
)
from ahpd.backends._paths import ignore, scratch_root, working_root
from ahpd.backends.port import (
    BackendError,
    Conversation,
    Event,
    EventSink,
    PromptResult,
    StoredConversation,
    Update,
)

if TYPE_CHECKING:
    from acp.schema import PromptCapabilities

    from ahpd.backends.acp.backend import AcpBackend

log = logging.getLogger("ahpd.backends.acp.backend")

_CLIENT_CAPABILITIES = {
    "fs": {"readTextFile": True, "writeTextFile": True},
    "terminal": True,
    "elicitation": {"form": {}, "url": {}},
}
#: Seconds the boot probe waits for the commands a new conversation is offered.
PROBE_COMMANDS_WAIT = 2.0
#: Pages of ``session/list`` read at most (a runaway cursor ends here).
MAX_LIST_PAGES = 50


@asynccontextmanager
async def open_agent(
    backend: AcpBackend, root: Path, events: EventSink, host_terminals: Any = None, granted: Sequence[Path] = ()
) -> AsyncIterator[Link]:
    """A started agent and its connection, in their own asyncio loop;
    on the way out everything is closed, killed and reaped. Its files and
    terminals reach ``root`` and the folders ``granted`` beside it."""
    env = {**os.environ, **backend.env}
    try:
        async with trio_asyncio.open_loop() as loop:
            agent = await start_agent(backend, root, env, loop=loop)
            label = agent.label
            try:
                async with trio.open_nursery() as nursery:
                    agent.start(nursery)
                    roots = [root, *granted]
                    terminals = Terminals(nursery, roots, env, host=host_terminals)
                    client = Client(loop=loop, events=events, roots=roots, terminals=terminals, label=label)
                    link = Link(loop, agent, client)
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
                    await agent.terminate(backend.shutdown_grace)
    except BaseExceptionGroup as group:
        raise unwrap(group) from None


def reason(exc: BaseException) -> str:
    if isinstance(exc, BackendError):
        return exc.message
    if isinstance(exc, trio.TooSlowError):
        return "the agent did not answer in time"
    return str(exc)


def unwrap(group: BaseExceptionGroup) -> BaseException:
    """The single error of a strict nursery's group (or the group itself)."""
    while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
        group = group.exceptions[0]  # type: ignore[assignment]
    return group


class Link:
    """One live connection: the loop, the process, the library's Connection."""

    def __init__(self, loop: Any, agent: AgentProcess, client: Client) -> None:
        self.loop = loop
        self.agent = agent
        self.client = client
        self.conn: Connection | None = None

    async def connect(self) -> None:
        async def build() -> Connection:
            # The router calls the handlers by name and sends what they answer;
            # ours answer wire JSON, where the library's Client protocol names its models.
            router = build_client_router(self.client, use_unstable_protocol=True)  # type: ignore[arg-type]
            return Connection(router, self.agent.transport)

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
            raise BackendError(f"the agent speaks ACP version {init.protocol_version}; ahpd speaks {PROTOCOL_VERSION}")
        if not isinstance(init.agent_capabilities, AgentCapabilities):
            # The library leaves capabilities that are not an object as its defaults in a plain
            # dict; read as those defaults (nothing offered), not as an AttributeError later.
            init.agent_capabilities = AgentCapabilities.model_validate(init.agent_capabilities or {})
        return init

    async def close(self) -> None:
        if self.conn is None:
            return
        with trio.move_on_after(2):
            try:
                await trio_asyncio.aio_as_trio(self.conn.close, loop=self.loop)()
            except Exception:  # noqa: BLE001 - closing is best effort, and logged
                log.exception("%s: closing the connection failed", self.agent.label)


class AcpConversation:
    """One live ACP session. Methods are called from trio."""

    def __init__(self, link: Link, session_id: str, prompt_caps: PromptCapabilities | None) -> None:
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


async def learn(backend: AcpBackend) -> bool:
    """Ask the agent, in this process, what a new conversation is offered.
    Only an agent that can delete a conversation is asked (``session/new``,
    the commands it announces, ``session/delete``), so the probe leaves
    nothing in its history."""
    heard = trio.Event()
    commands: list[dict[str, Any]] = []

    def listen(event: Event) -> None:
        if isinstance(event, Update) and event.update.get("sessionUpdate") == "available_commands_update":
            commands[:] = list(event.update.get("availableCommands") or [])
            heard.set()

    root = scratch_root()
    try:
        with trio.fail_after(backend.call_timeout):
            async with open_agent(backend, root, listen) as link:
                caps = (await link.initialize()).agent_capabilities
                # What it keeps, asked while it runs anyway (and before the probe's own conversation).
                backend.listed = await listed_by_probe(link, caps)
                if not (caps and caps.session_capabilities and caps.session_capabilities.delete):
                    return False
                answer = await link.call("session/new", {"cwd": str(root), "mcpServers": []}, "session/new")
                new = NewSessionResponse.model_validate(answer)
                link.client.session_id = new.session_id
                with trio.move_on_after(PROBE_COMMANDS_WAIT):
                    await heard.wait()
                await link.call(AGENT_METHODS["session_delete"], {"sessionId": new.session_id}, "session/delete")
    except (BackendError, ValidationError, trio.TooSlowError) as exc:
        log.warning("%s: the boot probe failed: %s", backend.provider, reason(exc))
        return False
    models = models_from_config(backend.provider, new.config_options) or backend._models
    changed = models != backend._models or commands != backend.commands
    backend._models, backend.commands = models, commands
    backend._offered(answer)
    return changed


async def run_conversation(
    backend: AcpBackend,
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
    root = working_root(cwd)
    granted = [working_root(d) for d in additional_directories]
    async with open_agent(backend, root, events, terminals, granted) as link:
        try:
            with trio.fail_after(backend.start_timeout):
                init = await link.initialize()
                caps = init.agent_capabilities
                # The host's own tools, as the MCP server it serves them on (ahpd.host.customizations.mcp_bridge).
                servers = [await host_tools.mcp_server()] if host_tools is not None else []
                params: dict[str, Any] = {"cwd": str(root), "mcpServers": servers}
                if additional_directories:
                    if caps and caps.session_capabilities and caps.session_capabilities.additional_directories:
                        params["additionalDirectories"] = [str(d) for d in granted]
                    else:
                        log.info(
                            "%s: the agent takes no additional directories; it works in %s only", backend.provider, root
                        )
                if resume_id is not None:
                    if not (caps and caps.load_session):
                        raise BackendError(
                            f"the {backend.provider} agent cannot load a conversation "
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
                    models = models_from_config(backend.provider, new.config_options)
                    if models:
                        backend._models = models
                backend._offered(answer)
        except trio.TooSlowError:
            raise BackendError(
                f"the {backend.provider} agent did not start its conversation within {backend.start_timeout:g} s"
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


async def delete_conversation(backend: AcpBackend, backend_id: str) -> bool:
    """``session/delete``, when the agent offers it (a short-lived process)."""
    try:
        with trio.fail_after(backend.call_timeout):
            async with open_agent(backend, scratch_root(), ignore) as link:
                init = await link.initialize()
                caps = init.agent_capabilities
                if not (caps and caps.session_capabilities and caps.session_capabilities.delete):
                    return False
                await link.call(AGENT_METHODS["session_delete"], {"sessionId": backend_id}, "session/delete")
                return True
    except (BackendError, trio.TooSlowError) as exc:
        log.warning("%s: deleting conversation %s failed: %s", backend.provider, backend_id, reason(exc))
        return False


async def listed(link: Any, caps: Any) -> list[StoredConversation]:
    """Every page of ``session/list`` over an initialized link, when ``caps`` offer it."""
    if not (caps and caps.session_capabilities and caps.session_capabilities.list):
        return []
    sessions = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        answer = await link.call("session/list", {"cursor": cursor} if cursor else {}, "session/list")
        page = ListSessionsResponse.model_validate(answer)
        sessions.extend(page.sessions)
        cursor = page.next_cursor
        if not cursor:
            break
    return stored_conversations(sessions)


async def listed_by_probe(link: Any, caps: Any) -> list[StoredConversation] | None:
    """:func:`listed`, for the boot probe: a listing that fails (None) costs
    the catalogue its first reading, never the probe what it came for."""
    try:
        return await listed(link, caps)
    except (BackendError, ValidationError) as exc:
        log.warning("%s: listing its conversations failed: %s", link.agent.label, exc)
        return None
