"""``authenticate``: a token a client lends for a resource an agent needs.

A token is held per connection, as the protocol asks, and spent only on the
agents that connection's sessions start: it goes into the agent's
environment on top of the daemon's own credentials, never instead of them.
An empty token takes it back; ``expiresIn`` says how long it is good for,
and past that it is neither spent nor kept. This is not the connection
token, which is about who may reach the host at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ahpd.host.bus import ROOT
from ahpd.host.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.protocol import model

if TYPE_CHECKING:
    from ahpd.host.host import Host, Peer


def advertised(host: Host) -> set[str]:
    agents = host.bus.channels[ROOT].state.get("agents", [])
    return {r["resource"] for a in agents for r in a.get("protectedResources") or []}


def authenticate(host: Host, peer: Peer, params: model.AuthenticateParams) -> dict[str, Any]:
    if params.resource not in advertised(host):
        raise RpcError(INVALID_PARAMS, f"{params.resource} is not a protected resource any agent here advertises",
                       {"path": "$.resource"})
    if not params.token:
        peer.tokens.pop(params.resource, None)  # signing out
        return {}
    expires = trio.current_time() + params.expiresIn if params.expiresIn else None
    peer.tokens[params.resource] = (params.token, expires)
    return {}


def token_for(peer: Peer | None, resource: str) -> str | None:
    if peer is None:
        return None
    held = peer.tokens.get(resource)
    if held is None:
        return None
    token, expires = held
    if expires is not None and trio.current_time() >= expires:
        del peer.tokens[resource]
        return None
    return token


COMMANDS = {"authenticate": authenticate}
