"""What clients ask of terminals: ``createTerminal``, ``disposeTerminal``, and
the actions they dispatch on one (input, resize, claim, title, clear).

A terminal another client holds is that client's shell; one a session holds
is there to be watched and typed into, sent to the background or taken
over. These are the requests and rules, cut out from the terminals they act
on (``ahpd.host.terminals.terminals``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.host.terminals.terminal import Terminal, running
from ahpd.host.terminals.terminals import DEFAULT_COLS, DEFAULT_ROWS, Terminals
from ahpd.protocol import codec, model

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer

NOT_FOUND = -32008
MAX_COLS, MAX_ROWS = 1000, 500


def _size_problem(cols: Any, rows: Any) -> str | None:
    for name, value, top in (("cols", cols, MAX_COLS), ("rows", rows, MAX_ROWS)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            return f"{name} must be a whole number, not {value!r}"
        if not 1 <= value <= top:
            return f"{name} must be from 1 to {top}, not {value}"
    return None


# -- requests ---------------------------------------------------------------------------


def _manager(host: Host) -> Terminals:
    if host.terminals is None:
        raise RpcError(INVALID_PARAMS, "this host was given no terminals port: it runs no terminals")
    return host.terminals


def _claim_problem(host: Host, peer: Peer, claim: dict[str, Any]) -> str | None:
    if claim["kind"] == "client":
        if claim["clientId"] != peer.client_id:
            return f"a client claims a terminal for itself ({peer.client_id}), not for {claim['clientId']}"
        return None
    sessions = host.sessions.sessions if host.sessions is not None else {}
    session = sessions.get(claim["session"])
    if session is None:
        return f"no session {claim['session']} on this host"
    if claim["chat"] not in session.chats:
        return f"no chat {claim['chat']} in {claim['session']}"
    return None


async def create_terminal(host: Host, peer: Peer, params: model.CreateTerminalParams) -> None:
    terminals = _manager(host)
    terminals.check_uri(params.channel)
    claim = codec.encode(params.claim)
    problem = _claim_problem(host, peer, claim)
    if problem:
        raise RpcError(INVALID_PARAMS, problem, {"path": "$.claim"})
    cols = DEFAULT_COLS if params.cols is None else params.cols
    rows = DEFAULT_ROWS if params.rows is None else params.rows
    problem = _size_problem(cols, rows)
    if problem:
        raise RpcError(INVALID_PARAMS, problem, {"path": "$.cols" if "cols" in problem else "$.rows"})
    folder = terminals.folder(params.cwd)
    problem = terminals.cap_problem(claim)
    if problem:
        raise RpcError(INVALID_PARAMS, problem, {"channel": params.channel})
    shell = peer.config.get("defaultShell") or os.environ.get("SHELL") or "/bin/sh"
    try:
        terminals.open_shell(
            params.channel, shell=shell, claim=claim, title=params.name, folder=folder, cols=int(cols), rows=int(rows)
        )
    except OSError as exc:
        raise RpcError(INVALID_PARAMS, f"cannot start {shell}: {exc.strerror or exc}", {"shell": shell}) from None


def dispose_terminal(host: Host, peer: Peer, params: model.DisposeTerminalParams) -> None:
    terminals = _manager(host)
    terminal = terminals.terminals.get(params.channel)
    if terminal is None:
        raise RpcError(NOT_FOUND, f"no terminal {params.channel} on this host", {"channel": params.channel})
    problem = _not_yours(peer, terminal)
    if problem:
        raise RpcError(INVALID_PARAMS, problem, {"channel": params.channel})
    terminals.dispose(params.channel)


COMMANDS = {"createTerminal": create_terminal, "disposeTerminal": dispose_terminal}


# -- what clients dispatch on a terminal ---------------------------------------------------


def _not_yours(peer: Peer, terminal: Terminal) -> str | None:
    """A terminal another client holds is that client's shell; one a session
    holds is there to be watched and typed into."""
    claim = terminal.state()["claim"]
    if claim.get("kind") == "client" and claim.get("clientId") != peer.client_id:
        return f"{terminal.uri} is held by client {claim['clientId']}"
    return None


def _terminal(host: Host, peer: Peer, channel: str) -> Terminal | Refuse:
    terminal = host.terminals.terminals.get(channel) if host.terminals is not None else None
    if terminal is None:
        return Refuse(f"{channel} is not a terminal this host runs")
    problem = _not_yours(peer, terminal)
    return Refuse(problem) if problem else terminal


def terminal_input(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    terminal = _terminal(host, peer, channel)
    if isinstance(terminal, Refuse):
        return terminal
    if not running(terminal.state()):
        return Refuse(f"{channel} has exited: there is nothing to type into")
    problem = terminal.input(action["data"])
    return Refuse(problem) if problem else Apply(action)


def terminal_resized(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    terminal = _terminal(host, peer, channel)
    if isinstance(terminal, Refuse):
        return terminal
    problem = _size_problem(action["cols"], action["rows"])
    if problem:
        return Refuse(problem)
    if running(terminal.state()):
        terminal.pty.resize(int(action["cols"]), int(action["rows"]))
    return Apply(action)


def terminal_claimed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    terminal = _terminal(host, peer, channel)
    if isinstance(terminal, Refuse):
        return terminal
    current = terminal.state()["claim"]
    if current.get("kind") == "session":
        # A client may send a session's terminal to the background (the
        # session keeps it) or take it over; it may not hand it elsewhere.
        wanted = action["claim"]
        background = (
            wanted.get("kind") == "session"
            and wanted.get("session") == current["session"]
            and wanted.get("chat") == current.get("chat")
            and not wanted.get("toolCallId")
        )
        mine = wanted.get("kind") == "client" and wanted.get("clientId") == peer.client_id
        if not (background or mine):
            return Refuse(
                f"{channel} is held by session {current['session']}: a client may send it to the "
                "background or take it for itself, nothing else"
            )
    problem = _claim_problem(host, peer, action["claim"]) if action["claim"]["kind"] == "session" else None
    if problem:
        return Refuse(problem)
    return Apply(action, after=host.terminals.publish)


def terminal_title_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    terminal = _terminal(host, peer, channel)
    if isinstance(terminal, Refuse):
        return terminal
    return Apply(action, after=host.terminals.publish)


def terminal_cleared(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    terminal = _terminal(host, peer, channel)
    if isinstance(terminal, Refuse):
        return terminal
    terminal.flush()
    return Apply(action)


CLIENT_ACTIONS = {
    "terminal/input": terminal_input,
    "terminal/resized": terminal_resized,
    "terminal/claimed": terminal_claimed,
    "terminal/titleChanged": terminal_title_changed,
    "terminal/cleared": terminal_cleared,
}
