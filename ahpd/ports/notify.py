"""File-system change notification: one inotify instance for the whole
daemon, read on the trio loop.

Why one. A watcher per watch (watchfiles' ``RustNotify``, as this daemon
had) is an inotify instance, a notify thread and a thread blocked in its
loop for every ``createResourceWatch``: 200 watches were 400 threads, and
the kernel allows a user 128 instances in all (``fs.inotify.max_user_instances``).
Here every watch is a :class:`Listener` of one :class:`Notifier`: one file
descriptor, no thread at all (``trio.lowlevel.wait_readable`` wakes the
reader), and a folder two watches share is one kernel watch, counted by its
users and removed (``inotify_rm_watch``) when the last one lets go.

Why inotify_simple. It is a thin public wrapper of the three system calls
and the event layout (``INotify.add_watch``, ``rm_watch``, ``read``) that
leaves the reading to us, which is what putting the descriptor on trio's
loop needs. watchfiles' public ``watch``/``awatch`` make an instance and a
thread per call over a fixed set of paths (nothing can be added to or taken
from a running one), and its ``RustNotify`` is private; watchdog runs an
emitter thread per watched path; asyncinotify's asynchronous side is
asyncio's. The price of the thin wrapper is that recursion is ours: a
recursive listener walks its tree once (in a thread of the ``files``
family), adds a kernel watch per folder, and adds the folders that appear
later as their ``IN_CREATE``/``IN_MOVED_TO`` arrive, reporting what such a
folder already holds when it is first looked at (``mkdir -p a/b && touch
a/b/f`` can all happen before the watch on ``a`` is in place, and a folder
moved in brings what it holds). A folder moved away within the tree is let
go of and watched again where it lands.
Linux only, as the daemon is.

A watch on a file is a watch on its folder that keeps the file's own name:
an editor's save (a new file renamed over the old) replaces the inode a
watch on the file itself would have followed.

Events lost to a full kernel queue (``IN_Q_OVERFLOW``) are said to every
listener as its root changed, the most a reader can know then.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterable

import inotify_simple
import trio

from ahpd.ports import threads

log = logging.getLogger("ahpd.ports.notify")

#: What a change was, as listeners hear it.
ADDED, MODIFIED, DELETED = 1, 2, 3

_F = inotify_simple.flags
#: What a folder's kernel watch asks for: its entries made, changed, removed,
#: moved in or out, and the folder itself removed or moved.
MASK = (
    _F.CREATE
    | _F.MODIFY
    | _F.ATTRIB
    | _F.CLOSE_WRITE
    | _F.DELETE
    | _F.MOVED_FROM
    | _F.MOVED_TO
    | _F.DELETE_SELF
    | _F.MOVE_SELF
    | _F.ONLYDIR
    | _F.DONT_FOLLOW
)
_MADE = _F.CREATE | _F.MOVED_TO
_GONE = _F.DELETE | _F.MOVED_FROM
_CHANGED = _F.MODIFY | _F.ATTRIB | _F.CLOSE_WRITE
_SELF_GONE = _F.DELETE_SELF | _F.MOVE_SELF
#: The most events held for watches a walk has not registered yet.
_EARLY = 10_000


class LimitReached(OSError):
    """The kernel refused another watch: its per-user limit is used up."""


class Listener:
    """One watch's share of the notifier: the changes under ``root`` since
    it last took them, as a set of ``(kind, path)``."""

    def __init__(self, root: str, recursive: bool, prune: Callable[[str], bool] | None = None) -> None:
        self.root = root
        self.recursive = recursive
        #: Folders (relative to ``root``) a recursive walk does not enter.
        self.prune = prune
        #: For a watch on a file: its name in the folder watched.
        self.name: str | None = None
        self.changes: set[tuple[int, str]] = set()
        #: How many changes have arrived in all (a batch is quiet when it stops moving).
        self.count = 0
        self._arrived = trio.Event()
        self.folders: set[_Folder] = set()
        self.closed = False

    @property
    def folder(self) -> str:
        """The folder whose kernel watch this listener starts from."""
        return os.path.dirname(self.root) if self.name is not None else self.root

    def add(self, kind: int, path: str) -> None:
        self.changes.add((kind, path))
        self.count += 1
        self._arrived.set()

    async def arrived(self) -> None:
        """Return once there is a change to take."""
        await self._arrived.wait()

    def take(self) -> set[tuple[int, str]]:
        taken, self.changes = self.changes, set()
        self._arrived = trio.Event()
        return taken

    def _hears(self, folder: _Folder, name: str) -> bool:
        if self.name is not None:
            return name == self.name and folder.path == self.folder
        return self.recursive or folder.path == self.root

    def _pruned(self, path: str) -> bool:
        if self.prune is None or path == self.root:
            return False
        return self.prune(os.path.relpath(path, self.root))


class _Folder:
    """One kernel watch and the listeners that need it."""

    __slots__ = ("path", "wd", "users")

    def __init__(self, path: str, wd: int) -> None:
        self.path = path
        self.wd = wd
        self.users: set[Listener] = set()


class Notifier:
    """The daemon's one inotify instance (see the module's docstring). Run
    :meth:`run` in a nursery; :meth:`listen` and :meth:`close_listener`
    add and remove listeners while it runs."""

    def __init__(self) -> None:
        self._inotify: inotify_simple.INotify | None = None
        self._by_wd: dict[int, _Folder] = {}
        self._by_path: dict[str, _Folder] = {}
        self._nursery: trio.Nursery | None = None
        #: Whether :meth:`run` got as far as reading (its failures after that are the daemon's to survive).
        self.started = False
        #: Walks under way, and the events of watches they added that are
        #: not registered yet (a folder's first entries can come before it is).
        self._walks = 0
        self._early: list[inotify_simple.Event] = []
        #: Kernel watches walks added that nobody took, removed when no walk is under way.
        self._orphans: set[int] = set()

    @property
    def kernel_watches(self) -> int:
        """How many kernel watches this notifier holds."""
        return len(self._by_wd)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the instance's events for as long as it is not cancelled."""
        inotify = inotify_simple.INotify(nonblocking=True)
        fd = inotify.fileno()
        try:
            async with trio.open_nursery() as nursery:
                self._inotify, self._nursery = inotify, nursery
                self.started = True
                task_status.started()
                while True:
                    await trio.lowlevel.wait_readable(fd)
                    self._dispatch(inotify.read(timeout=0))
        finally:
            self._inotify = self._nursery = None
            self._by_wd.clear()
            self._by_path.clear()
            self._orphans.clear()
            trio.lowlevel.notify_closing(fd)
            inotify.close()

    # -- listeners -----------------------------------------------------------------

    async def listen(self, listener: Listener) -> None:
        """Start ``listener``: its folder (a recursive one's whole tree)
        watched by the kernel before this returns. Raises ``OSError`` when
        the root cannot be watched, :class:`LimitReached` at the kernel's limit."""
        inotify = self._inotify
        if inotify is None:
            raise OSError(errno.ESHUTDOWN, "the notifier is not running")
        found: list[tuple[str, int]] = []
        self._walks += 1
        try:
            await threads.run("files", _start, inotify, listener, found)
            if not listener.closed:  # else let go of while its tree was being walked
                for path, wd in found:
                    self._register(path, wd, listener)
        finally:
            self._walks -= 1
            self._settle(found)

    def close_listener(self, listener: Listener) -> None:
        """Let go of ``listener``: a kernel watch nobody else uses is removed now."""
        listener.closed = True
        for folder in list(listener.folders):
            self._leave(folder, listener)
        listener.folders.clear()

    def _register(self, path: str, wd: int, listener: Listener) -> None:
        folder = self._by_wd.get(wd)
        if folder is None:
            folder = self._by_wd[wd] = _Folder(path, wd)
        elif folder.path != path:  # the same folder, moved: the kernel's wd is the truth
            if self._by_path.get(folder.path) is folder:
                del self._by_path[folder.path]
            folder.path = path
        self._by_path[path] = folder
        folder.users.add(listener)
        listener.folders.add(folder)

    def _leave(self, folder: _Folder, listener: Listener) -> None:
        folder.users.discard(listener)
        listener.folders.discard(folder)
        if not folder.users:
            self._forget(folder)
            if self._inotify is not None:
                _forget_watch(self._inotify, folder.wd)

    def _forget(self, folder: _Folder) -> None:
        if self._by_wd.get(folder.wd) is folder:
            del self._by_wd[folder.wd]
        if self._by_path.get(folder.path) is folder:
            del self._by_path[folder.path]
        for user in folder.users:
            user.folders.discard(folder)

    # -- events ----------------------------------------------------------------------

    def _dispatch(self, events: Iterable[inotify_simple.Event]) -> None:
        for wd, mask, _cookie, name in events:
            if mask & _F.Q_OVERFLOW:
                log.warning("inotify's queue overflowed: changes were lost; every watch is told its root changed")
                for listener in {u for f in self._by_wd.values() for u in f.users}:
                    listener.add(MODIFIED, listener.root)
                continue
            folder = self._by_wd.get(wd)
            if folder is None:
                if self._walks and len(self._early) < _EARLY:
                    self._early.append(inotify_simple.Event(wd, mask, _cookie, name))
                continue  # a watch already let go of, or one a walk has not registered yet
            if mask & _F.IGNORED:  # the kernel dropped it (the folder is gone)
                self._forget(folder)
                continue
            if not name:
                if mask & _SELF_GONE:
                    for listener in list(folder.users):
                        if listener.name is None and listener.root == folder.path:
                            listener.add(DELETED, folder.path)
                elif mask & _CHANGED:
                    for listener in list(folder.users):
                        if listener.name is None and listener.root == folder.path:
                            listener.add(MODIFIED, folder.path)
                continue
            path = os.path.join(folder.path, name)
            kind = ADDED if mask & _MADE else DELETED if mask & _GONE else MODIFIED
            growing: list[Listener] = []
            for listener in list(folder.users):
                if listener._hears(folder, name):
                    listener.add(kind, path)
                    if listener.recursive and listener.name is None and mask & _F.ISDIR:
                        growing.append(listener)
            if not growing:
                continue
            if mask & _F.MOVED_FROM:  # a deleted folder's own watch ends by itself (IN_IGNORED)
                self._moved_away(path, growing)
            elif mask & _MADE:
                wanted = [g for g in growing if not g._pruned(path)]
                if wanted and self._nursery is not None:
                    self._nursery.start_soon(self._grow, path, wanted)

    def _moved_away(self, path: str, listeners: list[Listener]) -> None:
        """A folder left a recursive tree (deleted or moved): its watches, and
        those below it, are let go of for these listeners."""
        below = path + os.sep
        for folder in [f for p, f in self._by_path.items() if p == path or p.startswith(below)]:
            for listener in listeners:
                if listener in folder.users:
                    self._leave(folder, listener)

    async def _grow(self, path: str, listeners: list[Listener]) -> None:
        """A folder appeared in recursive listeners' trees (made or moved
        in): watch it and the folders in it, and report what they hold as
        added, since it can have been put there before the watch was."""
        inotify = self._inotify
        if inotify is None:
            return
        seen: list[str] = []
        found: list[tuple[str, int]] = []
        self._walks += 1
        try:
            await threads.run("files", _add_tree, inotify, path, True, _Union(listeners), found, seen)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):  # gone again already: nothing to watch
                log.warning("cannot watch %s, new in a watched tree: %s", path, exc)
        finally:
            self._walks -= 1
        live = [listener for listener in listeners if not listener.closed]
        for folder_path, wd in found:
            for listener in live:
                if not listener._pruned(folder_path):
                    self._register(folder_path, wd, listener)
        for entry in seen:
            for listener in live:
                if not listener._pruned(entry):
                    listener.add(ADDED, entry)
        self._settle(found)

    def _settle(self, found: list[tuple[str, int]]) -> None:
        """After a walk: a kernel watch it added that nobody took is removed
        once no walk is under way (another may be about to take the same
        folder, whose watch the kernel hands out once), and the events held
        for the ones taken are heard now."""
        self._orphans.update(wd for _, wd in found if wd not in self._by_wd)
        if not self._walks and self._inotify is not None:
            for wd in self._orphans:
                if wd not in self._by_wd:
                    _forget_watch(self._inotify, wd)
            self._orphans.clear()
        early, self._early = self._early, []
        if self._walks:
            self._early = [e for e in early if e.wd not in self._by_wd]
        self._dispatch([e for e in early if e.wd in self._by_wd])


class _Union:
    """Several listeners' prune rules as one walk's: a folder is entered when any of them wants it."""

    def __init__(self, listeners: list[Listener]) -> None:
        self.listeners = listeners

    def _pruned(self, path: str) -> bool:
        return all(listener._pruned(path) for listener in self.listeners)


def _start(inotify: inotify_simple.INotify, listener: Listener, found: list[tuple[str, int]]) -> None:
    """A listener's first kernel watches (its folder, or its file's folder,
    and a recursive one's tree), into ``found``. Runs in a worker thread."""
    if not os.path.isdir(listener.root):
        listener.name = os.path.basename(listener.root)
        _add_tree(inotify, listener.folder, False, listener, found)
    else:
        _add_tree(inotify, listener.root, listener.recursive, listener, found)


def _add_tree(
    inotify: inotify_simple.INotify,
    top: str,
    recursive: bool,
    rule: Listener | _Union,
    found: list[tuple[str, int]],
    seen: list[str] | None = None,
) -> None:
    """Kernel watches on ``top`` and, if ``recursive``, every folder below
    it that ``rule`` does not prune, each added before its entries are
    listed (so nothing made meanwhile goes unseen), each appended to
    ``found`` as it is added (a failure half-way leaves the caller what to
    undo); ``seen`` collects the entries found below ``top``. Runs in a
    worker thread."""
    found.append((top, _add_watch(inotify, top)))
    if not recursive:
        return
    pending = [top]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # gone or unreadable meanwhile: its own events say so
        for entry in entries:
            if seen is not None:
                seen.append(entry.path)
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if not is_dir or rule._pruned(entry.path):
                continue
            try:
                found.append((entry.path, _add_watch(inotify, entry.path)))
            except LimitReached:
                raise
            except OSError:
                continue  # gone meanwhile, or not ours to read
            pending.append(entry.path)


def _add_watch(inotify: inotify_simple.INotify, path: str) -> int:
    try:
        return int(inotify.add_watch(path, MASK))
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise LimitReached(
                exc.errno,
                f"the kernel's limit on inotify watches is reached (fs.inotify.max_user_watches = {_limit()})",
            ) from None
        raise


def _limit() -> str:
    try:
        with open("/proc/sys/fs/inotify/max_user_watches") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def _forget_watch(inotify: inotify_simple.INotify, wd: int) -> None:
    try:
        inotify.rm_watch(wd)
    except OSError:
        pass  # the folder is gone and the kernel dropped it already


__all__ = ["ADDED", "DELETED", "MODIFIED", "LimitReached", "Listener", "Notifier"]
