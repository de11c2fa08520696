"""The ACP client, as the demo agent reaches it: updates and requests over the wire.

Each method sends one ACP message with the parameters in the library's form
(:mod:`ahpd.demo_agent.shapes`) and reads, from the answer, what the agent
uses; an answer without it is refused as the library's validation would
refuse it (``-32602 Invalid params``). An error answer raises
:class:`~ahpd.demo_agent.rpc.RequestError`; a closed connection,
``ConnectionError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ahpd.demo_agent.rpc import Connection
from ahpd.demo_agent.shapes import Json, optional, params_of, required


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None
    signal: str | None


@dataclass(frozen=True)
class TerminalOutput:
    output: str
    truncated: bool


class Client:
    """Requests and notifications to the client, on one connection."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def session_update(self, session_id: str, update: Json) -> None:
        await self._conn.notify("session/update", {"sessionId": session_id, "update": update})

    async def request_permission(self, session_id: str, tool_call: Json, options: list[Json]) -> str | None:
        """The option id the user picked; ``None`` if the request was answered ``cancelled``."""
        answer = params_of(
            await self._conn.request(
                "session/request_permission", {"sessionId": session_id, "toolCall": tool_call, "options": options}
            )
        )
        outcome = params_of(required(answer, "outcome", dict))
        if required(outcome, "outcome") == "cancelled":
            return None
        return str(required(outcome, "optionId"))

    async def read_text_file(self, session_id: str, path: str) -> str:
        answer = await self._conn.request("fs/read_text_file", {"sessionId": session_id, "path": path})
        return str(required(params_of(answer), "content"))

    async def write_text_file(self, session_id: str, path: str, content: str) -> None:
        await self._conn.request("fs/write_text_file", {"sessionId": session_id, "path": path, "content": content})

    async def create_terminal(
        self, session_id: str, command: str, args: list[str], cwd: str, output_byte_limit: int
    ) -> str:
        """Start ``command``; the terminal's id."""
        params = {
            "sessionId": session_id,
            "command": command,
            "args": args,
            "cwd": cwd,
            "outputByteLimit": output_byte_limit,
        }
        return str(required(params_of(await self._conn.request("terminal/create", params)), "terminalId"))

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str) -> ExitStatus:
        answer = params_of(await self._terminal("terminal/wait_for_exit", session_id, terminal_id))
        return ExitStatus(optional(answer, "exitCode", int), optional(answer, "signal"))

    async def terminal_output(self, session_id: str, terminal_id: str) -> TerminalOutput:
        answer = params_of(await self._terminal("terminal/output", session_id, terminal_id))
        return TerminalOutput(required(answer, "output"), required(answer, "truncated", bool))

    async def kill_terminal(self, session_id: str, terminal_id: str) -> None:
        await self._terminal("terminal/kill", session_id, terminal_id)

    async def release_terminal(self, session_id: str, terminal_id: str) -> None:
        await self._terminal("terminal/release", session_id, terminal_id)

    async def _terminal(self, method: str, session_id: str, terminal_id: str) -> Any:
        return await self._conn.request(method, {"sessionId": session_id, "terminalId": terminal_id})

    async def create_form_elicitation(self, session_id: str, message: str, schema: Json) -> tuple[str, Any]:
        """Ask a question in a form: the answer's ``action`` and ``content``."""
        params = {"sessionId": session_id, "message": message, "mode": "form", "requestedSchema": schema}
        answer = params_of(await self._conn.request("elicitation/create", params))
        return str(required(answer, "action")), answer.get("content")
