"""``authenticate``: a token a client lends for a resource an agent needs.

A token is held per connection, as the protocol asks, and spent only on the
agents that connection's sessions start: it goes into the agent's
environment on top of the daemon's own credentials, never instead of them.
An empty token takes it back; ``expiresIn`` says how long it is good for,
and past that it is neither spent nor kept. This is not the connection
token, which is about who may reach the host at all.

One resource is different: ``ahpd://users``, advertised when the host was
given a users directory (``ahpd users add``). Its token is verified here,
against that directory, and names the person the connection acts for; a
turn then says who sent it (``_meta['ahpd.sender']``) and a session whose
work it is (``_meta['ahpd.owner']``), as ``user:<id>``, or ``root:<host>``
for a connection that did not sign in and so acts on the deployment's own
token. A host with no directory names nobody.
"""

from __future__ import annotations

import math
import socket
from typing import TYPE_CHECKING, Any

import trio

from ahpd.host.kernel.bus import ROOT
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.ports.users import RESOURCE as USERS_RESOURCE
from ahpd.ports.users import UsersError
from ahpd.protocol import model
from ahpd.ports import threads

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer


AUTH_REQUIRED = -32007

#: How ``ahpd://users`` is described in each agent's ``protectedResources``.
USERS_RECORD = {"resource": USERS_RESOURCE, "resource_name": "the people who use this host", "required": False}


def advertised(host: Host) -> set[str]:
    return set(records(host))


def records(host: Host) -> dict[str, dict[str, Any]]:
    """Each advertised resource's RFC 9728 record, by resource."""
    agents = host.bus.channels[ROOT].state.get("agents", [])
    return {r["resource"]: r for a in agents for r in a.get("protectedResources") or []}


def _not_advertised(resource: str, known: dict[str, dict[str, Any]]) -> RpcError:
    """A refusal that says what could have been asked for: the resources the
    agents here advertise, or that none does, which is a plain install's case."""
    if not known:
        why = (
            f"{resource} is not a protected resource here: no agent on this host advertises one, "
            "so there is nothing to authenticate for"
        )
    else:
        why = f"{resource} is not a protected resource any agent here advertises; they are: {', '.join(sorted(known))}"
    return RpcError(INVALID_PARAMS, why, {"path": "$.resource", "resources": list(known.values())})


def who(host: Host, peer: Peer | None) -> str | None:
    """The typed reference naming who ``peer`` acts for; None on a host with
    no users directory, which has nobody to name."""
    if host.users is None:
        return None
    if peer is not None and peer.user is not None:
        return f"user:{peer.user}"
    return f"root:{socket.gethostname()}"


def granted(host: Host, peer: Peer, scope: str) -> bool:
    """Whether ``peer`` may do what ``scope`` names: anyone on a host with no
    users directory (it has nobody to tell apart), otherwise only a
    connection signed in as a user granted it."""
    return host.users is None or scope in peer.scopes


def signed(action: dict[str, Any], sender: str | None) -> dict[str, Any]:
    """``chat/turnStarted`` (or a pending message's action) saying who sent
    it: on the action's ``_meta`` when it has a turn, and on the message's,
    which is what a stored turn keeps."""
    if sender is None:
        return action
    message = action["message"]
    signed_message = {**message, "_meta": {**(message.get("_meta") or {}), "ahpd.sender": sender}}
    if action["type"] != "chat/turnStarted":
        return {**action, "message": signed_message}
    return {**action, "message": signed_message, "_meta": {**(action.get("_meta") or {}), "ahpd.sender": sender}}


async def authenticate(host: Host, peer: Peer, params: model.AuthenticateParams) -> dict[str, Any]:
    if params.resource == USERS_RESOURCE and host.users is not None:
        return await _sign_in(host, peer, params.token)
    known = records(host)
    if params.resource not in known:
        raise _not_advertised(params.resource, known)
    clock = peer.token_clocks.pop(params.resource, None)
    if clock is not None:
        clock.cancel()  # the token it timed is replaced or withdrawn
    if not params.token:
        peer.tokens.pop(params.resource, None)  # signing out
        return {}
    expires = trio.current_time() + params.expiresIn if params.expiresIn else None
    held = peer.tokens[params.resource] = (params.token, expires)
    nursery = host.nursery
    if expires is not None and nursery is not None:
        clock = peer.token_clocks[params.resource] = trio.CancelScope()
        nursery.start_soon(_run_out, host, peer, known[params.resource], held, clock)
    for lent in host.hooks.token_lent:
        lent(host, params.resource)
    return {}


async def _run_out(
    host: Host, peer: Peer, record: dict[str, Any], held: tuple[str, float | None], clock: trio.CancelScope
) -> None:
    """At the moment a lent token runs out, it is dropped and the connection
    that lent it - only that one: the token was theirs - is told
    ``auth/required`` with ``reason: 'expired'`` and the resource's whole
    record, so it knows where to sign in again."""
    resource = record["resource"]
    with clock:
        await trio.sleep_until(held[1] or math.inf)
        if peer.tokens.get(resource) is held:
            del peer.tokens[resource]
            if peer in host.peers:
                host.bus.notify([peer], "auth/required", {"channel": ROOT, "resource": record, "reason": "expired"})
    if peer.token_clocks.get(resource) is clock:
        del peer.token_clocks[resource]


async def _sign_in(host: Host, peer: Peer, token: str) -> dict[str, Any]:
    """Verify ``token`` against the users directory (an Argon2 hash: run in a
    thread, it takes tens of milliseconds). A refusal leaves the connection
    as it was; an empty token signs out."""
    if not token:
        peer.user, peer.scopes = None, frozenset()
        return {}
    try:
        peer.user, peer.scopes = await threads.run("auth", host.users.verify, token)
    except UsersError as exc:
        raise RpcError(AUTH_REQUIRED, str(exc), {"resources": [USERS_RECORD]}) from None
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
