"""Claude Code, through the Claude Agent SDK: one CLI conversation per chat.

The SDK (``claude-agent-sdk``) is anyio-based, so it runs under trio as it
is - no asyncio bridge. It starts the bundled Claude Code CLI and speaks
newline-delimited JSON with it (``stream-json``), with ``control_request`` /
``control_response`` pairs for the questions either side asks: the CLI asks
``can_use_tool`` before a tool it will not run on its own, and we ask
``interrupt``.

A chat is one :class:`ClaudeConversation`, held open in the chat's nursery
for the chat's whole life: the CLI's input stays open between turns (which
is also what lets a steering message reach a running turn), a single reader
task takes every message the CLI writes and hands it, mapped to ACP-shaped
updates by :class:`~ahpd.backends._claude_wire.StreamMapper`, to the event
sink. A turn is one user message in and one ``result`` out:

* ``can_use_tool`` becomes a :class:`PermissionRequest` under the agent's own
  ``tool_use`` id, answered through :meth:`ClaudeConversation.answer_permission`;
  a Write, Edit or MultiEdit carries the change it would make as ACP
  ``diff`` content;
* an error result ("Not logged in · Please run /login") fails the turn with
  the CLI's own words, and so does a CLI that dies - never a hang;
* cancelling interrupts the CLI, which answers the turn with a result;
* the active clients' tools ride the in-process MCP server ``ahp``
  (:mod:`~ahpd.backends._claude_tools`): a call of one is announced with
  the client as its contributor, runs without asking, and becomes a
  :class:`ClientToolCall` the host answers with the client's result.

A conversation's id is the CLI's session id. A new one is chosen here (or by
the caller) and handed to the CLI with ``--session-id``, so it is known
before the first prompt and a resume after a restart finds the transcript
under the same name.
"""

from __future__ import annotations

import itertools
import logging
import os
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ahpd.backends import _claude_plugins, _claude_transcripts
from ahpd.backends._claude_tools import CONTRIBUTOR_META, ENDED, LEFT, ClientCall, ClientTools
from ahpd.backends._claude_tools import PREFIX as CLIENT_TOOL_PREFIX
from ahpd.backends._claude_tools import SERVER_NAME as CLIENT_TOOL_SERVER
from ahpd.backends._claude_wire import (
    StreamMapper,
    available_commands,
    models_from_init,
    pending_edit,
    usage_info,
)
from ahpd.backends._paths import ignore, scratch_root, working_root
from ahpd.backends.port import (
    BackendError,
    ClientToolCall,
    Conversation,
    Event,
    EventSink,
    PermissionOption,
    PermissionRequest,
    PromptResult,
    StoredConversation,
    Update,
)

if TYPE_CHECKING:
    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, ResultMessage, ToolPermissionContext
    from claude_agent_sdk import Transport as SdkTransport

log = logging.getLogger("ahpd.backends.claude")


def _load() -> None:
    """Import the Claude Agent SDK on first use (a probe or a conversation),
    not with this module: it is most of a daemon's start-up otherwise."""
    global AssistantMessage, ClaudeAgentOptions, ClaudeSDKClient, PermissionResultAllow
    global PermissionResultDeny, ResultMessage, SystemMessage, ToolUseBlock
    if "ToolUseBlock" in globals():
        return  # loaded already
    from claude_agent_sdk import (
        AssistantMessage,
        ClaudeAgentOptions,
        ClaudeSDKClient,
        PermissionResultAllow,
        PermissionResultDeny,
        ResultMessage,
        SystemMessage,
        ToolUseBlock,
    )


PROVIDER = "claude"
ANTHROPIC_RESOURCE = "https://api.anthropic.com"

_OPTIONS = (
    PermissionOption("allow", "Allow", "allow_once"),
    PermissionOption("deny", "Deny", "reject_once"),
)
_DENIED = "The user denied this tool call."
_STOP_REASONS = {"end_turn": "end_turn", "max_tokens": "max_tokens", "refusal": "refusal",
                 "stop_sequence": "end_turn", "tool_use": "end_turn"}

TransportFactory = Callable[["ClaudeAgentOptions"], "SdkTransport"]


class ClaudeBackend:
    """The ``claude`` provider: Claude Code via the Claude Agent SDK."""

    #: Where a person adds a command or a skill, relative to the session's
    #: folder: the containers its customizations are published under.
    customization_dirs = {"prompt": ".claude/commands", "skill": ".claude/skills", "agent": ".claude/agents"}
    #: A conversation can be resumed at a point of its transcript
    #: (:meth:`ClaudeConversation.rewind`): ``chat/truncated`` and ``chat/turnResume``.
    rewinds = True

    def __init__(
        self,
        provider: str = PROVIDER,
        *,
        cli_path: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        model: str | None = None,
        display_name: str = "Claude Code",
        description: str = "Anthropic's Claude Code agent, through the Claude Agent SDK",
        transport_factory: TransportFactory | None = None,
        start_timeout: float = 60.0,
        cancel_grace: float = 30.0,
        shutdown_timeout: float = 20.0,
    ) -> None:
        self.provider = provider
        self.cli_path = cli_path
        #: Set over the daemon's own environment for every CLI, never instead of it.
        self.env = dict(env or {})
        self.model = model
        self.display_name = display_name
        self.description = description
        self.transport_factory = transport_factory
        self.start_timeout = start_timeout
        self.cancel_grace = cancel_grace
        self.shutdown_timeout = shutdown_timeout
        #: What the CLI said about itself at ``initialize`` (the boot probe's
        #: answer, or the latest conversation's): models, commands, agents.
        self.server_info: dict[str, Any] | None = None
        #: The skills the CLI named in a turn's ``init`` message (initialize
        #: does not tell a skill from a prompt), or None before any turn.
        self.skills: list[str] | None = None
        self._models: list[dict[str, Any]] = []

    # -- AgentInfo ----------------------------------------------------------------

    def agent_info(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "displayName": self.display_name,
            "description": self.description,
            "models": [dict(m) for m in self._models],
            "protectedResources": [{"resource": ANTHROPIC_RESOURCE, "required": False}],
        }

    #: The MCP servers the CLI has configured (its ``mcp_status``), from the
    #: probe; our own in-process ``ahp`` server is not among them.
    mcp_servers: list[dict[str, Any]] = []
    #: The plugins the CLI loads (its ``reload_plugins`` answer), from the probe.
    plugins: list[dict[str, Any]] = []

    @property
    def subagents(self) -> list[dict[str, Any]]:
        """The subagents the CLI offers (``name``, ``description``), from the probe."""
        agents = (self.server_info or {}).get("agents")
        return [a for a in agents if isinstance(a, dict)] if isinstance(agents, list) else []

    @property
    def commands(self) -> list[dict[str, Any]]:
        """The CLI's slash commands, as ACP ``AvailableCommand`` wire JSON."""
        return available_commands((self.server_info or {}).get("commands"), self.skills)

    def config_properties(self) -> dict[str, dict[str, Any]]:
        """The session config the CLI takes: the model. Its thinking level is
        each model's own ``configSchema`` (``thinkingLevel``), so no
        session-wide effort key is offered beside it."""
        if not self._models:
            return {}
        model: dict[str, Any] = {
            "type": "string", "title": "Model", "enum": [m["id"] for m in self._models],
            "enumLabels": [m["name"] for m in self._models], "sessionMutable": True,
        }
        if self.model in model["enum"]:
            model["default"] = self.model
        return {"model": model}

    def _learn(self, info: Mapping[str, Any] | None) -> bool:
        """Keep what the CLI said at ``initialize``; True when the models moved."""
        if not info:
            return False
        self.server_info = dict(info)
        models = models_from_init(self.provider, info.get("models"))
        if models and models != self._models:
            self._models = models
            return True
        return False

    async def probe(self, cwd: Path | None = None) -> bool:
        """The boot probe: start a CLI, read what ``initialize`` answers
        (models, commands, agents), and stop it. No model is called. True
        when :meth:`agent_info` changed, so the host sends
        ``root/agentsChanged`` again. Failure is logged, never raised."""
        _load()
        root = working_root(cwd or scratch_root())
        conversation = ClaudeConversation(str(uuid.uuid4()), ignore, root, self.provider)
        options = self._options(root, conversation, resume_id=None, session_id=None, api_key=None)
        client = ClaudeSDKClient(options, transport=self.transport_factory(options) if self.transport_factory else None)
        try:
            with trio.fail_after(self.start_timeout):
                await client.connect()
                changed = self._learn(await client.get_server_info())
            with trio.move_on_after(self.start_timeout):
                status = await client.get_mcp_status()
                servers = [s for s in status.get("mcpServers") or []
                           if isinstance(s, dict) and s.get("name") != CLIENT_TOOL_SERVER]
                if servers != self.mcp_servers:
                    self.mcp_servers = servers
                    changed = True
                try:  # a seed for the sessions' lists; AgentInfo does not carry them
                    self.plugins = _claude_plugins.loaded(await _claude_plugins.reload(client))
                except Exception as exc:  # noqa: BLE001 - a CLI that lists no plugins spoils nothing else
                    log.info("%s: the boot probe read no plugins: %s", self.provider, exc)
            return changed
        except Exception as exc:  # noqa: BLE001 - a probe that fails leaves the list as it was
            log.warning("%s: the boot probe failed: %s", self.provider, _words(exc, conversation))
            return False
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(self.shutdown_timeout):
                await client.disconnect()

    # -- conversations --------------------------------------------------------------

    def _options(
        self, root: Path, conversation: ClaudeConversation, *, resume_id: str | None,
        session_id: str | None, api_key: str | None, resume_at: str | None = None,
    ) -> ClaudeAgentOptions:
        settings = conversation.settings
        # The daemon's own environment, then ours: whether or not the SDK
        # merges ``env`` over it, the CLI never starts on a lone credential.
        env = {k: v for k, v in os.environ.items() if k != "CLAUDECODE"}
        env.update(self.env)
        if api_key:
            env["ANTHROPIC_API_KEY"] = api_key
        return ClaudeAgentOptions(
            cwd=str(root),
            cli_path=self.cli_path,
            env=env,
            model=settings.get("model") or self.model,
            effort=settings.get("effortLevel"),
            add_dirs=list(conversation.add_dirs),
            resume=resume_id,
            resume_session_at=resume_at,
            session_id=session_id,
            include_partial_messages=True,
            can_use_tool=conversation._can_use_tool,
            stderr=conversation._stderr,
            mcp_servers={CLIENT_TOOL_SERVER: conversation._tools.server_config()},
            plugins=_claude_plugins.local(conversation.plugins),
            settings=_claude_plugins.settings(conversation.plugin_switches),
            # When to record an artifact, said where the CLI's prompt takes an append.
            system_prompt=({"type": "preset", "preset": "claude_code", "append": instructions}
                           if (instructions := getattr(conversation._tools.host_tools, "instructions", None))
                           else None),
        )

    async def run_conversation(
        self,
        *,
        cwd: Path,
        events: EventSink,
        resume_id: str | None = None,
        task_status: trio.TaskStatus[Conversation] = trio.TASK_STATUS_IGNORED,
        api_key: str | None = None,
        session_id: str | None = None,
        client_tools: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        host_tools: Any = None,
        additional_directories: Sequence[Path] = (),
        config: Mapping[str, Any] | None = None,
        plugins: Sequence[Path] = (),
        plugin_switches: Mapping[str, bool] | None = None,
        resume_at: str | None = None,
    ) -> None:
        """Start the CLI in ``cwd`` on a new conversation (under ``session_id``
        when given, a UUID the caller chose) or on ``resume_id``'s, hand over
        the conversation, and keep the CLI until cancelled.

        ``api_key`` is a token a client pushed for ``https://api.anthropic.com``;
        it reaches the CLI as ``ANTHROPIC_API_KEY`` over the daemon's own
        environment. Raises :class:`BackendError` when the CLI cannot start
        (before ``task_status.started``); once started, a CLI that dies makes
        this *return*, with the reason in ``conversation.end_reason``.

        ``client_tools`` is what the session's active clients announce
        (client id -> ``ToolDefinition`` list), offered from the start.
        ``plugins`` are plugin directories the CLI loads beside its own, and
        ``plugin_switches`` the session's ``enabledPlugins`` (source -> on);
        the CLI takes directories only when it starts. ``resume_at`` is a
        :attr:`ClaudeConversation.rewind_point` to resume ``resume_id`` at
        (a rewind still to be made), said back as ``resumed_at``."""
        _load()
        root = working_root(cwd)
        if session_id is not None and not _is_uuid(session_id):
            raise BackendError(f"a Claude session id must be a UUID, not {session_id!r}")
        backend_id = resume_id or session_id or str(uuid.uuid4())
        if resume_id is not None and await trio.to_thread.run_sync(_claude_transcripts.state_file, resume_id) is None:
            # A CLI that never had a turn wrote no transcript, and the CLI
            # refuses to resume one it cannot find ("No conversation found"):
            # there is nothing to resume, so it starts anew under the same id.
            log.info("%s[%s]: no transcript to resume; starting it anew under its id", self.provider, resume_id)
            resume_id = None
        conversation = ClaudeConversation(backend_id, events, root, self.provider, cancel_grace=self.cancel_grace)
        conversation._on_init = self._learn_init
        conversation._tools.host_tools = host_tools  # the host's own, on the same server
        if client_tools or host_tools is not None:
            conversation._tools.set(client_tools or {})
        # What the CLI starts with: it takes its directories and its effort
        # only here, so a change of either starts it again, resumed.
        conversation.add_dirs = [str(working_root(d)) for d in additional_directories]
        conversation.settings = {k: v for k, v in (config or {}).items() if k in ("model", "effortLevel") and v}
        conversation.plugins = [str(p) for p in plugins]
        conversation.plugin_switches = dict(plugin_switches or {})
        conversation._on_commands = self._commands_now

        async def connect(resume: str | None, at: str | None = None) -> ClaudeSDKClient:
            options = self._options(root, conversation, resume_id=resume, session_id=None if resume else backend_id,
                                    api_key=api_key, resume_at=at)
            client = ClaudeSDKClient(options, transport=self.transport_factory(options) if self.transport_factory else None)
            try:
                with trio.fail_after(self.start_timeout):
                    await client.connect()
            except trio.TooSlowError:
                raise BackendError(f"Claude Code did not start within {self.start_timeout:g} s") from None
            except Exception as exc:  # noqa: BLE001 - the SDK raises several kinds; all mean "did not start"
                raise BackendError(f"Claude Code did not start: {_words(exc, conversation)}") from None
            return client

        async def restart(point: str | None) -> ClaudeSDKClient:
            """The CLI again, resumed at ``point`` (None: the conversation
            begun again under its own id, its transcript deleted)."""
            if point is None:
                await _claude_transcripts.delete_conversation(backend_id)
            return await connect(backend_id if point else None, point)

        try:
            at = resume_at if resume_id is not None else None
            conversation._client = await connect(resume_id, at)
            conversation.resumed_at = at
            if self._learn(await conversation._client.get_server_info()):
                log.info("%s: the CLI reported %d models", self.provider, len(self._models))
            if self.commands:
                conversation._emit(Update({"sessionUpdate": "available_commands_update",
                                           "availableCommands": self.commands}))
            async with trio.open_nursery() as nursery:
                conversation._restart = restart
                conversation._nursery = nursery
                conversation._start_reading()
                task_status.started(conversation)
                await conversation._ended.wait()
                nursery.cancel_scope.cancel()
            log.warning("%s[%s]: the conversation ended: %s", self.provider, backend_id, conversation.end_reason)
        finally:
            conversation._cancel_pending()
            conversation._shells_gone()
            with trio.CancelScope(shield=True), trio.move_on_after(self.shutdown_timeout):
                try:
                    if conversation._client is not None:
                        await conversation._client.disconnect()
                except Exception:  # noqa: BLE001 - closing is best effort, and logged
                    log.exception("%s[%s]: closing the CLI failed", self.provider, backend_id)

    def _commands_now(self, commands: Any) -> list[dict[str, Any]]:
        """The commands a reload answered (a plugin switched moves them): kept, and re-marked."""
        if isinstance(commands, list):
            self.server_info = {**(self.server_info or {}), "commands": commands}
        return self.commands

    def _learn_init(self, data: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """A turn's ``init`` system message: which commands are skills. The
        commands, re-marked, when that changed what the session was told."""
        skills = data.get("skills")
        if not isinstance(skills, list):
            return None
        skills = [s for s in skills if isinstance(s, str)]
        if skills == self.skills:
            return None
        self.skills = skills
        return self.commands

    async def list_conversations(self) -> list[StoredConversation]:
        """Past sessions, from the CLI's transcripts (a file read, no CLI)."""
        return await _claude_transcripts.list_conversations()

    def state_file(self, backend_id: str) -> Path | None:
        """The CLI's own transcript of a conversation (the window's debug view)."""
        return _claude_transcripts.state_file(backend_id)

    async def delete_conversation(self, backend_id: str) -> bool:
        """Delete the session's transcript; False when there is none."""
        return await _claude_transcripts.delete_conversation(backend_id)

    async def read_subagents(self, backend_id: str) -> dict[str, _claude_transcripts.HistoryTurn]:
        """A past session's subagents, each as its worker chat's one turn, by
        the call that spawned it (a file read, no CLI)."""
        return await _claude_transcripts.read_subagents(backend_id)

    async def read_history(self, backend_id: str) -> list[_claude_transcripts.HistoryTurn]:
        """A past session's turns as a live one would have streamed them
        (a file read, no CLI): feed each turn's updates to a
        ``TurnTranslator`` to rebuild the same turn shapes."""
        return await _claude_transcripts.read_history(backend_id)


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

    def __init__(self, backend_id: str, events: EventSink, root: Path, label: str, *, cancel_grace: float = 30.0) -> None:
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
        #: ``enabledPlugins`` switches (:mod:`~ahpd.backends._claude_plugins`).
        self.plugins: list[str] = []
        self.plugin_switches: dict[str, bool] = {}
        #: The rewind point the CLI was started at, if it was started at one.
        self.resumed_at: str | None = None
        self._on_commands: Callable[[Any], list[dict[str, Any]]] | None = None

    async def configure(self, values: Mapping[str, Any]) -> bool:
        """A model is set live (``set_model``); an effort only when the CLI
        starts, so a new one answers False: start again, resumed."""
        wanted = {k: v for k, v in values.items() if k in ("model", "effortLevel") and v}
        if wanted.get("effortLevel") != self.settings.get("effortLevel"):
            return False
        if wanted.get("model") and wanted["model"] != self.settings.get("model") and self._client is not None:
            try:
                await self._client.set_model(wanted["model"])
            except Exception as exc:  # noqa: BLE001 - the CLI's refusal, in its words
                raise BackendError(f"Claude Code did not take the model {wanted['model']!r}: {exc}") from None
            self.settings["model"] = wanted["model"]
        return True

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
                raise BackendError(self.end_reason or _words(exc, self)) from None
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
        except Exception as exc:  # noqa: BLE001
            raise BackendError(self.end_reason or _words(exc, self)) from None

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
        status = await self._control().get_mcp_status()
        return [s for s in status.get("mcpServers") or [] if isinstance(s, dict) and s.get("name") != CLIENT_TOOL_SERVER]

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
            self._emit(Update({"sessionUpdate": "available_commands_update",
                               "availableCommands": self._on_commands(answer["commands"])}))
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
        name = call.name[len(call.client_id) + 2:]
        self._emit(Update({
            "sessionUpdate": "tool_call_update", "toolCallId": call.call_id, "status": "in_progress",
            "title": self._tools.title(CLIENT_TOOL_PREFIX + call.name) or name, "kind": "other",
            "rawInput": dict(call.arguments),
            "_meta": {CONTRIBUTOR_META: {"kind": "client", "clientId": call.client_id},
                      "claudeCode": {"toolName": CLIENT_TOOL_PREFIX + call.name}},
        }))
        self._emit(ClientToolCall(tool_call_id=call.call_id, client_id=call.client_id, tool_name=name,
                                  arguments=dict(call.arguments)))

    def _client_contributor(self, update: dict[str, Any]) -> None:
        """A call of a client's tool is that client's, not the ``ahp`` server's."""
        if update.get("sessionUpdate") not in ("tool_call", "tool_call_update"):
            return
        meta = update.get("_meta") or {}
        name = (meta.get("claudeCode") or {}).get("toolName")
        owner = self._tools.owner(name) if isinstance(name, str) else None
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
        server = name[len("mcp__"):].split("__", 1)[0]
        if server and server != CLIENT_TOOL_SERVER:
            update["_meta"] = {**meta, CONTRIBUTOR_META: {"kind": "mcp", "customizationId": f"{self._provider}.mcp:{server}"}}

    # -- the CLI's side -------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        try:
            self._events(event)
        except Exception:
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
        if tool_name.startswith(CLIENT_TOOL_PREFIX) and not self._tools.asks(tool_name):
            # A client's tool: the client announced it to be run, and runs it.
            return PermissionResultAllow(updated_input=tool_input)
        number = next(self._ids)
        call_id = context.tool_use_id or f"claude-call-{number}"
        # A subagent's call is its own mapper's, and asked in its worker chat.
        announced = self._mapper.announce_for(getattr(context, "agent_id", None), call_id, tool_name, tool_input)
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
            async with aclosing(client.receive_messages()) as messages:
                async for message in messages:
                    self._on_message(message)
        except Exception as exc:  # noqa: BLE001 - a CLI that dies is said, not raised
            reason = _words(exc, self)
        else:
            tail = _tail(self)
            if tail:
                reason = f"{reason}: {tail}"
        if self._client is client:  # not a CLI a rewind let go of
            self._die(reason)

    def _on_message(self, message: Any) -> None:
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
            message.usage, model=self._mapper.model, cost_usd=message.total_cost_usd, model_usage=message.model_usage,
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
            from urllib.parse import unquote, urlparse

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


def _tail(conversation: ClaudeConversation) -> str:
    return " | ".join(line for line in list(conversation._stderr_tail)[-3:] if line.strip())


def _words(exc: BaseException, conversation: ClaudeConversation) -> str:
    text = str(exc) or type(exc).__name__
    tail = _tail(conversation)
    return f"{text} ({tail})" if tail and tail not in text else text


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


