"""The host's own tools for agents: ``SessionState.serverTools``.

What a session's agent gets from this host beyond what its harness has is
the reference host's set, under the same names and input schemas, so a
skill written for VS Code's agent host runs here:

* the session tools (``list_sessions``, ``get_current_session``,
  ``create_session``, ``create_chat``, ``send_message``,
  ``get_session_context``, ``delete_session``), which act through the same
  command handlers a client's requests go through;
* the artifact three (``add_artifact_or_reference``,
  ``remove_artifact_or_reference``, ``list_artifacts_and_references``),
  which keep what the agent recorded under
  ``_meta['agentHost/sessionArtifacts']`` on the session and its catalogue
  row - the session store keeps ``_meta``, so they survive a restart - and
  answer in the reference's words;
* ``ahp_resource``, one tool for the ``resource*`` family, routed exactly as
  a client's request is (``ahpd.host.resources.resources``): a ``file:`` URI through
  the filesystem port, ``<scheme>://<clientId>/...`` forwarded to that
  connected client. So an agent reads a client's unsaved buffer the way a
  client does. ``createResourceWatch`` is not offered: a watch is a channel,
  and an agent subscribes to none.

The set is told to every session as ``session/serverToolsChanged`` (a full
replacement) when it opens and whenever :func:`set_tools` changes it. How an
agent reaches the tools is its backend's business: Claude Code through the
in-process MCP server ``ahp``, an ACP agent through the MCP server the host
passes in ``session/new`` (``ahpd.host.customizations.mcp_bridge``). Both end in
:func:`call`, which answers an MCP ``CallToolResult``: a refusal is an
error result naming what was wrong, never an exception the agent cannot read.

This module is the set and the calling; the tools' definitions are
``tool_schemas``, what they share ``tool_args``, and the tools themselves
``session_tools`` and ``artifact_tools`` (``ahp_resource`` is here: it is
one line of routing).
"""

from __future__ import annotations

import json
import logging
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ahpd.host.customizations.artifact_tools import (
    add_artifact_or_reference,
    list_artifacts_and_references,
    remove_artifact_or_reference,
)
from ahpd.host.customizations.session_tools import (
    create_chat,
    create_session,
    delete_session,
    get_current_session,
    get_session_context,
    list_sessions,
    rename_chat,
    send_message,
)
from ahpd.host.customizations.tool_args import AgentPeer, Runner, ToolError, dump
from ahpd.host.customizations.tool_schemas import DEFAULT_TOOLS, RESOURCE_METHODS
from ahpd.host.kernel import jsonrpc
from ahpd.host.kernel.jsonrpc import RpcError
from ahpd.protocol import codec

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")

# -- the set ------------------------------------------------------------------------------


@dataclass
class _Given:
    """The set an embedder gave a host (``set_tools``), and its own tools' runners."""

    definitions: list[dict[str, Any]]
    runners: dict[str, Runner]


_given: weakref.WeakKeyDictionary[Host, _Given] = weakref.WeakKeyDictionary()


def tools(host: Host) -> list[dict[str, Any]]:
    """The set offered now (``SessionState.serverTools``)."""
    given = _given.get(host)
    return (given.definitions if given is not None else None) or DEFAULT_TOOLS


def publish(session: Session) -> None:
    """Tell ``session`` the set, when it does not hold it already."""
    offered = tools(session.host)
    if session.state().get("serverTools") != offered:
        session.host.bus.emit(session.uri, {"type": "session/serverToolsChanged", "tools": offered})


def set_tools(host: Host, definitions: list[dict[str, Any]], runners: dict[str, Runner] | None = None) -> None:
    """Replace the set (the embedder's ``setTools``): every running session is
    told. ``runners`` carries the embedder's own tools (name -> an async
    ``(host, chat, arguments) -> text``, raising :class:`ToolError` to refuse);
    a name without one is this host's."""
    _given[host] = _Given([dict(d) for d in definitions], dict(runners or {}))
    for session in list(host.sessions.sessions.values()) if host.sessions else []:
        if not session.disposed:
            publish(session)


# -- calling ------------------------------------------------------------------------------


def result(text: str, *, error: bool = False) -> dict[str, Any]:
    """An MCP ``CallToolResult`` (wire JSON)."""
    return {"content": [{"type": "text", "text": text}], "isError": error}


async def call(host: Host, chat_uri: str, name: str, arguments: Any) -> dict[str, Any]:
    """Run the host tool ``name`` for the agent of ``chat_uri``; an MCP result."""
    chat = host.sessions.chat_owner.get(chat_uri) if host.sessions else None
    if chat is None or chat.session.disposed:
        return result(f"{name}: the chat {chat_uri} this agent runs in is gone", error=True)
    given = _given.get(host)
    run = (given.runners.get(name) if given is not None else None) or _RUNNERS.get(name)
    if run is None or not any(t.get("name") == name for t in tools(host)):
        return result(f"{name} is not a tool this host offers", error=True)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return result(f"{name} takes an object of arguments", error=True)
    try:
        return result(await run(host, chat, arguments))
    except ToolError as exc:
        return result(str(exc), error=True)
    except RpcError as exc:
        return result(f"{name}: {exc.message} (error {exc.code})", error=True)
    except Exception as exc:  # noqa: BLE001 - a fault answers one call, as a failed result
        log.exception("%s: the host tool %s failed", chat_uri, name)
        return result(f"{name} failed: {type(exc).__name__}: {exc}", error=True)


# -- ahp_resource -------------------------------------------------------------------------------


async def ahp_resource(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    method = args.get("method")
    if method not in RESOURCE_METHODS:
        raise ToolError(f"method must be one of {', '.join(RESOURCE_METHODS)}")
    params = args.get("params")
    if not isinstance(params, dict):
        raise ToolError("params must be an object (the command's params)")
    decoded = host.decode_params(method, params)
    answer = await host.commands[method](host, AgentPeer(chat), decoded)  # the resources feature's, as joined
    if isinstance(answer, jsonrpc.Encoded):  # a read answered in its JSON form already
        answer = json.loads("".join(answer.parts))
    elif isinstance(answer, jsonrpc.EncodedBytes):  # a large one, as bytes
        answer = json.loads(b"".join(answer.pieces))
    return dump(answer if answer is None or isinstance(answer, dict) else codec.encode(answer))


_RUNNERS: dict[str, Runner] = {
    "list_sessions": list_sessions,
    "get_current_session": get_current_session,
    "create_session": create_session,
    "create_chat": create_chat,
    "rename_chat": rename_chat,
    "send_message": send_message,
    "get_session_context": get_session_context,
    "delete_session": delete_session,
    "add_artifact_or_reference": add_artifact_or_reference,
    "remove_artifact_or_reference": remove_artifact_or_reference,
    "list_artifacts_and_references": list_artifacts_and_references,
    "ahp_resource": ahp_resource,
}


# -- what the sessions ask (ahpd.host.table) ---------------------------------------------


def session_opened(session: Session, record: dict[str, Any]) -> None:
    """A session opens knowing the host's tools (``session/serverToolsChanged``)."""
    publish(session)
