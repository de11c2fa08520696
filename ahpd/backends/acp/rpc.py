"""A small JSON-RPC 2.0 client for an ACP agent, without the ``acp`` library.

The boot probe asks an agent four things (``initialize``, ``session/list``,
``session/new``, ``session/delete``) and listens for one notification
(``available_commands_update``). The library would cost its process
~0.6 s of CPU to build hundreds of pydantic models at import, on every
daemon's first hello; these few calls need none of them. The agent is
started as :func:`~ahpd.backends.acp.session.open_agent` starts it (its own
process group, the backend's env, a scratch root) and its pipes are owned
by the same :class:`~ahpd.backends.acp.process.AgentProcess` (line cap,
stderr logged, the group ended and reaped on the way out); only the
JSON-RPC on top is ours.

One task reads and writes: a call sends its request and reads until its
answer, handling what arrives meanwhile. A request the agent makes of us is
answered "method not found" (the probe serves no files, terminals or
permissions); a notification goes to ``listen``.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from ahpd.backends.acp.backend import AcpBackend
from ahpd.backends.acp.process import AgentProcess, start_agent
from ahpd.backends.port import BackendError

log = logging.getLogger("ahpd.backends.acp.backend")

#: The ACP version spoken (``acp.meta.PROTOCOL_VERSION``; a test keeps them equal).
PROTOCOL_VERSION = 1
#: JSON-RPC's "method not found".
METHOD_NOT_FOUND = -32601

Notification = Callable[[str, Any], None]


class Peer:
    """One agent's JSON-RPC connection, driven from a single trio task."""

    def __init__(self, agent: AgentProcess, listen: Notification) -> None:
        self.agent = agent
        self._listen = listen
        self._ids = itertools.count(1)

    async def _send(self, message: dict[str, Any]) -> None:
        data = (json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        try:
            await self.agent.outgoing.send(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise BackendError(await self.agent.death_message_after_exit()) from None

    async def _next(self) -> dict[str, Any]:
        """The agent's next message; its end (exit, closed stdout) is :class:`BackendError`."""
        try:
            return await self.agent.incoming.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise BackendError(await self.agent.death_message_after_exit()) from None

    async def _handle(self, message: dict[str, Any]) -> None:
        """A message that is not the answer being waited for."""
        method = message.get("method")
        if isinstance(method, str) and "id" in message:
            log.warning("%s: the agent asked %s of the boot probe, which serves nothing", self.agent.label, method)
            error = {"code": METHOD_NOT_FOUND, "message": "Method not found", "data": {"method": method}}
            await self._send({"id": message["id"], "error": error})
        elif isinstance(method, str):
            self._listen(method, message.get("params"))
        else:
            log.debug("%s: an answer nobody waits for ignored: %.200r", self.agent.label, message)

    async def serve_until(self, done: Callable[[], bool]) -> None:
        """Handle what the agent sends until ``done()`` holds (or it ends)."""
        while not done():
            await self._handle(await self._next())

    async def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """``method``'s result; the agent's error, in its own words, is :class:`BackendError`."""
        ident = next(self._ids)
        await self._send({"id": ident, "method": method, "params": dict(params)})
        while True:
            message = await self._next()
            if message.get("id") != ident or "method" in message:
                await self._handle(message)
            elif isinstance(message.get("error"), dict):
                raise BackendError(f"{method}: {error_message(message['error'])}")
            elif "result" in message:
                return message["result"]
            else:
                raise BackendError(f"the agent answered {method} with neither a result nor an error")


def error_message(error: Mapping[str, Any]) -> str:
    """A JSON-RPC error in the agent's words, its ``data`` detail after the
    message (as :func:`~ahpd.backends.acp.wire.rpc_error_message` says it)."""
    message = str(error.get("message") or "") or "error"
    data = error.get("data")
    detail = None
    if isinstance(data, str):
        detail = data
    elif isinstance(data, Mapping):
        detail = next((data[k] for k in ("details", "message", "error") if isinstance(data.get(k), str)), None)
    if detail and detail not in message:
        return f"{message}: {detail}"
    return message


@asynccontextmanager
async def open_peer(backend: AcpBackend, root: Path, listen: Notification) -> AsyncIterator[Peer]:
    """The agent started in ``root`` and its connection; on the way out its
    stdin is closed and its process group ended and reaped."""
    agent = await start_agent(backend, root, {**os.environ, **backend.env}, loop=None)
    try:
        async with trio.open_nursery() as nursery:
            agent.start(nursery)
            try:
                yield Peer(agent, listen)
            finally:
                agent.outgoing.close()  # the stdin pump writes what is queued, then closes the pipe
                agent.incoming.close()  # the stdout pump keeps draining, so the agent never blocks
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
            group = group.exceptions[0]
        raise group from None
    finally:
        with trio.CancelScope(shield=True):
            await agent.terminate(backend.shutdown_grace)
