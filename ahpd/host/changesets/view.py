"""One changeset channel, re-read while somebody watches it.

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

A view is re-read while it is watched (git's index or HEAD moving, a tool
call completing, a turn starting or ending, an operation). A re-read that
comes back quickly says only what moved, and nothing when nothing did; one
that takes longer says ``recomputing`` first, so a client keeps the files it
has, and ``ready`` when it is back. What moved goes out as the smaller of
per-file ``fileSet``/``fileRemoved`` and one ``contentChanged`` (``cleared``
when everything went). Each view also declares the operations its scope
offers, with the sentences a client must show before one runs.

The views of a host are held here, by URI (``views``), because a view's own
re-reads ask whether another is watched; opening and closing them, on a
client's say, is ``ahpd.host.changesets.changesets``.
"""

from __future__ import annotations

import logging
import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import trio

from ahpd import state as reducers
from ahpd.host.changesets import checkout, pulls
from ahpd.host.changesets.book import MARK, Book, book_of, refresh_git, run_off_loop
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.ports import git as gitport

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")

BLOB = "ahpd-git:"
#: Seconds a re-read may take before ``recomputing`` is said.
QUIET_READ = 0.25
#: How often a watched changeset looks at git's index and HEAD.
POLL = 0.25

STAGED, UNSTAGED = "ahpd.staged", "ahpd.unstaged"


def busy(session: Session) -> bool:
    """Whether any chat of the session is running a turn."""
    return any(chat.turn is not None and not chat.turn.ended for chat in session.chats.values())


def commit_subject(host: Host, session: Session, given: str | None, *, quiet: bool = False) -> str:
    """The words a commit goes in with: the person's own, or as the root's
    ``changeWords`` says (the session title by default)."""
    if given:
        return given
    words = host.config("changeWords") or {}
    mode = words.get("mode", "session-title") if isinstance(words, dict) else "session-title"
    if mode == "forced" and not quiet:
        raise RpcError(
            INVALID_PARAMS,
            "changeWords is forced: a commit needs _meta['ahpd.commit'].message, the person's own words",
            {"path": "$._meta['ahpd.commit'].message"},
        )
    title = (session.state().get("title") or "").strip()
    return title.splitlines()[0] if title else "Changes from an agent session"


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
                # Git is looked at before the first read: a change made
                # between that read and the watch's first look would
                # otherwise be in neither.
                await nursery.start(self._watch_git)
                while True:
                    await self.wanted.wait()
                    self.wanted = trio.Event()
                    await self.read()
                    await trio.sleep(0.05)  # a burst of triggers is one re-read

    async def _watch_git(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Re-read when git's index or HEAD (or the branch it names) moves;
        started once it has taken its first look."""
        try:
            repo = await run_off_loop(gitport.Repo, self.session.cwd)
        except gitport.GitError:
            task_status.started()
            return
        gitdir = Path(repo.repo.path)
        seen = None
        while True:
            marks: list[tuple[int, int] | None] = []
            for name in ("index", "HEAD", "logs/HEAD"):
                try:
                    st = os.stat(gitdir / name)
                    marks.append((st.st_mtime_ns, st.st_size))
                except OSError:
                    marks.append(None)
            if seen is None:
                task_status.started()
            elif marks != seen:
                self.kick()
                refresh_git_soon(self.session)
            seen = marks
            await trio.sleep(POLL)

    async def read(self) -> None:
        done = trio.Event()
        result: list[Any] = []

        async def reading() -> None:
            try:
                result.append(await run_off_loop(self._compute))
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
            self._emit(
                {
                    "type": "changeset/statusChanged",
                    "status": "error",
                    "error": {"errorType": type(outcome).__name__, "message": str(outcome)},
                }
            )
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

    def _compute(
        self,
    ) -> tuple[list[dict[str, Any]], dict[str, tuple[Path, str]], tuple[int, int, int], dict[str, str]]:
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
    def _row(
        repo: gitport.Repo,
        row: gitport.Change,
        sides: dict[str, tuple[Path, str]],
        prints: dict[str, str],
        *,
        live: bool,
        porcelain: bool,
    ) -> dict[str, Any]:
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
        actions: list[dict[str, Any]] = [
            {"type": "changeset/fileRemoved", "fileId": i} for i in before if i not in after
        ]
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
            operations = [
                {**o, **{k: held[o["id"]][k] for k in ("status", "error") if k in held[o["id"]]}}
                if o["id"] in held and o["status"] != "disabled"
                else o
                for o in operations
            ]
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
                f", {untracked} of them untracked" if untracked else ""
            )
        commit = {
            "id": "commit",
            "label": "Commit",
            "scopes": both,
            "icon": "check",
            "status": status,
            "description": "Commit one file as the working tree has it, or the whole changeset: the index "
            "when it holds anything, else every change under the session's folder",
            "confirmation": f"Commit as '{subject}'? The whole changeset takes {takes}.",
        }
        discard = {
            "id": "discard",
            "label": "Discard",
            "scopes": both,
            "icon": "discard",
            "status": status,
            "description": "Put a file, or every change under the session's folder, back to HEAD",
            "confirmation": "Discard the changes and put the files back to HEAD? Untracked files are "
            "removed too. This cannot be undone.",
        }
        revert = {
            "id": "revert",
            "label": "Revert",
            "scopes": both,
            "icon": "history",
            "status": status,
            "description": "Put a file back to the state the agent found it in",
            "confirmation": "Put the files back to the state the agent found them in? This cannot be undone.",
        }
        if self.scope == "uncommitted":
            # A session nobody has spoken in may still choose the branch it starts from.
            unused = [checkout.declared(status)] if checkout.unspoken(self.session) else []
            proposals = pulls.declared(status) if pulls.offered(self.session) else []
            return [
                commit,
                {
                    "id": "stage",
                    "label": "Stage",
                    "scopes": both,
                    "icon": "add",
                    "status": status,
                    "description": "Move a file, a folder or the whole changeset into the index",
                },
                {
                    "id": "unstage",
                    "label": "Unstage",
                    "scopes": both,
                    "icon": "remove",
                    "status": status,
                    "description": "Move a file, a folder or the whole changeset out of the index",
                },
                discard,
                *proposals,
                *unused,
            ]
        if self.scope == "session":
            return [commit, revert, discard, *(pulls.declared(status) if pulls.offered(self.session) else [])]
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


#: Each host's open changesets, by URI.
_views: weakref.WeakKeyDictionary[Host, dict[str, View]] = weakref.WeakKeyDictionary()


def views(host: Host) -> dict[str, View]:
    """The changesets open on ``host``, by URI."""
    found = _views.get(host)
    if found is None:
        found = _views[host] = {}
    return found


def refresh_git_soon(session: Session, uncommitted: int | None = None) -> None:
    """Read the facts again; left to the uncommitted changeset's own re-read
    where one is watched, which counts the uncommitted files anyway."""
    if uncommitted is None and f"{session.uri}{MARK}uncommitted" in views(session.host):
        return
    if not session.disposed and session.nursery is not None:
        session.nursery.start_soon(refresh_git, session, uncommitted)
