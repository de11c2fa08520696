"""What the demo agent's turn does over the wire: the script's actions.

A script (:mod:`ahpd.demo_agent.script`) says what a prompt asks for; each
action is carried out here as a real agent would: the demo tool and a write
or a command are announced as tool calls and asked permission for (unless
the session is in ``auto`` mode), a read and a write go through the client's
``fs/*`` methods, a command through its ``terminal/*`` methods, and a
question through ``elicitation/create`` (or, for a client without it, a
permission request with yes and no options).

:class:`Actions` is a part of :class:`~ahpd.demo_agent.agent.DemoAgent`, kept
apart because it is the half that talks to the client rather than answers
it: all it needs is the connection and what the client offered at
``initialize``. :mod:`~ahpd.demo_agent.mcp_calls` announces its tool call
with the same helpers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ahpd.demo_agent import script as sc
from ahpd.demo_agent.client import Client
from ahpd.demo_agent.rpc import RequestError
from ahpd.demo_agent.shapes import (
    Capabilities,
    Json,
    permission_option,
    permission_tool_call,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    tool_terminal_ref,
    update_tool_call,
)
from ahpd.demo_agent.store import SessionRecord, new_id

log = logging.getLogger("ahpd.demo_agent.agent")

T = TypeVar("T")

#: Permission options offered before a tool acts (ACP option kinds).
ALLOW_ONCE = "allow-once"
REJECT_ONCE = "reject-once"
ACT_OPTIONS = (
    permission_option(ALLOW_ONCE, "Allow once", "allow_once"),
    permission_option(REJECT_ONCE, "Reject", "reject_once"),
)

TERMINAL_OUTPUT_LIMIT = 64 * 1024
CLEANUP_TIMEOUT = 5.0


class TurnCancelled(Exception):
    """The client answered a request of the turn with ``cancelled``."""


@dataclass(eq=False)
class LiveSession:
    record: SessionRecord
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    turn: asyncio.Task[Json] | None = None
    deleted: bool = False
    #: The MCP servers the client handed over, as sent (``mcp`` prompts call them: ``mcp_calls``).
    mcp_servers: list[Any] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.record.session_id


class Actions:
    """The requests a turn makes of the client; a base of ``DemoAgent``."""

    #: The client, once connected.
    _conn: Client
    #: What the client offered at ``initialize``.
    _client: Capabilities

    # -- actions --------------------------------------------------------------------------

    async def _act(self, session: LiveSession, action: sc.Action) -> str:
        if action.kind == "permission":
            return await self._demo_tool(session)
        if action.kind == "read":
            return await self._read(session, action.target)
        if action.kind == "write":
            return await self._write(session, action.target, action.text)
        if action.kind == "run":
            return await self._run(session, action.target)
        return await self._ask(session)

    async def _demo_tool(self, session: LiveSession) -> str:
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

    async def _allowed(self, session: LiveSession, start: Json) -> bool:
        """Ask the client before a tool that acts (the demo tool, ``write``, ``run``).

        In ``auto`` mode nothing is asked. A request answered ``cancelled``
        ends the turn (:class:`TurnCancelled`).
        """
        if session.record.mode == "auto":
            return True
        request = permission_tool_call(
            start["toolCallId"],
            start["title"],
            start["kind"],
            content=start.get("content"),
            locations=[location["path"] for location in start.get("locations", [])] or None,
            raw_input=start.get("rawInput"),
        )
        chosen = await self._conn.request_permission(session.id, request, list(ACT_OPTIONS))
        if chosen is None:
            raise TurnCancelled()
        return chosen == ALLOW_ONCE

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

    async def _read(self, session: LiveSession, target: str) -> str:
        if not self._client.read_text_file:
            return f"I cannot read `{target}`: the client did not offer `fs/read_text_file`."
        sid = session.id
        path = _resolve(session.record.cwd, target)
        start = start_tool_call(
            new_call_id(),
            f"Read {target}",
            kind="read",
            status="pending",
            locations=[path],
            raw_input={"path": path},
        )
        async with self._tool_call(sid, start) as call_id:
            await self._update(sid, update_tool_call(call_id, status="in_progress"))
            try:
                content = await self._conn.read_text_file(sid, path)
            except RequestError as exc:
                await self._failed(sid, call_id, f"Could not read {path}: {exc}")
                return f"I could not read `{target}`: {exc}."
            shown = "\n".join(content.splitlines()[:20])
            await self._update(
                sid, update_tool_call(call_id, status="completed", content=[tool_content(text_block(shown))])
            )
        lines = content.splitlines()
        if not lines:
            return f"`{target}` is empty."
        return f"The first line of `{target}` is: “{lines[0]}”."

    async def _write(self, session: LiveSession, target: str, text: str) -> str:
        if not self._client.write_text_file:
            return f"I cannot write `{target}`: the client did not offer `fs/write_text_file`."
        sid = session.id
        path = _resolve(session.record.cwd, target)
        new_text = text + "\n"
        old_text = None
        if self._client.read_text_file:
            with contextlib.suppress(RequestError):  # a new file
                old_text = await self._conn.read_text_file(sid, path)
        start = start_tool_call(
            new_call_id(),
            f"Write {target}",
            kind="edit",
            status="pending",
            content=[tool_diff_content(path, new_text, old_text)],
            locations=[path],
            raw_input={"path": path, "content": new_text},
        )
        async with self._tool_call(sid, start) as call_id:
            if not await self._allowed(session, start):
                await self._denied(sid, call_id, f"{path} was not written")
                return f"You rejected writing `{target}`, so it was not written."
            await self._update(sid, update_tool_call(call_id, status="in_progress"))
            try:
                await self._conn.write_text_file(sid, path, new_text)
            except RequestError as exc:
                await self._failed(sid, call_id, f"Could not write {path}: {exc}")
                return f"I could not write `{target}`: {exc}."
            await self._update(sid, update_tool_call(call_id, status="completed"))
        verb = "Created" if old_text is None else "Updated"
        return f"{verb} `{target}` ({len(new_text)} characters)."

    async def _run(self, session: LiveSession, command: str) -> str:
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
                terminal_id = await self._conn.create_terminal(sid, "sh", ["-c", command], cwd, TERMINAL_OUTPUT_LIMIT)
            except RequestError as exc:
                await self._failed(sid, call_id, f"Could not start the command: {exc}")
                return f"I could not run `{command}`: {exc}."
            exited = False
            try:
                await self._update(
                    sid, update_tool_call(call_id, status="in_progress", content=[tool_terminal_ref(terminal_id)])
                )
                status = await self._conn.wait_for_terminal_exit(sid, terminal_id)
                exited = True
                output = await self._conn.terminal_output(sid, terminal_id)
            except RequestError as exc:
                await self._failed(sid, call_id, f"The terminal failed: {exc}")
                return f"I could not finish running `{command}`: {exc}."
            finally:
                if not exited:
                    await _best_effort(self._conn.kill_terminal(sid, terminal_id))
                await _best_effort(self._conn.release_terminal(sid, terminal_id))
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

    async def _ask(self, session: LiveSession) -> str:
        sid = session.id
        if self._client.elicitation_form:
            # (The schema's "type": "object" is its default: the library leaves it out.)
            schema = {
                "title": "A question from the demo agent",
                "properties": {"answer": {"title": "Your answer", "enum": list(sc.ANSWERS), "type": "string"}},
                "required": ["answer"],
            }
            try:
                action, content = await self._conn.create_form_elicitation(sid, sc.QUESTION, schema)
            except RequestError as exc:
                if exc.code != -32601:  # anything but "method not found"
                    return f"I could not ask you: {exc}."
                log.info("the client offered elicitation but does not answer it; asking through a permission request")
            else:
                if action == "accept":
                    value = (content if isinstance(content, dict) else {}).get("answer")
                    return f"I asked “{sc.QUESTION}” and you answered **{value}**."
                if action == "decline":
                    return f"I asked “{sc.QUESTION}” and you declined to answer."
                if action == "cancel":
                    return f"I asked “{sc.QUESTION}” and you dismissed the question."
                return f"I asked “{sc.QUESTION}” and the client answered “{action}”."
        return await self._ask_by_permission(session)

    async def _ask_by_permission(self, session: LiveSession) -> str:
        """``ask`` for clients without elicitation: a permission request with yes/no options."""
        sid = session.id
        title = f"Question: {sc.QUESTION}"
        yes = permission_option(sc.ANSWERS[0], "Yes", "allow_once")
        no = permission_option(sc.ANSWERS[1], "No", "reject_once")
        start = start_tool_call(
            new_call_id(), title, kind="other", status="pending", raw_input={"question": sc.QUESTION}
        )
        async with self._tool_call(sid, start) as call_id:
            request = permission_tool_call(call_id, title, "other")
            value = await self._conn.request_permission(sid, request, [yes, no])
            if value is None:
                raise TurnCancelled()
            await self._update(
                sid,
                update_tool_call(call_id, status="completed", content=[tool_content(text_block(f"Answer: {value}"))]),
            )
        return f"I asked “{sc.QUESTION}” and you answered **{value}**."

    # -- tool calls and updates ------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _tool_call(self, session_id: str, start: Json) -> AsyncIterator[str]:
        """Announce a tool call; if the turn is cancelled inside, mark it ``failed``."""
        await self._update(session_id, start)
        try:
            yield start["toolCallId"]
        except (asyncio.CancelledError, TurnCancelled):
            await _best_effort(
                self._update(
                    session_id,
                    update_tool_call(
                        start["toolCallId"], status="failed", content=[tool_content(text_block("Cancelled."))]
                    ),
                )
            )
            raise

    async def _failed(self, session_id: str, call_id: str, message: str) -> None:
        await self._update(
            session_id, update_tool_call(call_id, status="failed", content=[tool_content(text_block(message))])
        )

    async def _update(self, session_id: str, update: Json) -> None:
        await self._conn.session_update(session_id, update)


def new_call_id() -> str:
    return "call_" + new_id()[:16]


def _resolve(cwd: str, target: str) -> str:
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(target)))


async def _best_effort(awaitable: Awaitable[T]) -> T | None:
    """Await a clean-up request, giving up quietly on errors or after a few seconds."""
    try:
        return await asyncio.wait_for(awaitable, CLEANUP_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - clean-up is best effort: any failure is given up on, quietly
        log.debug("clean-up request failed: %s", exc)
        return None
