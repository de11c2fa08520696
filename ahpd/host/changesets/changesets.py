"""Changesets: what changed in a session's repository, as channels.

Four scopes per session (``ahpd.host.changesets.view``), each a channel at
``<sessionUri>/changeset/<scope>``, offered on the session
(``SessionState.changesets``) when its folder is in a git repository.

A channel exists only while somebody subscribes to it: it is opened on the
first subscribe, re-read while it is watched and closed with its last
subscriber, so nothing is read for a folder nobody watches. This module
opens and closes them, keeps a turn's trees (``ahpd.host.changesets.book``)
as it starts and ends, kicks the views when the tree may have moved, and is
what the kernel and the sessions core call (``ahpd.host.table``); the
operations a client presses on a changeset are
``ahpd.host.changesets.operations``.

The before side of an edit is a blob, not a file: it is served by
``resourceRead`` under ``ahpd-git://<blob>/<path>`` for exactly the blobs a
changeset currently names (``read_resource``).
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ahpd.host.changesets import pulls
from ahpd.host.changesets.book import MARK, book_of, refresh_git, restore, run_off_loop, split
from ahpd.host.changesets.view import BLOB, View, refresh_git_soon, views
from ahpd.host.kernel.jsonrpc import RpcError
from ahpd.ports import git as gitport
from ahpd.ports import git_facts

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.session import Session
    from ahpd.protocol import model

log = logging.getLogger("ahpd.host")

NOT_FOUND = -32008


# -- opening and closing -------------------------------------------------------------


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
    known = (
        scope in ("uncommitted", "session")
        or (words[0] == "turn" and len(words) == 2 and words[1] in book.turns)
        or (words[0] == "compare" and len(words) == 3 and words[1] in book.turns and words[2] in book.turns)
    )
    if not known:
        return False
    try:
        await run_off_loop(gitport.Repo, session.cwd)
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
        view.host.bus.emit(
            view.uri,
            {
                "type": "changeset/statusChanged",
                "status": "error",
                "error": {"errorType": type(exc).__name__, "message": str(exc)},
            },
        )
    finally:
        if views(view.host).get(view.uri) is view and view.uri not in view.host.bus.channels:
            views(view.host).pop(view.uri, None)


def left(host: Host, uri: str) -> None:
    """A subscriber went: a changeset nobody watches is closed, and costs nothing."""
    view = views(host).get(uri)
    channel = host.bus.channels.get(uri)
    if view is None or channel is None or channel.subscribers or channel.aliased:  # aliased: watched by another name
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
            folder is not None and _related(view.session.cwd, folder)
        ):
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
        tree = await run_off_loop(lambda: gitport.Repo(session.cwd).snapshot())
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
            book.turns[turn_id][1] = await run_off_loop(lambda: gitport.Repo(session.cwd).snapshot())
        except Exception:  # noqa: BLE001 - the turn's scope stays live, read against the tree as it is
            log.exception("%s: the tree at the end of %s could not be kept", session.uri, turn_id)
    redeclare(session.host, session)
    touch(session.host, session=session)
    refresh_git_soon(session)
    if session.host.github is not None and not session.disposed:
        session.nursery.start_soon(refresh_github, session)  # the seed: asked again when a turn ends


def token_lent(host: Host, resource: str) -> None:
    """A token for GitHub was lent: every session with a GitHub remote asks about its branch again."""
    if resource != pulls.RESOURCE or host.github is None:
        return
    for session in pulls.with_remote(host):
        session.nursery.start_soon(refresh_github, session)


async def refresh_github(session: Session) -> None:
    """The branch's pull request asked again, and the operations said again
    (the pull request pair is offered only while the branch has none)."""
    try:
        await pulls.refresh(session)
    except Exception:  # noqa: BLE001 - a request not found out is a request not shown
        log.exception("%s: asking GitHub about the branch failed", session.uri)
        return
    redeclare(session.host, session)


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
    data = await run_off_loop(lambda: gitport.Repo(root).blob(oid))
    if params.encoding == "base64":
        return {"data": base64.b64encode(data).decode(), "encoding": "base64", "contentType": "text/plain"}
    try:
        return {"data": data.decode("utf-8"), "encoding": "utf-8", "contentType": "text/plain"}
    except UnicodeDecodeError:
        raise RpcError(NOT_FOUND, f"{uri} is not UTF-8 text: ask for it with encoding base64", {"uri": uri}) from None


# -- the catalogue on the session ---------------------------------------------------------


def catalogue(session_uri: str) -> list[dict[str, Any]]:
    """``SessionState.changesets``: the scopes a client may subscribe to."""
    base = f"{session_uri}{MARK}"
    review: dict[str, Any] = {"review": {}}
    return [
        {
            "label": "Uncommitted Changes",
            "uriTemplate": f"{base}uncommitted",
            "changeKind": "uncommitted",
            "description": "git status under the session's folder",
            "capabilities": review,
        },
        {
            "label": "Session Changes",
            "uriTemplate": f"{base}session",
            "changeKind": "session",
            "description": "Everything changed since the session's first turn",
            "capabilities": review,
        },
        {
            "label": "Turn Changes",
            "uriTemplate": f"{base}turn/{{turnId}}",
            "changeKind": "turn",
            "description": "What one turn changed",
        },
        {
            "label": "Compare Turns",
            "uriTemplate": f"{base}compare/{{originalTurnId}}/{{modifiedTurnId}}",
            "changeKind": "compare-turns",
            "description": "The tree after one turn against the tree after another",
        },
    ]


async def advertise(session: Session) -> None:
    """Offer the session's changesets when its folder is in a repository
    (a folder that is not, or a bare repository, simply has none)."""
    try:
        await run_off_loop(git_facts.check, session.cwd)
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
    if host.github is not None:
        await refresh_github(session)


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
