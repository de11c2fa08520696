"""The git port: what changesets, operations and the catalogue's git facts
need from a repository, read and written through libgit2 (pygit2).

Why libgit2 and not the ``git`` command: a changeset is re-read every time
the tree moves, and a library call over an open repository is one process
fewer per read. Everything here blocks (a big repository is a big read), so
the host runs each call in a thread; nothing here knows about the host.

What libgit2 cannot do, and where the ``git`` command is used instead: a
worktree with a *new branch* checked out is made with ``git worktree add``
(libgit2 adds a worktree only on an existing reference and does not run the
checkout the way git's porcelain does), and removing one is
``git worktree remove``, which also drops its administrative files.

Nothing here rewrites history, moves a branch other than by a new commit on
top of it, or touches the stash: a snapshot of the working tree is written
as a tree object into the object database from an in-memory index, so the
user's index file and stash list stay as they were.
"""

from __future__ import annotations

import functools
import importlib
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pygit2
    from pygit2 import enums
else:

    class _OnFirstUse:
        """A module imported when one of its names is first read. libgit2 is
        about 20 MB and 80 ms that a daemon nobody has asked a git question of
        should not pay; ``import_module`` takes the import lock, so the worker
        threads that first touch it are safe."""

        def __init__(self, name: str) -> None:
            self._name = name

        def __getattr__(self, attr: str) -> Any:
            return getattr(importlib.import_module(self._name), attr)

    pygit2 = _OnFirstUse("pygit2")
    enums = _OnFirstUse("pygit2.enums")


class GitError(Exception):
    """A repository operation that could not be done, in words for a person."""


class NotARepository(GitError):
    """The folder is in no repository with a working tree (changesets are absent)."""


class Refused(GitError):
    """The repository is in a state where the operation would lose or mangle work."""


_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def _no_git_above(folder: Path) -> bool:
    """True when neither ``folder`` nor a folder above it (as given or with its
    links resolved) holds a ``.git`` or is itself a repository (``HEAD`` and
    ``objects``, as a bare one is): then libgit2 would find nothing, and need
    not be loaded to say so (a session in a plain folder). Only a necessary
    condition: wherever one is found, libgit2 decides (a file system
    boundary, a bare repository, an unreadable or foreign ``.git``)."""
    for start in {folder.absolute(), folder.resolve()}:
        for place in (start, *start.parents):
            if os.path.lexists(place / ".git") or (
                os.path.lexists(place / "HEAD") and os.path.lexists(place / "objects")
            ):
                return False
    return True


@functools.cache
def _index_letters() -> dict[Any, str]:
    d = enums.DeltaStatus
    return {d.ADDED: "A", d.DELETED: "D", d.MODIFIED: "M", d.RENAMED: "R", d.COPIED: "C", d.TYPECHANGE: "T"}


@functools.cache
def _worktree_letters() -> dict[Any, str]:
    d = enums.DeltaStatus
    return {d.DELETED: "D", d.MODIFIED: "M", d.TYPECHANGE: "T", d.UNTRACKED: "?"}


@functools.cache
def _states() -> dict[Any, str]:
    r = enums.RepositoryState
    return {
        r.MERGE: "a merge",
        r.REVERT: "a revert",
        r.REVERT_SEQUENCE: "a revert",
        r.CHERRYPICK: "a cherry-pick",
        r.CHERRYPICK_SEQUENCE: "a cherry-pick",
        r.BISECT: "a bisect",
        r.REBASE: "a rebase",
        r.REBASE_INTERACTIVE: "a rebase",
        r.REBASE_MERGE: "a rebase",
        r.APPLY_MAILBOX: "a git am",
        r.APPLY_MAILBOX_OR_REBASE: "a rebase",
    }


@dataclass(frozen=True)
class Change:
    """One row of a changeset: a path and what happened to it.

    ``index``/``worktree`` are ``git status --porcelain``'s two letters
    (``' '`` for nothing); a tree-to-tree change carries its letter in
    ``index`` and a blank ``worktree``. ``old_path`` is a rename's or a
    copy's source. ``before``/``after`` are blob ids (None: absent on that
    side, or for ``after``, the file as it is in the working tree)."""

    path: str
    index: str
    worktree: str
    old_path: str | None = None
    before: str | None = None
    after: str | None = None

    @property
    def staged(self) -> bool:
        return self.index not in (" ", "?")

    @property
    def unstaged(self) -> bool:
        return self.worktree != " "


def _under(path: str, prefix: str) -> bool:
    return not prefix or path == prefix or path.startswith(prefix + "/")


class Repo:
    """One repository with a working tree, opened for one piece of work
    (a ``pygit2.Repository`` is not shared between threads)."""

    def __init__(self, folder: Path | str) -> None:
        folder = Path(folder)
        if _no_git_above(folder):
            raise NotARepository(f"{folder} is not in a git repository")
        try:
            found = pygit2.discover_repository(str(folder))
        except pygit2.GitError as exc:  # an unreadable .git
            raise NotARepository(f"{folder} is not in a readable git repository: {exc}") from None
        if found is None:
            raise NotARepository(f"{folder} is not in a git repository")
        self.repo = pygit2.Repository(found)
        if self.repo.is_bare or self.repo.workdir is None:
            raise NotARepository(f"{found} is a bare repository: it has no working tree to change")
        self.root = Path(self.repo.workdir).resolve()
        try:
            self.prefix = PurePosixPath(folder.resolve().relative_to(self.root)).as_posix()
        except ValueError:
            raise NotARepository(f"{folder} is not inside the working tree {self.root}") from None
        if self.prefix == ".":
            self.prefix = ""

    # -- reading ---------------------------------------------------------------

    def head_tree(self) -> pygit2.Tree | None:
        if self.repo.head_is_unborn:
            return None
        return self.repo.head.peel(pygit2.Commit).tree

    @property
    def has_commit(self) -> bool:
        return not self.repo.head_is_unborn

    def in_progress(self) -> str | None:
        """What the repository is in the middle of (a merge, a rebase), if anything."""
        state = self.repo.state()
        if state == enums.RepositoryState.NONE:
            return None
        return _states().get(state, "another operation")

    def status(self) -> list[Change]:
        """``git status --porcelain`` under the folder, renames found in the
        index as git finds them: one row per path, under its new name."""
        repo = self.repo
        index = repo.index
        index.read(False)
        tree = self.head_tree()
        staged = (tree if tree is not None else self._tree(_EMPTY_TREE)).diff_to_index(index)
        staged.find_similar(enums.DiffFind.FIND_RENAMES)
        rows: dict[str, Change] = {}
        for delta in staged.deltas:
            path = delta.new_file.path
            moved = delta.status in (enums.DeltaStatus.RENAMED, enums.DeltaStatus.COPIED)
            old = delta.old_file.path if moved else None
            rows[path] = Change(
                path,
                _index_letters().get(delta.status, "M"),
                " ",
                old,
                before=None if delta.status == enums.DeltaStatus.ADDED else str(delta.old_file.id),
                after=None if delta.status == enums.DeltaStatus.DELETED else str(delta.new_file.id),
            )
        unstaged = index.diff_to_workdir(
            enums.DiffOption.INCLUDE_UNTRACKED
            | enums.DiffOption.RECURSE_UNTRACKED_DIRS
            | enums.DiffOption.INCLUDE_TYPECHANGE
        )
        for delta in unstaged.deltas:
            path = delta.new_file.path
            letter = _worktree_letters().get(delta.status, "M")
            row = rows.get(path)
            if letter == "?":
                rows[path] = Change(path, "?", "?")
            elif row is None:
                head_id = _tree_blob(tree, path)
                rows[path] = Change(path, " ", letter, before=head_id, after=None)
            else:
                rows[path] = Change(path, row.index, letter, row.old_path, row.before, None)
        return [
            rows[p]
            for p in sorted(rows)
            if _under(p, self.prefix) or (rows[p].old_path and _under(rows[p].old_path or "", self.prefix))
        ]

    def blob(self, oid: str) -> bytes:
        obj = self.repo.get(oid)
        if not isinstance(obj, pygit2.Blob):
            raise GitError(f"{oid} is not a blob in {self.root}")
        return obj.data

    def tree_blob(self, treeish: str, path: str) -> str | None:
        """The blob id at ``path`` in a tree (or commit), or None."""
        obj = self.repo.get(treeish)
        if obj is None:
            return None
        return _tree_blob(obj.peel(pygit2.Tree), path)

    def _tree(self, treeish: str) -> pygit2.Tree:
        """The tree a tree or commit id names. A snapshot is a tree nothing refers to, which
        ``git gc`` may prune once it is old: that is a GitError, said, not a crash."""
        obj = self.repo.get(treeish)
        if obj is None:
            raise GitError(f"{treeish} is no longer in the repository at {self.root}")
        return obj.peel(pygit2.Tree)

    def snapshot(self) -> str:
        """The working tree as a tree object (tracked and untracked files,
        ignored ones left out), written into the object database from an
        in-memory copy of the index: the index file itself is not written."""
        scratch = pygit2.Repository(self.repo.path)  # its own index object, never written
        index = scratch.index
        index.read(False)
        index.add_all()
        return str(index.write_tree())

    def diff_trees(self, old: str, new: str) -> list[Change]:
        """What changed between two trees (snapshots or commits), under the folder."""
        a = self._tree(old)
        b = self._tree(new)
        diff = a.diff_to_tree(b)
        diff.find_similar(enums.DiffFind.FIND_RENAMES)
        out = []
        for delta in diff.deltas:
            path = delta.new_file.path
            moved = delta.status in (enums.DeltaStatus.RENAMED, enums.DeltaStatus.COPIED)
            old_path = delta.old_file.path if moved else None
            if not (_under(path, self.prefix) or (old_path and _under(old_path, self.prefix))):
                continue
            out.append(
                Change(
                    path,
                    _index_letters().get(delta.status, "M"),
                    " ",
                    old_path,
                    before=None if delta.status == enums.DeltaStatus.ADDED else str(delta.old_file.id),
                    after=None if delta.status == enums.DeltaStatus.DELETED else str(delta.new_file.id),
                )
            )
        return sorted(out, key=lambda c: c.path)

    def head_id(self) -> str | None:
        return None if self.repo.head_is_unborn else str(self.repo.head.target)

    # -- facts for the catalogue -------------------------------------------------

    def facts(self, uncommitted: int | None = None) -> dict[str, object]:
        """``_meta.git``: the branch, its upstream, how far apart they are,
        and how many files are uncommitted (read here unless given: a
        status is the one costly part)."""
        repo = self.repo
        facts: dict[str, object] = {}
        if repo.head_is_detached:
            facts["branchName"] = "HEAD"
        else:
            name = repo.references["HEAD"].target
            branch_name = str(name).removeprefix("refs/heads/")
            facts["branchName"] = branch_name
            branch = repo.branches.local.get(branch_name)
            upstream = branch.upstream if branch is not None and not repo.head_is_unborn else None
            if branch is not None and upstream is not None:
                facts["upstreamBranchName"] = upstream.branch_name
                ahead, behind = repo.ahead_behind(branch.target, upstream.target)
                facts["ahead"], facts["behind"] = ahead, behind
        facts["uncommittedChanges"] = len(self.status()) if uncommitted is None else uncommitted
        return facts

    def branches(self) -> list[str]:
        """Local branches, most recently committed first."""
        repo = self.repo
        dated = []
        for name in repo.branches.local:
            commit = repo.branches.local[name].peel(pygit2.Commit)
            dated.append((commit.commit_time, name))
        return [name for _, name in sorted(dated, key=lambda d: (-d[0], d[1]))]

    # -- writing ----------------------------------------------------------------

    def _writable(self) -> None:
        doing = self.in_progress()
        if doing is not None:
            raise Refused(f"the repository at {self.root} is in the middle of {doing}: finish or abort it first")

    def _paths(self, targets: Iterable[str] | None) -> list[str]:
        """The changed paths a target names: a file, a folder (everything
        changed under it) or, with None, everything under the session's folder."""
        rows = self.status()
        if targets is None:
            picked = rows
        else:
            wanted = list(targets)
            picked = [
                r for r in rows if any(_under(r.path, t) or (r.old_path and _under(r.old_path, t)) for t in wanted)
            ]
        paths: list[str] = []
        for row in picked:
            paths.append(row.path)
            if row.old_path:
                paths.append(row.old_path)
        return list(dict.fromkeys(paths))

    def _stage_paths(self, index: pygit2.Index, paths: Iterable[str]) -> None:
        for path in paths:
            if (self.root / path).is_symlink() or (self.root / path).exists():
                index.add(path)
            elif path in index:
                index.remove(path)

    def stage(self, targets: Iterable[str] | None) -> int:
        self._writable()
        paths = self._paths(targets)
        index = self.repo.index
        index.read(False)
        self._stage_paths(index, paths)
        index.write()
        return len(paths)

    def unstage(self, targets: Iterable[str] | None) -> int:
        self._writable()
        paths = self._paths(targets)
        index = self.repo.index
        index.read(False)
        tree = self.head_tree()
        for path in paths:
            entry = _tree_entry(tree, path)
            if entry is not None:
                index.add(pygit2.IndexEntry(path, entry.id, entry.filemode))
            elif path in index:
                index.remove(path)
        index.write()
        return len(paths)

    def staged_count(self) -> int:
        return sum(1 for r in self.status() if r.staged)

    def commit(self, message: str, targets: Iterable[str] | None = None) -> str:
        """Commit the index when it holds anything, else the whole working
        tree under the folder; with ``targets``, those files as the working
        tree has them, leaving whatever else the index holds staged."""
        self._writable()
        repo = self.repo
        index = repo.index
        index.read(False)
        if targets is None:
            if not any(r.staged for r in self.status()):
                self._stage_paths(index, self._paths(None))
            tree = self.head_tree()
            if tree is not None and index.diff_to_tree(tree).stats.files_changed == 0:
                raise Refused("nothing to commit: the working tree under the session's folder matches HEAD")
            if tree is None and len(index) == 0:
                raise Refused("nothing to commit: the working tree under the session's folder is empty")
            tree_id = index.write_tree()
            index.write()
        else:
            paths = self._paths(targets)
            if not paths:
                raise Refused("nothing to commit: the file has no change")
            scratch = pygit2.Index()
            head = self.head_tree()
            if head is not None:
                scratch.read_tree(head)
            self._stage_paths_into(scratch, paths)
            tree_id = scratch.write_tree(repo)
            # The real index takes the same entries, and keeps everything else it holds.
            self._stage_paths(index, paths)
            index.write()
        parents = [] if repo.head_is_unborn else [repo.head.target]
        signature = _signature(repo)
        ref = "HEAD" if not repo.head_is_unborn or not repo.head_is_detached else None
        oid = repo.create_commit(ref, signature, signature, message, tree_id, parents)
        return str(oid)

    def _stage_paths_into(self, index: pygit2.Index, paths: Iterable[str]) -> None:
        for path in paths:
            full = self.root / path
            if full.is_symlink() or full.is_file():
                blob = self.repo.create_blob_fromworkdir(path)
                mode = (
                    enums.FileMode.LINK
                    if full.is_symlink()
                    else enums.FileMode.BLOB_EXECUTABLE
                    if os.access(full, os.X_OK)
                    else enums.FileMode.BLOB
                )
                index.add(pygit2.IndexEntry(path, blob, mode))
            elif path in index:
                index.remove(path)

    def discard(self, targets: Iterable[str] | None) -> int:
        """Put files back to HEAD, in the index and the working tree; an
        untracked file is removed. Refused with no commit, where it would
        delete every file."""
        self._writable()
        if not self.has_commit:
            raise Refused("the repository has no commit yet: every file is new, and discarding would delete them all")
        rows = {r.path: r for r in self.status()}
        paths = self._paths(targets)
        tree = self.head_tree()
        index = self.repo.index
        index.read(False)
        tracked = []
        for path in paths:
            row = rows.get(path)
            entry = _tree_entry(tree, path)
            if entry is None:
                if path in index:
                    index.remove(path)
                full = self.root / path
                if full.is_symlink() or full.is_file():
                    full.unlink()
                    _prune_empty(full.parent, self.root)
            else:
                index.add(pygit2.IndexEntry(path, entry.id, entry.filemode))
                tracked.append(path)
            del row
        index.write()
        if tracked:
            self.repo.checkout_tree(tree, paths=tracked, strategy=enums.CheckoutStrategy.FORCE)
        return len(paths)

    def restore(self, tree_id: str, path: str) -> None:
        """Put one working-tree file back to what it was in a snapshot (the
        index is not touched): absent there, the file is removed."""
        self._writable()
        entry = _tree_entry(self._tree(tree_id), path)
        full = self.root / path
        if entry is None:
            if full.is_symlink() or full.exists():
                full.unlink()
                _prune_empty(full.parent, self.root)
            return
        full.parent.mkdir(parents=True, exist_ok=True)
        data = entry.data
        if full.is_symlink():
            full.unlink()
        if entry.filemode == enums.FileMode.LINK:
            os.symlink(data, full)
            return
        full.write_bytes(data)
        full.chmod(0o755 if entry.filemode == enums.FileMode.BLOB_EXECUTABLE else 0o644)

    # -- worktrees ----------------------------------------------------------------

    def add_worktree(self, path: Path, branch: str, base: str | None = None) -> None:
        """A new worktree at ``path`` on a new ``branch`` from ``base`` (HEAD
        when None). libgit2 checks a worktree out only onto an existing
        reference, so the porcelain does this one."""
        for name in (branch, base):
            if name is not None and not valid_branch_name(name):
                raise Refused(f"{name!r} is not a branch name git allows")
        if branch in self.repo.branches.local:
            _git(self.root, "worktree", "add", "--", str(path), branch)
        else:
            _git(self.root, "worktree", "add", "-b", branch, "--", str(path), *([base] if base else []))

    def set_upstream(self, branch: str, upstream: str) -> None:
        """Make ``upstream`` (a local branch, else a remote-tracking one) the
        branch's upstream, as ``git branch --set-upstream-to`` does."""
        branches = self.repo.branches
        target = branches.local.get(upstream) or branches.remote.get(upstream)
        if target is None:
            raise Refused(f"no branch {upstream} to track")
        branches.local[branch].upstream = target

    def remove_worktree(self, path: Path, force: bool = False) -> None:
        """``force`` removes a tree with work in it too (a person asked for it)."""
        _git(self.root, "worktree", "remove", *(["--force", "--force"] if force else []), "--", str(path))

    def prune_worktrees(self) -> None:
        """Forget the worktrees whose folder is gone (removed by hand), so one
        can be made again at the same place."""
        _git(self.root, "worktree", "prune")

    def delete_branch(self, name: str) -> None:
        """Delete a local branch (merged or not); one already gone is no error."""
        branch = self.repo.branches.local.get(name)
        if branch is not None:
            branch.delete()


def valid_branch_name(name: str) -> bool:
    """A name git takes for a branch: libgit2's reference-name check, and
    what git's ``branch`` adds to it (no leading ``-``, which a command line
    would read as an option, and not ``HEAD``)."""
    return not name.startswith("-") and name != "HEAD" and pygit2.reference_is_valid_name(f"refs/heads/{name}")


def is_clean(folder: Path) -> bool:
    """No change of any kind, untracked files included."""
    return not Repo(folder).status()


def _git(cwd: Path, *args: str) -> str:
    """The ``git`` command, for what libgit2 cannot do (see the module's docstring).
    Every caller puts ``--`` before its paths and names, so that none is
    read as an option, whatever it starts with."""
    if shutil.which("git") is None:
        raise GitError("the git command is needed for worktrees and is not on PATH")
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise GitError(f"git {' '.join(args[:2])} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _tree_entry(tree: pygit2.Tree | None, path: str) -> pygit2.Blob | None:
    if tree is None:
        return None
    try:
        entry = tree[path]
    except KeyError:
        return None
    return entry if isinstance(entry, pygit2.Blob) else None


def _tree_blob(tree: pygit2.Tree | None, path: str) -> str | None:
    entry = _tree_entry(tree, path)
    return str(entry.id) if entry is not None else None


def _prune_empty(folder: Path, root: Path) -> None:
    """Remove the folders a deleted file leaves empty, up to the root."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _signature(repo: pygit2.Repository) -> pygit2.Signature:
    try:
        return repo.default_signature
    except (KeyError, pygit2.GitError):
        raise Refused("git has no user.name and user.email for this repository: set them to commit") from None
