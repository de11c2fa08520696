"""What a session holds of its repository: its trees, its reviews, its git facts.

A turn's trees are snapshots of the working tree written into the object
database from an in-memory index (``ports.git.Repo.snapshot``): the user's
index and stash list are never touched, and the ids are kept in the session
record (its ``Book``) so the scopes survive a restart, as do the files a
client marked reviewed. The git facts (``_meta.git``: the branch, its
upstream, the uncommitted count) are said on the session and its catalogue
row.

This is the changesets' per-session state, cut out from the channels that
show it (``ahpd.host.changesets.view``) so that both those and the session
hooks (``ahpd.host.changesets.changesets``) read one record.
"""

from __future__ import annotations

import functools
import logging
import weakref
from typing import TYPE_CHECKING, Any


from ahpd.host.sessions.summaries import set_meta
from ahpd.ports import git as gitport
from ahpd.ports import git_facts
from ahpd.ports import threads

if TYPE_CHECKING:
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")

MARK = "/changeset/"


def run_off_loop(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in a thread: git blocks."""
    return threads.run("git", functools.partial(fn, *args))


def split(uri: str) -> tuple[str, str] | None:
    """``(sessionUri, scope)`` of a changeset URI, or None."""
    session_uri, mark, scope = uri.rpartition(MARK)
    if not mark or not session_uri or not scope:
        return None
    return session_uri, scope


class Book:
    """A session's trees and reviews, kept in its record across restarts."""

    def __init__(self, raw: dict[str, Any] | None = None) -> None:
        raw = raw if isinstance(raw, dict) else {}
        baseline = raw.get("baseline")
        self.baseline: str | None = baseline if isinstance(baseline, str) else None
        turns = raw.get("turns")
        self.turns: dict[str, list[str | None]] = {
            k: [v[0], v[1] if len(v) > 1 else None]
            for k, v in (turns if isinstance(turns, dict) else {}).items()
            if isinstance(v, list) and v and isinstance(v[0], str)
        }
        reviewed = raw.get("reviewed")
        self.reviewed: dict[str, dict[str, str]] = {
            k: dict(v) for k, v in (reviewed if isinstance(reviewed, dict) else {}).items() if isinstance(v, dict)
        }

    def record(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "turns": self.turns, "reviewed": self.reviewed}


#: Each session's book, from when it opens (or its first turn) until it goes.
_books: weakref.WeakKeyDictionary[Session, Book] = weakref.WeakKeyDictionary()


def book_of(session: Session) -> Book:
    book = _books.get(session)
    if book is None:
        book = _books[session] = Book()
    return book


def restore(session: Session, record: dict[str, Any]) -> None:
    """Read a session's trees and reviews back from its stored record."""
    _books[session] = Book(record.get("changesets"))
    tree = record.get("worktree")
    # Read by the sessions core too (a disposed session's tree is removed with it).
    session.worktree = tree if isinstance(tree, dict) else None


def record_of(session: Session) -> dict[str, Any]:
    """What the session record keeps of its changesets."""
    book = _books.get(session)
    out: dict[str, Any] = {"changesets": book.record()} if book is not None else {}
    tree = worktree_of(session)
    if tree:
        out["worktree"] = tree
    return out


def worktree_of(session: Session) -> dict[str, Any] | None:
    """The session's own tree (``isolation: worktree``), or None."""
    tree = session.worktree
    return tree if isinstance(tree, dict) else None


# -- _meta.git ------------------------------------------------------------------------------


async def refresh_git(session: Session, uncommitted: int | None = None) -> None:
    """``_meta.git`` on the session and its catalogue row: the branch, its
    upstream and how far apart, the uncommitted count, and the base branch
    of a worktree. Said only when it moved, through the one place that
    says ``_meta`` (``ahpd.host.sessions.summaries.set_meta``): it is replaced whole."""
    try:
        facts = await run_off_loop(git_facts.facts, session.cwd, uncommitted)  # libgit2 not loaded for it
    except gitport.GitError:
        return
    except Exception:  # noqa: BLE001 - facts that cannot be read are facts not shown
        log.exception("%s: reading the git facts failed", session.uri)
        return
    base = (worktree_of(session) or {}).get("base")
    if base:
        facts["baseBranchName"] = base
    set_meta(session, "git", facts)
