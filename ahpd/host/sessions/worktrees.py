"""Sessions in a worktree of their own: ``isolation: worktree``.

A session created with it gets a new branch checked out in a tree at
``<repo>.worktrees/<name>``, beside its repository (or at
``<dir>/<repo>/<name>`` under ``--worktrees-root <dir>``), and works there, so
two sessions on one repository never edit the same files. A checkout has
no ``.env`` and no ``node_modules``: ``worktreeIncludeFiles`` copies the
git-ignored files its patterns name into the new tree, and
``worktreeSymlinkFolders`` links the git-ignored folders its patterns name
(links first, as the reference makes them). Both are best effort, one
pattern at a time: a pattern that matches nothing is the ordinary case.

Disposing the session removes a clean tree and keeps its branch; a tree
with somebody's work in it is kept where it is and its path is logged,
since a daemon cannot judge the value of that work.

The seven worktree properties of ``resolveSessionConfig`` are this host's
own, offered when the working directory is in a repository; ``branch`` (the
branch the new one starts from) is seeded with the twenty most recently
committed and answered by substring in ``sessionConfigCompletions``.
``worktreeBranchPrefix`` starts the new branch's name,
``worktreeCreateNewBranch: 'false'`` checks the base branch itself out in
the tree (it stays the user's: nothing ever deletes it), and
``worktreeBranchTrack: 'true'`` makes the base the new branch's upstream.
``worktreeBranchName`` from an older client is still honoured, not offered.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any


from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.ports import git as gitport
from ahpd.ports import git_facts
from ahpd.ports import threads

log = logging.getLogger("ahpd.host")

SEEDED = 20

ISOLATION, BRANCH, INCLUDE, LINK, PREFIX, CREATE_NEW, TRACK = (
    "isolation",
    "branch",
    "worktreeIncludeFiles",
    "worktreeSymlinkFolders",
    "worktreeBranchPrefix",
    "worktreeCreateNewBranch",
    "worktreeBranchTrack",
)
NEW_BRANCH = "worktreeBranchName"  # an older client's; honoured, no longer offered
DEFAULT_PREFIX = "ahpd/"


def _patterns_schema(title: str, description: str) -> dict[str, Any]:
    return {
        "type": "array",
        "title": title,
        "description": description,
        "items": {"type": "string", "title": "Pattern"},
        "default": [],
    }


def properties(branches: list[str], current: str | None) -> dict[str, Any]:
    """The worktree properties this host adds to a session's config schema."""
    seeded = branches[:SEEDED]
    branch: dict[str, Any] = {
        "type": "string",
        "title": "Base branch",
        "description": "The branch a worktree session's own branch starts from",
    }
    if seeded:
        branch["enum"] = seeded
        branch["enumDynamic"] = True  # more are answered by sessionConfigCompletions
    if current:
        branch["default"] = current
    return {
        ISOLATION: {
            "type": "string",
            "title": "Isolation",
            "enum": ["folder", "worktree"],
            "default": "folder",
            "enumLabels": ["Work in the folder", "Work in a worktree of its own"],
            "description": "worktree gives the session a new branch checked out in a tree of its own",
        },
        BRANCH: branch,
        INCLUDE: _patterns_schema(
            "Files copied into the worktree", "gitignore patterns for the git-ignored files to copy in (.env...)"
        ),
        LINK: _patterns_schema(
            "Folders linked into the worktree",
            "gitignore patterns for the git-ignored folders to link (node_modules...)",
        ),
        PREFIX: {
            "type": "string",
            "title": "Branch prefix",
            "default": "",
            "description": f"What the new branch's name starts with; {DEFAULT_PREFIX} when empty",
        },
        CREATE_NEW: _yes_no("Create a new branch", "true", "false checks the base branch itself out in the worktree"),
        TRACK: _yes_no("Track the base branch", "false", "true makes the base branch the new branch's upstream"),
    }


def _yes_no(title: str, default: str, description: str) -> dict[str, Any]:
    return {
        "type": "string",
        "title": title,
        "enum": ["true", "false"],
        "enumLabels": ["Yes", "No"],
        "default": default,
        "description": description,
    }


def repository_facts(folder: Path) -> tuple[list[str], str | None] | None:
    """(branches most recently committed first, the current one), or None
    outside a repository (a thread's work)."""
    try:  # read with the git command: asking for a session's form does not load libgit2
        return git_facts.branches(folder), git_facts.current_branch(folder)
    except gitport.GitError:
        return None


def complete_branch(folder: Path, query: str) -> list[str]:
    """Branches whose name holds ``query``, most recently committed first."""
    try:
        branches = git_facts.branches(folder)
    except gitport.GitError:
        return []
    needle = query.lower()
    return [b for b in branches if needle in b.lower()]


def _patterns(value: Any) -> list[str]:
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list):
        return []
    return [p.strip() for p in value if isinstance(p, str) and p.strip() and not p.strip().startswith("#")]


def _matches(root: Path, pattern: str, repo: gitport.Repo, want_dir: bool) -> list[Path]:
    """The git-ignored paths under ``root`` a gitignore-style pattern names."""
    anchored = pattern.startswith("/") or "/" in pattern.rstrip("/")
    bare = pattern.strip("/")
    found = root.glob(bare) if anchored else root.rglob(bare)
    out = []
    for path in found:
        if ".git" in path.relative_to(root).parts or path.is_dir() != want_dir:
            continue
        relative = path.relative_to(root).as_posix()
        if repo.repo.path_is_ignored(relative + ("/" if want_dir else "")) or repo.repo.path_is_ignored(relative):
            out.append(path)
    if want_dir:  # a folder inside one already linked is reached through it
        out = [p for p in out if not any(q in p.parents for q in out)]
    return out


def _bring_along(source: Path, tree: Path, config: dict[str, Any]) -> list[str]:
    """Link and copy what the patterns name; the links made, to take away
    before the tree is removed (git counts a link to a folder as a file)."""
    repo = gitport.Repo(source)
    root = repo.root
    links = []
    for pattern in _patterns(config.get(LINK)):
        try:
            for folder in _matches(root, pattern, repo, want_dir=True):
                target = tree / folder.relative_to(root)
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(folder, target, target_is_directory=True)
                    links.append(str(target))
        except OSError as exc:
            log.info("worktree %s: linking %r: %s", tree, pattern, exc)
    for pattern in _patterns(config.get(INCLUDE)):
        try:
            for file in _matches(root, pattern, repo, want_dir=False):
                target = tree / file.relative_to(root)
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(file, target)
        except OSError as exc:
            log.info("worktree %s: copying %r: %s", tree, pattern, exc)
    return links


def _branch_name(session_id: str, config: dict[str, Any]) -> str:
    wanted = config.get(NEW_BRANCH)
    if isinstance(wanted, str) and wanted.strip():
        return wanted.strip()
    return (config.get(PREFIX) or DEFAULT_PREFIX) + re.sub(r"[^A-Za-z0-9._-]", "-", session_id)[:40]


def _refuse(key: str, why: str) -> RpcError:
    return RpcError(INVALID_PARAMS, f"{key} {why}", {"path": f"$.config.{key}"})


def _flag(config: dict[str, Any], key: str, default: bool) -> bool:
    """A yes/no property: the strings the schema offers (a JSON boolean too)."""
    value = config.get(key, default)
    if value == "true" or value is True:  # `is`: 1 == True
        return True
    if value == "false" or value is False:
        return False
    raise _refuse(key, f"must be 'true' or 'false', not {value!r}")


def validate(config: dict[str, Any]) -> dict[str, Any]:
    """The worktree properties checked, the yes/no ones as booleans; a bad
    value is refused naming its key."""
    prefix = config.get(PREFIX, "")
    if not isinstance(prefix, str) or (prefix and not gitport.valid_branch_name(prefix + "x")):
        raise _refuse(PREFIX, f"must be text a branch name can start with, not {prefix!r}")
    for key in (BRANCH, NEW_BRANCH):
        value = config.get(key)
        if value is not None and not isinstance(value, str):
            raise _refuse(key, f"must be a branch name, not {value!r}")
        if isinstance(value, str) and value.strip() and not gitport.valid_branch_name(value.strip()):
            raise _refuse(key, f"{value!r} is not a branch name git allows")
    return {**config, CREATE_NEW: _flag(config, CREATE_NEW, True), TRACK: _flag(config, TRACK, False)}


def make(folder: Path, session_id: str, config: dict[str, Any], root: Path | None = None) -> dict[str, Any]:
    """Make the worktree a session asked for (a thread's work): its record.
    Under ``root`` (``--worktrees-root``) it is ``<root>/<repo>/<name>``, so a
    machine with many repositories keeps their trees in one folder."""
    config = validate(config)
    repo = gitport.Repo(folder)
    base = config.get(BRANCH) if isinstance(config.get(BRANCH), str) and config.get(BRANCH) else None
    if base is None:
        current = repo.facts().get("branchName")
        base = current if isinstance(current, str) and current != "HEAD" else None
    if not repo.has_commit:
        raise gitport.Refused(f"{repo.root} has no commit yet: a worktree needs a branch to start from")
    own = config[CREATE_NEW]
    if own:
        branch = _branch_name(session_id, config)
    elif base is None or base not in repo.repo.branches.local:
        raise _refuse(CREATE_NEW, f"'false' needs a local base branch to check out; {base or 'HEAD'} is not one")
    elif repo.repo.branches.local[base].is_checked_out():
        raise _refuse(CREATE_NEW, f"'false': branch {base} is already checked out in another worktree")
    else:
        branch = base
    name = branch.replace("/", "-")
    tree = (root / repo.root.name if root is not None else repo.root.parent / f"{repo.root.name}.worktrees") / name
    if tree.exists():
        raise gitport.Refused(f"{tree} already exists")
    tree.parent.mkdir(parents=True, exist_ok=True)
    repo.add_worktree(tree, branch, base)
    if own and config[TRACK] and base:
        repo.set_upstream(branch, base)
    links = _bring_along(folder, tree, config)
    inside = tree / repo.prefix if repo.prefix else tree
    return {
        "path": str(inside),
        "tree": str(tree),
        "repo": str(repo.root),
        "branch": branch,
        "base": base or "",
        "ownBranch": own,
        "links": links,
    }


def remove_if_clean(record: dict[str, Any]) -> bool:
    """Remove a session's worktree unless somebody's work is in it (a thread's
    work); the branch stays. True if it was removed."""
    tree = Path(record["tree"])
    if not tree.exists():
        return True
    try:
        clean = gitport.is_clean(tree)
    except gitport.GitError as exc:
        log.warning("worktree %s kept: it cannot be read (%s)", tree, exc)
        return False
    if not clean:
        log.warning("worktree %s kept: it holds uncommitted work (branch %s)", tree, record.get("branch"))
        return False
    for link in record.get("links") or []:
        if Path(link).is_symlink():
            Path(link).unlink()
    gitport.Repo(Path(record["repo"])).remove_worktree(tree)
    log.info("worktree %s removed; branch %s kept", tree, record.get("branch"))
    return True


async def prepare(
    session_id: str, folder: Path, config: dict[str, Any] | None, root: Path | None = None
) -> dict[str, Any] | None:
    """The worktree for a new session, when its config asks for one."""
    if not config or config.get(ISOLATION) != "worktree":
        return None
    return await threads.run("git", make, folder, session_id, config, root)


async def dispose(record: dict[str, Any] | None) -> None:
    if record:
        try:
            await threads.run("git", remove_if_clean, record)
        except Exception:  # noqa: BLE001 - a tree that cannot be removed is a tree kept
            log.exception("worktree %s could not be removed; kept", record.get("tree"))
