"""A client's tools, served to Claude Code through this host's in-process MCP server.

A client announces what it can run on ``SessionActiveClient.tools``; the
model reaches those tools through one in-process MCP server named ``ahp``,
each under ``<clientId>__<name>`` (so the model sees
``mcp__ahp__<clientId>__<name>``, and two clients may both offer
``openFile``). The server's tool list is one list object, changed in place
when the announced set changes, so the CLI sees the new set the next time
it lists the server's tools (the conversation asks it to reconnect the
server before the next turn).

Joining a call to its handler is ours to do. They arrive separately and
neither carries the other's name: the assistant frame opens the call under
the harness's ``tool_use`` id, and the in-process handler is invoked with
the tool's name and input and nothing else. So a handler is matched to an
opened call by tool name and then by the input itself, which is what tells
two concurrent calls of one tool apart. Either may come first (the SDK
hands a tool call to another task, so the handler can overtake the frame);
whichever arrives second makes the pair.

A joined call waits for its result: the owning client's
``chat/toolCallComplete`` (an AHP ``ToolCallResult``) becomes the MCP result
- text content as text, ``success: false`` as an error result. A call that
can no longer be answered (its client left, the turn ended) is answered as
failed, never left waiting.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ahpd.backends.translate import CONTRIBUTOR_META  # noqa: F401 - re-exported for the backend

if TYPE_CHECKING:
    from claude_agent_sdk import McpSdkServerConfig

log = logging.getLogger("ahpd.backends.claude.backend")

#: The in-process MCP server a client's tools ride on.
SERVER_NAME = "ahp"
#: What the model calls a tool of that server: ``mcp__ahp__<clientId>__<name>``.
PREFIX = f"mcp__{SERVER_NAME}__"

LEFT = "the client that provides this tool has left"
ENDED = "the turn ended before the client answered"
WITHDRAWN = "no client provides this tool any more"


def registered_name(client_id: str, name: str) -> str:
    return f"{client_id}__{name}"


def failure(message: str) -> dict[str, Any]:
    """An AHP ``ToolCallResult`` saying the call could not run."""
    return {"success": False, "pastTenseMessage": message, "error": {"message": message}}


def mcp_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """An AHP ``ToolCallResult`` -> MCP ``CallToolResult`` wire JSON: the text
    content as text blocks; ``success: false`` as an error result (carrying
    the error's message when it said nothing else)."""
    texts = [
        str(c.get("text", ""))
        for c in result.get("content") or []
        if isinstance(c, Mapping) and c.get("type") == "text"
    ]
    ok = bool(result.get("success"))
    if not ok and not texts:
        error = result.get("error")
        if not isinstance(error, Mapping):
            error = {}
        texts = [str(error.get("message") or _plain(result.get("pastTenseMessage")) or "the tool failed")]
    if ok and not texts and result.get("structuredContent") is not None:
        texts = [json.dumps(result["structuredContent"], ensure_ascii=False)]
    return {"content": [{"type": "text", "text": t} for t in texts], "isError": not ok}


def _plain(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("markdown"), str):
        return value["markdown"]
    return None


def announced_tools(active_clients: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``SessionState.activeClients`` -> client id -> its ``ToolDefinition`` list."""
    out: dict[str, list[dict[str, Any]]] = {}
    for client in active_clients or []:
        client_id = client.get("clientId")
        tools = [
            dict(t) for t in client.get("tools") or [] if isinstance(t, Mapping) and isinstance(t.get("name"), str)
        ]
        if isinstance(client_id, str) and client_id and tools:
            out[client_id] = tools
    return out


def _mcp_tool(name: str, definition: Mapping[str, Any]) -> dict[str, Any]:
    schema = definition.get("inputSchema")
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        schema = {"type": "object", "properties": {}}
    tool: dict[str, Any] = {
        "name": name,
        "description": str(definition.get("description") or definition.get("title") or definition["name"]),
        "inputSchema": dict(schema),
    }
    if isinstance(definition.get("title"), str):
        tool["title"] = definition["title"]
    return tool


@attrs.define(eq=False)
class ClientCall:
    """One call of a client's tool, from the handler's side."""

    name: str  # <clientId>__<name>
    arguments: dict[str, Any]
    client_id: str
    call_id: str | None = None  # the harness's tool_use id, once joined
    done: trio.Event = attrs.Factory(trio.Event)
    result: dict[str, Any] | None = None  # AHP ToolCallResult

    def settle(self, result: Mapping[str, Any]) -> bool:
        if self.done.is_set():
            return False
        self.result = dict(result)
        self.done.set()
        return True


class ClientTools:
    """The ``ahp`` server's tools and the calls waiting on clients.

    ``on_joined`` is told each call once it is joined to the harness's id.
    Everything here runs on the trio loop (the handler is invoked by the
    SDK's MCP bridge, in a task of that loop)."""

    def __init__(self, on_joined: Callable[[ClientCall], None]) -> None:
        self._on_joined = on_joined
        #: The server's list: the same object for the server's life, changed in place.
        self._tools: list[Any] = []
        self._signature: str = "[]"
        #: <clientId>__<name> -> client id, as announced now.
        self.owners: dict[str, str] = {}
        #: Every name ever announced -> its client: a call still running after
        #: its tool was withdrawn is still that client's.
        self._known: dict[str, str] = {}
        #: Every name ever announced -> what a person calls it (its title or name).
        self.titles: dict[str, str] = {}
        #: Calls the frame opened that no handler has taken yet: (id, name, input).
        self._opened: list[tuple[str, str, Any]] = []
        self._joined_ids: set[str] = set()
        #: Handlers that no opened call matched yet.
        self._waiting: list[ClientCall] = []
        #: tool_use id -> joined call awaiting its result.
        self.calls: dict[str, ClientCall] = {}
        self._server: Any = None
        #: The host's own tools (``list_sessions``, the artifact three,
        #: ``ahp_resource``...), offered on the same server under their own
        #: names and run by the host itself; None offers none.
        self.host_tools: Any = None

    # -- the MCP server --------------------------------------------------------

    def server_config(self) -> McpSdkServerConfig:
        """The ``mcp_servers`` entry: ``{"ahp": <this>}``'s value.

        Our own ``mcp`` lowlevel ``Server``, which the SDK documents taking in
        place of ``create_sdk_mcp_server`` ("bringing your own server"): that
        helper freezes its tool list when it is made, and ours changes with
        the announced set. Built on mcp 2's constructor callbacks (the
        ``mcp`` requirement is ``>=2``); on mcp 1 the SDK could not pass a
        client's cancellation to a server it did not build itself."""
        if self._server is None:
            from mcp.server import Server
            from mcp.types import ListToolsResult

            async def listed(context: Any, params: Any) -> ListToolsResult:
                return ListToolsResult(tools=list(self._tools))

            async def called(context: Any, params: Any) -> Any:
                return await self._run(params.name, dict(params.arguments or {}))

            self._server = Server(SERVER_NAME, version="1.0.0", on_list_tools=listed, on_call_tool=called)
        return {"type": "sdk", "name": SERVER_NAME, "instance": self._server}

    def set(self, announced: Mapping[str, Sequence[Mapping[str, Any]]]) -> bool:
        """Offer what the active clients announce; True when that changed the set."""
        from mcp.types import Tool

        entries: list[tuple[str, str, dict[str, Any]]] = []
        for definition in self._host_definitions():
            entries.append((definition["name"], "", _mcp_tool(definition["name"], definition)))
        for client_id, definitions in announced.items():
            for announced_one in definitions:
                name = announced_one.get("name")
                if isinstance(name, str) and name:
                    full = registered_name(client_id, name)
                    entries.append((full, client_id, _mcp_tool(full, announced_one)))
        signature = json.dumps([e[2] for e in entries], sort_keys=True, default=str)
        if signature == self._signature:
            return False
        tools = []
        for full, _, wire in entries:
            try:
                tools.append(Tool.model_validate(wire))
            except Exception as exc:  # noqa: BLE001 - one bad definition is left out, not the set
                log.warning("the client tool %s is not offered: %s", full, exc)
        self._tools[:] = tools
        self.owners = {full: client_id for full, client_id, _ in entries if client_id}
        self._known.update(self.owners)
        for full, client_id, wire in entries:
            if client_id:
                self.titles[full] = wire.get("title") or full[len(client_id) + 2 :]
        self._signature = signature
        return True

    def _host_definitions(self) -> list[dict[str, Any]]:
        if self.host_tools is None:
            return []
        return [dict(d) for d in self.host_tools.definitions if isinstance(d.get("name"), str)]

    def is_host_tool(self, tool_name: str) -> bool:
        """``tool_name`` (as the model names it) is one of the host's own."""
        return tool_name.startswith(PREFIX) and any(
            d["name"] == tool_name[len(PREFIX) :] for d in self._host_definitions()
        )

    def asks(self, tool_name: str) -> bool:
        """Whether a person is asked before ``tool_name`` runs: a client's
        tool never (its client runs it), a host tool when the host says so."""
        if not self.is_host_tool(tool_name):
            return False
        return bool(self.host_tools.needs_confirmation(tool_name[len(PREFIX) :]))

    def title(self, tool_name: str) -> str | None:
        return self.titles.get(tool_name[len(PREFIX) :]) if tool_name.startswith(PREFIX) else None

    def owner(self, tool_name: str) -> str | None:
        """The client whose tool ``tool_name`` (as the model names it) is."""
        if not tool_name.startswith(PREFIX):
            return None
        return self._known.get(tool_name[len(PREFIX) :])

    async def _run(self, name: str, arguments: dict[str, Any]) -> Any:
        """The handler the SDK's MCP bridge invokes for every call."""
        from mcp.types import CallToolResult

        client_id = self.owners.get(name)
        if client_id is None and self.is_host_tool(PREFIX + name):
            return CallToolResult.model_validate(await self.host_tools.call(name, dict(arguments or {})))
        if client_id is None:
            return CallToolResult.model_validate(mcp_result(failure(WITHDRAWN)))
        call = ClientCall(name=name, arguments=dict(arguments or {}), client_id=client_id)
        self._waiting.append(call)
        self._join()
        try:
            await call.done.wait()
        finally:
            if call in self._waiting:
                self._waiting.remove(call)
            if call.call_id is not None:
                self.calls.pop(call.call_id, None)
        assert call.result is not None
        return CallToolResult.model_validate(mcp_result(call.result))

    # -- joining ---------------------------------------------------------------

    def opened(self, call_id: str, tool_name: str, tool_input: Any) -> None:
        """The assistant frame opened ``call_id`` (the model's name for the tool)."""
        if call_id in self._joined_ids or self.owner(tool_name) is None:
            return
        if any(o[0] == call_id for o in self._opened):
            return
        self._opened.append((call_id, tool_name[len(PREFIX) :], tool_input if tool_input is not None else {}))
        self._join()

    def _join(self) -> None:
        for call in list(self._waiting):
            match = next((o for o in self._opened if o[1] == call.name and o[2] == call.arguments), None)
            if match is None:
                continue
            self._opened.remove(match)
            self._waiting.remove(call)
            call.call_id = match[0]
            self._joined_ids.add(match[0])
            self.calls[match[0]] = call
            try:
                self._on_joined(call)
            except Exception:  # noqa: BLE001 - the call still waits for its answer
                log.exception("telling the host about client call %s failed", match[0])

    # -- answers ---------------------------------------------------------------

    def complete(self, call_id: str, result: Mapping[str, Any]) -> bool:
        call = self.calls.get(call_id)
        return call is not None and call.settle(result)

    def fail_client(self, client_id: str, message: str = LEFT) -> list[str]:
        """Answer every call of ``client_id`` as failed; the joined ids."""
        failed = []
        for call in [*self.calls.values(), *self._waiting]:
            if call.client_id == client_id and call.settle(failure(message)) and call.call_id:
                failed.append(call.call_id)
        return failed

    def fail_all(self, message: str = ENDED) -> None:
        for call in [*self.calls.values(), *self._waiting]:
            call.settle(failure(message))
        self._opened.clear()
