"""One live Claude Code conversation: a CLI held open for a chat's whole life.

The CLI's input stays open between turns (which is also what lets a steering
message reach a running turn), and a single reader task takes every message
the CLI writes and hands it, mapped to ACP-shaped updates by
:class:`~ahpd.backends.claude.wire.StreamMapper`, to the event sink. A turn
is one user message in and one ``result`` out:

* ``can_use_tool`` becomes a :class:`PermissionRequest` under the agent's own
  ``tool_use`` id, answered through :meth:`ClaudeConversation.answer_permission`;
  a Write, Edit or MultiEdit carries the change it would make as ACP
  ``diff`` content;
* an error result ("Not logged in · Please run /login") fails the turn with
  the CLI's own words, and so does a CLI that dies - never a hang;
* cancelling interrupts the CLI, which answers the turn with a result;
* the active clients' tools ride the in-process MCP server ``ahp``
  (:mod:`~ahpd.backends.claude.tools`): a call of one is announced with
  the client as its contributor, runs without asking, and becomes a
  :class:`ClientToolCall` the host answers with the client's result.

:class:`~ahpd.backends.claude.backend.ClaudeBackend` starts the CLI and wires a
conversation to it (its client, nursery and restart); this module is what
the conversation does once it runs. The SDK's classes are imported in the
methods that use them, never with this module: the SDK is about a second of
a daemon's start-up (``python -X importtime -c 'import claude_agent_sdk'``),
and those methods run only once a CLI does.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import attrs
import trio

from ahpd.backends.claude import plugins as _claude_plugins, shell_init
from ahpd.backends.claude.tools import CONTRIBUTOR_META, ENDED, LEFT, ClientCall, ClientTools
from ahpd.backends.claude.tools import PREFIX as CLIENT_TOOL_PREFIX
from ahpd.backends.claude.tools import SERVER_NAME as CLIENT_TOOL_SERVER
from ahpd.backends.claude.wire import StreamMapper, pending_edit, usage_info
from ahpd.backends.port import (
    MODEL_META,
    BackendError,
    ClientToolCall,
    Event,
    EventSink,
    PermissionOption,
    PermissionRequest,
    PromptResult,
    Update,
)

if TYPE_CHECKING:
    from claude_agent_sdk import (
        ClaudeSDKClient,
        PermissionResultAllow,
        PermissionResultDeny,
        ResultMessage,
        ToolPermissionContext,
    )

log = logging.getLogger("ahpd.backends.claude.backend")

_OPTIONS = (
    PermissionOption("allow", "Allow", "allow_once"),
    PermissionOption("deny", "Deny", "reject_once"),
)
_DENIED = "The user denied this tool call."
_STOP_REASONS = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
    "stop_sequence": "end_turn",
    "tool_use": "end_turn",
}


@attrs.define
class _Turn:
    done: trio.Event = attrs.Factory(trio.Event)
    cancelled: bool = False
    stop_reason: str = "end_turn"
    usage: dict[str, Any] | None = None
    error: str | None = None
    error_type: str = "AgentError"


@attrs.define
class _Asked:
    answered: trio.Event = attrs.Factory(trio.Event)
    option_id: str | None = None


class ClaudeConversation:
    """One live CLI conversation. Methods are called from trio tasks."""

    def __init__(
        self, backend_id: str, events: EventSink, root: Path, label: str, *, cancel_grace: float = 30.0
    ) -> None:
        self.backend_id = backend_id
        #: Why the CLI went away on its own, once it has.
        self.end_reason: str | None = None
        self.root = root
        self._events = events
        self._label = f"{label}[{backend_id[:8]}]"
        self._provider = label
        self._cancel_grace = cancel_grace
        self._client: ClaudeSDKClient | None = None
        self._mapper = StreamMapper(label)
        #: Set by the backend once the CLI runs: the CLI started again at a point.
        self._restart: Callable[[str | None], Any] | None = None
        self._nursery: trio.Nursery | None = None
        self._reading: trio.CancelScope | None = None
        self._turn: _Turn | None = None
        self._asked: dict[str, _Asked] = {}
        self._ids = itertools.count(1)
        self._ended = trio.Event()
        self._stderr_tail: deque[str] = deque(maxlen=20)
        #: Told each ``init`` system message; answers the commands to announce again, if any.
        self._on_init: Callable[[Mapping[str, Any]], list[dict[str, Any]] | None] | None = None
        #: The active clients' tools, and the calls of them waiting on a client.
        self._tools = ClientTools(self._client_call_joined)
        #: The announced set changed since the CLI last listed the server's tools.
        self._tools_changed = False
        #: The session config it runs with (``model``, ``effortLevel``) and
        #: the directories beside ``root`` it was started with.
        self.settings: dict[str, Any] = {}
        self.add_dirs: list[str] = []
        #: The plugin directories it was started with, and the session's
        #: ``enabledPlugins`` switches (:mod:`~ahpd.backends.claude.plugins`).
        self.plugins: list[str] = []
        self.plugin_switches: dict[str, bool] = {}
        #: The rewind point the CLI was started at, if it was started at one.
        self.resumed_at: str | None = None
        #: The model the CLI runs on, as last said (``_meta['ahpd.model']``).
        self.model: str | None = None
        self._on_commands: Callable[[Any], list[dict[str, Any]]] | None = None
        #: A sandbox the session's stored config holds (``ClaudeBackend.sandbox_for``).
        self.stored_sandbox: Any = None
        #: The session's shell init scripts, sourced before each Bash command.
        self.shell = shell_init.ShellInit(self._label)

    async def configure(self, values: Mapping[str, Any]) -> bool:
        """A model is set live (``set_model``), and the shell init scripts
        (their file rewritten); an effort only when the CLI starts, so a new
        one answers False: start again, resumed."""
        if shell_init.KEY in values and values[shell_init.KEY] != self.settings.get(shell_init.KEY):
            await self.shell.set(values[shell_init.KEY])
            self.settings[shell_init.KEY] = values[shell_init.KEY]
        wanted = {k: v for k, v in values.items() if k in ("model", "effortLevel") and v}
        if wanted.get("effortLevel") != self.settings.get("effortLevel"):
            return False
        if wanted.get("model") and wanted["model"] != self.settings.get("model") and self._client is not None:
            try:
                await self._client.set_model(wanted["model"])
            except Exception as exc:  # noqa: BLE001 - the CLI's refusal, in its words
                raise BackendError(f"Claude Code did not take the model {wanted['model']!r}: {exc}") from None
            self.settings["model"] = wanted["model"]
            self.say_model(wanted["model"])
        return True

    def say_model(self, model: str | None) -> None:
        """Tell the session the model the CLI runs on now, when it moved: the
        one it was started or switched with, or else the one its ``init`` chose."""
        if not model or model == self.model:
            return
        self.model = model
        self._emit(Update({"sessionUpdate": "session_info_update", "_meta": {MODEL_META: model}}))

    # -- the port ---------------------------------------------------------------------

    async def prompt(self, text: str, attachments: Sequence[dict[str, Any]] = ()) -> PromptResult:
        if self.end_reason is not None or self._client is None:
            raise BackendError(self.end_reason or "the conversation with Claude Code has ended")
        if self._turn is not None:
            raise BackendError("a turn is already running in this conversation")
        turn = self._turn = _Turn()
        try:
            if self._tools_changed:
                self._tools_changed = False
                await self._relist_client_tools()
            try:
                await self._client.query(prompt_text(text, attachments))
            except Exception as exc:  # noqa: BLE001 - a CLI that cannot be written to is a dead one
                raise BackendError(self.end_reason or words(exc, self)) from None
            await turn.done.wait()
        finally:
            if self._turn is turn:
                self._turn = None
        if turn.error is not None:
            raise BackendError(turn.error, turn.error_type)
        return PromptResult(stop_reason="cancelled" if turn.cancelled else turn.stop_reason, usage=turn.usage)

    async def steer(self, text: str) -> None:
        """A message for the running turn: the CLI takes it in at its next
        step rather than after the turn."""
        if self._client is None or self.end_reason is not None:
            raise BackendError(self.end_reason or "the conversation with Claude Code has ended")
        try:
            await self._client.query(text)
        except Exception as exc:  # noqa: BLE001 - a CLI that cannot be written to is a dead one
            raise BackendError(self.end_reason or words(exc, self)) from None

    @property
    def rewind_point(self) -> str | None:
        """Where the conversation stands now: the uuid of the latest entry of
        its main chain, which :meth:`rewind` takes to drop all after it."""
        return self._mapper.point

    async def rewind(self, point: str | None) -> None:
        """Start the CLI again resumed at ``point``, a :attr:`rewind_point`
        this conversation said, so what came after it is no longer in the
        conversation; ``None`` begins it again before its first prompt. The
        session id is kept: a later resume reaches the rewound conversation.
        Raises :class:`BackendError` when the CLI does not start again (the
        conversation has then ended)."""
        if self._turn is not None:
            raise BackendError("a turn is running in this conversation")
        if self._restart is None or self._nursery is None or self.end_reason is not None:
            raise BackendError(self.end_reason or "the conversation with Claude Code has ended")
        if self._reading is not None:
            self._reading.cancel()
        old, self._client = self._client, None
        with trio.CancelScope(shield=True), trio.move_on_after(self._cancel_grace):
            try:
                if old is not None:
                    await old.disconnect()
            except Exception as exc:  # noqa: BLE001 - the old CLI is gone either way
                log.warning("%s: closing the CLI before a rewind failed: %s", self._label, exc)
        try:
            self._client = await self._restart(point)
        except BackendError as err:
            self._die(f"the CLI did not start again at the kept turn: {err.message}")
            raise
        self._shells_gone()
        self._mapper = StreamMapper(self._mapper.provider)
        self._mapper.point = point
        self._start_reading()
        log.info("%s: rewound to %s", self._label, point or "the start")

    def _shells_gone(self) -> None:
        """The CLI that ran them has gone, and its background shells with it."""
        for work_id in list(self._mapper.background):
            del self._mapper.background[work_id]
            self._emit(Update({"sessionUpdate": "background_work_removed", "id": work_id}))

    def _start_reading(self) -> None:
        assert self._nursery is not None
        scope = self._reading = trio.CancelScope()
        client = self._client  # bound now: a rewind may replace it before this task first runs

        async def read() -> None:
            with scope:
                await self._read_loop(client)

        self._nursery.start_soon(read)

    async def cancel(self) -> None:
        turn = self._turn
        if turn is None or turn.done.is_set():
            return
        turn.cancelled = True
        self._cancel_pending()
        if self._client is not None and self.end_reason is None:
            try:
                with trio.move_on_after(self._cancel_grace):
                    await self._client.interrupt()
            except Exception as exc:  # noqa: BLE001 - the turn still ends, below
                log.warning("%s: interrupt failed: %s", self._label, exc)
        # The CLI answers an interrupt with a result; one that does not is not
        # allowed to hold the turn for ever.
        with trio.move_on_after(self._cancel_grace):
            await turn.done.wait()
        if not turn.done.is_set():
            log.warning("%s: no result %g s after an interrupt; the turn ends anyway", self._label, self._cancel_grace)
            turn.done.set()

    def answer_permission(self, request_id: str, option_id: str | None) -> None:
        asked = self._asked.get(request_id)
        if asked is None:
            log.debug("%s: permission %s is not pending", self._label, request_id)
            return
        if option_id not in (None, *(o.option_id for o in _OPTIONS)):
            log.warning("%s: permission %s answered with unknown option %r", self._label, request_id, option_id)
            option_id = None
        asked.option_id = option_id
        asked.answered.set()

    def answer_input(self, request_id: str, response: str, answers: dict[str, Any] | None) -> None:
        log.debug("%s: input %s answered, but this backend asks none", self._label, request_id)

    # -- the active clients' tools ------------------------------------------------------

    def set_client_tools(self, announced: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """What the active clients announce; the CLI is offered it from the next turn."""
        if self._tools.set(announced):
            self._tools_changed = True

    def complete_client_tool(self, tool_call_id: str, result: Mapping[str, Any]) -> bool:
        """The owning client's result for a running call; False when none waits."""
        return self._tools.complete(tool_call_id, result)

    def fail_client_tools(self, client_id: str, message: str = LEFT) -> list[str]:
        """Every call waiting on ``client_id`` is answered as failed."""
        return self._tools.fail_client(client_id, message)

    # -- MCP servers (ahpd.host.customizations.customizations drives these) ---------------------------------

    async def mcp_status(self) -> list[dict[str, Any]]:
        """The CLI's MCP servers as it reports them (``mcp_status``), without our own ``ahp``."""
        return configured_servers(await self._control().get_mcp_status())

    async def toggle_mcp(self, name: str, enabled: bool) -> None:
        """The CLI's own switch for a server (``mcp_toggle``); it keeps it per project."""
        await self._control().toggle_mcp_server(name, enabled)

    async def reconnect_mcp(self, name: str) -> None:
        """Connect a server again (``mcp_reconnect``): how a failed or signed-out one is retried."""
        await self._control().reconnect_mcp_server(name)

    # -- plugins (ahpd.host.customizations.plugins drives these) -------------------------------------------

    async def loaded_plugins(self) -> list[dict[str, Any]]:
        """The plugins the CLI loads now (``reload_plugins``)."""
        return _claude_plugins.loaded(await _claude_plugins.reload(self._control()))

    async def switch_plugins(self, switches: Mapping[str, bool]) -> list[dict[str, Any]]:
        """The session's ``enabledPlugins``, set live; the plugins the CLI
        then loads. Its slash commands move with them, and are said again."""
        answer = await _claude_plugins.switch(self._control(), switches)
        self.plugin_switches = dict(switches)
        if self._on_commands is not None and isinstance(answer.get("commands"), list):
            self._emit(
                Update(
                    {
                        "sessionUpdate": "available_commands_update",
                        "availableCommands": self._on_commands(answer["commands"]),
                    }
                )
            )
        return _claude_plugins.loaded(answer)

    def _control(self) -> ClaudeSDKClient:
        if self._client is None or self.end_reason is not None:
            raise BackendError(self.end_reason or "the conversation with Claude Code has ended")
        return self._client

    async def _relist_client_tools(self) -> None:
        """Make the CLI list the ``ahp`` server's tools again. The CLI refuses
        ``mcp_reconnect`` for an in-process server, so the server is taken
        out and put back with ``mcp_set_servers`` (the control request the
        TypeScript SDK's ``setMcpServers`` sends; this SDK has no method for
        it): putting it back is a new handshake on the same server, which
        lists the new set."""
        query = getattr(self._client, "_query", None)
        send = getattr(query, "_send_control_request", None)
        if send is None:
            log.warning("%s: this SDK cannot offer the client tools again; the next conversation will", self._label)
            return
        config = {CLIENT_TOOL_SERVER: {"type": "sdk", "name": CLIENT_TOOL_SERVER}}
        try:
            with trio.move_on_after(self._cancel_grace):
                await send({"subtype": "mcp_set_servers", "servers": {}})
                await send({"subtype": "mcp_set_servers", "servers": config})
        except Exception as exc:  # noqa: BLE001 - the turn runs with the set the CLI has
            log.warning("%s: the client tools could not be offered again: %s", self._label, exc)

    def _client_call_joined(self, call: ClientCall) -> None:
        """A handler is joined to the call the frame opened: the call runs,
        and the host is told it waits on a client."""
        assert call.call_id is not None
        name = call.name[len(call.client_id) + 2 :]
        self._emit(
            Update(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": call.call_id,
                    "status": "in_progress",
                    "title": self._tools.title(CLIENT_TOOL_PREFIX + call.name) or name,
                    "kind": "other",
                    "rawInput": dict(call.arguments),
                    "_meta": {
                        CONTRIBUTOR_META: {"kind": "client", "clientId": call.client_id},
                        "claudeCode": {"toolName": CLIENT_TOOL_PREFIX + call.name},
                    },
                }
            )
        )
        self._emit(
            ClientToolCall(
                tool_call_id=call.call_id, client_id=call.client_id, tool_name=name, arguments=dict(call.arguments)
            )
        )

    def _client_contributor(self, update: dict[str, Any]) -> None:
        """A call of a client's tool is that client's, not the ``ahp`` server's."""
        if update.get("sessionUpdate") not in ("tool_call", "tool_call_update"):
            return
        meta = update.get("_meta") or {}
        name = (meta.get("claudeCode") or {}).get("toolName")
        if not isinstance(name, str):
            return
        owner = self._tools.owner(name)
        if owner is not None:
            update["_meta"] = {**meta, CONTRIBUTOR_META: {"kind": "client", "clientId": owner}}
            if update.get("title"):
                update["title"] = self._tools.title(name) or update["title"]

    def _mcp_contributor(self, update: dict[str, Any]) -> None:
        """A call of a configured MCP server's tool (``mcp__<server>__<tool>``)
        is that server's: its contributor names the server's customization,
        which is how a sign-in the server asks for is joined to the call."""
        if update.get("sessionUpdate") not in ("tool_call", "tool_call_update"):
            return
        meta = update.get("_meta") or {}
        name = (meta.get("claudeCode") or {}).get("toolName")
        if CONTRIBUTOR_META in meta or not isinstance(name, str) or not name.startswith("mcp__"):
            return
        server = name[len("mcp__") :].split("__", 1)[0]
        if server and server != CLIENT_TOOL_SERVER:
            contributor = {"kind": "mcp", "customizationId": f"{self._provider}.mcp:{server}"}
            update["_meta"] = {**meta, CONTRIBUTOR_META: contributor}

    # -- the CLI's side -------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        try:
            self._events(event)
        except Exception:  # noqa: BLE001 - the host's sink failing must not break the agent's stream
            log.exception("%s: the event sink failed on %r", self._label, type(event).__name__)

    def _stderr(self, line: str) -> None:
        self._stderr_tail.append(line)
        log.debug("%s stderr: %s", self._label, line)

    def _cancel_pending(self) -> None:
        for asked in list(self._asked.values()):
            asked.answered.set()  # option_id stays None: cancelled
        self._tools.fail_all(ENDED)

    async def _can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        """The CLI asks before a tool it will not run on its own."""
        from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny  # see the module's docstring

        if tool_name.startswith(CLIENT_TOOL_PREFIX) and not self._tools.asks(tool_name):
            # A client's tool: the client announced it to be run, and runs it.
            return PermissionResultAllow(updated_input=tool_input)
        number = next(self._ids)
        call_id = context.tool_use_id or f"claude-call-{number}"
        # A subagent's call is its own mapper's, and asked in its worker chat.
        shown = dict(tool_input)  # as the model wrote it: the sourcing of a shell init script is ours
        if tool_name == "Bash" and isinstance(shown.get("command"), str):
            shown["command"] = self.shell.strip(shown["command"])
        announced = self._mapper.announce_for(getattr(context, "agent_id", None), call_id, tool_name, shown)
        if announced["sessionUpdate"] == "tool_call":
            self._emit(Update(announced))  # asked before the stream named it
        call = {**announced, "sessionUpdate": "tool_call_update", "status": "pending"}
        diff = pending_edit(tool_name, tool_input, self.root)
        if diff is not None:
            call["content"] = [diff]
        request_id = f"permission-{number}"
        asked = self._asked[request_id] = _Asked()
        try:
            self._emit(PermissionRequest(request_id=request_id, tool_call=call, options=list(_OPTIONS)))
            await asked.answered.wait()
        finally:
            self._asked.pop(request_id, None)
        if asked.option_id == "allow":
            return PermissionResultAllow(updated_input=tool_input)
        if asked.option_id is None:
            return PermissionResultDeny(message="The tool call was cancelled.", interrupt=True)
        return PermissionResultDeny(message=_DENIED)

    async def _read_loop(self, client: ClaudeSDKClient | None) -> None:
        """Every message ``client`` writes, in order, until it stops writing."""
        assert client is not None
        reason = "Claude Code exited"
        try:
            # The SDK says AsyncIterator; what it returns is an async generator, which has aclose.
            async with aclosing(client.receive_messages()) as messages:  # type: ignore[type-var]
                async for message in messages:
                    self._on_message(message)
        except Exception as exc:  # noqa: BLE001 - a CLI that dies is said, not raised
            reason = words(exc, self)
        else:
            tail = stderr_tail(self)
            if tail:
                reason = f"{reason}: {tail}"
        if self._client is client:  # not a CLI a rewind let go of
            self._die(reason)

    def _on_message(self, message: Any) -> None:
        from claude_agent_sdk import AssistantMessage, ResultMessage, SystemMessage, ToolUseBlock  # see the docstring

        if isinstance(message, SystemMessage) and message.subtype == "init" and self.model is None:
            chosen = (message.data or {}).get("model")
            self.say_model(chosen if isinstance(chosen, str) else None)
        if isinstance(message, SystemMessage) and message.subtype == "init" and self._on_init is not None:
            commands = self._on_init(message.data or {})
            if commands:
                self._emit(Update({"sessionUpdate": "available_commands_update", "availableCommands": commands}))
        for update in self._mapper.feed(message):
            self._client_contributor(update)
            self._mcp_contributor(update)
            self._emit(Update(update))
        if isinstance(message, AssistantMessage):
            for block in message.content or []:
                if isinstance(block, ToolUseBlock) and block.name.startswith(CLIENT_TOOL_PREFIX):
                    self._tools.opened(block.id, block.name, block.input)
        if isinstance(message, ResultMessage):
            self._result(message)

    def _result(self, message: ResultMessage) -> None:
        turn = self._turn
        if turn is None or turn.done.is_set():
            log.debug("%s: a result outside a turn: %s", self._label, message.subtype)
            return
        turn.usage = usage_info(
            message.usage,
            model=self._mapper.model,
            cost_usd=message.total_cost_usd,
            model_usage=message.model_usage,
        )
        if turn.cancelled:
            pass
        elif message.is_error:
            turn.error = result_error(message)
        elif message.subtype == "error_max_turns":
            turn.stop_reason = "max_turn_requests"
        else:
            turn.stop_reason = _STOP_REASONS.get(message.stop_reason or "end_turn", "end_turn")
        turn.done.set()

    def _die(self, reason: str) -> None:
        if self.end_reason is None:
            self.end_reason = reason
        turn = self._turn
        if turn is not None and not turn.done.is_set():
            if not turn.cancelled:
                turn.error = self.end_reason
            turn.done.set()
        self._cancel_pending()
        self._ended.set()


# -- helpers ----------------------------------------------------------------------------


def configured_servers(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The CLI's MCP servers from its ``mcp_status`` answer, without our own ``ahp``."""
    return [
        dict(s) for s in status.get("mcpServers") or [] if isinstance(s, dict) and s.get("name") != CLIENT_TOOL_SERVER
    ]


def prompt_text(text: str, attachments: Sequence[dict[str, Any]]) -> str:
    """The user message as the CLI takes it: the text, then the files attached
    as ``@path`` mentions, which the CLI reads in itself."""
    mentions = []
    for attachment in attachments:
        if attachment.get("type") == "text":  # what the host resolved for the agent (annotations)
            mentions.append(str(attachment.get("text", "")))
            continue
        uri = attachment.get("uri") or (attachment.get("resource") or {}).get("uri")
        if isinstance(uri, str) and uri.startswith("file://"):
            mentions.append("@" + unquote(urlparse(uri).path))
    return "\n".join([text, *mentions]) if mentions else text


def result_error(message: ResultMessage) -> str:
    """An error result in the CLI's own words."""
    if message.errors:
        return "; ".join(str(e) for e in message.errors)
    if isinstance(message.result, str) and message.result.strip():
        return message.result.strip()
    if message.api_error_status is not None:
        return f"API error (HTTP {message.api_error_status})"
    return message.subtype or "Claude Code failed the turn"


def stderr_tail(conversation: ClaudeConversation) -> str:
    """The CLI's last few lines on standard error: often the only reason it gives."""
    return " | ".join(line for line in list(conversation._stderr_tail)[-3:] if line.strip())


def words(exc: BaseException, conversation: ClaudeConversation) -> str:
    """A failure said for a person: the error, and what the CLI said about it."""
    text = str(exc) or type(exc).__name__
    tail = stderr_tail(conversation)
    return f"{text} ({tail})" if tail and tail not in text else text
