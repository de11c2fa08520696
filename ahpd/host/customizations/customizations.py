"""Customizations and MCP servers: what a client may switch, and what the
agent makes of it.

A session's list is the backend's own containers (commands, skills), its
MCP servers as bare top-level entries, then the plugins its clients handed
it. A client's switch is only as good as the agent behind it, so each rule
here either carries the switch through to the agent and reports what the
agent then says (Claude Code: ``mcp_toggle``, ``mcp_reconnect``, read back
with ``mcp_status``), answers it itself (a client's plugin, which the agent
has never heard of), or refuses it out loud and sends the list again, so a
control a client drew as moved returns to where it was.

A client's plugin is copied into this host's own directory (under the
daemon's data directory) and reported on the session twice: ``loading``
when it is announced, ``loaded`` (with its children) or ``error`` once the
copy settles.
"""

from __future__ import annotations

import logging
import re
import shutil
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import trio

from ahpd.host.customizations import plugins as agent_plugins
from ahpd.host.customizations.plugins import children_of, refuse_and_resend
from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.sessions.catalogue import mcp_state
from ahpd.host.kernel.supervise import spawn
from ahpd.host.sessions.common import path_of
from ahpd.host.sessions.common import session_id
from ahpd.ports import threads

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")

#: How long a server the CLI reports as ``pending`` is waited on before the
#: host says what it has.
SETTLE_SECONDS = 30.0

#: A chat's turn is over: nothing of it waits on a sign-in any more.
_TURN_OVER = frozenset({"chat/turnComplete", "chat/turnCancelled", "chat/error"})


@runtime_checkable
class McpSwitches(Protocol):
    """What the conversation of a backend that switches MCP servers while
    it runs (``_controls_mcp``: Claude Code) answers besides the port's."""

    async def mcp_status(self) -> list[dict[str, Any]]: ...

    async def toggle_mcp(self, name: str, enabled: bool) -> None: ...

    async def reconnect_mcp(self, name: str) -> None: ...


# -- the session's list -------------------------------------------------------


def mcp_entry(provider: str, server: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """One MCP server as a bare top-level customization. Its enablement is
    the CLI's decision for the folder the session works in (the CLI keeps
    a switched-off server per project)."""
    name = server["name"]
    return {
        "type": "mcpServer",
        "id": f"{provider}.mcp:{name}",
        "uri": f"{(Path.home() / '.claude.json').as_uri()}#mcp:{name}",
        "name": name,
        "state": mcp_state(server),
        "enablement": [{"kind": "workspace", "uri": cwd.as_uri(), "enabled": server.get("status") != "disabled"}],
    }


#: The servers a session's own CLI last reported.
_read_back: weakref.WeakKeyDictionary[Session, list[dict[str, Any]]] = weakref.WeakKeyDictionary()


def session_list(session: Session, own: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The whole list: the backend's containers, its MCP servers (what the
    session's CLI said, else the boot probe's), its plugins
    (:mod:`ahpd.host.customizations.plugins`), then the clients' plugins the session
    holds - laid after the backend's own."""
    servers = _read_back.get(session)
    if servers is None:
        servers = [
            s
            for s in getattr(session.backend, "mcp_servers", None) or []
            if isinstance(s, dict) and isinstance(s.get("name"), str)
        ]
    channel = session.host.bus.channels.get(session.uri)
    held = (channel.state.get("customizations") or []) if channel is not None else []
    plugins = [c for c in held if c.get("clientId")]
    return [
        *own,
        *(mcp_entry(session.provider, s, session.cwd) for s in servers),
        *agent_plugins.own(session),
        *plugins,
    ]


# -- client actions -------------------------------------------------------------


def _find(state: dict[str, Any], cid: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(container or None, entry) for ``cid``, or (None, None)."""
    for top in state.get("customizations") or []:
        if top.get("id") == cid:
            return None, top
        for child in top.get("children") or []:
            if child.get("id") == cid:
                return top, child
    return None, None


def _session(host: Host, channel: str) -> Session | None:
    return host.sessions.sessions.get(channel) if host.sessions is not None else None


def _controls_mcp(session: Session) -> bool:
    """Whether the session's backend switches MCP servers while it runs."""
    return hasattr(session.backend, "mcp_servers")


def customization_toggled(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    session = _session(host, channel)
    if session is None:
        return Refuse(f"{channel} is not a running session")
    container, entry = _find(session.state(), action["id"])
    if entry is None:
        return Refuse(f"no customization {action['id']!r} in this session")
    if entry.get("clientId") or (container or {}).get("clientId"):
        # A client's plugin is this host's to answer: the agent never heard of it.
        return agent_plugins.client_toggled(session, entry, action)
    kind = entry.get("type")
    if kind == "plugin" and container is None:
        return agent_plugins.toggled(session, entry, action)
    if kind == "mcpServer":
        if not _controls_mcp(session):
            return refuse_and_resend(
                session,
                f"{session.provider} cannot switch MCP server {entry['name']!r}: an "
                "ACP agent is handed its servers only when a conversation starts",
            )
        enabled = action["enablement"][0]["enabled"] if action["enablement"] else True
        return Apply(action, after=lambda: _drive_soon(session, entry, "on" if enabled else "off"))
    what = {
        "prompt": "a prompt",
        "skill": "a skill",
        "agent": "a subagent",
        "directory": "a directory of " + str(entry.get("contents", "customization")) + "s",
        "plugin": "a plugin",
    }.get(str(kind), f"a {kind}")
    return refuse_and_resend(
        session, f"{session.provider} has no runtime switch for {what} ({entry.get('name')!r}); it stays as it is"
    )


def _mcp_rule(op: str):
    def rule(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
        session = _session(host, channel)
        if session is None:
            return Refuse(f"{channel} is not a running session")
        _container, entry = _find(session.state(), action["id"])
        if entry is None or entry.get("type") != "mcpServer":
            return Refuse(f"no MCP server {action['id']!r} in this session")
        if not _controls_mcp(session):
            return refuse_and_resend(
                session, f"{session.provider} cannot {op} MCP server {entry['name']!r} while it runs"
            )
        return Apply(action, after=lambda: _drive_soon(session, entry, op))

    return rule


def background_requested(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Apply:
    """No backend here holds a message back on a starting server, so none
    ever reports ``blocking``: the request changes nothing and its sender
    is answered with that, not refused."""
    return Apply(action)


CLIENT_ACTIONS = {
    "session/customizationToggled": customization_toggled,
    "session/mcpServerStartRequested": _mcp_rule("start"),
    "session/mcpServerStopRequested": _mcp_rule("stop"),
    "session/mcpServerBackgroundRequested": background_requested,
}


# -- carrying it through to the CLI ---------------------------------------------


def _drive_soon(session: Session, entry: dict[str, Any], op: str) -> None:
    spawn(session.nursery, f"{op} MCP server {entry['name']} of {session.uri}", _drive, session, entry, op)


async def _drive(session: Session, entry: dict[str, Any], op: str) -> None:
    """``on``/``start``: switched on (``mcp_toggle``) when the CLI has it
    off, else reconnected (how a signed-out or failed server is retried,
    and so how one is signed into); ``off``/``stop``: the CLI's own switch.
    Then read back, whether or not the CLI took it: what the CLI then says
    is the answer, a refusal included (a server that cannot start says why)."""
    name = entry["name"]
    chat = next(iter(session.chats.values()), None)
    if chat is None:
        return
    try:
        conversation = await chat.ensure_agent()
        if not isinstance(conversation, McpSwitches):
            raise TypeError(f"the {session.provider} agent's conversation has no MCP switches")
        try:
            servers = {s["name"]: s for s in await conversation.mcp_status()}
            if op in ("off", "stop"):
                await conversation.toggle_mcp(name, False)
            elif (servers.get(name) or {}).get("status") == "disabled":
                await conversation.toggle_mcp(name, True)
            else:
                await conversation.reconnect_mcp(name)
        except Exception as exc:  # noqa: BLE001 - said below, as the server's state the CLI reports
            log.info("%s: MCP server %s: %s: %s", session.uri, name, op, exc)
        await read_back(session, conversation)
    except Exception as exc:  # noqa: BLE001 - no CLI to ask: said in protocol terms
        log.info("%s: MCP server %s: %s failed: %s", session.uri, name, op, exc)
        if session.uri in session.host.bus.channels:
            session.host.bus.emit(
                session.uri,
                {
                    "type": "session/mcpServerStateChanged",
                    "id": entry["id"],
                    "state": {
                        "kind": "error",
                        "error": {"errorType": "McpServerFailed", "message": f"{op} failed: {exc}"},
                    },
                },
            )


async def read_back(session: Session, conversation: McpSwitches) -> None:
    """Ask the CLI what its servers are (waiting out ``pending`` ones for a
    while) and say what moved: the state alone with ``mcpServerStateChanged``,
    the whole row with ``customizationUpdated`` when its enablement moved
    too, a server taken out of the configuration with ``customizationRemoved``."""
    with trio.move_on_after(SETTLE_SECONDS):
        while True:
            servers = await conversation.mcp_status()
            if not any(s.get("status") == "pending" for s in servers):
                break
            await trio.sleep(0.2)
    _read_back[session] = servers
    publish(session, [mcp_entry(session.provider, s, session.cwd) for s in servers])


def publish(session: Session, entries: list[dict[str, Any]]) -> None:
    bus = session.host.bus
    if session.uri not in bus.channels:
        return
    held = {c["id"]: c for c in session.state().get("customizations") or [] if c.get("type") == "mcpServer"}
    fresh = {e["id"] for e in entries}
    for gone in held.keys() - fresh:
        bus.emit(session.uri, {"type": "session/customizationRemoved", "id": gone})
    for entry in entries:
        before = held.get(entry["id"])
        if before is None or before.get("enablement") != entry["enablement"]:
            bus.emit(session.uri, {"type": "session/customizationUpdated", "customization": entry})
        elif before.get("state") != entry["state"]:
            bus.emit(session.uri, {"type": "session/mcpServerStateChanged", "id": entry["id"], "state": entry["state"]})
        join_auth(session, entry["id"], entry["state"])


def _calls_of(chat_state: dict[str, Any], server_id: str) -> list[dict[str, Any]]:
    turn = chat_state.get("activeTurn") or {}
    return [
        part["toolCall"]
        for part in turn.get("responseParts") or []
        if part.get("kind") == "toolCall"
        and (part["toolCall"].get("contributor") or {}).get("customizationId") == server_id
    ]


def _auth_request_id(call_id: str) -> str:
    return f"auth:{call_id}"


def join_auth(session: Session, server_id: str, state: dict[str, Any]) -> None:
    """The SDK has no per-call sign-in moment, so the join is made here: a
    server that asks for a sign-in blocks every call running against it
    (``chat/toolCallAuthRequired``, and a ``toolAuthentication`` entry in the
    session's ``inputNeeded``); once it is ready again each is resumed
    (``chat/toolCallAuthResolved``) and its entry lifted. A server stopped
    instead (or failed) lifts the entry too: there is nothing to sign in to."""
    bus = session.host.bus
    for chat in list(session.chats.values()):
        channel = bus.channels.get(chat.uri)
        if channel is None or not channel.state.get("activeTurn"):
            continue
        turn_id = channel.state["activeTurn"]["id"]
        for call in _calls_of(channel.state, server_id):
            call_id = call["toolCallId"]
            if state["kind"] == "authRequired" and call.get("status") == "running":
                auth = {k: v for k, v in state.items() if k != "kind"}
                bus.emit(
                    chat.uri,
                    {"type": "chat/toolCallAuthRequired", "turnId": turn_id, "toolCallId": call_id, "auth": auth},
                )
                paused = next(
                    (c for c in _calls_of(bus.channels[chat.uri].state, server_id) if c["toolCallId"] == call_id), None
                )
                if paused is not None and paused.get("status") == "auth-required":
                    bus.emit(
                        session.uri,
                        {
                            "type": "session/inputNeededSet",
                            "request": {
                                "id": _auth_request_id(call_id),
                                "chat": chat.uri,
                                "kind": "toolAuthentication",
                                "turnId": turn_id,
                                "toolCall": paused,
                            },
                        },
                    )
            elif state["kind"] == "ready" and call.get("status") == "auth-required":
                bus.emit(chat.uri, {"type": "chat/toolCallAuthResolved", "turnId": turn_id, "toolCallId": call_id})
                bus.emit(session.uri, {"type": "session/inputNeededRemoved", "id": _auth_request_id(call_id)})
            elif state["kind"] in ("stopped", "error") and call.get("status") == "auth-required":
                # Nobody can sign in to a server that is not running: nothing to ask any more.
                bus.emit(session.uri, {"type": "session/inputNeededRemoved", "id": _auth_request_id(call_id)})


#: How often a server is asked about itself while a call of its runs.
WATCH_SECONDS = 1.0


def _watch_call(host: Host, chat_uri: str, action: dict[str, Any]) -> None:
    chat = host.sessions.chat_owner.get(chat_uri) if host.sessions is not None else None
    if chat is None or chat.conversation is None or not hasattr(chat.conversation, "mcp_status"):
        return
    spawn(
        chat.session.nursery,
        f"watching MCP call {action['toolCallId']} in {chat_uri}",
        _watch,
        chat,
        chat.conversation,
        action["toolCallId"],
        action["contributor"]["customizationId"],
    )


async def _watch(chat: Any, conversation: Any, call_id: str, server_id: str) -> None:
    """While a call of an MCP server runs, the server's state is read now
    and then: the CLI says nothing when one starts asking for a sign-in, and
    that is the moment the call is blocked on it."""
    bus = chat.session.host.bus
    while chat.uri in bus.channels:
        calls = [c for c in _calls_of(bus.channels[chat.uri].state, server_id) if c["toolCallId"] == call_id]
        if not calls or calls[0].get("status") not in ("streaming", "pending-confirmation", "running", "auth-required"):
            return
        await trio.sleep(WATCH_SECONDS)
        try:
            servers = await conversation.mcp_status()
        except Exception:  # noqa: BLE001 - a CLI that went away ends its calls too
            return
        _read_back[chat.session] = servers
        publish(chat.session, [mcp_entry(chat.session.provider, s, chat.session.cwd) for s in servers])


def _turn_over(host: Host, chat_uri: str) -> None:
    """A turn that ended leaves no call waiting on a sign-in: its entries go."""
    chat = host.sessions.chat_owner.get(chat_uri) if host.sessions is not None else None
    if chat is None or chat.session.uri not in host.bus.channels:
        return
    for request in list(chat.session.state().get("inputNeeded") or []):
        if request.get("kind") == "toolAuthentication" and request.get("chat") == chat_uri:
            host.bus.emit(chat.session.uri, {"type": "session/inputNeededRemoved", "id": request["id"]})


def agent_started(session: Session, conversation: Any) -> None:
    """A session's own CLI is up: its word on the servers and the plugins
    replaces the boot probe's."""
    if hasattr(conversation, "mcp_status"):
        spawn(session.nursery, f"reading the MCP servers of {session.uri}", read_back, session, conversation)
    if hasattr(conversation, "loaded_plugins"):
        spawn(session.nursery, f"reading the plugins of {session.uri}", agent_plugins.read_back, session, conversation)


# -- the plugins a client hands over ----------------------------------------------


def attach(host: Host) -> None:
    """Watch what clients announce on sessions (from a client, from
    createSession, from an automation's run) for the plugins they carry."""
    host.bus.observers.append(lambda uri, action: _observed(host, uri, action))


def _observed(host: Host, uri: str, action: dict[str, Any]) -> None:
    kind = action.get("type")
    if kind in _TURN_OVER:
        _turn_over(host, uri)
        chat = host.sessions.chat_owner.get(uri) if host.sessions is not None else None
        if chat is not None:
            agent_plugins.turn_over(chat)
        return
    if kind == "chat/toolCallStart" and (action.get("contributor") or {}).get("kind") == "mcp":
        _watch_call(host, uri, action)
        return
    if kind not in ("session/activeClientSet", "session/activeClientRemoved"):
        return
    session = _session(host, uri)
    if session is None or session.nursery is None:
        return
    if kind == "session/activeClientRemoved":
        client_id, plugins = action["clientId"], []
    else:
        client_id = action["activeClient"]["clientId"]
        plugins = [p for p in action["activeClient"].get("customizations") or [] if p.get("type") == "plugin"]
    spawn(session.nursery, f"the plugins of {client_id} in {uri}", _take_plugins, host, session, client_id, plugins)


async def _take_plugins(host: Host, session: Session, client_id: str, plugins: list[dict[str, Any]]) -> None:
    bus = host.bus
    held = {c["id"]: c for c in session.state().get("customizations") or [] if c.get("clientId") == client_id}
    wanted = {p["id"]: p for p in plugins}
    for gone in held.keys() - wanted.keys():
        bus.emit(session.uri, {"type": "session/customizationRemoved", "id": gone})
    for pid, plugin in wanted.items():
        before = held.get(pid)
        if before is not None and _unchanged(before, plugin):
            continue  # announced again as it was: copied once is enough, and saying it again would be a change
        entry = {
            k: v for k, v in plugin.items() if k not in ("nonce", "childEnablement", "children", "load", "enablement")
        }
        entry["clientId"] = client_id
        decided = agent_plugins.client_enablement(session, pid, plugin.get("enablement") or [])
        if decided:
            entry["enablement"] = decided
        if plugin.get("nonce"):
            entry["_meta"] = {**(entry.get("_meta") or {}), "ahpd.nonce": plugin["nonce"]}
        bus.emit(
            session.uri,
            {"type": "session/customizationUpdated", "customization": {**entry, "load": {"kind": "loading"}}},
        )
        try:
            copy = await _copy(host, session, client_id, plugin)
            settled = {
                **entry,
                "load": {"kind": "loaded"},
                "children": children_of(pid, copy),
                "_meta": {**(entry.get("_meta") or {}), "ahpd.copy": copy.as_uri()},
            }
        except (OSError, ValueError) as exc:
            settled = {**entry, "load": {"kind": "error", "message": str(exc)}}
        if session.uri in bus.channels:
            bus.emit(session.uri, {"type": "session/customizationUpdated", "customization": settled})
    agent_plugins.clients_changed(session)


def _unchanged(held: dict[str, Any], plugin: dict[str, Any]) -> bool:
    """The same plugin as the one held: by its nonce when it carries one,
    else by where it is and what it is called."""
    nonce = plugin.get("nonce")
    if nonce:
        return (held.get("_meta") or {}).get("ahpd.nonce") == nonce
    return held.get("uri") == plugin.get("uri") and held.get("name") == plugin.get("name")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).strip(".") or "_"


async def _copy(host: Host, session: Session, client_id: str, plugin: dict[str, Any]) -> Path:
    """The plugin's files, copied into this host's own directory."""
    root = getattr(host, "plugins_root", None)
    if root is None:
        raise ValueError("this host keeps no directory for plugins")
    uri = plugin["uri"]
    if not uri.startswith("file:"):
        raise ValueError(f"{uri} is not a file: URI this host can copy from")
    source = path_of(uri)
    if not source.is_dir():
        raise ValueError(f"{source} is not a plugin directory on this host")
    target = Path(root) / _safe(session_id(session.uri)) / _safe(client_id) / _safe(plugin["id"])

    def copy() -> None:
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target, symlinks=True)

    await threads.run("files", copy)
    return target
