"""``resourceRead``, as far as this host serves it: the sides of an edit
waiting for approval.

A Write, Edit or MultiEdit that asks permission is drawn as a diff before
anybody decides (``chat/toolCallReady`` carries ``edits``). Its after side
is content that exists nowhere yet, served here under
``ahp-edit://pending/<toolCallId>`` until the call is settled; its before
side is the file as it is, readable here while that edit is pending. Any
other URI is answered -32008: this host serves no other resources yet.

The before side is read through the filesystem port, fenced to the working
folder of the session whose call it is, and only under the very path the
edit names: a link (or a folder swapped for one) that leads out of that
folder is refused, so a pending edit never lends a client a look at
anything else.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ahpd.backends.translate import PENDING_EDIT
from ahpd.host import changesets
from ahpd.host.jsonrpc import RpcError
from ahpd.host.sessions import path_of
from ahpd.ports import fs
from ahpd.protocol import model

if TYPE_CHECKING:
    from ahpd.host.host import Host, Peer

NOT_FOUND = -32008


def _answer(data: bytes, encoding: str | None, uri: str) -> dict[str, Any]:
    if encoding == "base64":
        return {"data": base64.b64encode(data).decode(), "encoding": "base64", "contentType": "text/plain"}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RpcError(NOT_FOUND, f"{uri} is not UTF-8 text: ask for it with encoding base64", {"uri": uri}) from None
    return {"data": text, "encoding": "utf-8", "contentType": "text/plain"}


def _folders_of(host: Host, call_id: str) -> list[Path]:
    """The working folders of the sessions where ``call_id`` waits for approval."""
    sessions = host.sessions.sessions.values() if host.sessions is not None else ()
    return [session.cwd for session in sessions
            if any(chat.turn is not None and call_id in chat.turn.permissions for chat in session.chats.values())]


def _read_fenced(folders: list[Path], path: str) -> bytes:
    """``path``, read through a fence around each folder in turn (a thread's work)."""
    refusal: fs.FsError | None = None
    for folder in folders:
        try:
            with fs.Fence(folder) as fence:
                return fence.read_bytes(path)
        except fs.Outside as exc:
            refusal = exc
    raise refusal or fs.Outside(path, f"{path} belongs to no session waiting on the edit")


async def resource_read(host: Host, peer: Peer, params: model.ResourceReadParams) -> dict[str, Any]:
    if (side := await changesets.read_resource(host, params)) is not None:
        return side  # the changeset source first: a before side is not a file on disk
    pending = host.sessions.pending_edits if host.sessions is not None else {}
    if params.uri in pending:
        return _answer(pending[params.uri][2].encode(), params.encoding, params.uri)
    if params.uri.startswith(PENDING_EDIT):
        raise RpcError(NOT_FOUND, f"{params.uri} is no longer pending: its tool call was settled",
                       {"uri": params.uri})
    if params.uri.startswith("file:"):
        path = str(path_of(params.uri))
        calls = [call_id for call_id, p, _ in pending.values() if p == path]
        if calls:
            folders = [f for call_id in dict.fromkeys(calls) for f in _folders_of(host, call_id)]
            try:
                data = await trio.to_thread.run_sync(_read_fenced, folders, path)
            except fs.Outside as exc:
                raise RpcError(NOT_FOUND, f"{params.uri} is not served: {exc}", {"uri": params.uri}) from None
            except fs.FsError as exc:
                raise RpcError(NOT_FOUND, f"{params.uri} cannot be read: {exc}", {"uri": params.uri}) from None
            return _answer(data, params.encoding, params.uri)
    raise RpcError(NOT_FOUND, f"{params.uri} is not a resource this host serves: resourceRead serves only the "
                   "sides of an edit waiting for approval", {"uri": params.uri})


COMMANDS = {"resourceRead": resource_read}
