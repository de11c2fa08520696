"""The git facts a session shows from its creation on, read with the ``git``
command instead of libgit2.

Why not ``ahpd.ports.git.Repo``: every session in a repository asks, at its
creation, whether its folder is in one, what branch it is on and how far
that is from its upstream, how many files are uncommitted, and which GitHub
remote there is. Answering through libgit2 loads it into the daemon (about
8 MB, and more with every repository it opens), for sessions that may never
open a changeset. One short ``git`` process per question costs a few
milliseconds of a child's CPU and nothing of the daemon's memory; libgit2 is
loaded only where the work needs it (diffs, snapshots, checkouts).

The answers are the ones ``Repo`` gives (``tests/ports/test_git_facts.py``
compares them): ``git status --porcelain=v2 --branch`` limited to the folder
counts one row per path (a rename is one row, wherever its other side is),
untracked files one by one. Without a ``git`` command on PATH, ``Repo``
answers. Everything here blocks: the host calls it in a thread.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ahpd.ports.git import GitError, NotARepository, Repo, _no_git_above
from ahpd.ports import git_branches

#: What would point ``git`` at another repository, index or object store than
#: the folder's own (libgit2 reads none of them either).
_PLACING = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PLACING}
    env["GIT_OPTIONAL_LOCKS"] = "0"  # a read never rewrites the user's index (git status would refresh it)
    env["LC_ALL"] = "C"
    return env


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``git args`` in ``folder``; a folder gone or a git that hangs is a GitError, said, not a crash."""
    try:
        return subprocess.run(
            ["git", "--no-pager", *args], cwd=folder, capture_output=True, env=_env(), check=False, timeout=120
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} in {folder} did not answer in 120 s") from None
    except OSError as exc:
        raise NotARepository(f"git {args[0]} could not run in {folder}: {exc.strerror or exc}") from None


def _cli() -> bool:
    return shutil.which("git") is not None


def check(folder: Path | str) -> None:
    """Raise ``NotARepository`` unless ``folder`` is inside a repository's working tree."""
    folder = Path(folder)
    if _no_git_above(folder):
        raise NotARepository(f"{folder} is not in a git repository")
    if not _cli():
        Repo(folder)
        return
    done = _run(folder, "rev-parse", "--is-bare-repository", "--is-inside-work-tree")
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()
        raise NotARepository(f"{folder} is not in a readable git repository: {said}")
    bare, inside = [*done.stdout.decode().split(), "", ""][:2]
    if bare == "true":
        raise NotARepository(f"{folder} is in a bare repository: it has no working tree to change")
    if inside != "true":
        raise NotARepository(f"{folder} is not inside a working tree")


def facts(folder: Path | str, uncommitted: int | None = None) -> dict[str, object]:
    """``_meta.git`` as ``Repo.facts`` says it: the branch, its upstream and
    how far apart they are, and how many files under the folder are uncommitted
    (counted here unless given)."""
    folder = Path(folder)
    if _no_git_above(folder):
        raise NotARepository(f"{folder} is not in a git repository")
    if not _cli():
        return Repo(folder).facts(uncommitted)
    args = ["status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all"]
    done = _run(folder, *args, "--", ".")
    if done.returncode != 0:  # no repository, a bare one, or inside .git: git status needs a working tree
        said = done.stderr.decode(errors="replace").strip()
        raise NotARepository(f"{folder} has no git status: {said}")
    head = oid = upstream = None
    ab: tuple[int, int] | None = None
    rows = 0
    entries = iter(done.stdout.split(b"\0"))
    for entry in entries:
        if entry.startswith(b"# branch.head "):
            head = entry[len(b"# branch.head ") :].decode(errors="surrogateescape")
        elif entry.startswith(b"# branch.oid "):
            oid = entry[len(b"# branch.oid ") :].decode()
        elif entry.startswith(b"# branch.upstream "):
            upstream = entry[len(b"# branch.upstream ") :].decode(errors="surrogateescape")
        elif entry.startswith(b"# branch.ab "):
            ahead, behind = entry.split()[2:4]
            ab = (int(ahead), -int(behind))
        elif entry[:2] in (b"1 ", b"u ", b"? "):
            rows += 1
        elif entry.startswith(b"2 "):
            rows += 1
            next(entries, None)  # a rename's source path is the next field
    out: dict[str, object] = {}
    if head is None or head == "(detached)":
        out["branchName"] = "HEAD"
    else:
        out["branchName"] = head
        # libgit2 says no upstream for a branch with no commit, or one whose upstream is gone:
        # git then still names it, but cannot count how far apart they are.
        if upstream is not None and ab is not None and oid != "(initial)":
            out["upstreamBranchName"] = upstream
            out["ahead"], out["behind"] = ab
    out["uncommittedChanges"] = rows if uncommitted is None else uncommitted
    return out


def branches(folder: Path | str) -> list[str]:
    """Local branches, most recently committed first (``Repo.branches``)."""
    folder = Path(folder)
    check(folder)
    if not _cli():
        return Repo(folder).branches()
    done = _run(folder, "for-each-ref", "--format=%(committerdate:unix) %(refname)", "refs/heads/")
    if done.returncode != 0:
        raise GitError(f"git for-each-ref failed in {folder}: {done.stderr.decode(errors='replace').strip()}")
    dated = []
    for line in done.stdout.decode(errors="surrogateescape").splitlines():
        when, _, ref = line.partition(" ")
        dated.append((int(when or 0), ref.removeprefix("refs/heads/")))
    return [name for _, name in sorted(dated, key=lambda d: (-d[0], d[1]))]


def current_branch(folder: Path | str) -> str | None:
    """The branch HEAD is on (with no commit yet, too); None when HEAD is detached."""
    folder = Path(folder)
    check(folder)
    if not _cli():
        return git_branches.current_branch(Repo(folder))
    ref = _run(folder, "symbolic-ref", "-q", "HEAD")
    branch = ref.stdout.decode(errors="surrogateescape").strip() if ref.returncode == 0 else ""
    return branch.removeprefix("refs/heads/") or None


def github_place(folder: Path | str) -> tuple[str, str, str, str | None] | None:
    """``(remote, owner, repo, branch)`` of the folder's GitHub remote (``origin``
    when it is GitHub's, else the first that is) and the branch HEAD is on
    (None when detached); None without a GitHub remote."""
    folder = Path(folder)
    check(folder)
    if not _cli():
        return _github_place_libgit2(folder)
    done = _run(folder, "remote", "-v")
    if done.returncode != 0:
        raise GitError(f"git remote failed in {folder}: {done.stderr.decode(errors='replace').strip()}")
    urls: dict[str, str] = {}
    for line in done.stdout.decode(errors="surrogateescape").splitlines():
        name, _, rest = line.partition("\t")
        url, _, kind = rest.rpartition(" ")
        if kind == "(fetch)" and name not in urls:
            urls[name] = url
    for name in sorted(urls, key=lambda n: (n != "origin", n)):
        found = git_branches.github_of(urls[name])
        if found is not None and name:
            return name, *found, current_branch(folder)
    return None


def _github_place_libgit2(folder: Path) -> tuple[str, str, str, str | None] | None:
    repo = Repo(folder)
    found = git_branches.github_remote(repo)
    if found is None:
        return None
    return (*found, git_branches.current_branch(repo))
