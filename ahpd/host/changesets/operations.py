"""The operations a client presses on a changeset, and its reviews.

``invokeChangesetOperation`` commits, stages, unstages, discards or reverts
a file, a folder or the whole changeset; what each does is decided again
from the repository at the moment it runs, whatever the confirmation said
when the view declared it (``ahpd.host.changesets.view``). A client marking
files reviewed is kept in the session's record (``ahpd.host.changesets.book``)
until the file's content moves.

These are the changesets' requests and client actions, cut out from the
channels they act on: they open a changeset as a subscribe would
(``ahpd.host.changesets.changesets.ensure``) and act through its view.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from ahpd.host.changesets import checkout, pulls
from ahpd.host.changesets.book import book_of, run_off_loop
from ahpd.host.changesets.changesets import NOT_FOUND, ensure, refresh_github, touch
from ahpd.host.changesets.view import View, busy, commit_subject, refresh_git_soon, views
from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.ports import git as gitport
from ahpd.ports import git_branches

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.protocol import model


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
        raise RpcError(
            INVALID_PARAMS,
            "a range target is not served: operations take a file, a folder or the whole changeset",
            {"path": "$.target.kind"},
        )
    wanted = Path(os.path.normpath(path))
    for folder in (Path(os.path.normpath(view.session.cwd)), view.session.cwd.resolve()):
        if wanted == folder or folder in wanted.parents:
            inside = wanted.relative_to(folder).as_posix()
            break
    else:
        raise RpcError(
            INVALID_PARAMS,
            f"{target.resource} is outside the session's folder {view.session.cwd}: "
            "an operation takes a file or folder under it",
            {"path": "$.target.resource"},
        )
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
        raise RpcError(
            INVALID_PARAMS,
            f"{params.operationId!r} is not an operation this changeset offers "
            f"(it offers {', '.join(operations) or 'none'})",
            {"path": "$.operationId"},
        )
    if busy(view.session):
        raise RpcError(INVALID_PARAMS, f"{params.operationId} is disabled while a turn is running in the session")
    if op["status"] == "running":
        raise RpcError(INVALID_PARAMS, f"{params.operationId} is already running")
    kind = "changeset" if params.target is None else getattr(params.target, "kind", "resource")
    if kind not in op["scopes"]:
        raise RpcError(
            INVALID_PARAMS,
            f"{params.operationId} takes {' or '.join(op['scopes'])}, not a {kind}",
            {"path": "$.target"},
        )
    if op["id"] == checkout.ID:
        treeish, action = checkout.read_meta(params._meta)
        return await _run(host, view, op, lambda: run_off_loop(checkout.run, view.session.cwd, treeish, action))
    if op["id"] in (pulls.CREATE, pulls.PREPARE):
        words = host.config("changeWords") or {}
        forced = isinstance(words, dict) and words.get("mode") == "forced"
        subject = commit_subject(host, view.session, None, quiet=True)
        act = pulls.create if op["id"] == pulls.CREATE else pulls.prepare
        return await _run(host, view, op, lambda: act(host, view.session, subject, forced, params._meta))
    repo = await run_off_loop(gitport.Repo, view.session.cwd)
    paths = _target_paths(view, repo, params) or None  # the session's folder itself is the whole changeset
    meta = params._meta or {}
    given = (meta.get("ahpd.commit") or {}).get("message") if isinstance(meta.get("ahpd.commit"), dict) else None
    if given is not None and (not isinstance(given, str) or not given.strip()):
        raise RpcError(
            INVALID_PARAMS,
            "_meta['ahpd.commit'].message must be a sentence",
            {"path": "$._meta['ahpd.commit'].message"},
        )
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
            picked = [
                r
                for r in rows
                if paths is None
                or any(gitport._under(r.path, p) or (r.old_path and gitport._under(r.old_path, p)) for p in paths)
            ]
            for row in picked:
                port.restore(start, row.path)
                if row.old_path:
                    port.restore(start, row.old_path)
            return f"Put {len(picked)} file(s) back as the agent found them."
        raise gitport.GitError(f"{params.operationId} is not served")

    return await _run(host, view, op, lambda: run_off_loop(work))


async def _run(host: Host, view: View, op: dict[str, Any], act: Any) -> dict[str, Any]:
    """``act()``, said as the operation's status: running, then idle, or
    error with why; a refusal is answered -32602. What it answers is the
    result, a sentence being its message."""
    status = "changeset/operationStatusChanged"
    host.bus.emit(view.uri, {"type": status, "operationId": op["id"], "status": "running"})
    try:
        said = await act()
    except RpcError as exc:
        # Refused before anything moved (bad _meta, no token): the operation is idle again.
        host.bus.emit(view.uri, {"type": status, "operationId": op["id"], "status": "idle"})
        raise exc from None
    except git_branches.DirtyTree as exc:
        # Not a failure of the operation: the person is asked what to do with the changes.
        host.bus.emit(view.uri, {"type": status, "operationId": op["id"], "status": "idle"})
        raise RpcError(INVALID_PARAMS, f"{op['id']} refused: {exc}", checkout.DIRTY) from None
    except gitport.GitError as exc:
        error = {"errorType": type(exc).__name__, "message": str(exc)}
        host.bus.emit(view.uri, {"type": status, "operationId": op["id"], "status": "error", "error": error})
        touch(host, folder=view.session.cwd)
        raise RpcError(INVALID_PARAMS, f"{op['id']} refused: {exc}") from None
    host.bus.emit(view.uri, {"type": status, "operationId": op["id"], "status": "idle"})
    touch(host, folder=view.session.cwd)
    refresh_git_soon(view.session)
    if op["id"] in (checkout.ID, pulls.CREATE) and not view.session.disposed:
        view.session.nursery.start_soon(refresh_github, view.session)  # the branch, or its request, moved
    return said if isinstance(said, dict) else {"message": said}


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
