"""Claude Code, through the Claude Agent SDK: one CLI conversation per chat.

The SDK (``claude-agent-sdk``) is anyio-based, so it runs under trio as it
is - no asyncio bridge. It starts the bundled Claude Code CLI and speaks
newline-delimited JSON with it (``stream-json``), with ``control_request`` /
``control_response`` pairs for the questions either side asks: the CLI asks
``can_use_tool`` before a tool it will not run on its own, and we ask
``interrupt``.

A chat is one :class:`~ahpd.backends.claude.conversation.ClaudeConversation`,
held open in the chat's nursery for the chat's whole life; this module is
the provider: what the CLI offers (its boot probe), how a CLI is started on
a conversation (and started again at a rewind point), and the past
conversations its transcripts keep.

A conversation's id is the CLI's session id. A new one is chosen here (or by
the caller) and handed to the CLI with ``--session-id``, so it is known
before the first prompt and a resume after a restart finds the transcript
under the same name.

The SDK is imported on first use, never with this module: it is about a
second of a daemon's start-up and ~60 MB otherwise (``python -X importtime
-c 'import claude_agent_sdk'``). Until a conversation of this backend starts
(and loads it here), the boot probe and the transcripts' catalogue ask it
from a child process (``ahpd.backends.claude.catalogue``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ahpd.backends.claude import plugins as _claude_plugins, shell_init, transcripts as _claude_transcripts
from ahpd.backends.claude.conversation import ClaudeConversation, configured_servers, words
from ahpd.backends.claude.tools import SERVER_NAME as CLIENT_TOOL_SERVER
from ahpd.backends.claude.offers import available_commands, models_from_init
from ahpd.backends._paths import ignore, scratch_root, working_root
from ahpd.backends.port import (
    BackendError,
    Conversation,
    EventSink,
    HistoryTurn,
    ProbeListing,
    StoredConversation,
    Update,
)
from ahpd.ports import threads

if TYPE_CHECKING:
    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient
    from claude_agent_sdk import Transport as SdkTransport

__all__ = ["ANTHROPIC_RESOURCE", "PROVIDER", "ClaudeBackend", "ClaudeConversation", "TransportFactory"]

log = logging.getLogger("ahpd.backends.claude.backend")

PROVIDER = "claude"
ANTHROPIC_RESOURCE = "https://api.anthropic.com"

TransportFactory = Callable[["ClaudeAgentOptions"], "SdkTransport"]

#: A preset's ``sandbox``: leave it to the CLI's settings files, or set it on or off.
SANDBOX_MODES = ("default", "on", "off")
#: The reference host's session key for the sandbox. Not declared here (a
#: preset decides), but a session stored while a window could set it may
#: still hold an "on", which is kept: an upgrade never runs a session less
#: sandboxed than it was (:meth:`ClaudeBackend.sandbox_for`).
STORED_SANDBOX_KEY = "sandboxEnabled"


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
        sandbox: str = "default",
    ) -> None:
        if sandbox not in SANDBOX_MODES:
            raise ValueError(f"sandbox is one of {', '.join(SANDBOX_MODES)}, not {sandbox!r}")
        self.provider = provider
        #: The preset's sandbox for shell commands (:data:`SANDBOX_MODES`).
        self.sandbox = sandbox
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
        #: A conversation of this backend has started: the SDK is loaded in this process.
        self._conversed = False
        #: The boot probe's child lists the transcripts too (the SDK is loaded
        #: there anyway); a listing asked meanwhile takes that answer.
        self.probe_listing = ProbeListing()

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

    #: Session config keys kept for a backend that no longer declares them
    #: (the host hands them on with the rest): the stored sandbox.
    config_kept = (STORED_SANDBOX_KEY,)

    def sandbox_for(self, stored: Any) -> dict[str, Any] | None:
        """The SDK's ``sandbox`` option for a session whose config holds
        ``stored`` under :data:`STORED_SANDBOX_KEY`: the preset's, except
        that a stored "on" makes a preset's "default" on. A preset's "off"
        is somebody asking for no sandbox, and wins. None leaves it to the
        CLI's own settings. "on" also forbids the model's way around it
        (``allowUnsandboxedCommands``) and a CLI that cannot make one
        (``failIfUnavailable``: without bubblewrap on Linux it refuses to
        start, in its own words): never a command run outside one."""
        mode = self.sandbox
        if mode == "default" and stored in ("on", True):
            mode = "on"
        if mode == "on":
            return {"enabled": True, "failIfUnavailable": True, "allowUnsandboxedCommands": False}
        if mode == "off":
            return {"enabled": False}
        return None

    def config_properties(self) -> dict[str, dict[str, Any]]:
        """The session config the CLI takes: the model, and the shell init
        scripts (:mod:`~ahpd.backends.claude.shell_init`). A model's thinking
        level is its own ``configSchema`` (``thinkingLevel``), so no
        session-wide effort key is offered beside it; the sandbox is the
        preset's (:meth:`sandbox_for`), so no key is offered for it."""
        if not self._models:
            return {shell_init.KEY: dict(shell_init.PROPERTY)}
        model: dict[str, Any] = {
            "type": "string",
            "title": "Model",
            "enum": [m["id"] for m in self._models],
            "enumLabels": [m["name"] for m in self._models],
            "sessionMutable": True,
        }
        if self.model in model["enum"]:
            model["default"] = self.model
        return {"model": model, shell_init.KEY: dict(shell_init.PROPERTY)}

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
        ``root/agentsChanged`` again. Failure is logged, never raised.

        Asked of a child process (``catalogue``) while no conversation of
        this backend has loaded the SDK here, in this process after."""
        if self._sdk_here():
            return await self.probe_here(cwd)
        async with self.probe_listing.lock:
            learned = await self._ask("probe", cwd=cwd)
            self.probe_listing.keep(learned)
        if not isinstance(learned, dict):
            return False
        changed = self._learn(learned.get("serverInfo"))
        servers = learned.get("mcpServers")
        if isinstance(servers, list) and servers != self.mcp_servers:
            self.mcp_servers = servers
            changed = True
        if isinstance(learned.get("plugins"), list):
            self.plugins = learned["plugins"]
        return changed

    async def probe_here(self, cwd: Path | None = None) -> bool:
        """:meth:`probe`, in this process (the SDK is imported here)."""
        root = working_root(cwd or scratch_root())
        conversation = ClaudeConversation(str(uuid.uuid4()), ignore, root, self.provider)
        options = self._options(root, conversation, resume_id=None, session_id=None, api_key=None)
        client = self._client(options)
        try:
            with trio.fail_after(self.start_timeout):
                await client.connect()
                changed = self._learn(await client.get_server_info())
            with trio.move_on_after(self.start_timeout):
                servers = configured_servers(await client.get_mcp_status())
                if servers != self.mcp_servers:
                    self.mcp_servers = servers
                    changed = True
                try:  # a seed for the sessions' lists; AgentInfo does not carry them
                    self.plugins = _claude_plugins.loaded(await _claude_plugins.reload(client))
                except Exception as exc:  # noqa: BLE001 - a CLI that lists no plugins spoils nothing else
                    log.info("%s: the boot probe read no plugins: %s", self.provider, exc)
            return changed
        except Exception as exc:  # noqa: BLE001 - a probe that fails leaves the list as it was
            log.warning("%s: the boot probe failed: %s", self.provider, words(exc, conversation))
            return False
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(self.shutdown_timeout):
                await client.disconnect()

    # -- conversations --------------------------------------------------------------

    def _client(self, options: ClaudeAgentOptions) -> ClaudeSDKClient:
        """A client for one CLI, over the test's transport when one is set."""
        from claude_agent_sdk import ClaudeSDKClient  # on first use: see the module's docstring

        return ClaudeSDKClient(options, transport=self.transport_factory(options) if self.transport_factory else None)

    def _options(
        self,
        root: Path,
        conversation: ClaudeConversation,
        *,
        resume_id: str | None,
        session_id: str | None,
        api_key: str | None,
        resume_at: str | None = None,
    ) -> ClaudeAgentOptions:
        from claude_agent_sdk import ClaudeAgentOptions, HookMatcher  # on first use: see the module's docstring

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
            sandbox=self.sandbox_for(conversation.stored_sandbox),  # type: ignore[arg-type]
            # The SDK types a hook's input and answer as TypedDicts; ours reads and answers plain dicts.
            hooks={"PreToolUse": [HookMatcher(matcher="Bash", hooks=[conversation.shell.before_bash])]},  # type: ignore[list-item]
            # When to record an artifact, said where the CLI's prompt takes an append.
            system_prompt=(
                {"type": "preset", "preset": "claude_code", "append": instructions}
                if (instructions := getattr(conversation._tools.host_tools, "instructions", None))
                else None
            ),
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
        self._conversed = True  # the SDK is imported here from now on
        root = working_root(cwd)
        if session_id is not None and not _is_uuid(session_id):
            raise BackendError(f"a Claude session id must be a UUID, not {session_id!r}")
        backend_id = resume_id or session_id or str(uuid.uuid4())
        if resume_id is not None and await threads.run("agents", _claude_transcripts.state_file, resume_id) is None:
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
        conversation.stored_sandbox = (config or {}).get(STORED_SANDBOX_KEY)
        if STORED_SANDBOX_KEY in (config or {}):  # what it runs with, so a turn does not ask again
            conversation.settings[STORED_SANDBOX_KEY] = (config or {})[STORED_SANDBOX_KEY]
        if shell_init.KEY in (config or {}):
            await conversation.shell.set((config or {})[shell_init.KEY])
            conversation.settings[shell_init.KEY] = (config or {})[shell_init.KEY]
        conversation.plugins = [str(p) for p in plugins]
        conversation.plugin_switches = dict(plugin_switches or {})
        conversation._on_commands = self._commands_now

        async def connect(resume: str | None, at: str | None = None) -> ClaudeSDKClient:
            options = self._options(
                root,
                conversation,
                resume_id=resume,
                session_id=None if resume else backend_id,
                api_key=api_key,
                resume_at=at,
            )
            client = self._client(options)
            try:
                with trio.fail_after(self.start_timeout):
                    await client.connect()
            except trio.TooSlowError:
                raise BackendError(f"Claude Code did not start within {self.start_timeout:g} s") from None
            except Exception as exc:  # noqa: BLE001 - the SDK raises several kinds; all mean "did not start"
                raise BackendError(f"Claude Code did not start: {words(exc, conversation)}") from None
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
            conversation.say_model(conversation.settings.get("model") or self.model)
            if self._learn(await conversation._client.get_server_info()):
                log.info("%s: the CLI reported %d models", self.provider, len(self._models))
            if self.commands:
                conversation._emit(
                    Update({"sessionUpdate": "available_commands_update", "availableCommands": self.commands})
                )
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
                await conversation.shell.close()

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
        """Past sessions, from the CLI's transcripts (a file read, no CLI). A
        listing the boot probe's child finished after this was asked is as
        new as one started now, so it is taken instead: a daemon's first
        hello loads the SDK into one child, not two."""
        if self._sdk_here():
            return await _claude_transcripts.list_conversations()
        return await self.probe_listing.read(lambda: self._ask("list"))

    def state_file(self, backend_id: str) -> Path | None:
        """The CLI's own transcript of a conversation (the window's debug view)."""
        return _claude_transcripts.state_file(backend_id)

    async def delete_conversation(self, backend_id: str) -> bool:
        """Delete the session's transcript; False when there is none."""
        if self._sdk_here():
            return await _claude_transcripts.delete_conversation(backend_id)
        return await self._ask("delete", backend_id) is True

    async def read_subagents(self, backend_id: str) -> dict[str, _claude_transcripts.HistoryTurn]:
        """A past session's subagents, each as its worker chat's one turn, by
        the call that spawned it (a file read, no CLI)."""
        if self._sdk_here():
            return await _claude_transcripts.read_subagents(backend_id)
        answer = await self._ask("subagents", backend_id)
        return {call: HistoryTurn(**turn) for call, turn in (answer or {}).items()}

    async def read_history(self, backend_id: str) -> list[_claude_transcripts.HistoryTurn]:
        """A past session's turns as a live one would have streamed them
        (a file read, no CLI): feed each turn's updates to a
        ``TurnTranslator`` to rebuild the same turn shapes."""
        if self._sdk_here():
            return await _claude_transcripts.read_history(backend_id)
        return [HistoryTurn(**turn) for turn in await self._ask("history", backend_id) or []]

    # -- the SDK's questions, asked of a child process while it is not loaded here ----

    def _sdk_here(self) -> bool:
        """Whether to ask in this process: a test's transport is here, or a
        conversation has loaded the SDK here already."""
        return self.transport_factory is not None or self._conversed

    async def _ask(self, *argv: str, cwd: Path | None = None) -> Any:
        """Run ``catalogue`` as a child process and read its JSON answer;
        None when it failed (said on the daemon's standard error by the child)."""
        spec = {
            "provider": self.provider,
            "cli_path": None if self.cli_path is None else str(self.cli_path),
            "env": self.env,
            "model": self.model,
            "start_timeout": self.start_timeout,
            "shutdown_timeout": self.shutdown_timeout,
            "cwd": None if cwd is None else str(cwd),
        }
        try:
            with trio.fail_after(self.start_timeout + self.shutdown_timeout + 30):
                done = await trio.run_process(
                    [sys.executable, "-m", "ahpd.backends.claude.catalogue", *argv],
                    stdin=json.dumps(spec).encode(),
                    capture_stdout=True,
                    stderr=None,
                    check=False,
                )
            answer = json.loads(done.stdout or b"null")
        except (OSError, ValueError, trio.TooSlowError) as exc:
            log.warning("%s: asking for %s failed: %s", self.provider, argv[0], exc)
            return None
        if done.returncode != 0:
            log.warning("%s: asking for %s failed (exit status %s)", self.provider, argv[0], done.returncode)
            return None
        return answer


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
