"""Resource watches: ``createResourceWatch`` and the ``ahp-resource-watch:``
channels it opens.

A watch on a ``file:`` URI is a listener of the daemon's one notifier
(``ahpd.ports.notify``: a single inotify instance read on the trio loop, no
thread), started with the first watch; a folder several watches cover is
one kernel watch. Each watch batches what it hears in a task of its own in
the watches' nursery: a watch that fails ends alone, logged. A batch closes
once the tree has been quiet for ``STEP`` ms (or ``DEBOUNCE`` ms have
passed), so a ``git checkout`` of thousands of files is a handful of
``resourceWatch/changed`` actions, not thousands. A batch is a set, so the
order inside it is rebuilt per path: what was added, then updated, then
deleted, and a path deleted and made again within one batch reads deleted,
then added. Batches themselves arrive in the order they happened. A
recursive watch's ``excludes`` also keep the kernel out of the folders they
name (``node_modules`` costs no kernel watch).

A watch lives while somebody listens: it is released when its last
subscriber unsubscribes or disconnects, when the connection that created it
goes without anybody having subscribed, and when the host shuts down.
Release removes its kernel watches that no other watch uses, at once, and
cancels its task. The notifier is shared, so its failure is everybody's:
every watch is released, logged, and the next ``createResourceWatch``
starts a new notifier.

Watches are capped: ``resourceWatches`` for all clients together and
``resourceWatchesPerConnection`` for the watches one connection created
(root config keys). A ``createResourceWatch`` past either is refused with
-32009, naming the key and its value; so is one the kernel's own limit on
inotify watches refuses.

A watch on a client's resources (``<scheme>://<clientId>/...``) is created
on that client: the channel it mints is opened here as a relay, whose state
is the watch as asked. The owner subscribes to it like any channel, only it
may dispatch ``resourceWatch/changed`` there, and this host passes each
batch to the relay's other subscribers. The protocol gives a host no
``subscribe`` or ``unsubscribe`` to send a client, so release is said the
only way there is: the relay closes here when its last listener (the owner
is none) leaves or the owner disconnects, and the owner's next dispatch on
it is refused, which is its cue to let its watcher go.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ahpd.host.kernel import dispatch, rootconfig
from ahpd.host.kernel.forward import forward
from ahpd.host.kernel.jsonrpc import INTERNAL_ERROR, RpcError
from ahpd.ports import fs, notify, threads

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer

log = logging.getLogger("ahpd.host")


SCHEME = "ahp-resource-watch:/"
#: Milliseconds of quiet that close a batch, and the most a batch waits.
STEP = 20
DEBOUNCE = 150

_ADDED, _MODIFIED, _DELETED = notify.ADDED, notify.MODIFIED, notify.DELETED
#: The code a watch past a cap is refused with: what this host will not do.
REFUSED = -32009
#: The temporary file a write through the filesystem port renames into place.
_PORT_TEMP = re.compile(r"^\..*\.[0-9a-f]{12}\.tmp$")


@attrs.define(eq=False)
class Watch:
    """A watcher of this host's over ``path`` (reported under ``root``)."""

    uri: str
    root: str  # the URI as asked
    shown: str  # its path, under which changes are reported
    path: str  # where it leads, links resolved
    recursive: bool
    includes: list[str] | None
    excludes: list[str] | None
    creator: Any
    notifier: notify.Notifier | None = None
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    listener: notify.Listener | None = None


@attrs.define(eq=False)
class Relay:
    """A watch a client publishes, relayed to this host's subscribers."""

    uri: str
    owner: Any
    creator: Any


def _matches(relative: str, patterns: list[str]) -> bool:
    """Whether ``relative`` (or a folder it is in) matches one of the globs."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        pattern = pattern.strip("/")
        bare = pattern[3:] if pattern.startswith("**/") else pattern
        for candidate in prefixes:
            if (
                fnmatch.fnmatchcase(candidate, pattern)
                or fnmatch.fnmatchcase(candidate, bare)
                or fnmatch.fnmatchcase(candidate.rsplit("/", 1)[-1], bare)
            ):
                return True
    return False


def batch(watch: Watch, raw: set[tuple[int, str]]) -> list[dict[str, str]]:
    """The ``ResourceChange`` items of one watcher batch, filtered by the
    watch's globs and ordered per path as the changes can have happened."""
    kinds: dict[str, set[int]] = {}
    for kind, path in raw:
        relative = os.path.relpath(path, watch.path)
        if relative == ".":
            relative = ""
        elif relative.startswith(".."):
            continue
        if _PORT_TEMP.match(os.path.basename(path)):
            continue
        if relative and watch.includes and not _matches(relative, watch.includes):
            continue
        if relative and watch.excludes and _matches(relative, watch.excludes):
            continue
        kinds.setdefault(relative, set()).add(kind)
    items: list[dict[str, str]] = []
    base = Path(watch.shown)
    for relative in sorted(kinds):
        seen = kinds[relative]
        uri = (base / relative).as_uri() if relative else base.as_uri()
        if _DELETED in seen and _ADDED in seen and os.path.lexists(os.path.join(watch.path, relative)):
            order = ["deleted", "added"]
        else:
            order = [
                name
                for code, name in ((_ADDED, "added"), (_MODIFIED, "updated"), (_DELETED, "deleted"))
                if code in seen
            ]
        items.extend({"uri": uri, "type": name} for name in order)
    return items


class Watches:
    """Every watch of this host, each in its own task of one nursery, and
    the notifier they share, in another."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self._nursery: trio.Nursery | None = None  # the watches' tasks
        self._service: trio.Nursery | None = None  # the notifier's
        self._notifier: notify.Notifier | None = None
        self._starting = trio.Lock()
        self.watches: dict[str, Watch | Relay] = {}

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as service:
            self._service = service
            try:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    task_status.started()
                    await trio.sleep_forever()
            finally:
                self._nursery = self._service = None
                for uri in list(self.watches):
                    self.release(uri)

    @property
    def tasks(self) -> int:
        """How many watch tasks are running (for tests and status)."""
        return len(self._nursery.child_tasks) if self._nursery is not None else 0

    @property
    def kernel_watches(self) -> int:
        """How many kernel watches the watches hold between them."""
        return self._notifier.kernel_watches if self._notifier is not None else 0

    def _cap(self, key: str) -> int:
        value = self._host.config(key)
        return int(value if value is not None else rootconfig.SCHEMA["properties"][key]["default"])

    def check_room(self, peer: Peer, uri: str) -> None:
        """Refuse a new watch for ``peer`` past either cap, naming it."""
        total, mine = self._cap("resourceWatches"), self._cap("resourceWatchesPerConnection")
        if len(self.watches) >= total:
            raise RpcError(
                REFUSED,
                f"cannot watch {uri}: this host keeps {len(self.watches)} watches, its limit "
                f"(resourceWatches = {total}); release one first",
                {"uri": uri, "limit": total},
            )
        held = sum(1 for w in self.watches.values() if w.creator is peer)
        if held >= mine:
            raise RpcError(
                REFUSED,
                f"cannot watch {uri}: this connection keeps {held} watches, its limit "
                f"(resourceWatchesPerConnection = {mine}); release one first",
                {"uri": uri, "limit": mine},
            )

    # -- this host's own -------------------------------------------------------------

    async def _running_notifier(self) -> notify.Notifier:
        """The shared notifier, started by the first watch that needs it."""
        async with self._starting:
            if self._notifier is None:
                if self._service is None:
                    raise RpcError(INTERNAL_ERROR, "this host runs no watchers: it is shutting down")
                notifier = notify.Notifier()
                try:
                    await self._service.start(self._notify, notifier)
                except OSError as exc:
                    raise RpcError(INTERNAL_ERROR, f"this host cannot watch files: {exc}") from None
                self._notifier = notifier
            return self._notifier

    async def _notify(self, notifier: notify.Notifier, task_status: trio.TaskStatus[None]) -> None:
        """The notifier's failure boundary. Every watch hears through it, so
        its failure releases every watch, logged; the next watch starts another."""
        try:
            await notifier.run(task_status)
        except Exception:
            if not notifier.started:
                raise
            log.exception("the file notifier failed; every watch of this host's is released")
        finally:
            if self._notifier is notifier:
                self._notifier = None
            for uri, watch in list(self.watches.items()):
                if isinstance(watch, Watch) and watch.notifier is notifier:
                    self.release(uri)

    async def create(
        self, peer: Peer, uri: str, path: str, recursive: bool, includes: list[str] | None, excludes: list[str] | None
    ) -> str:
        """Open a watch over the folder or file at ``path`` (``uri`` as asked)."""
        if self._nursery is None:
            raise RpcError(INTERNAL_ERROR, "this host runs no watchers: it is not running or is shutting down")
        real = await threads.run("files", _real_path, path)
        notifier = await self._running_notifier()
        self.check_room(peer, uri)  # after the last wait: nothing else is added before this one
        channel = f"{SCHEME}{secrets.token_hex(8)}"
        watch = Watch(channel, uri, path, real, recursive, includes, excludes, peer, notifier=notifier)
        self.watches[channel] = watch
        state: dict[str, Any] = {"root": uri, "recursive": recursive}
        if excludes is not None:
            state["excludes"] = {"items": excludes}
        if includes is not None:
            state["includes"] = {"items": includes}
        self._host.bus.open(channel, "resourceWatch", state)
        try:
            await self._nursery.start(self._watch, watch, notifier)
        except BaseException:
            self.release(channel)
            raise
        log.info("%s: watching %s as %s (recursive: %s)", peer.name, uri, channel, recursive)
        return channel

    async def _watch(
        self, watch: Watch, notifier: notify.Notifier, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """One watch's task and failure boundary: its batches, made of what
        its listener hears; a failure ends this watch only."""
        excludes = watch.excludes
        prune = (lambda relative: _matches(relative, excludes)) if watch.recursive and excludes else None
        listener = watch.listener = notify.Listener(watch.path, watch.recursive, prune)
        started = False
        try:
            with watch.scope:
                try:
                    await notifier.listen(listener)
                except notify.LimitReached as exc:
                    raise RpcError(REFUSED, f"cannot watch {watch.root}: {exc.strerror}", {"uri": watch.root}) from None
                task_status.started()
                started = True
                while True:
                    await listener.arrived()
                    began = trio.current_time()
                    while True:  # until STEP ms pass without a change, or DEBOUNCE in all
                        heard = listener.count
                        await trio.sleep(STEP / 1000)
                        if listener.count == heard or trio.current_time() - began >= DEBOUNCE / 1000:
                            break
                    self._changed(watch, listener.take())
            if not started:
                raise RpcError(INTERNAL_ERROR, f"{watch.root} was let go of while its watch was being made")
        except RpcError:
            raise
        except Exception as exc:  # noqa: BLE001 - one watch fails, the host goes on
            if not started:
                raise RpcError(INTERNAL_ERROR, f"cannot watch {watch.root}: {exc}", {"uri": watch.root}) from None
            log.exception("watch %s over %s failed; released", watch.uri, watch.root)
        finally:
            notifier.close_listener(listener)
            if self.watches.get(watch.uri) is watch:
                self.release(watch.uri)

    def _changed(self, watch: Watch, raw: set[tuple[int, str]]) -> None:
        items = batch(watch, raw)
        channel = self._host.bus.channels.get(watch.uri)
        if items and channel is not None:
            # The state never moves; the batch travels on the action stream.
            self._host.bus.emit(
                watch.uri, {"type": "resourceWatch/changed", "changes": {"items": items}}, new_state=dict(channel.state)
            )

    # -- a client's ----------------------------------------------------------------------

    async def relay(self, asker: Peer, owner: Peer, params: dict[str, Any], uri: str) -> str:
        """Create the watch on ``owner`` and open the channel it mints here."""
        self.check_room(asker, uri)
        result = await forward(self._host, asker, owner, "createResourceWatch", params, uri)
        channel = result.get("channel") if isinstance(result, dict) else None
        if not isinstance(channel, str) or not channel.startswith(SCHEME):
            raise RpcError(
                INTERNAL_ERROR,
                f"client {owner.client_id} answered createResourceWatch of {uri} "
                f"without an {SCHEME} channel: {result!r}",
                {"uri": uri},
            )
        if channel in self._host.bus.channels:
            raise RpcError(
                INTERNAL_ERROR,
                f"client {owner.client_id} minted {channel}, which is already a channel on this host",
                {"uri": uri},
            )
        state = {"root": uri, "recursive": bool(params.get("recursive", False))}
        state.update({k: params[k] for k in ("excludes", "includes") if k in params})
        if owner.outgoing.gone:
            raise RpcError(
                INTERNAL_ERROR, f"client {owner.client_id} disconnected while {uri} was being watched", {"uri": uri}
            )
        self._host.bus.open(channel, "resourceWatch", state)
        self.watches[channel] = Relay(channel, owner, asker)
        log.info("%s: relaying %s of client %s as %s", asker.name, uri, owner.client_id, channel)
        return channel

    # -- release -------------------------------------------------------------------------

    def release(self, uri: str) -> None:
        """Let go of the watch behind channel ``uri`` (no-op for any other)."""
        watch = self.watches.pop(uri, None)
        if watch is None:
            return
        self._host.bus.close(uri)
        if isinstance(watch, Watch):
            watch.scope.cancel()
            if watch.listener is not None and watch.notifier is not None:
                watch.notifier.close_listener(watch.listener)  # its kernel watches go now, not when its task ends
        log.info("watch %s released", uri)

    def left(self, uri: str) -> None:
        """Somebody unsubscribed from ``uri``: the last listener releases the
        watch (the client that publishes a relayed one is no listener)."""
        watch = self.watches.get(uri)
        channel = self._host.bus.channels.get(uri)
        if watch is None or channel is None:
            return
        owner = watch.owner.client_id if isinstance(watch, Relay) else None
        listeners = [s for s in channel.subscribers if owner is None or getattr(s, "client_id", None) != owner]
        if not listeners:
            self.release(uri)

    def peer_gone(self, peer: Peer) -> None:
        """A connection closed: the relays it published end, and the watches
        it created that nobody subscribed to."""
        for uri, watch in list(self.watches.items()):
            channel = self._host.bus.channels.get(uri)
            unheard = channel is None or not channel.subscribers
            if (isinstance(watch, Relay) and watch.owner is peer) or (watch.creator is peer and unheard):
                self.release(uri)


def _real_path(path: str) -> str:
    with fs.Fence("/") as fence:
        info = fence.stat(path)
        if info.kind not in ("file", "directory"):
            raise fs.Refused(path, f"{path} is neither a file nor a folder")
        return str(fence.resolve(path))


# -- the rule for a client's resourceWatch/changed ------------------------------------------


def relay_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> dispatch.Refuse | dispatch.Apply:
    """Only the client that publishes a relayed watch says what changed in it;
    this host passes the batch on to the relay's subscribers."""
    watch = host.watches.watches.get(channel)
    if not isinstance(watch, Relay):
        return dispatch.Refuse(f"{channel} is watched by this host: resourceWatch/changed on it is the host's to say")
    if peer.client_id != watch.owner.client_id:
        return dispatch.Refuse(
            f"only client {watch.owner.client_id}, which publishes {channel}, dispatches resourceWatch/changed on it"
        )
    if not action.get("changes", {}).get("items"):
        return dispatch.Refuse("an empty batch of changes is not dispatched")
    state = host.bus.channels[channel].state
    host.bus.emit(channel, action, new_state=dict(state))
    return dispatch.Apply(action)


CLIENT_ACTIONS = {"resourceWatch/changed": relay_changed}


# -- what the kernel asks (ahpd.host.table.KERNEL_HOOKS) ----------------------------------


def on_left(host: Any, peer: Peer, uri: str) -> None:
    """A watch nobody watches any more ends."""
    channel = host.bus.channels.get(uri)
    if channel is not None and channel.kind == "resourceWatch":
        host.watches.left(uri)


def on_peer_gone(host: Any, peer: Peer) -> None:
    host.watches.peer_gone(peer)
