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
  (:class:`~ahpd.backends.acp.client.Client`). The library runs each
  incoming message in its own asyncio task; a ``session/update`` is handed
  to the event sink before the handler's first ``await``, so the tasks,
  started in arrival order, hand updates over in arrival order.

Trio code calls asyncio with ``aio_as_trio(..., loop=loop)`` (the loop is
named, because the host's tasks that call
:class:`~ahpd.backends.acp.session.AcpConversation` do not run inside it);
asyncio handlers call trio with ``trio_as_aio``. Both sides run on one
thread, so the plain synchronous ``answer_permission`` and ``answer_input``
resolve an asyncio future directly.

This module is what the daemon holds for a configured agent, and it loads
no ACP library: the boot probe and the catalogue ask the agent from a
short-lived Python process of their own (``probe``, ``catalogue``),
and a conversation imports :mod:`~ahpd.backends.acp.session`, where the
library is, when it starts. That import is deferred on purpose: the library
with pydantic and trio-asyncio is 0.6-0.9 s of start-up here
(``python -X importtime -c 'import ahpd.backends.acp.session'``), and a
daemon whose clients never run an ACP agent never needs it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from ahpd.backends.acp import settings as _acp_settings
from ahpd.backends.port import (
    BackendError,
    Conversation,
    EventSink,
    HistoryTurn,
    ProbeListing,
    StoredConversation,
    ran_note,
)

log = logging.getLogger("ahpd.backends.acp.backend")

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024

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
        #: Its lock is held by the boot probe and by a listing, so a listing never
        #: sees the conversation the probe makes and deletes again.
        self.probe_listing = ProbeListing()
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
            raise BackendError(
                f"cannot start the {self.provider} agent: command {self.command!r} is not found or not executable"
            )

    async def probe(self) -> bool:
        """The boot probe: what a composer shows before any session's agent
        runs - the models and slash commands a new conversation is offered
        (:meth:`learn`). It runs in a short-lived Python process of its own
        (``ahpd.backends.acp.probe``), which speaks the few calls it needs
        without the ACP library; the daemon holds the library only once a
        turn needs it.
        True when :meth:`agent_info` or the commands changed. Failure is
        logged, never raised."""
        spec = {
            "provider": self.provider,
            "command": self.command,
            "args": list(self.args),
            "env": self.env,
            "call_timeout": self.call_timeout,
        }
        try:
            with trio.fail_after(self.call_timeout + 30):
                async with self.probe_listing.lock:
                    done = await trio.run_process(
                        [sys.executable, "-m", "ahpd.backends.acp.probe", json.dumps(spec)],
                        capture_stdout=True,
                        stderr=None,
                        check=False,
                    )
                    learned = json.loads(done.stdout or b"null")
                    if done.returncode == 0:
                        self.probe_listing.keep(learned)
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
        """Ask the agent, in this process and through the ACP library, what a
        new conversation is offered (see :func:`_acp_session.learn`; the boot
        probe's own process learns the same without the library)."""
        from ahpd.backends.acp import session as _acp_session

        return await _acp_session.learn(self)

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
        """Start the agent in ``cwd`` and keep it until cancelled: see
        :func:`_acp_session.run_conversation`."""
        from ahpd.backends.acp import session as _acp_session

        await _acp_session.run_conversation(
            self,
            cwd=cwd,
            events=events,
            resume_id=resume_id,
            task_status=task_status,
            terminals=terminals,
            host_tools=host_tools,
            additional_directories=additional_directories,
            config=config,
        )

    async def delete_conversation(self, backend_id: str) -> bool:
        """``session/delete``, when the agent offers it (an agent started for it)."""
        from ahpd.backends.acp import session as _acp_session

        return await _acp_session.delete_conversation(self, backend_id)

    # -- the catalogue: the agent's own stored conversations, asked of a child process ----

    async def list_conversations(self) -> list[StoredConversation]:
        """``session/list``, when the agent offers it (a short-lived process,
        ``catalogue``). A listing the boot probe finished after this was
        asked is as new as one started now, so it is taken instead: the
        first reading of the catalogue, at a daemon's first hello, starts no
        agent beyond the probe's."""
        return await self.probe_listing.read(lambda: self._ask("list"))

    async def read_history(self, backend_id: str) -> list[HistoryTurn]:
        """A stored conversation's turns, from ``session/load``'s replay (a short-lived process)."""
        answer = await self._ask("history", backend_id)
        return [HistoryTurn(**turn) for turn in answer or []]

    async def _ask(self, *argv: str) -> Any:
        """Run ``catalogue`` as a child process and read its JSON answer;
        None when it failed (said on the daemon's standard error by the child)."""
        spec = {
            "provider": self.provider,
            "command": self.command,
            "args": list(self.args),
            "env": self.env,
            "call_timeout": self.call_timeout,
        }
        try:
            with trio.fail_after(self.call_timeout + 30):
                done = await trio.run_process(
                    [sys.executable, "-m", "ahpd.backends.acp.catalogue", json.dumps(spec), *argv],
                    capture_stdout=True,
                    stderr=None,
                    check=False,
                )
            answer = json.loads(done.stdout or b"null")
        except (OSError, ValueError, trio.TooSlowError) as exc:
            log.warning("%s: asking the agent for %s failed: %s", self.provider, argv[0], exc)
            return None
        if done.returncode != 0 or not isinstance(answer, list):
            log.warning("%s: asking the agent for %s failed (exit status %s)", self.provider, argv[0], done.returncode)
            return None
        return answer
