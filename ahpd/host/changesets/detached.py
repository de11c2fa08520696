"""Worktrees the reference window manages: its five ``vscode/*DetachedWorktree*`` requests.

VS Code's agents window keeps a handle of its own on a session's worktree,
so its "new session in a worktree" flow can archive, restore and delete the
tree with the session. They are not AHP; they are served here over the same
trees ``isolation: worktree`` makes (``ahpd.host.sessions.worktrees``), in the shapes
the window sends, and ``initialize`` says so under
``_meta['vscode.detachedWorktrees']``, which is what the window reads before
it makes any of them.

* create ``{session, prompt}`` -> ``{handle, resource}``: a handle on the
  session's tree (the same handle again for the same session); -32602 for a
  session with no tree of its own.
* claim ``{handle}``: the handle is the session's; -32602 for one this host
  never handed out.
* setArchived ``{handle, archived}``: archiving takes a clean tree off the
  disk once its session is gone, keeping the branch; a tree with somebody's
  work in it, or a session still open in it, stays. Unarchiving puts the tree
  back on that branch.
* delete ``{handle}``: tree and branch go; -32004 while the session is open.
* reconcile ``{scope, activeHandles}``: the named handles are seen now; a
  clean tree nobody named for a day is taken off the disk (the branch stays:
  a window forgetting a handle is not a person being done with the branch)
  and its handle let go of.

Handles live for the daemon's run: a restart forgets them, and the trees
stand until a session or the window takes them down. The params are not in
the protocol model, so each handler reads its own and refuses -32602 naming
the field.
"""

from __future__ import annotations

import logging
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any


from ahpd.host.sessions import worktrees  # the same trees, and the removal a disposed session gets
from ahpd.host.kernel.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from ahpd.ports import git as gitport
from ahpd.ports import threads

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer

log = logging.getLogger("ahpd.host")

SESSION_RUNNING = -32004
#: How long a tree nobody named is kept before a reconcile may take it down.
GRACE_SECONDS = 24 * 60 * 60


@dataclass
class Handle:
    """The window's handle on one session's tree."""

    handle: str
    session: str
    worktree: dict[str, Any]
    seen: float = field(default_factory=time.time)
    claimed: bool = False
    archived: bool = False
    scope: str | None = None

    @property
    def tree(self) -> Path:
        return Path(self.worktree["tree"])


_handles: weakref.WeakKeyDictionary[Host, dict[str, Handle]] = weakref.WeakKeyDictionary()


def handles(host: Host) -> dict[str, Handle]:
    """This host's handles, by handle (one table per host, for its run)."""
    return _handles.setdefault(host, {})


def _field(params: Any, key: str, kind: type, what: str) -> Any:
    value = params.get(key) if isinstance(params, dict) else None
    if not isinstance(value, kind) or (kind is str and not value):
        raise RpcError(INVALID_PARAMS, f"{key} must be {what}", {"path": f"$.{key}"})
    return value


def _handle(host: Host, params: Any) -> Handle:
    name = _field(params, "handle", str, "a non-empty string")
    found = handles(host).get(name)
    if found is None:
        raise RpcError(
            INVALID_PARAMS,
            f"handle {name!r} was never handed out by this host (or was let go of)",
            {"path": "$.handle"},
        )
    return found


def _session_open(host: Host, uri: str) -> bool:
    """Whether a session is open in the tree: one this host holds, awake or dormant."""
    sessions = host.sessions
    return sessions is not None and (uri in sessions.sessions or uri in sessions.dormant)


def _own_name(host: Host, uri: str) -> str:
    """The name the host keeps a session by, for ``uri`` that may be another
    spelling of it (``ahp-session:/<id>`` for ``demo:/<id>``)."""
    if _session_open(host, uri):
        return uri
    alias = host.alias_of(uri)
    return alias.target if alias is not None else uri


def _record(host: Host, uri: str) -> dict[str, Any] | None:
    sessions = host.sessions
    if sessions is None:
        return None
    session = sessions.sessions.get(uri)
    record = (
        getattr(session, "worktree", None) if session is not None else (sessions.dormant.get(uri) or {}).get("worktree")
    )
    return record if isinstance(record, dict) and record.get("tree") else None


# -- what happens to a tree (threads' work: git blocks) ---------------------------------------


def take_down(worktree: dict[str, Any]) -> bool:
    """Take a clean tree off the disk, keeping its branch; True if it is gone
    (or was already). A tree with work in it stays."""
    return worktrees.remove_if_clean(worktree)


def put_back(worktree: dict[str, Any]) -> None:
    """Check the tree out again on its branch where it stood."""
    tree = Path(worktree["tree"])
    if tree.exists():
        return
    repo = gitport.Repo(Path(worktree["repo"]))
    if worktree["branch"] not in repo.repo.branches.local:
        raise gitport.Refused(f"branch {worktree['branch']} is gone: the tree cannot be put back")
    tree.parent.mkdir(parents=True, exist_ok=True)
    repo.prune_worktrees()  # a tree somebody removed by hand is still registered with git
    repo.add_worktree(tree, worktree["branch"])


def delete(worktree: dict[str, Any]) -> None:
    """Remove the tree, whatever is in it, and its branch: the person asked.
    A branch not made for the session (``worktreeCreateNewBranch: 'false'``)
    is the user's and stays."""
    tree = Path(worktree["tree"])
    repo = gitport.Repo(Path(worktree["repo"]))
    for link in worktree.get("links") or []:
        if Path(link).is_symlink():
            Path(link).unlink()
    if tree.exists():
        repo.remove_worktree(tree, force=True)
    if worktree.get("ownBranch", True):
        repo.delete_branch(worktree["branch"])


def reap(held: dict[str, Handle], scope: str, active: list[str], now: float, open_sessions: set[str]) -> list[Handle]:
    """What a reconcile does to one host's handles: the named are seen now;
    a handle in this scope nobody named for :data:`GRACE_SECONDS`, whose tree is
    clean and has no session open in it, has its tree taken down (the branch
    stays) and is let go of. The handles let go of."""
    for name in active:
        if name in held:
            held[name].seen = now
            held[name].scope = scope
    gone = []
    for item in list(held.values()):
        if item.scope not in (None, scope) or item.handle in active or now - item.seen < GRACE_SECONDS:
            continue
        if item.session in open_sessions:
            continue
        try:
            removed = take_down(item.worktree)
        except gitport.GitError as exc:
            log.info("worktree %s kept at reconcile: %s", item.tree, exc)
            continue
        if removed:
            held.pop(item.handle, None)
            gone.append(item)
    return gone


# -- the requests ---------------------------------------------------------------------------------


def create(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    uri = _own_name(host, _field(params, "session", str, "a session URI"))
    prompt = params.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise RpcError(INVALID_PARAMS, "prompt must be a string", {"path": "$.prompt"})
    worktree = _record(host, uri)
    if worktree is None:
        raise RpcError(
            INVALID_PARAMS,
            f"{uri} has no worktree of its own here (create it with isolation: worktree)",
            {"path": "$.session"},
        )
    held = handles(host)
    item = next((h for h in held.values() if h.session == uri), None)
    if item is None:
        item = Handle(handle=str(uuid.uuid4()), session=uri, worktree=worktree)
        held[item.handle] = item
    item.seen = time.time()
    return {"handle": item.handle, "resource": item.tree.as_uri()}


def claim(host: Host, peer: Peer, params: Any) -> None:
    item = _handle(host, params)
    item.claimed = True
    item.seen = time.time()


async def set_archived(host: Host, peer: Peer, params: Any) -> None:
    item = _handle(host, params)
    archived = _field(params, "archived", bool, "true or false")
    item.seen = time.time()
    item.archived = archived
    try:
        if not archived:
            await threads.run("git", put_back, item.worktree)
        elif _session_open(host, item.session):
            log.info("worktree %s stays at archive: session %s is still open in it", item.tree, item.session)
        else:
            await threads.run("git", take_down, item.worktree)
    except gitport.GitError as exc:
        raise RpcError(INTERNAL_ERROR, f"worktree {item.tree}: {exc}") from None


async def delete_worktree(host: Host, peer: Peer, params: Any) -> None:
    item = _handle(host, params)
    if _session_open(host, item.session):
        raise RpcError(SESSION_RUNNING, f"session {item.session} is still open in {item.tree}: dispose of it first")
    try:
        await threads.run("git", delete, item.worktree)
    except gitport.GitError as exc:
        raise RpcError(INTERNAL_ERROR, f"worktree {item.tree}: {exc}") from None
    handles(host).pop(item.handle, None)


async def reconcile(host: Host, peer: Peer, params: Any) -> None:
    scope = _field(params, "scope", str, "a non-empty string")
    active = _field(params, "activeHandles", list, "a list of handles")
    if not all(isinstance(name, str) for name in active):
        raise RpcError(INVALID_PARAMS, "activeHandles must hold only strings", {"path": "$.activeHandles"})
    open_sessions = {h.session for h in handles(host).values() if _session_open(host, h.session)}
    gone = await threads.run("git", reap, handles(host), scope, active, time.time(), open_sessions)
    for item in gone:
        log.info("worktree %s let go of at reconcile (branch %s kept)", item.tree, item.worktree.get("branch"))


COMMANDS = {
    "vscode/createAgentHostDetachedWorktree": create,
    "vscode/claimAgentHostDetachedWorktree": claim,
    "vscode/setAgentHostDetachedWorktreeArchived": set_archived,
    "vscode/deleteAgentHostDetachedWorktree": delete_worktree,
    "vscode/reconcileAgentHostDetachedWorktrees": reconcile,
}


def capabilities_of(host: Any) -> dict[str, Any]:
    """``InitializeResult._meta``: the window's handles on trees are served."""
    return {"_meta": {"vscode.detachedWorktrees": True}}
