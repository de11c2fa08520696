"""The commands this host answers, one function each, named by method.

``COMMANDS`` maps a request method to its handler; ``NOTIFICATIONS`` maps a
client notification. Anything in neither is answered -32601: a host that
returns an empty success to a method it does not have leaves the client
waiting for state that is never coming.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ahpd import __version__
from ahpd.host.kernel import dispatch, versions
from ahpd.host.kernel.alias import Alias
from ahpd.host.kernel.jsonrpc import INVALID_REQUEST, RpcError
from ahpd.protocol import DecodeError, codec, model

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Handler, Host, Peer

log = logging.getLogger("ahpd.host")

SESSION_NOT_FOUND = -32001
NOT_FOUND = -32008


def _unique(uris: list[str]) -> list[str]:
    return list(dict.fromkeys(uris))


def _no_channel(uri: str) -> RpcError:
    code = (
        NOT_FOUND
        if uri.startswith(("ahp-terminal:", "ahp-changeset:", "ahp-resource-watch:")) or ("/changeset/" in uri)
        else SESSION_NOT_FOUND
    )
    return RpcError(code, f"no channel {uri} on this host", {"channel": uri})


async def initialize(host: Host, peer: Peer, params: model.InitializeParams) -> dict[str, Any]:
    if peer.initialized:
        raise RpcError(INVALID_REQUEST, "initialize was already answered on this connection")
    version = versions.negotiate(params.protocolVersions)
    peer.client_id = params.clientId
    peer.protocol_version = version
    snapshots = []
    without_snapshot: list[str] = []
    for uri in _unique(params.initialSubscriptions or []):
        await host.ensure_channel(uri)
        snapshot = host.bus.subscribe(uri, peer)
        if snapshot is None:
            without_snapshot.append(uri)  # a telemetry channel, or none at all: asked last
            continue
        peer.subscriptions.add(uri)
        snapshots.append(snapshot)
    log.info("%s: initialized, protocol %s", peer.name, version)
    for hello in host.hooks.hello:
        hello(host)  # the agents' boot probes wait for this (SessionManager.probe_soon)
    result: dict[str, Any] = {
        "protocolVersion": version,
        "serverSeq": host.bus.server_seq,
        "serverInfo": {"name": "ahpd", "version": __version__},
        "snapshots": snapshots,
    }
    for capabilities in host.hooks.capabilities:  # telemetry, the window's extensions, automations, the `!` prefix
        for key, value in capabilities(host).items():
            result[key] = {**result[key], **value} if key == "_meta" and key in result else value
    # Last, with nothing awaited after: a channel without a snapshot (telemetry)
    # may send at once, and nothing it sends should reach the client before this answer.
    for uri in without_snapshot:
        try:
            answer = _subscribe_stateless(host, peer, uri)
        except RpcError as err:
            log.info("%s: initial subscription %s refused (%s); not subscribed", peer.name, uri, err.message)
            continue
        if answer is None:
            log.info("%s: initial subscription %s names no channel; not subscribed", peer.name, uri)
    return result


def _subscribe_stateless(host: Host, peer: Peer, uri: str) -> dict[str, Any] | None:
    """Subscribe ``peer`` to a channel that has no snapshot (telemetry), or
    None when no feature has one by that name."""
    for stateless in host.hooks.stateless:  # no snapshot, never replayed
        answer = stateless(host, peer, uri)
        if answer is not None:
            return answer
    return None


def ping(host: Host, peer: Peer, params: model.PingParams) -> None:
    return None


async def subscribe(host: Host, peer: Peer, params: model.SubscribeParams) -> dict[str, Any]:
    answer = _subscribe_stateless(host, peer, params.channel)
    if answer is not None:
        return answer
    await host.ensure_channel(params.channel)
    snapshot = host.bus.subscribe(params.channel, peer)
    if snapshot is None:
        raise _no_channel(params.channel)
    peer.subscriptions.add(params.channel)
    return {"snapshot": snapshot}


async def reconnect(host: Host, peer: Peer, params: model.ReconnectParams) -> dict[str, Any]:
    """A client coming back: what it missed, or whole snapshots if too much."""
    if peer.initialized and peer.client_id != params.clientId:
        raise RpcError(INVALID_REQUEST, "reconnect names another client than this connection's")
    peer.client_id = params.clientId
    peer.protocol_version = peer.protocol_version or versions.SUPPORTED_VERSIONS[0]
    for hello in host.hooks.hello:
        hello(host)
    wanted = _unique(params.subscriptions)
    for uri in wanted:
        await host.ensure_channel(uri)
    present = [uri for uri in wanted if host.bus.has(uri)]
    missing = [uri for uri in wanted if not host.bus.has(uri)]
    last_seen = params.lastSeenServerSeq
    # The replay buffer holds each action under its channel's own name: one
    # watched under an alias is replayed spelled from that name, as it is sent live.
    aliased = {u: host.bus.aliases[u] for u in present if u not in host.bus.channels and u in host.bus.aliases}
    own = [u for u in present if u not in aliased]
    targets = [a.target for a in aliased.values()]
    replay = host.bus.replay.since(int(last_seen), host.bus.server_seq, [*own, *targets])
    if replay is not None and aliased:
        replay = _spelled(replay, set(own), aliased)
    snapshots = []
    for uri in present:
        snapshot = host.bus.subscribe(uri, peer)
        peer.subscriptions.add(uri)
        snapshots.append(snapshot)
    if replay is None:
        log.info("%s: reconnect from %s is beyond the replay buffer; answering snapshots", peer.name, last_seen)
        return {"type": "snapshot", "snapshots": snapshots}
    return {"type": "replay", "actions": replay, "missing": missing}


def _spelled(envelopes: list[dict[str, Any]], own: set[str], aliased: dict[str, Alias]) -> list[dict[str, Any]]:
    """What a client missed, under each name it watches a channel by."""
    out = []
    for envelope in envelopes:
        if envelope["channel"] in own:
            out.append(envelope)
        for name, alias in aliased.items():
            if alias.target == envelope["channel"]:
                out.append({**envelope, "channel": name, "action": alias.out(envelope["action"])})
    return out


def unsubscribe(host: Host, peer: Peer, raw: Any) -> None:
    try:
        params = codec.decode(model.UnsubscribeParams, raw if raw is not None else {})
    except DecodeError as err:
        log.warning("%s: unsubscribe ignored: %s", peer.name, err)
        return
    host.leave(peer, params.channel)


COMMANDS: dict[str, Handler] = {
    "initialize": initialize,
    "ping": ping,
    "subscribe": subscribe,
    "reconnect": reconnect,
}

NOTIFICATIONS: dict[str, Handler] = {
    "unsubscribe": unsubscribe,
    "dispatchAction": dispatch.dispatch_action,
}
