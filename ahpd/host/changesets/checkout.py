"""``checkout``: put a new session's repository on another branch.

Offered on the uncommitted changeset of a session nobody has spoken in yet,
which is the moment the reference window offers to pick the branch the work
starts from; once a turn has run, moving the tree under the agent would
pull its ground away, so the operation is no longer declared.

It is driven by the reference's request ``_meta``: ``treeish`` names a local
branch, and ``preCheckoutAction`` (``stash`` or ``commit``) says what to do
with changes in the tree. A tree with changes and no action is refused
-32602 with ``data.reason: dirtyWorkingTree``, which is what the window reads
to offer the two; nothing is carried to the other branch unasked.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.ports import git as gitport
from ahpd.ports import git_branches

if TYPE_CHECKING:
    from ahpd.host.sessions.session import Session

ID = "checkout"
ACTIONS = ("stash", "commit")
#: What a refusal over a dirty tree carries, for the window to offer stash or commit.
DIRTY = {"reason": "dirtyWorkingTree"}


def unspoken(session: Session) -> bool:
    """Nobody has started a turn in any chat of the session."""
    if any(session.older_turns.values()):
        return False
    return all(chat.turn is None and not chat.state().get("turns") for chat in session.chats.values())


def declared(status: str) -> dict[str, Any]:
    return {
        "id": ID,
        "label": "Checkout",
        "group": "checkout",
        "scopes": ["changeset"],
        "icon": "git-branch",
        "status": status,
        "description": "Put the repository on another local branch before the session starts "
        "(_meta.treeish; _meta.preCheckoutAction stash or commit clears a tree with changes first)",
    }


def read_meta(meta: dict[str, Any] | None) -> tuple[str, str | None]:
    """``(treeish, preCheckoutAction)`` from the request's ``_meta``, or a refusal naming what was wrong."""
    meta = meta or {}
    treeish = meta.get("treeish")
    if not isinstance(treeish, str) or not treeish.strip():
        raise RpcError(
            INVALID_PARAMS, "checkout needs _meta.treeish, the local branch to check out", {"path": "$._meta.treeish"}
        )
    action = meta.get("preCheckoutAction")
    if action is not None and action not in ACTIONS:
        raise RpcError(
            INVALID_PARAMS,
            f"_meta.preCheckoutAction is {action!r}: it is 'stash' or 'commit', or absent",
            {"path": "$._meta.preCheckoutAction"},
        )
    return treeish, action


def run(folder: Path, treeish: str, action: str | None) -> str:
    """The checkout itself (blocking: a thread's work). Raises
    ``git_branches.DirtyTree`` for a tree with changes and no action."""
    repo = gitport.Repo(folder)
    whole = gitport.Repo(repo.root)  # a checkout moves the whole tree, not only the session's folder
    if treeish.startswith("-") or treeish not in whole.repo.branches.local:
        raise gitport.Refused(f"{treeish!r} is not a local branch of {whole.root}")
    if git_branches.current_branch(whole) == treeish:
        return f"Already on {treeish}."
    kept = ""
    if action is not None and git_branches.changed_paths(whole):
        if action == "stash":
            git_branches.stash_all(whole, f"Changes put aside before checking out {treeish}")
            kept = " The changes were stashed first."
        else:
            oid = git_branches.commit_all(whole, f"Work in progress, saved before checking out {treeish}")
            kept = f" The changes were committed first as {oid[:7]}."
    git_branches.checkout(whole, treeish)
    return f"Checked out {treeish}.{kept}"
