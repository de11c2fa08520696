"""The demo agent calls a tool of the MCP servers its client handed it.

A prompt ``mcp <tool> [<JSON arguments>]`` connects to each stdio MCP server
named in ``session/new`` (or ``session/load``/``session/resume``) with the
``mcp`` library's client, finds the one that lists ``<tool>``, calls it, and
answers with the tool's text. ``mcp`` alone lists every tool offered. The
call is reported as an ACP tool call (``kind: other``) whose content is the
result, failed when the tool answered an error, so a client sees it like any
other tool call. This is how tests drive the host's own tools
(``list_sessions``, ``add_artifact_or_reference``, ``ahp_resource``...)
through a real agent.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from ahpd.demo_agent.shapes import Json, message_chunk, start_tool_call, text_block, tool_content, update_tool_call

TRIGGER = "mcp"


def is_call(text: str) -> bool:
    words = text.strip().split(None, 1)
    return bool(words) and words[0].lower() == TRIGGER


def parse(text: str) -> tuple[str | None, dict[str, Any]]:
    """``mcp <tool> [<JSON object>]`` -> (tool, arguments); (None, {}) lists."""
    rest = text.strip()[len(TRIGGER) :].strip()
    if not rest:
        return None, {}
    name, _, raw = rest.partition(" ")
    raw = raw.strip()
    if not raw:
        return name, {}
    arguments = json.loads(raw)
    if not isinstance(arguments, dict):
        raise ValueError("the arguments must be a JSON object")
    return name, arguments


@contextlib.asynccontextmanager
async def _connected(server: Json) -> AsyncIterator[Any]:
    # Imported here: the mcp library costs its import to every start of the
    # demo agent otherwise, and only ``mcp`` prompts use it.
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {str(e.get("name")): str(e.get("value")) for e in server.get("env") or [] if isinstance(e, dict)}
    params = StdioServerParameters(command=server["command"], args=[str(a) for a in server.get("args") or []], env=env)
    with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 - /dev/null opens at once, never blocks
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def _stdio(servers: list[Any]) -> list[Json]:
    """The stdio servers among those handed over (ACP's ``McpServerStdio``, as sent)."""
    return [s for s in servers if isinstance(s, dict) and isinstance(s.get("command"), str) and s["command"]]


async def run(servers: list[Any], name: str | None, arguments: dict[str, Any]) -> tuple[bool, str]:
    """Call ``name`` on whichever server offers it; (succeeded, its text)."""
    if not _stdio(servers):
        return False, "no MCP server was handed to this session"
    listing: list[str] = []
    for server in _stdio(servers):
        async with _connected(server) as session:
            offered = [t.name for t in (await session.list_tools()).tools]
            if name is None:
                listing += [f"{server.get('name')}: {t}" for t in offered]
                continue
            if name not in offered:
                continue
            answer = await session.call_tool(name, arguments)
            text = "\n".join(getattr(c, "text", "") for c in answer.content if getattr(c, "type", "") == "text")
            failed = getattr(answer, "is_error", getattr(answer, "isError", False))  # mcp 2.x, 1.x
            return not failed, text
    if name is None:
        return True, "\n".join(listing)
    return False, f"no MCP server handed to this session offers {name}"


async def play(agent: Any, session: Any, text: str, call_id: str) -> str:
    """Carry out an ``mcp`` prompt as a tool call of the turn; the reply."""
    try:
        name, arguments = parse(text)
    except ValueError as exc:
        return f"I could not read the tool's arguments: {exc}"
    title = f"MCP tool {name}" if name else "List the MCP tools"
    start = start_tool_call(call_id, title, kind="other", status="pending", raw_input={"tool": name, **arguments})
    async with agent._tool_call(session.id, start):
        await agent._update(session.id, update_tool_call(call_id, status="in_progress"))
        try:
            ok, answer = await run(list(getattr(session, "mcp_servers", []) or []), name, arguments)
        except Exception as exc:  # noqa: BLE001 - a server that fails is this call's failure
            failure: BaseException = exc
            while isinstance(failure, BaseExceptionGroup) and len(failure.exceptions) == 1:
                failure = failure.exceptions[0]  # the task group's one failure, in its own words
            ok, answer = False, f"{type(failure).__name__}: {failure}"
        await agent._update(
            session.id,
            update_tool_call(
                call_id,
                status="completed" if ok else "failed",
                content=[tool_content(text_block(answer))],
                raw_output={"isError": not ok, "text": answer},
            ),
        )
    return answer if ok else f"The tool failed: {answer}"


async def turn(agent: Any, session: Any, text: str, call_id: str, reply_id: str, sent: list[str]) -> Json:
    """A whole ``mcp`` turn: the tool call, then its text as the reply."""
    reply = await play(agent, session, text, call_id)
    await agent._update(session.id, message_chunk("agent_message_chunk", reply, reply_id))
    sent.append(reply)
    return {"stopReason": "end_turn"}
