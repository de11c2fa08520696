"""Changesets: what changed in a session's repository, as channels, and the
operations that commit, stage, unstage, discard and revert it.

Four scopes, each a channel at ``<sessionUri>/changeset/<scope>``, so a
session's disposal closes them by a prefix scan:

* ``uncommitted`` - ``git status`` under the session's folder, one row per
  path with ``_meta['ahpd.staged']``/``['ahpd.unstaged']`` from the two
  porcelain letters; a staged rename or copy is one row under its new name.
* ``session`` - the working tree against the tree it was when the session's
  first turn started.
* ``turn/{turnId}`` - what one turn changed: the tree at its end (or now,
  while it runs) against the tree at its start.
* ``compare/{a}/{b}`` - the tree at the end of turn ``a`` against the one at
  the end of turn ``b``.

A turn's trees are snapshots of the working tree written into the object
database from an in-memory index (``ports.git.Repo.snapshot``): the user's
index and stash list are never touched, and the ids are kept in the session
record so the scopes survive a restart, as do the files a client marked
reviewed.

A channel exists only while somebody subscribes to it: it is opened on the
first subscribe, re-read while it is watched (git's index or HEAD moving, a
tool call completing, a turn starting or ending, an operation) and closed
with its last subscriber, so nothing is read for a folder nobody watches.
A re-read that comes back quickly says only what moved, and nothing when
nothing did; one that takes longer says ``recomputing`` first, so a client
keeps the files it has, and ``ready`` when it is back. What moved goes out as
the smaller of per-file ``fileSet``/``fileRemoved`` and one
``contentChanged`` (``cleared`` when everything went).

The before side of an edit is a blob, not a file: it is served by
``resourceRead`` under ``ahpd-git://<blob>/<path>`` for exactly the blobs a
changeset currently names (``read_resource``).
"""

from __future__ import annotations

import base64
import functools
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlparse

import trio

from ahpd import state as reducers
from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.ports import git as gitport
from ahpd.host.sessions.summaries import set_meta

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.session import Session
    from ahpd.protocol import model

log = logging.getLogger("ahpd.host")

MARK = "/changeset/"
BLOB = "ahpd-git:"
NOT_FOUND = -32008
#: Seconds a re-read may take before ``recomputing`` is said.
QUIET_READ = 0.25
#: How often a watched changeset looks at git's index and HEAD.
POLL = 0.25

STAGED, UNSTAGED = "ahpd.staged", "ahpd.unstaged"


def _run(fn: Any, *args: Any) -> Any:
    return trio.to_thread.run_sync(functools.partial(fn, *args))


def split(uri: str) -> tuple[str, str] | None:
    """``(sessionUri, scope)`` of a changeset URI, or None."""
    session_uri, mark, scope = uri.rpartition(MARK)
    if not mark or not session_uri or not scope:
        return None
    return session_uri, scope


def busy(session: Session) -> bool:
    """Whether any chat of the session is running a turn."""
    return any(chat.turn is not None and not chat.turn.ended for chat in session.chats.values())


def catalogue(session_uri: str) -> list[dict[str, Any]]:
    """``SessionState.changesets``: the scopes a client may subscribe to."""
    base = f"{session_uri}{MARK}"
    review = {"review": {}}
    return [
        {"label": "Uncommitted Changes", "uriTemplate": f"{base}uncommitted", "changeKind": "uncommitted",
         "description": "git status under the session's folder", "capabilities": review},
        {"label": "Session Changes", "uriTemplate": f"{base}session", "changeKind": "session",
         "description": "Everything changed since the session's first turn", "capabilities": review},
        {"label": "Turn Changes", "uriTemplate": f"{base}turn/{{turnId}}", "changeKind": "turn",
         "description": "What one turn changed"},
        {"label": "Compare Turns", "uriTemplate": f"{base}compare/{{originalTurnId}}/{{modifiedTurnId}}",
         "changeKind": "compare-turns", "description": "The tree after one turn against the tree after another"},
    ]


# -- what a session keeps ----------------------------------------------------------


class Book:
    """A session's trees and reviews, kept in its record across restarts."""

    def __init__(self, raw: dict[str, Any] | None = None) -> None:
        raw = raw if isinstance(raw, dict) else {}
        self.baseline: str | None = raw.get("baseline") if isinstance(raw.get("baseline"), str) else None
        turns = raw.get("turns") if isinstance(raw.get("turns"), dict) else {}
        self.turns: dict[str, list[str | None]] = {
            k: [v[0], v[1] if len(v) > 1 else None] for k, v in turns.items()
            if isinstance(v, list) and v and isinstance(v[0], str)}
        reviewed = raw.get("reviewed") if isinstance(raw.get("reviewed"), dict) else {}
        self.reviewed: dict[str, dict[str, str]] = {
            k: dict(v) for k, v in reviewed.items() if isinstance(v, dict)}

    def record(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "turns": self.turns, "reviewed": self.reviewed}


def book_of(session: Session) -> Book:
    book = getattr(session, "changeset_book", None)
    if book is None:
        book = session.changeset_book = Book()  # type: ignore[attr-defined]
    return book


def restore(session: Session, record: dict[str, Any]) -> None:
    """Read a session's trees and reviews back from its stored record."""
    session.changeset_book = Book(record.get("changesets"))  # type: ignore[attr-defined]
    tree = record.get("worktree")
    session.worktree = tree if isinstance(tree, dict) else None  # type: ignore[attr-defined]


def record_of(session: Session) -> dict[str, Any]:
    """What the session record keeps of its changesets."""
    book = getattr(session, "changeset_book", None)
    out: dict[str, Any] = {"changesets": book.record()} if book is not None else {}
    if getattr(session, "worktree", None):
        out["worktree"] = session.worktree  # type: ignore[attr-defined]
    return out


# -- one open changeset -----------------------------------------------------------


class View:
    """One changeset channel, re-read while somebody watches it."""

    def __init__(self, host: Host, session: Session, uri: str, scope: str) -> None:
        self.host = host
        self.session = session
        self.uri = uri
        self.scope = scope
        self.wanted = trio.Event()
        self.wanted.set()
        self.cancel = trio.CancelScope()
        #: Content URIs this changeset names -> (repository root, blob id).
        self.sides: dict[str, tuple[Path, str]] = {}
        #: Row id -> what identifies its content, for resetting a review.
        self.prints: dict[str, str] = {}
        #: The facts the commit confirmation was built from.
        self.counts: tuple[int, int, int] = (0, 0, 0)

    def kick(self) -> None:
        self.wanted.set()

    def state(self) -> dict[str, Any]:
        return self.host.bus.channels[self.uri].state

    async def run(self) -> None:
        with self.cancel:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_git)
                while True:
                    await self.wanted.wait()
                    self.wanted = trio.Event()
                    await self.read()
                    await trio.sleep(0.05)  # a burst of triggers is one re-read

    async def _watch_git(self) -> None:
        """Re-read when git's index or HEAD (or the branch it names) moves."""
        try:
            repo = await _run(gitport.Repo, self.session.cwd)
        except gitport.GitError:
            return
        gitdir = Path(repo.repo.path)
        seen = None
        while True:
            marks = []
            for name in ("index", "HEAD", "logs/HEAD"):
                try:
                    st = os.stat(gitdir / name)
                    marks.append((st.st_mtime_ns, st.st_size))
                except OSError:
                    marks.append(None)
            if seen is not None and marks != seen:
                self.kick()
                refresh_git_soon(self.session)
            seen = marks
            await trio.sleep(POLL)

    async def read(self) -> None:
        done = trio.Event()
        result: list[Any] = []

        async def reading() -> None:
            try:
                result.append(await _run(self._compute))
            except gitport.GitError as exc:
                result.append(exc)
            except Exception as exc:  # noqa: BLE001 - a read that fails is this changeset's error
                log.exception("%s: reading the changeset failed", self.uri)
                result.append(exc)
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reading)
            with trio.move_on_after(QUIET_READ):
                await done.wait()
            previous = self.state()["status"]
            if not done.is_set() and previous == "ready":
                self._emit({"type": "changeset/statusChanged", "status": "recomputing"})
            await done.wait()
        outcome = result[0]
        if isinstance(outcome, Exception):
            self._emit({"type": "changeset/statusChanged", "status": "error",
                        "error": {"errorType": type(outcome).__name__, "message": str(outcome)}})
            return
        files, sides, counts, prints = outcome
        self.sides, self.prints = sides, prints
        self.counts = counts
        if self.scope == "uncommitted":
            refresh_git_soon(self.session, counts[0])
        self._publish(files)
        self.declare()
        if self.state()["status"] != "ready":
            self._emit({"type": "changeset/statusChanged", "status": "ready"})

    def _emit(self, action: dict[str, Any]) -> None:
        self.host.bus.emit(self.uri, action)

    # -- computing (a thread's work) -------------------------------------------

    def _compute(self) -> tuple[list[dict[str, Any]], dict[str, tuple[Path, str]], tuple[int, int, int],
                                dict[str, str]]:
        repo = gitport.Repo(self.session.cwd)
        book = book_of(self.session)
        sides: dict[str, tuple[Path, str]] = {}
        prints: dict[str, str] = {}
        if self.scope == "uncommitted":
            rows = repo.status()
            files = [self._row(repo, r, sides, prints, live=True, porcelain=True) for r in rows]
            staged = sum(1 for r in rows if r.staged)
            untracked = sum(1 for r in rows if r.index == "?")
            return files, sides, (len(rows), staged, untracked), prints
        old, new = self._trees(book)
        if old is None:
            return [], sides, (0, 0, 0), prints
        live = new is None
        rows = repo.diff_trees(old, new if new is not None else repo.snapshot())
        files = [self._row(repo, r, sides, prints, live=live, porcelain=False) for r in rows]
        status = {r.path: r for r in repo.status()} if live else {}
        staged = sum(1 for r in status.values() if r.staged)
        return files, sides, (len(status), staged, sum(1 for r in status.values() if r.index == "?")), prints

    def _trees(self, book: Book) -> tuple[str | None, str | None]:
        """(old, new) trees of a tree-diff scope; new None means the working tree."""
        if self.scope == "session":
            return book.baseline, None
        parts = self.scope.split("/")
        if parts[0] == "turn":
            start, end = book.turns[parts[1]]
            return start, end
        a, b = book.turns[parts[1]], book.turns[parts[2]]
        return a[1] or a[0], b[1]

    @staticmethod
    def _row(repo: gitport.Repo, row: gitport.Change, sides: dict[str, tuple[Path, str]], prints: dict[str, str], *,
             live: bool, porcelain: bool) -> dict[str, Any]:
        root = repo.root
        after_file = (root / row.path).as_uri()
        gone = row.worktree == "D" or (row.index == "D" and row.worktree == " ")
        edit: dict[str, Any] = {}
        before_id = row.before
        if row.index == "?":
            before_id = None
        if before_id is not None:
            source = row.path if row.index == "C" else (row.old_path or row.path)
            content = blob_uri(before_id, root / (row.old_path or row.path))
            sides[content] = (root, before_id)
            edit["before"] = {"uri": (root / source).as_uri(), "content": {"uri": content}}
        if not gone:
            if live or row.after is None:
                edit["after"] = {"uri": after_file, "content": {"uri": after_file}}
            else:
                content = blob_uri(row.after, root / row.path)
                sides[content] = (root, row.after)
                edit["after"] = {"uri": after_file, "content": {"uri": content}}
        ident = edit["after"]["uri"] if "after" in edit else edit["before"]["uri"]
        entry: dict[str, Any] = {"id": ident, "edit": edit}
        if porcelain:
            entry["_meta"] = {STAGED: row.staged, UNSTAGED: row.unstaged}
        prints[ident] = f"{row.index}{row.worktree}:{row.before}:{row.after}:{_stamp(root / row.path)}"
        return entry

    # -- telling ----------------------------------------------------------------

    def _publish(self, files: list[dict[str, Any]]) -> None:
        reviewed = book_of(self.session).reviewed.get(self.scope, {})
        kept = {}
        for entry in files:
            mark = reviewed.get(entry["id"])
            if mark is not None and mark == self.prints.get(entry["id"]):
                entry["reviewed"] = True
                kept[entry["id"]] = mark
        if reviewed and kept != reviewed:
            book_of(self.session).reviewed[self.scope] = kept  # a file that moved is reviewed again
            self.session.save()
        old = self.state()["files"]
        if old == files:
            return
        if not files:
            self._emit({"type": "changeset/cleared"})
            return
        before = {f["id"]: f for f in old}
        after = {f["id"]: f for f in files}
        # The order a client already has, new files after it: what per-file actions reach.
        files = [after[f["id"]] for f in old if f["id"] in after] + [f for f in files if f["id"] not in before]
        actions: list[dict[str, Any]] = [{"type": "changeset/fileRemoved", "fileId": i} for i in before
                                         if i not in after]
        actions += [{"type": "changeset/fileSet", "file": f} for i, f in after.items() if before.get(i) != f]
        if len(actions) < len(files):
            # Per file only when that reduces to exactly the new set (a new
            # file is appended, so an order it cannot reach is sent whole).
            state = self.state()
            for action in actions:
                state = reducers.reduce("changeset", state, action)
            if state["files"] == files:
                for action in actions:
                    self._emit(action)
                return
        self._emit({"type": "changeset/contentChanged", "files": files})

    def declare(self) -> None:
        """The operations this scope offers, with this host's answer to
        whether each may be pressed now and the sentences it must show."""
        operations = self._operations()
        current = self.state().get("operations")
        if current is not None:
            # An operation running or failed keeps that status until it settles.
            held = {o["id"]: o for o in current if o["status"] in ("running", "error")}
            operations = [{**o, **{k: held[o["id"]][k] for k in ("status", "error") if k in held[o["id"]]}}
                          if o["id"] in held and o["status"] != "disabled" else o for o in operations]
        if operations != current:
            self._emit({"type": "changeset/operationsChanged", "operations": operations})

    def _operations(self) -> list[dict[str, Any]]:
        status = "disabled" if busy(self.session) else "idle"
        both = ["changeset", "resource"]
        total, staged, untracked = self.counts
        subject = commit_subject(self.host, self.session, None, quiet=True)
        if staged:
            takes = f"{staged} staged file{'s' if staged != 1 else ''}"
        else:
            takes = f"{total} file{'s' if total != 1 else ''}" + (
                f", {untracked} of them untracked" if untracked else "")
        commit = {"id": "commit", "label": "Commit", "scopes": both, "icon": "check", "status": status,
                  "description": "Commit one file as the working tree has it, or the whole changeset: the index "
                  "when it holds anything, else every change under the session's folder",
                  "confirmation": f"Commit as '{subject}'? The whole changeset takes {takes}."}
        discard = {"id": "discard", "label": "Discard", "scopes": both, "icon": "discard", "status": status,
                   "description": "Put a file, or every change under the session's folder, back to HEAD",
                   "confirmation": "Discard the changes and put the files back to HEAD? Untracked files are "
                   "removed too. This cannot be undone."}
        revert = {"id": "revert", "label": "Revert", "scopes": both, "icon": "history", "status": status,
                  "description": "Put a file back to the state the agent found it in",
                  "confirmation": "Put the files back to the state the agent found them in? This cannot be undone."}
        if self.scope == "uncommitted":
            return [
                commit,
                {"id": "stage", "label": "Stage", "scopes": both, "icon": "add", "status": status,
                 "description": "Move a file, a folder or the whole changeset into the index"},
                {"id": "unstage", "label": "Unstage", "scopes": both, "icon": "remove", "status": status,
                 "description": "Move a file, a folder or the whole changeset out of the index"},
                discard,
            ]
        if self.scope == "session":
            return [commit, revert, discard]
        if self.scope.startswith("turn/"):
            return [revert]
        return []


def _stamp(path: Path) -> str:
    try:
        st = path.lstat()
    except OSError:
        return "-"
    return f"{st.st_mtime_ns}:{st.st_size}"


def blob_uri(oid: str, path: Path) -> str:
    return f"{BLOB}//{oid}{quote(str(path))}"


# -- the host-wide registry --------------------------------------------------------


def views(host: Host) -> dict[str, View]:
    found = getattr(host, "changeset_views", None)
    if found is None:
        found = host.changeset_views = {}  # type: ignore[attr-defined]
    return found


async def ensure(host: Host, uri: str) -> bool:
    """Open the changeset ``uri`` names, if it is one this host can compute:
    a scope of a session whose folder is in a git repository."""
    parts = split(uri)
    if parts is None or host.sessions is None:
        return False
    session_uri, scope = parts
    if session_uri not in host.bus.channels and not await host.sessions.wake(session_uri):
        return False
    session = host.sessions.sessions.get(session_uri)
    if session is None or session.disposed or uri in host.bus.channels:
        return uri in host.bus.channels
    book = book_of(session)
    words = scope.split("/")
    known = (scope in ("uncommitted", "session")
             or (words[0] == "turn" and len(words) == 2 and words[1] in book.turns)
             or (words[0] == "compare" and len(words) == 3 and words[1] in book.turns and words[2] in book.turns))
    if not known:
        return False
    try:
        await _run(gitport.Repo, session.cwd)
    except gitport.GitError:
        return False
    if uri in host.bus.channels:  # opened by somebody else meanwhile
        return True
    host.bus.open(uri, "changeset", {"status": "computing", "files": []})
    view = views(host)[uri] = View(host, session, uri, scope)
    session.nursery.start_soon(_supervised_view, view)
    return True


async def _supervised_view(view: View) -> None:
    try:
        await view.run()
    except Exception as exc:  # noqa: BLE001 - a changeset that fails ends with an error status
        log.exception("%s failed", view.uri)
        view.host.bus.emit(view.uri, {"type": "changeset/statusChanged", "status": "error",
                                      "error": {"errorType": type(exc).__name__, "message": str(exc)}})
    finally:
        if views(view.host).get(view.uri) is view and view.uri not in view.host.bus.channels:
            views(view.host).pop(view.uri, None)


def left(host: Host, uri: str) -> None:
    """A subscriber went: a changeset nobody watches is closed, and costs nothing."""
    view = views(host).get(uri)
    channel = host.bus.channels.get(uri)
    if view is None or channel is None or channel.subscribers:
        return
    view.cancel.cancel()
    views(host).pop(uri, None)
    host.bus.close(uri)


def close_session(host: Host, session: Session) -> None:
    """A session is gone: every changeset under its URI is cleared and closed."""
    prefix = f"{session.uri}{MARK}"
    for uri in [u for u in host.bus.channels if u.startswith(prefix)]:
        host.bus.emit(uri, {"type": "changeset/cleared"})
        view = views(host).pop(uri, None)
        if view is not None:
            view.cancel.cancel()
        host.bus.close(uri)


def touch(host: Host, folder: Path | None = None, session: Session | None = None) -> None:
    """The tree may have moved (a tool call completed, a client wrote a file,
    a terminal in the folder exited): re-read what is watched there. Costs
    nothing where nobody watches."""
    for view in views(host).values():
        if (session is not None and view.session is session) or (
                folder is not None and _related(view.session.cwd, folder)):
            view.kick()


def redeclare(host: Host, session: Session) -> None:
    """The session's title or its running turn moved: say the operations again."""
    for view in views(host).values():
        if view.session is session and view.uri in host.bus.channels:
            view.declare()


def _related(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents


# -- turns ---------------------------------------------------------------------------


async def turn_started(session: Session, turn_id: str) -> None:
    """Snapshot the tree a turn starts from (and the session's baseline, at
    its first turn). A folder outside any repository has nothing to keep."""
    try:
        tree = await _run(lambda: gitport.Repo(session.cwd).snapshot())
    except gitport.GitError:
        return
    except Exception:  # noqa: BLE001 - a snapshot that fails leaves that turn without a scope
        log.exception("%s: the tree at the start of %s could not be kept", session.uri, turn_id)
        return
    book = book_of(session)
    if book.baseline is None:
        book.baseline = tree
    book.turns[turn_id] = [tree, None]
    redeclare(session.host, session)
    touch(session.host, session=session)


async def turn_ended(session: Session, turn_id: str) -> None:
    book = book_of(session)
    if turn_id in book.turns:
        try:
            book.turns[turn_id][1] = await _run(lambda: gitport.Repo(session.cwd).snapshot())
        except Exception:  # noqa: BLE001 - the turn's scope stays live, read against the tree as it is
            log.exception("%s: the tree at the end of %s could not be kept", session.uri, turn_id)
    redeclare(session.host, session)
    touch(session.host, session=session)
    refresh_git_soon(session)


# -- the before side, through resourceRead -----------------------------------------------


async def read_resource(host: Host, params: model.ResourceReadParams) -> dict[str, Any] | None:
    """The content of a side a changeset names, or None for a URI that is not one."""
    uri = params.uri
    if not uri.startswith(BLOB):
        return None
    found = next((v.sides[uri] for v in views(host).values() if uri in v.sides), None)
    if found is None:
        raise RpcError(NOT_FOUND, f"{uri} is not a side of any changeset being watched", {"uri": uri})
    root, oid = found
    data = await _run(lambda: gitport.Repo(root).blob(oid))
    if params.encoding == "base64":
        return {"data": base64.b64encode(data).decode(), "encoding": "base64", "contentType": "text/plain"}
    try:
        return {"data": data.decode("utf-8"), "encoding": "utf-8", "contentType": "text/plain"}
    except UnicodeDecodeError:
        raise RpcError(NOT_FOUND, f"{uri} is not UTF-8 text: ask for it with encoding base64", {"uri": uri}) from None


# -- operations ----------------------------------------------------------------------------


def commit_subject(host: Host, session: Session, given: str | None, *, quiet: bool = False) -> str:
    """The words a commit goes in with: the person's own, or as the root's
    ``changeWords`` says (the session title by default)."""
    if given:
        return given
    words = host.config("changeWords") or {}
    mode = words.get("mode", "session-title") if isinstance(words, dict) else "session-title"
    if mode == "forced" and not quiet:
        raise RpcError(INVALID_PARAMS, "changeWords is forced: a commit needs _meta['ahpd.commit'].message, "
                       "the person's own words", {"path": "$._meta['ahpd.commit'].message"})
    title = (session.state().get("title") or "").strip()
    return title.splitlines()[0] if title else "Changes from an agent session"


def _target_paths(view: View, repo: gitport.Repo, params: model.InvokeChangesetOperationParams) -> list[str] | None:
    target = params.target
    if target is None:
        return None
    kind = getattr(target, "kind", None)
    try:
        path = Path(unquote(urlparse(target.resource).path)) if target.resource.startswith("file:") else None
    except ValueError:
        path = None
    if path is None:
        raise RpcError(INVALID_PARAMS, f"{target.resource} is not a file: URI", {"path": "$.target.resource"})
    if kind == "range":
        raise RpcError(INVALID_PARAMS, "a range target is not served: operations take a file, a folder or the "
                       "whole changeset", {"path": "$.target.kind"})
    wanted = Path(os.path.normpath(path))
    for folder in (Path(os.path.normpath(view.session.cwd)), view.session.cwd.resolve()):
        if wanted == folder or folder in wanted.parents:
            inside = wanted.relative_to(folder).as_posix()
            break
    else:
        raise RpcError(INVALID_PARAMS, f"{target.resource} is outside the session's folder {view.session.cwd}: "
                       "an operation takes a file or folder under it", {"path": "$.target.resource"})
    if inside == ".":
        return []
    return [f"{repo.prefix}/{inside}" if repo.prefix else inside]


async def invoke(host: Host, peer: Peer, params: model.InvokeChangesetOperationParams) -> dict[str, Any]:
    """``invokeChangesetOperation``: decided again from the repository at the
    moment it runs, whatever the confirmation said when it was declared."""
    if not await ensure(host, params.channel):
        raise RpcError(NOT_FOUND, f"no changeset {params.channel} on this host", {"channel": params.channel})
    view = views(host)[params.channel]
    operations = {o["id"]: o for o in view.state().get("operations") or []}
    if not operations:
        await view.read()
        operations = {o["id"]: o for o in view.state().get("operations") or []}
    op = operations.get(params.operationId)
    if op is None:
        raise RpcError(INVALID_PARAMS, f"{params.operationId!r} is not an operation this changeset offers "
                       f"(it offers {', '.join(operations) or 'none'})", {"path": "$.operationId"})
    if busy(view.session):
        raise RpcError(INVALID_PARAMS, f"{params.operationId} is disabled while a turn is running in the session")
    if op["status"] == "running":
        raise RpcError(INVALID_PARAMS, f"{params.operationId} is already running")
    kind = "changeset" if params.target is None else getattr(params.target, "kind", "resource")
    if kind not in op["scopes"]:
        raise RpcError(INVALID_PARAMS, f"{params.operationId} takes {' or '.join(op['scopes'])}, not a {kind}",
                       {"path": "$.target"})
    repo = await _run(gitport.Repo, view.session.cwd)
    paths = _target_paths(view, repo, params) or None  # the session's folder itself is the whole changeset
    meta = params._meta or {}
    given = (meta.get("ahpd.commit") or {}).get("message") if isinstance(meta.get("ahpd.commit"), dict) else None
    if given is not None and (not isinstance(given, str) or not given.strip()):
        raise RpcError(INVALID_PARAMS, "_meta['ahpd.commit'].message must be a sentence",
                       {"path": "$._meta['ahpd.commit'].message"})
    message = commit_subject(host, view.session, given) if params.operationId == "commit" else ""
    book = book_of(view.session)
    start = book.baseline
    if view.scope.startswith("turn/"):
        start = book.turns[view.scope.split("/")[1]][0]

    def work() -> str:
        port = gitport.Repo(view.session.cwd)
        if params.operationId == "commit":
            oid = port.commit(message, paths)
            return f"Committed {oid[:7]} as '{message.splitlines()[0]}'."
        if params.operationId == "stage":
            return f"Staged {port.stage(paths)} path(s)."
        if params.operationId == "unstage":
            return f"Unstaged {port.unstage(paths)} path(s)."
        if params.operationId == "discard":
            return f"Discarded the changes of {port.discard(paths)} path(s)."
        if params.operationId == "revert":
            if start is None:
                raise gitport.Refused("the agent has not started a turn here: there is no state to go back to")
            rows = port.diff_trees(start, port.snapshot())
            picked = [r for r in rows if paths is None or any(
                gitport._under(r.path, p) or (r.old_path and gitport._under(r.old_path, p)) for p in paths)]
            for row in picked:
                port.restore(start, row.path)
                if row.old_path:
                    port.restore(start, row.old_path)
            return f"Put {len(picked)} file(s) back as the agent found them."
        raise gitport.GitError(f"{params.operationId} is not served")

    host.bus.emit(view.uri, {"type": "changeset/operationStatusChanged", "operationId": op["id"], "status": "running"})
    try:
        said = await _run(work)
    except gitport.GitError as exc:
        host.bus.emit(view.uri, {"type": "changeset/operationStatusChanged", "operationId": op["id"],
                                 "status": "error", "error": {"errorType": type(exc).__name__, "message": str(exc)}})
        touch(host, folder=view.session.cwd)
        raise RpcError(INVALID_PARAMS, f"{params.operationId} refused: {exc}") from None
    host.bus.emit(view.uri, {"type": "changeset/operationStatusChanged", "operationId": op["id"], "status": "idle"})
    touch(host, folder=view.session.cwd)
    refresh_git_soon(view.session)
    return {"message": said}


# -- reviews -------------------------------------------------------------------------------


def files_review_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    """A client marking files reviewed: kept in the session's record, so a
    restart keeps it, until the file's content moves."""
    view = views(host).get(channel)
    if view is None:
        return Refuse(f"no changeset {channel} is open")
    if view.scope not in ("uncommitted", "session"):
        return Refuse(f"{channel} is not reviewable: only the uncommitted and session changesets are")

    def after() -> None:
        marks = book_of(view.session).reviewed.setdefault(view.scope, {})
        for ident in action["files"]:
            if action["reviewed"] and ident in view.prints:
                marks[ident] = view.prints[ident]
            else:
                marks.pop(ident, None)
        view.session.save()

    return Apply(action, after=after)


COMMANDS = {"invokeChangesetOperation": invoke}
CLIENT_ACTIONS = {"changeset/filesReviewChanged": files_review_changed}


# -- the catalogue on the session ---------------------------------------------------------


async def advertise(session: Session) -> None:
    """Offer the session's changesets when its folder is in a repository
    (a folder that is not, or a bare repository, simply has none)."""
    try:
        await _run(gitport.Repo, session.cwd)
    except gitport.GitError as exc:
        log.debug("%s: no changesets: %s", session.uri, exc)
        return
    host = session.host
    if session.disposed or session.uri not in host.bus.channels:
        return
    offered = catalogue(session.uri)
    if session.state().get("changesets") != offered:
        host.bus.emit(session.uri, {"type": "session/changesetsChanged", "changesets": offered})
    await refresh_git(session)


# -- _meta.git ------------------------------------------------------------------------------


async def refresh_git(session: Session, uncommitted: int | None = None) -> None:
    """``_meta.git`` on the session and its catalogue row: the branch, its
    upstream and how far apart, the uncommitted count, and the base branch
    of a worktree. Said only when it moved, through the one place that
    says ``_meta`` (``ahpd.host.sessions.summaries.set_meta``): it is replaced whole."""
    try:
        facts = await _run(lambda: gitport.Repo(session.cwd).facts(uncommitted))
    except gitport.GitError:
        return
    except Exception:  # noqa: BLE001 - facts that cannot be read are facts not shown
        log.exception("%s: reading the git facts failed", session.uri)
        return
    base = (getattr(session, "worktree", None) or {}).get("base")
    if base:
        facts["baseBranchName"] = base
    set_meta(session, "git", facts)


def refresh_git_soon(session: Session, uncommitted: int | None = None) -> None:
    """Read the facts again; left to the uncommitted changeset's own re-read
    where one is watched, which counts the uncommitted files anyway."""
    if uncommitted is None and f"{session.uri}{MARK}uncommitted" in views(session.host):
        return
    if not session.disposed and session.nursery is not None:
        session.nursery.start_soon(refresh_git, session, uncommitted)


# -- what the sessions and the kernel ask (ahpd.host.table) ---------------------------------


async def open_channel(host: Host, uri: str) -> bool:
    """A changeset's channel is opened when a client names it."""
    return split(uri) is not None and await ensure(host, uri)


def on_left(host: Host, peer: Any, uri: str) -> None:
    left(host, uri)


def files_touched(host: Host, folder: Path) -> None:
    touch(host, folder=folder)


def session_opened(session: Session, record: dict[str, Any]) -> None:
    """Read the session's trees and reviews back, and offer its changesets."""
    restore(session, record)
    session.nursery.start_soon(advertise, session)


def session_disposed(session: Session) -> None:
    close_session(session.host, session)


def turn_action(chat: Any, action: dict[str, Any]) -> None:
    """A tool call that completed may have changed the tree."""
    if action["type"] == "chat/toolCallComplete":
        touch(chat.host, session=chat.session)
