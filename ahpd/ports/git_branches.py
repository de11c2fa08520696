"""Moving a repository between branches, and what a pull request needs of it.

Beside ``ahpd.ports.git`` (which reads and edits one working tree) because
these move the whole repository: a ``checkout`` of another branch, the stash
or commit that clears the way for it, a branch made for a pull request, the
push, and reading which GitHub repository a remote names. Everything here
blocks, so the host runs it in a thread, and nothing here knows the host.

libgit2 does the local work. The push is the ``git`` command: it is what
reaches the person's credential helpers, SSH agent and ``pushurl``, none of
which libgit2 would read the way git does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import TYPE_CHECKING

from ahpd.ports.git import GitError, Refused, Repo, _signature, pygit2, valid_branch_name

if TYPE_CHECKING:
    from collections.abc import Iterable


class DirtyTree(Refused):
    """The tree has changes a checkout would carry away or overwrite."""


#: ``https://github.com/o/r(.git)``, ``git@github.com:o/r(.git)``, ``ssh://git@github.com/o/r(.git)``.
_GITHUB = re.compile(
    r"^(?:https?://(?:[^@/]+@)?github\.com/|git@github\.com:|ssh://git@github\.com(?::\d+)?/)"
    r"(?P<owner>[A-Za-z0-9_.-]+)/(?P<repo>[A-Za-z0-9_.-]+?)(?:\.git)?/?$"
)


def github_of(url: str) -> tuple[str, str] | None:
    """``(owner, repo)`` when ``url`` is a github.com remote, else None."""
    found = _GITHUB.match(url.strip())
    return (found["owner"], found["repo"]) if found else None


def github_remote(repo: Repo) -> tuple[str, str, str] | None:
    """``(remote, owner, repo)`` of the repository's GitHub remote: ``origin``
    when it is GitHub's, else the first that is; None when none is."""
    remotes = sorted(repo.repo.remotes, key=lambda r: (r.name != "origin", r.name or ""))
    for remote in remotes:
        found = github_of(remote.url or "")
        if found is not None and remote.name:
            return remote.name, *found
    return None


def current_branch(repo: Repo) -> str | None:
    """The branch HEAD is on; None when HEAD is detached."""
    if repo.repo.head_is_detached:
        return None
    return str(repo.repo.references["HEAD"].target).removeprefix("refs/heads/")


def changed_paths(repo: Repo) -> list[str]:
    """Every path ``git status`` shows anywhere in the repository, untracked
    files included (ignored ones are not): a checkout moves the whole tree,
    not only the session's folder."""
    return sorted(repo.repo.status(untracked_files="all", ignored=False))


def _stage_everything(repo: Repo) -> pygit2.Index:
    raw = repo.repo
    gone = [path for path, flags in raw.status().items() if flags & pygit2.enums.FileStatus.WT_DELETED]
    index = raw.index
    index.read(False)
    index.add_all()
    for path in gone:  # a tracked file deleted from the tree leaves the index too
        if path in index:
            index.remove(path)
    return index


def commit_all(repo: Repo, message: str) -> str:
    """Commit every change in the repository, untracked files included."""
    repo._writable()
    raw = repo.repo
    index = _stage_everything(repo)
    tree = index.write_tree()
    index.write()
    parents = [] if raw.head_is_unborn else [raw.head.target]
    signature = _signature(raw)
    return str(raw.create_commit("HEAD", signature, signature, message, tree, parents))


def stash_all(repo: Repo, message: str) -> str:
    """Stash every change, untracked files included, as ``git stash -u`` does."""
    repo._writable()
    return str(repo.repo.stash(_signature(repo.repo), message, include_untracked=True))


def checkout(repo: Repo, branch: str) -> bool:
    """Put the repository on the local ``branch``. False when it already is.

    Refused for a name that is no local branch, for a branch another
    worktree has checked out (git keeps one tree per branch), and for a tree
    with changes (``DirtyTree``): they are stashed or committed first, by
    the caller's choice."""
    if not valid_branch_name(branch) or branch not in repo.repo.branches.local:
        raise Refused(f"{branch!r} is not a local branch of {repo.root}")
    if current_branch(repo) == branch:
        return False
    repo._writable()
    changed = changed_paths(repo)
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise DirtyTree(f"the working tree has changes ({shown}): stash or commit them before checking out {branch}")
    ref = repo.repo.branches.local[branch]
    if ref.is_checked_out():
        raise Refused(f"{branch} is checked out in another worktree of {repo.root}")
    try:
        repo.repo.checkout(ref.name)
    except pygit2.GitError as exc:
        raise GitError(f"checking out {branch} failed: {exc}") from None
    return True


def new_branch(repo: Repo, name: str) -> None:
    """Make ``name`` at HEAD and put the repository on it; the tree stays as it is."""
    if not valid_branch_name(name):
        raise Refused(f"{name!r} is not a branch name git allows")
    if name in repo.repo.branches.local:
        raise Refused(f"a branch {name} already exists")
    raw = repo.repo
    commit = raw.head.peel(pygit2.Commit)
    raw.branches.local.create(name, commit)
    raw.set_head(f"refs/heads/{name}")


def free_branch_name(repo: Repo, wanted: str) -> str:
    """``wanted``, or ``wanted-2``, ``-3``... the first no local branch has."""
    taken = set(repo.repo.branches.local)
    name, n = wanted, 1
    while name in taken:
        n += 1
        name = f"{wanted}-{n}"
    return name


#: Seconds a push may take before it is given up.
PUSH_TIMEOUT = 300


def push(repo: Repo, remote: str, branch: str) -> None:
    """``git push --set-upstream <remote> <branch>``, never asking on a
    terminal (there is none: a credential a helper cannot give is a refusal)."""
    if shutil.which("git") is None:
        raise GitError("the git command is needed to push and is not on PATH")
    command = ["git", "push", "--porcelain", "--set-upstream", "--", remote, f"refs/heads/{branch}"]
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        done = subprocess.run(
            command, cwd=repo.root, env=env, capture_output=True, text=True, check=False, timeout=PUSH_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"pushing {branch} to {remote} took over {PUSH_TIMEOUT} s and was given up") from None
    if done.returncode != 0:
        raise GitError(f"pushing {branch} to {remote} failed: {done.stderr.strip() or done.stdout.strip()}")


def commits_between(repo: Repo, base: str, head: str, limit: int = 50) -> list[str]:
    """Subject lines of the commits on ``head`` that ``base`` lacks, newest
    first (at most ``limit``). A base that is not known locally gives all of
    ``head``'s, up to the limit."""
    raw = repo.repo
    tip = raw.revparse_single(head).peel(pygit2.Commit)
    walker = raw.walk(tip.id)
    for candidate in (base, f"origin/{base}"):
        try:
            walker.hide(raw.revparse_single(candidate).peel(pygit2.Commit).id)
            break
        except (KeyError, ValueError, pygit2.GitError):
            continue
    out: list[str] = []
    for commit in walker:
        out.append(commit.message.splitlines()[0] if commit.message else "")
        if len(out) >= limit:
            break
    return out


def default_branch(repo: Repo, remote: str | None, fallbacks: Iterable[str] = ("main", "master")) -> str | None:
    """The branch a pull request targets when GitHub was not asked: the
    remote's HEAD, else the first of ``fallbacks`` that exists."""
    raw = repo.repo
    if remote is not None:
        try:
            target = raw.references[f"refs/remotes/{remote}/HEAD"].target
            return str(target).removeprefix(f"refs/remotes/{remote}/")
        except (KeyError, pygit2.GitError):
            pass
    return next((name for name in fallbacks if name in raw.branches.local), None)
