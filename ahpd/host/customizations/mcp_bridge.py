"""The host's tools for an ACP agent, as an MCP server it is handed in ``session/new``.

ACP lets a client name MCP servers for the agent to connect to
(``mcpServers`` in ``session/new`` and ``session/load``); every agent must
take the stdio kind, the HTTP kind only when it says so. So the host hands
each chat's agent one stdio server, ``ahp``: the command is this Python
running :mod:`ahpd.mcp_relay`, a byte pipe from its stdin and stdout to a
unix socket of the daemon's, which serves MCP over it here.

Why this shape. The tools act on the daemon's own state (sessions, the
session store, connected clients), so they must run in the daemon; an
agent-side process can only be a pipe. A unix socket in a private folder
(``0700``, made by ``mkdtemp``) is reached by nobody but the daemon's user,
and the first line a relay sends is the chat's secret, which names the chat
the calls are made for: an agent cannot act as another chat's, and a
secret never appears on a command line. The socket opens at the first ACP
conversation and goes with the host.

MCP here is its JSON-RPC over newline-delimited frames - ``initialize``,
``ping``, ``tools/list`` and ``tools/call`` - answered by hand: four methods
do not need a server framework, and the answers are the same
``CallToolResult`` the Claude backend's in-process server gives
(:func:`ahpd.host.customizations.server_tools.call`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import trio

from ahpd import __version__
from ahpd.host.customizations import server_tools
from ahpd.host.customizations.tool_schemas import ARTIFACT_INSTRUCTION, CONFIRMED
from ahpd.ports import threads

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.chat import Chat

log = logging.getLogger("ahpd.host")

SERVER_NAME = "ahp"
#: MCP protocol revisions this server answers in; the newest is offered to
#: a client asking for one it does not know.
MCP_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
#: The longest frame read (a resourceWrite carries a whole file).
MAX_FRAME = 64 * 2**20
HELLO_TIMEOUT = 10.0


#: The beginning of the name of each daemon's socket folder in the temporary directory.
FOLDER_PREFIX = "ahpd-mcp-"
#: A socket no process holds is taken for stale only past this age (one
#: held in another network namespace is not listed where we look).
STALE_AFTER = 60.0


def sweep_stale(tmp: str) -> None:
    """Remove the socket folders that daemons killed without a chance to
    clean up left behind (``kill -9``, a crash, a power cut): this user's,
    whose socket no process holds any more, and not made in the last
    minute. Which sockets are held is read from ``/proc/net/unix`` rather
    than by connecting (a live daemon would log a stranger); without it
    nothing is swept. A folder that cannot be read or removed is left."""
    try:
        names = [n for n in os.listdir(tmp) if n.startswith(FOLDER_PREFIX)]
        if not names:
            return
        with open("/proc/net/unix", "rb") as table:
            held = {line.rsplit(b" ", 1)[-1].strip() for line in table.read().splitlines()[1:]}
    except OSError:
        return
    now = time.time()
    for name in names:
        folder = os.path.join(tmp, name)
        path = os.path.join(folder, "tools.sock")
        try:
            st = os.lstat(path)
        except OSError:
            continue  # a daemon starting: its socket is not bound yet
        if (
            st.st_uid == os.getuid()
            and stat.S_ISSOCK(st.st_mode)
            and now - st.st_mtime > STALE_AFTER
            and os.fsencode(path) not in held
        ):
            shutil.rmtree(folder, ignore_errors=True)
            log.info("removed %s, left by an ahpd that did not stop cleanly", folder)


class Bridge:
    """The daemon's end: one unix socket, a secret per chat."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.folder: str | None = None
        self.path: str | None = None
        self._secrets: dict[str, str] = {}  # secret -> chat URI
        self._by_chat: dict[str, str] = {}
        self._listening: trio.Event | None = None

    async def server_for(self, chat_uri: str) -> dict[str, Any]:
        """The ACP ``McpServerStdio`` (wire JSON) for the agent of ``chat_uri``."""
        await self._listen()
        secret = self._by_chat.get(chat_uri)
        if secret is None:
            secret = self._by_chat[chat_uri] = secrets.token_urlsafe(32)
            self._secrets[secret] = chat_uri
        return {
            "name": SERVER_NAME,
            "command": sys.executable,
            "args": ["-m", "ahpd.mcp_relay"],
            "env": [{"name": "AHPD_MCP_SOCKET", "value": self.path}, {"name": "AHPD_MCP_SECRET", "value": secret}],
        }

    def forget(self, chat_uri: str) -> None:
        secret = self._by_chat.pop(chat_uri, None)
        if secret is not None:
            self._secrets.pop(secret, None)

    async def _listen(self) -> None:
        if self._listening is not None:
            await self._listening.wait()
            return
        self._listening = trio.Event()
        nursery = self.host.sessions.nursery if self.host.sessions else None
        if nursery is None:
            raise RuntimeError("the host is not running")
        await nursery.start(self._serve)
        self._listening.set()

    async def _serve(self, task_status: trio.TaskStatus[None]) -> None:
        await threads.run("files", sweep_stale, tempfile.gettempdir())
        self.folder = tempfile.mkdtemp(prefix=FOLDER_PREFIX)
        self.path = os.path.join(self.folder, "tools.sock")
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await sock.bind(self.path)
            sock.listen(16)
            listener = trio.SocketListener(sock)
            async with trio.open_nursery() as nursery:
                task_status.started()
                await trio.serve_listeners(self._connection, [listener], handler_nursery=nursery)
        finally:
            sock.close()
            shutil.rmtree(self.folder, ignore_errors=True)

    async def _connection(self, stream: trio.SocketStream) -> None:
        """One relay: its secret, then MCP until either end closes. A fault
        ends this connection, logged, never the listener."""
        try:
            async with stream:
                lines = _Lines(stream)
                with trio.move_on_after(HELLO_TIMEOUT):
                    hello = await lines.next()
                chat_uri = self._secrets.get((hello or b"").decode(errors="replace").strip())
                if chat_uri is None:
                    log.warning("an MCP relay connected without a secret this host gave out; closed")
                    return
                await _Session(self.host, chat_uri, stream).run(lines)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:  # noqa: BLE001 - see above
            log.exception("the MCP connection of an agent failed")


class _Lines:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def next(self) -> bytes | None:
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                return line
            if len(self.buffer) > MAX_FRAME:
                raise ValueError(f"an MCP frame over {MAX_FRAME} bytes")
            chunk = await self.stream.receive_some(1 << 16)
            if not chunk:
                return None
            self.buffer += chunk


class _Session:
    """MCP for one agent: each request answered in a task of its own."""

    def __init__(self, host: Host, chat_uri: str, stream: trio.SocketStream) -> None:
        self.host = host
        self.chat_uri = chat_uri
        self.stream = stream
        self.lock = trio.Lock()

    async def run(self, lines: _Lines) -> None:
        async with trio.open_nursery() as nursery:
            while (line := await lines.next()) is not None:
                if not line.strip():
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    await self._send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "not JSON"}})
                    continue
                if isinstance(message, dict) and isinstance(message.get("method"), str) and "id" in message:
                    nursery.start_soon(self._answer, message)
            nursery.cancel_scope.cancel()

    async def _answer(self, request: dict[str, Any]) -> None:
        method, ident = request["method"], request["id"]
        given = request.get("params")
        params: dict[str, Any] = given if isinstance(given, dict) else {}
        if method == "initialize":
            asked = params.get("protocolVersion")
            reply: Any = {
                "protocolVersion": asked if asked in MCP_VERSIONS else MCP_VERSIONS[0],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "ahpd", "version": __version__},
            }
        elif method == "ping":
            reply = {}
        elif method == "tools/list":
            reply = {"tools": [mcp_tool(t) for t in server_tools.tools(self.host)]}
        elif method == "tools/call":
            name = params.get("name")
            if not isinstance(name, str):
                await self._send(
                    {
                        "jsonrpc": "2.0",
                        "id": ident,
                        "error": {"code": -32602, "message": "tools/call needs a tool name"},
                    }
                )
                return
            reply = await server_tools.call(self.host, self.chat_uri, name, params.get("arguments"))
        else:
            await self._send(
                {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"{method} is not served here"}}
            )
            return
        await self._send({"jsonrpc": "2.0", "id": ident, "result": reply})

    async def _send(self, frame: dict[str, Any]) -> None:
        data = json.dumps(frame, ensure_ascii=False).encode() + b"\n"
        async with self.lock:
            await self.stream.send_all(data)


def mcp_tool(definition: dict[str, Any]) -> dict[str, Any]:
    """A ``ToolDefinition`` as an MCP ``Tool`` (the fields mirror each other)."""
    tool: dict[str, Any] = {
        k: definition[k] for k in ("name", "title", "description", "inputSchema", "annotations") if k in definition
    }
    tool.setdefault("inputSchema", {"type": "object", "properties": {}})
    return tool


def bridge(host: Host) -> Bridge:
    """The host's bridge, made at the first agent that needs it."""
    found = getattr(host, "mcp_bridge", None)
    if found is None:
        found = host.mcp_bridge = Bridge(host)
    return found


class AgentTools:
    """What a backend is handed for one chat's agent (``host_tools``): the
    set, a way to call it, and the MCP server an ACP agent connects to."""

    def __init__(self, host: Host, chat_uri: str) -> None:
        self.host = host
        self.chat_uri = chat_uri

    @property
    def definitions(self) -> list[dict[str, Any]]:
        return server_tools.tools(self.host)

    @property
    def instructions(self) -> str | None:
        """For a harness whose system prompt takes an append: when to record."""
        offered = {t.get("name") for t in server_tools.tools(self.host)}
        return ARTIFACT_INSTRUCTION if "add_artifact_or_reference" in offered else None

    async def call(self, name: str, arguments: Any) -> dict[str, Any]:
        return await server_tools.call(self.host, self.chat_uri, name, arguments)

    def needs_confirmation(self, name: str) -> bool:
        """Asked before it runs, as the reference host asks: a tool that
        starts, messages or deletes another conversation."""
        return name in CONFIRMED

    async def mcp_server(self) -> dict[str, Any]:
        return await bridge(self.host).server_for(self.chat_uri)


def agent_extras(chat: Chat, accepts: Collection[str]) -> dict[str, Any]:
    """``host_tools`` for a backend that takes them (``SessionHooks.agent_extras``)."""
    return {"host_tools": AgentTools(chat.host, chat.uri)} if "host_tools" in accepts else {}
