"""``dispatchAction``: what a client says happened, and what the host makes of it.

A client applies its action before sending it, so every dispatch is answered
to its sender: with the action itself, carrying the sender's origin, once the
host has applied it (everyone watching the channel gets the same envelope);
with the same origin and no ``rejectionReason`` when it changed nothing
(to the sender alone, not buffered: not state moving, and not a reason for
any other client to reconcile); or with a refusal, an envelope carrying
``rejectionReason``, to the sender alone, at the current serverSeq.

Per-type rules live in ``ahpd.host.table.CLIENT_ACTIONS``, keyed by action
type; a type without one is reduced as it is.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from ahpd import state as reducers
from ahpd.host.kernel import auth, jsonrpc, rootconfig
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.protocol import DecodeError, codec, model

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer

log = logging.getLogger("ahpd.host")


@attrs.frozen
class Refuse:
    reason: str


@attrs.frozen
class Apply:
    """Apply ``action`` (possibly narrowed from what was sent); ``refused``
    names the part that was not applied, answered as a separate refusal."""

    action: dict[str, Any]
    refused: str | None = None
    #: What the host does once the action is applied (start the turn...).
    after: Callable[[], None] | None = None


Rule = Callable[["Host", "Peer", str, dict[str, Any]], Refuse | Apply]

#: Host actions a client may still say on a channel it publishes (a watch
#: over its own resources); their rule checks that it is that client.
OWNER_DISPATCHED = frozenset({"resourceWatch/changed"})
#: Session actions a client may dispatch on a chat's channel, meaning that
#: chat (a chat renamed: ``ahpd.host.sessions.summaries.title_changed``).
ON_A_CHAT = frozenset({"session/titleChanged"})


async def dispatch_action(host: Host, peer: Peer, raw: Any) -> None:
    params = raw if isinstance(raw, dict) else {}
    given = params.get("channel")
    if isinstance(given, str) and not host.bus.has(given):  # open already: nothing to wake, no await
        await host.ensure_channel(given)
    client_seq = params.get("clientSeq")
    try:
        # The wire JSON the host sends for it (declared order, constants
        # filled in), strictly checked, without building the model's objects.
        decoded = codec.normalize(model.DispatchActionParams, params)
    except DecodeError as err:
        envelope = _lenient(params) or _readable_envelope(params)
        if envelope is None:
            # No channel and clientSeq to answer on: say what was wrong as a
            # JSON-RPC error (id null, the only id a notification has).
            peer.send(
                jsonrpc.error_frame(
                    None,
                    RpcError(INVALID_PARAMS, f"dispatchAction refused: {err.reason} at {err.path}", {"path": err.path}),
                )
            )
            log.warning("%s: undecodable dispatchAction: %s", peer.name, err)
            return
        # Otherwise the sender can match a refusal by its clientSeq: it gets
        # its own action back (as sent, or with undeclared keys dropped when
        # that much decodes), with what was wrong in it.
        channel, client_seq, action = envelope
        _refuse(host, peer, channel, action, client_seq, f"{err.reason} at {err.path}")
        return
    channel = decoded["channel"]
    action = decoded["action"]
    origin = {"clientId": peer.client_id, "clientSeq": client_seq}
    # Under an alias, the rules see the channel's own names and the sender
    # is answered in the names it used (ahpd.host.kernel.alias).
    alias = host.bus.aliases.get(channel) if channel not in host.bus.channels else None
    named = channel
    if alias is not None:
        channel, action = alias.target, alias.into(action)

    def refuse(shown: dict[str, Any], why: str) -> None:
        _refuse(host, peer, named, alias.out(shown) if alias else shown, client_seq, why)

    # The block of serverSeq reserved on disk spent while a healthy disk
    # writes the next: this connection waits for it, nobody else does.
    await host.bus.sequencer.numbered()
    reason = _why_not(host, action["type"], channel)
    if reason is not None:
        refuse(action, reason)
        return
    rule = host.client_actions.get(action["type"])
    try:
        decision = rule(host, peer, channel, action) if rule else Apply(action)
        if not isinstance(decision, Apply | Refuse) and inspect.isawaitable(decision):
            decision = await decision  # a rule that must write before it answers
        if isinstance(decision, Refuse):
            refuse(action, decision.reason)
            return
        current = host.bus.channels[channel].state
        new_state = host.bus.reduce(channel, decision.action)
    except Exception as exc:  # noqa: BLE001 - nothing moved: the sender is told, nobody else
        log.exception("%s: %s on %s failed", peer.name, action["type"], channel)
        refuse(action, f"internal error: {type(exc).__name__}: {exc}")
        return
    if new_state is current or new_state == current:
        # Nothing moved: the sender is told what the host made of its action
        # (for a key the connection keeps, that is nothing the host holds).
        host.bus.answer(peer, named, alias.out(decision.action) if alias else decision.action, origin)
    else:
        read = rule is None  # a rule may add what no frame held
        if host.bus.emit(channel, decision.action, origin, new_state=new_state, read=read) is None:
            why = host.bus.sequencer.unavailable() or "the action has no JSON form this host can send"
            refuse(action, why)
            return
        if decision.after is not None:
            decision.after()
        host.state_changed(channel)
    if decision.refused:
        refuse(action, decision.refused)


def _why_not(host: Host, action_type: str, channel: str) -> str | None:
    if (unnumbered := host.bus.sequencer.unavailable()) is not None:  # a full disk: nothing can move
        return unnumbered
    if action_type in model.EXPERIMENTAL:
        return f"{action_type} is experimental AHP surface this host does not serve"
    if not reducers.CLIENT_DISPATCHABLE.get(action_type, False) and action_type not in OWNER_DISPATCHED:
        return f"{action_type} is the host's to say: a client cannot claim it happened"
    target = host.bus.channels.get(channel)
    if target is None:
        return f"no channel {channel} on this host"
    kind = reducers.channel_of_action(action_type)
    if kind != target.kind and not (target.kind == "chat" and action_type in ON_A_CHAT):
        return f"{action_type} is a {kind} action, and {channel} is a {target.kind} channel"
    for refusal in host.hooks.refusals:  # a read-only chat, say
        reason = refusal(host, action_type, channel)
        if reason is not None:
            return reason
    return None


def _refuse(host: Host, peer: Peer, channel: str, action: dict[str, Any], client_seq: Any, reason: str) -> None:
    log.info("%s: refused %s on %s: %s", peer.name, action.get("type"), channel, reason)
    host.bus.answer(peer, channel, action, {"clientId": peer.client_id, "clientSeq": client_seq}, reason)


def _readable_envelope(params: dict[str, Any]) -> tuple[str, Any, dict[str, Any]] | None:
    """The channel, clientSeq and action object a refusal is addressed with,
    however wrong what is inside the action; None when one is missing."""
    channel, seq, action = params.get("channel"), params.get("clientSeq"), params.get("action")
    if isinstance(channel, str) and isinstance(action, dict) and isinstance(seq, int) and not isinstance(seq, bool):
        return channel, seq, action
    return None


def _lenient(params: dict[str, Any]) -> tuple[str, Any, dict[str, Any]] | None:
    """The dispatch with undeclared keys dropped, if that much decodes, so
    that the refusal can carry a well-formed action."""
    try:
        decoded = codec.decode(model.DispatchActionParams, params, strict=False)
    except DecodeError:
        return None
    return decoded.channel, decoded.clientSeq, codec.encode(decoded.action)


# -- per-type rules --------------------------------------------------------------


def root_config_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    """Every declared key is kept; an undeclared one is refused by name and
    the rest still applies. The connection's own keys stay on it. A key that
    needs a scope the connection was not granted is refused naming both."""
    shared: dict[str, Any] = {}
    refused: list[str] = []
    withheld = {k for k, scope in rootconfig.NEEDS_SCOPE.items() if not auth.granted(host, peer, scope)}
    for key, value in action["config"].items():
        if key in withheld:
            refused.append(_needs_scope(key))
            continue
        if key in rootconfig.CONNECTION_KEYS:
            peer.config[key] = value
            continue
        problem = rootconfig.check_value(key, value)
        if problem is not None:
            refused.append(problem)
        else:
            shared[key] = value
    reason = "; ".join(refused) or None
    if not shared and not action.get("replace"):
        if reason:
            return Refuse(reason)
        return Apply({**action, "config": {}})  # the connection's own: nothing shared moves
    narrowed = {**action, "config": shared}
    if action.get("replace"):
        # Replacing never drops what the host needs to run, nor moves a key
        # this connection may not push.
        current = host.bus.channels[channel].state.get("config", {}).get("values", {})
        kept = {k: current[k] for k in withheld if k in current}
        narrowed["config"] = {**rootconfig.DEFAULT_VALUES, **kept, **shared}
    return Apply(narrowed, refused=reason)


def _needs_scope(key: str) -> str:
    scope = rootconfig.NEEDS_SCOPE[key]
    return (
        f"{key} needs the {scope} scope: sign in to ahpd://users as a user granted it (ahpd users grant USER {scope})"
    )


CLIENT_ACTIONS = {"root/configChanged": root_config_changed}
