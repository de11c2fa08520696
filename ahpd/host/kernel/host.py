"""The host: one AHP server, whatever transports it is reached over.

``Host.serve_connection`` is the transport handler: it reads frames, answers
requests by method through the command table (``ahpd.host.kernel.commands``) and
hands client actions to ``ahpd.host.kernel.dispatch``, in the order they
come; a request that waits on another party lets the next frames in
meanwhile (``ahpd.host.kernel.forward.let_go``). Each connection is a
``Peer``; its sends go to the transport's writer queue and never wait.
A fault in one handler is answered -32603 and logged with its traceback; it
never reaches another connection.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from ahpd.host.kernel import commands as kernel_commands
from ahpd.host.kernel import forward, jsonrpc, rootconfig
from ahpd.host.kernel.alias import Alias
from ahpd.host.kernel.bus import ROOT, ActionBus
from ahpd.host.kernel.feed import Feed
from ahpd.host.kernel.forward import Outgoing
from ahpd.host.kernel.frame import Utf8Frame
from ahpd.host.kernel.hooks import KernelHooks
from ahpd.host.kernel.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, RpcError
from ahpd.host.kernel.seqstore import MemorySeqStore, Sequencer
from ahpd import protocol
from ahpd.protocol import DecodeError, codec, model

log = logging.getLogger("ahpd.host")

#: Requests a client may make before ``initialize``.
BEFORE_HANDSHAKE = frozenset({"ping", "initialize", "reconnect"})
#: Commands whose literal ``channel`` is not checked: how a client finds out
#: it can talk at all must not fail on a wrong constant.
CHANNEL_EXEMPT = frozenset({"initialize", "ping"})
#: What a missing config reads as, without a dict made per frame.
_NONE: dict[str, Any] = {}
#: Other spellings of a literal channel, taken as it (seed: the catalogue's).
CHANNEL_ALIASES = {"ahp-automations://catalog": "ahp-automations://"}


class Peer:
    """One connected client, as the host knows it."""

    def __init__(self, conn: Any, number: int) -> None:
        self.conn = conn
        self.number = number
        self.client_id: str | None = None
        self.protocol_version: str | None = None
        self.subscriptions: set[str] = set()
        #: Config keys that are this connection's own (defaultShell...).
        self.config: dict[str, Any] = {}
        #: Tokens lent with ``authenticate``: resource -> (token, expiry or None).
        self.tokens: dict[str, tuple[str, float | None]] = {}
        #: The clock of each lent token that expires (``ahpd.host.kernel.auth``).
        self.token_clocks: dict[str, trio.CancelScope] = {}
        #: The user this connection signed in as (``ahpd://users``), if any.
        self.user: str | None = None
        #: What that user was granted (``config:write``, ``trust:push``).
        self.scopes: frozenset[str] = frozenset()
        #: Requests this host sent the client that wait for its answer.
        self.outgoing = Outgoing(self)
        #: Where this connection's requests run (``serve_connection``), and
        #: how many of them wait on another party (``forward.let_go``).
        self.requests: trio.Nursery | None = None
        self.waiting = 0

    @property
    def initialized(self) -> bool:
        return self.client_id is not None

    @property
    def name(self) -> str:
        who = f" client {self.client_id}" if self.client_id else ""
        return f"{self.conn.name}{who}"

    def send(self, text: str | Utf8Frame, size: int | None = None) -> bool:
        if isinstance(text, Utf8Frame):
            return self.conn.send(text, text.size)
        if size is None and text.isascii():  # measured without a copy: a 50 MB read is one frame
            size = len(text)
        return self.conn.send(text, size)

    def follow(self, feed: Feed) -> bool:
        """Queue ``feed``'s frames from now on (``ahpd.host.kernel.feed``);
        False when the connection cannot (closed, or a transport without feeds)."""
        follow = getattr(self.conn, "follow", None)
        return follow is not None and bool(follow(feed))

    def unfollow(self, feed: Feed) -> None:
        unfollow = getattr(self.conn, "unfollow", None)
        if unfollow is not None:
            unfollow(feed)

    def __repr__(self) -> str:
        return f"<Peer {self.number} {self.name}>"


Handler = Callable[["Host", Peer, Any], Awaitable[Any] | Any]


class Host:
    """The kernel of one AHP server: its connections, the action bus and
    replay, the command and client-action tables it is given, and the
    moments (``hooks``) at which the features it is assembled with act.

    A kernel alone serves the connection layer (``ahpd.host.kernel.commands``);
    ``ahpd.host.assembly.Host`` is the host with every feature package."""

    # What the assembly (``ahpd.host.assembly``) attaches: each feature's own
    # object. The kernel never reads them; they are declared here, untyped,
    # so that code handed the kernel's ``Host`` reaches a feature's object
    # through the host it was given rather than by importing the feature.
    sessions: Any = None
    terminals: Any = None
    watches: Any = None
    telemetry: Any = None
    #: The automations catalogue and scheduler, set by whoever gives the
    #: host a store; None serves no automations.
    automations: Any = None
    mcp_bridge: Any = None
    #: GitHub's API for the pull request beside a branch (``ahpd.ports.github``,
    #: set by the daemon); None: no pull request is looked up or offered.
    github: Any = None
    #: Where ``isolation: worktree`` trees go (``<root>/<repo>/<name>``, set
    #: by ``--worktrees-root``); None: beside their repository.
    worktrees_root: Path | None = None
    #: Where the plugins clients hand over are copied (``<data dir>/plugins``,
    #: set by the daemon); None: a client's plugin is reported as not loaded.
    plugins_root: Path | None = None
    #: The customization decisions kept for a folder and for every session
    #: (``ahpd.host.customizations.decisions.DecisionStore``, set by the
    #: daemon); None: kept in memory from first use.
    decisions: Any = None

    def __init__(
        self,
        *,
        seq_store: Any = None,
        config_values: dict[str, Any] | None = None,
        on_state_change: Callable[[str], None] | None = None,
        stores: tuple[Any, ...] = (),
        users: Any = None,
        commands: dict[str, Handler] | None = None,
        notifications: dict[str, Handler] | None = None,
        client_actions: dict[str, Any] | None = None,
        hooks: KernelHooks | None = None,
    ) -> None:
        #: The users directory (``ahpd.ports.users``); None: nobody to name.
        self.users = users
        #: How ``shutdown`` stops the daemon (set by it); None: not served.
        self.stop: Callable[[], None] | None = None
        #: Request method -> handler; notification -> handler; client action
        #: type -> rule (``ahpd.host.kernel.dispatch``): joined in ``ahpd.host.table``.
        self.commands: dict[str, Handler] = commands if commands is not None else dict(kernel_commands.COMMANDS)
        self.notifications: dict[str, Handler] = (
            notifications if notifications is not None else dict(kernel_commands.NOTIFICATIONS)
        )
        self.client_actions: dict[str, Any] = client_actions if client_actions is not None else {}
        self.hooks = hooks or KernelHooks()
        self.bus = ActionBus(Sequencer(seq_store or MemorySeqStore()), lambda: self.config("replayBytes"))
        values = {**rootconfig.DEFAULT_VALUES, **(config_values or {})}
        self.bus.open(
            ROOT,
            "root",
            {
                "agents": [],
                "activeSessions": 0,
                "terminals": [],
                "config": {"schema": rootconfig.SCHEMA, "values": values},
            },
        )
        #: The root channel: never closed, its state replaced as it moves.
        self._root = self.bus.channels[ROOT]
        self.peers: set[Peer] = set()
        self._numbers = 0
        self._limit_from: Any = None
        self._limit = 0
        #: Called with a channel's URI after a client's action moved its
        #: state, so that what a user set can be written down.
        self.on_state_change = on_state_change
        #: What writes to disk behind the host's back (``run`` in its
        #: nursery, ``close`` on the way out): the serverSeq reservation and
        #: the stores given.
        self.writers = [self.bus.sequencer, *(s for s in stores if hasattr(s, "run"))]
        #: The nursery of what the host runs beside its connections (a lent
        #: token's clock), while :meth:`run` runs.
        self.nursery: trio.Nursery | None = None

    def seed_root(self, **fields: Any) -> None:
        """Fill in the root state while the host is being assembled, before
        any client can have seen it (the agents, the session count)."""
        channel = self.bus.channels[ROOT]
        channel.state = {**channel.state, **fields}

    def services(self) -> list[Any]:
        """What runs beside the connections, in the order it starts (each
        has ``run(task_status)``); the assembled host names its features'."""
        return []

    # -- configuration -------------------------------------------------------

    def config(self, key: str) -> Any:
        """A root config value, read where it is used so a change applies next time."""
        values = self.bus.channels[ROOT].state.get("config", {}).get("values", {})
        return values.get(key, rootconfig.DEFAULT_VALUES.get(key))

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run what the host owns beyond its connections: the writers, then
        the features' services. Cancelled, it ends every agent."""
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            for writer in self.writers:
                await nursery.start(writer.run)
            for service in self.services():
                await nursery.start(service.run)
            task_status.started()
            await trio.sleep_forever()

    async def ensure_channel(self, uri: str) -> bool:
        """True if ``uri`` is an open channel, opening it when a feature can
        (a stored session woken, a changeset read)."""
        if uri in self.bus.channels:
            return True
        alias = self.bus.aliases.get(uri) or self.alias_of(uri)
        if alias is not None:  # another name of a channel: that one opened, and this name kept
            if not await self.ensure_channel(alias.target):
                return False
            self.bus.aliases.setdefault(uri, alias)
            return True
        for opener in self.hooks.openers:
            if await opener(self, uri):
                return True
        return uri in self.bus.channels

    def alias_of(self, uri: str) -> Alias | None:
        """``uri`` as another name of a channel, when a feature says it is one."""
        for aliases in self.hooks.aliases:
            pairs = aliases(self, uri)
            if pairs:
                alias = Alias(uri, pairs)
                if alias.target != uri:
                    return alias
        return None

    def state_changed(self, channel: str) -> None:
        """A client's action moved ``channel``: write down what must survive."""
        for hook in self.hooks.state_changed:
            hook(self, channel)
        if self.on_state_change is not None:
            self.on_state_change(channel)

    def queue_limit(self) -> int:
        """Read per frame per subscriber once a queue holds anything, so it is
        kept with the values dict it came from: the reducers replace that dict
        when the config moves, and only then is the limit read again."""
        values = self._root.state.get("config", _NONE).get("values", _NONE)
        if values is not self._limit_from:
            self._limit_from = values
            self._limit = int(values.get("clientQueueBytes", rootconfig.DEFAULT_VALUES["clientQueueBytes"]))
        return self._limit

    # -- the connection loop -------------------------------------------------

    async def serve_connection(self, conn: Any) -> None:
        """The transport handler: one client, until it goes."""
        self._numbers += 1
        peer = Peer(conn, self._numbers)
        self.peers.add(peer)
        log.info("connected: %s", peer.name)
        try:
            async with trio.open_nursery() as requests:
                peer.requests = requests
                while (text := await conn.receive()) is not None:
                    handling = self.handle_frame(peer, text)
                    text = None  # held by the handler alone, which lets go of it once parsed (a large write)
                    await handling
                requests.cancel_scope.cancel()  # a request still waiting on another party ends with its asker
        finally:
            self.peers.discard(peer)
            peer.outgoing.fail_all(f"client {peer.client_id} disconnected")
            for clock in peer.token_clocks.values():
                clock.cancel()  # its tokens go with it
            for uri in list(peer.subscriptions):
                self.leave(peer, uri)
            if peer.client_id is not None and not any(p.client_id == peer.client_id for p in self.peers):
                for hook in self.hooks.client_gone:  # the last connection of this client
                    hook(self, peer.client_id)
            for gone in self.hooks.peer_gone:
                gone(self, peer)
            log.info("disconnected: %s", peer.name)

    def leave(self, peer: Peer, uri: str) -> None:
        """``peer`` stops watching ``uri``. Under an alias, the features are
        told of the channel by its own name."""
        alias = self.bus.aliases.get(uri) if uri not in self.bus.channels else None
        self.bus.unsubscribe(uri, peer)
        peer.subscriptions.discard(uri)
        for hook in self.hooks.left:
            hook(self, peer, alias.target if alias is not None else uri)

    async def handle_frame(self, peer: Peer, text: str) -> None:
        message = jsonrpc.parse(text)
        del text  # what is left of a large frame is its parsed content, held once
        if isinstance(message, jsonrpc.Invalid):
            peer.send(message.reply)
        elif isinstance(message, jsonrpc.Request):
            if peer.requests is None:  # not in a connection's loop: nothing else to read meanwhile
                peer.send(await self._answer(peer, message))
                return
            turn = forward.Turn(peer)
            peer.requests.start_soon(self._answer_in_turn, peer, message, turn)
            await turn.released.wait()
        elif isinstance(message, jsonrpc.Notification):
            await self._notification(peer, message)
        elif not peer.outgoing.settle(message):
            log.debug("%s: response to nothing we asked (id %r)", peer.name, message.id)

    async def _answer_in_turn(self, peer: Peer, request: jsonrpc.Request, turn: forward.Turn) -> None:
        """Answer ``request`` in a task of its own; the frame loop waits for
        it unless it lets go of its turn (``forward.let_go``)."""
        forward.TURN.set(turn)  # this task's context alone
        try:
            peer.send(await self._answer(peer, request))
        finally:
            turn.done()

    async def _answer(self, peer: Peer, request: jsonrpc.Request) -> str | Utf8Frame:
        try:
            result = await self._call(self.commands, peer, request.method, request.params)
        except RpcError as err:
            return jsonrpc.error_frame(request.id, err)
        except Exception as exc:  # noqa: BLE001 - a fault answers one request, no more
            log.exception("%s: %s failed", peer.name, request.method)
            return jsonrpc.error_frame(
                request.id, RpcError(INTERNAL_ERROR, f"internal error in {request.method}: {type(exc).__name__}: {exc}")
            )
        return jsonrpc.result_frame(request.id, result)

    async def _call(self, table: dict[str, Handler], peer: Peer, method: str, params: Any) -> Any:
        handler = table.get(method)
        if handler is None:
            raise RpcError(METHOD_NOT_FOUND, _not_served(method))
        if not peer.initialized and method not in BEFORE_HANDSHAKE:
            raise RpcError(INVALID_REQUEST, f"{method} before initialize: send initialize first")
        alias = await self._alias_named(method, params)
        if alias is not None:  # a command on a channel named by an alias: the channel's own names inside
            params = alias.into(params)
        decoded = self.decode_params(method, params)
        result = handler(self, peer, decoded)
        if isinstance(result, Awaitable):
            result = await result
        # Handlers answer wire JSON (states are held as wire JSON), or one
        # already encoded (a file's content); a model object is encoded.
        if result is None or isinstance(result, (dict, jsonrpc.Encoded, jsonrpc.EncodedBytes)):
            return alias.out(result) if alias is not None and isinstance(result, dict) else result
        encoded = codec.encode(result)
        return alias.out(encoded) if alias is not None else encoded

    async def _alias_named(self, method: str, params: Any) -> Alias | None:
        """The alias a command's ``channel`` is, opening what it names;
        None for the commands that keep the name a client subscribes by."""
        if method in ("initialize", "subscribe", "reconnect") or not isinstance(params, dict):
            return None
        channel = params.get("channel")
        if not isinstance(channel, str) or channel in self.bus.channels:
            return None
        alias = self.bus.aliases.get(channel) or self.alias_of(channel)
        if alias is None or not await self.ensure_channel(channel):
            return None
        return alias

    def decode_params(self, method: str, params: Any) -> Any:
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, f"{method} takes an object of params")
        if method not in model.COMMANDS and method not in model.CLIENT_NOTIFICATIONS:
            return params  # outside the protocol (ahpd.host.window.window): the handler reads its own
        cls = model.COMMANDS[method][0] if method in model.COMMANDS else model.CLIENT_NOTIFICATIONS[method]
        params = _check_literal_channel(method, cls, params)
        try:
            return codec.decode(cls, params)
        except DecodeError as err:
            raise RpcError(
                INVALID_PARAMS, f"invalid {method} params: {err.reason} at {err.path}", {"path": err.path}
            ) from None

    async def _notification(self, peer: Peer, note: jsonrpc.Notification) -> None:
        handler = self.notifications.get(note.method)
        if handler is None:
            log.warning("%s: notification %s is not served; dropped", peer.name, note.method)
            return
        if not peer.initialized:
            log.warning("%s: %s before initialize; dropped", peer.name, note.method)
            return
        try:
            result = handler(self, peer, note.params)
            if isinstance(result, Awaitable):
                await result
        except Exception:  # noqa: BLE001 - a fault in one notification is logged; it has no answer to fail
            log.exception("%s: %s failed", peer.name, note.method)

    # -- shutdown --------------------------------------------------------------

    def close(self) -> None:
        """Flush what must survive: the serverSeq reservation and whatever
        the stores still hold."""
        for writer in self.writers:
            writer.close()


def _not_served(method: str) -> str:
    if method in model.EXPERIMENTAL:
        return f"{method} is experimental AHP surface this host does not serve"
    if method in model.COMMANDS:
        return f"{method} is an AHP command this host does not serve yet"
    return f"{method} is not a method this host serves"


def _check_literal_channel(method: str, cls: type, params: dict[str, Any]) -> dict[str, Any]:
    """A command that declares ``channel`` as a literal is refused when it
    names another; one that names none has named nothing wrong."""
    field = protocol.fields_dict(cls).get("channel")
    if field is None or typing.get_origin(field.type) is not typing.Literal:
        return params
    (expected,) = typing.get_args(field.type)
    given = params.get("channel")
    if given is None or method in CHANNEL_EXEMPT or CHANNEL_ALIASES.get(given) == expected:
        return {**params, "channel": expected}
    if given != expected:
        raise RpcError(
            INVALID_PARAMS,
            f"{method} is sent on channel {expected}, not {given!r}",
            {"path": "$.channel", "expected": expected},
        )
    return params
