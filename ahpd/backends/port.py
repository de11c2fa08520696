"""The backend port: the one interface every agent backend implements.

Events flow *out* of a backend as ACP-shaped ``session/update`` payloads
(wire JSON, camelCase: ``{"sessionUpdate": "agent_message_chunk", ...}``),
because the Agent Client Protocol already names every moment an agent has:
a chunk of reply or of thought, a tool call and its updates, a plan, the
commands it offers. A backend that is not ACP (Claude Code) translates into
the same vocabulary, so ``ahpd.backends.translate`` is the only place that
knows AHP's side. Two moments ACP puts in requests rather than updates
arrive as events too: :class:`PermissionRequest` and :class:`InputRequest`;
the host answers them through the :class:`Conversation`.

Lifetime is structured: ``Backend.run_conversation`` runs inside the chat's
nursery, starts (or resumes) the agent, hands a :class:`Conversation` to
``task_status.started`` and keeps the agent alive until it is cancelled,
which is how a chat's disposal or the host's shutdown ends the agent process.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import trio


class BackendError(Exception):
    """The agent failed; ``message`` is its own words, shown to the user."""

    def __init__(self, message: str, error_type: str = "AgentError") -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type


@attrs.frozen
class PermissionOption:
    option_id: str
    name: str
    kind: str  # ACP PermissionOptionKind: allow_once | allow_always | reject_once | reject_always


@attrs.frozen
class PermissionRequest:
    """The agent stopped a tool call to ask a person (ACP session/request_permission)."""

    request_id: str
    tool_call: dict[str, Any]  # ACP ToolCallUpdate, wire JSON
    options: Sequence[PermissionOption]


@attrs.frozen
class InputRequest:
    """The agent asked the user a question (an elicitation)."""

    request_id: str
    message: str
    questions: Sequence[dict[str, Any]] = ()  # AHP ChatInputQuestion wire JSON


@attrs.frozen
class Update:
    """One ACP ``session/update`` payload, as wire JSON."""

    update: dict[str, Any]


@attrs.frozen
class ClientToolCall:
    """The agent is running a tool an active client provides, and waits for
    that client's result (an AHP ``ToolCallResult``), which the host hands
    back through the conversation's ``complete_client_tool``. The call was
    opened under ``tool_call_id`` and is now running."""

    tool_call_id: str
    client_id: str
    tool_name: str  # as the client announced it
    arguments: dict[str, Any] = attrs.Factory(dict)


Event = Update | PermissionRequest | InputRequest | ClientToolCall

#: The ``_meta`` key on an ACP ``AvailableCommand`` (in an
#: ``available_commands_update``) that says the command is a skill rather
#: than a prompt; ACP itself does not tell them apart.
SKILL_META = "ahpd.skill"
#: The ``_meta`` key on an update a subagent produced: the id of the tool
#: call (a Task or Agent call) that runs it. The host draws such updates in
#: that call's worker chat, never in the chat that made the call.
PARENT_CALL_META = "ahpd.parentToolCallId"
#: The ``_meta`` key of an ACP ``session_info_update`` that names the model
#: the agent runs on now: the host puts it on the session's ``_meta`` under
#: the same name, since ``SessionState`` declares no model and a turn's
#: ``UsageInfo.model`` says only what a past turn ran on.
MODEL_META = "ahpd.model"
EventSink = Callable[[Event], None]


@attrs.frozen
class PromptResult:
    stop_reason: str  # ACP StopReason: end_turn | max_tokens | max_turn_requests | refusal | cancelled
    usage: dict[str, Any] | None = None  # AHP UsageInfo wire JSON, when the agent reports it


@attrs.frozen
class StoredConversation:
    """A conversation the backend keeps, for the session catalogue."""

    backend_id: str
    title: str
    cwd: str | None
    created_at: str | None = None
    modified_at: str | None = None


class ProbeListing:
    """What an agent keeps, as its boot probe's child listed it, shared with
    the catalogue's reading: the probe holds :attr:`lock` while its child
    runs (it runs the agent, or loads its SDK, anyway), and a listing asked
    meanwhile takes that answer instead of starting a child of its own."""

    def __init__(self) -> None:
        self.lock = trio.Lock()
        self._kept: tuple[float, list[StoredConversation]] | None = None

    def keep(self, learned: Any) -> None:
        """Keep the probe's ``conversations`` rows, if it sent any; called while it holds :attr:`lock`."""
        rows = learned.get("conversations") if isinstance(learned, dict) else None
        if isinstance(rows, list):
            self._kept = (trio.current_time(), [StoredConversation(**row) for row in rows])

    async def read(self, ask: Callable[[], Awaitable[Any]]) -> list[StoredConversation]:
        """The stored conversations: a listing the probe finished after this
        was asked is as new as one started now, so it is taken; else ``ask()``."""
        asked = trio.current_time()
        async with self.lock:
            if self._kept is not None and self._kept[0] >= asked:
                return list(self._kept[1])
            answer = await ask()
        return [StoredConversation(**row) for row in answer or []]


@attrs.frozen
class HistoryTurn:
    """One past turn of a stored conversation: what the user said and the
    updates a live turn would have emitted for it, so a browsed session is
    rebuilt through the same translator and draws the same turn shapes."""

    text: str
    updates: list[dict[str, Any]]
    usage: dict[str, Any] | None = None  # AHP UsageInfo wire JSON
    #: Where the conversation stood when the turn ended, in the backend's
    #: own names (a backend that rewinds: ``ahpd.host.sessions.chats.rewind``); None unknown.
    point: str | None = None


class Conversation(Protocol):
    """One live agent conversation (ACP: one session)."""

    backend_id: str

    async def prompt(self, text: str, attachments: Sequence[dict[str, Any]] = ()) -> PromptResult:
        """Run one turn; events stream to the sink meanwhile. Raises
        :class:`BackendError` when the agent fails the turn."""

    async def cancel(self) -> None:
        """Ask the running turn to stop; ``prompt`` then returns ``cancelled``."""

    def answer_permission(self, request_id: str, option_id: str | None) -> None:
        """Answer a :class:`PermissionRequest`; None means cancelled."""

    def answer_input(self, request_id: str, response: str, answers: dict[str, Any] | None) -> None:
        """Answer an :class:`InputRequest` (accept | decline | cancel)."""


class ClientToolHost(Protocol):
    """Optional, for a conversation that can offer the active clients' tools
    to its agent (Claude Code does). The host tells it what the session's
    active clients announce before each turn, and answers each
    :class:`ClientToolCall` with the owning client's result."""

    def set_client_tools(self, announced: dict[str, list[dict[str, Any]]]) -> None:
        """client id -> its ``ToolDefinition`` list; offered from the next turn."""

    def complete_client_tool(self, tool_call_id: str, result: dict[str, Any]) -> bool:
        """Hand a client's result to the waiting call; False when none waits."""

    def fail_client_tools(self, client_id: str, message: str) -> list[str]:
        """Answer every call of ``client_id`` as failed; the call ids."""


class Backend(Protocol):
    """An agent provider, e.g. ``demo`` or any configured ACP agent."""

    provider: str

    def agent_info(self) -> dict[str, Any]:
        """The ``AgentInfo`` wire JSON for ``RootState.agents``."""

    async def run_conversation(
        self,
        *,
        cwd: Path,
        events: EventSink,
        resume_id: str | None = None,
        task_status: trio.TaskStatus[Conversation] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Start a new conversation in ``cwd`` (or load ``resume_id``, replaying
        its history as events), ``task_status.started(conversation)``, then
        keep the agent alive until cancelled."""

    async def list_conversations(self) -> list[StoredConversation]:
        """What the agent keeps, newest first; empty if it keeps nothing."""

    async def delete_conversation(self, backend_id: str) -> bool:
        """Delete the agent's own copy; False when it cannot."""


class CommandsRan(Protocol):
    """A backend that can be told of a command the person ran themselves
    (a ``!`` message, run by the host in a terminal): the host runs such
    commands only in sessions of a backend that can. Optional."""

    def ran(self, command: str, output: str, exit_code: int | None) -> str:
        """What the agent is handed with its next prompt about it."""


#: How much of a !command's output the agent is handed.
RAN_OUTPUT = 8 * 1024


def ran_note(command: str, output: str, exit_code: int | None) -> str:
    """The plain-text note of a !command for an agent that takes only prompts."""
    shown = output.replace("\r\n", "\n")[-RAN_OUTPUT:].rstrip("\n")
    ended = "was killed" if exit_code is None else f"exited with code {exit_code}"
    return f"(The user ran `{command}` in a terminal; it {ended} and printed:)\n```\n{shown}\n```"


class HistoryReader(Protocol):
    """A backend whose stored conversations can be read without running its
    agent (Claude Code's transcripts are files). Optional: only such a
    backend's past conversations are offered in the session catalogue, since
    listing and opening them must never wait on an agent process."""

    async def list_conversations(self) -> list[StoredConversation]:
        """What the agent keeps, newest first (a file read)."""

    async def read_history(self, backend_id: str) -> list[HistoryTurn]:
        """A stored conversation's turns, oldest first; empty when unreadable."""
