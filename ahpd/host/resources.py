"""``resourceRead``, as far as this host serves it: the sides of an edit
waiting for approval.

A Write, Edit or MultiEdit that asks permission is drawn as a diff before
anybody decides (``chat/toolCallReady`` carries ``edits``). Its after side
is content that exists nowhere yet, served here under
``ahp-edit://pending/<toolCallId>`` until the call is settled; its before
side is the file as it is, readable here while that edit is pending. Any
other URI is answered -32008: this host serves no other resources yet.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import trio

from ahpd.backends.translate import PENDING_EDIT
from ahpd.host.commands import COMMANDS
from ahpd.host.jsonrpc import RpcError
from ahpd.host.sessions import path_of
from ahpd.protocol import model

if TYPE_CHECKING:
    from ahpd.host.host import Host, Peer

NOT_FOUND = -32008


def _answer(text: str, encoding: str | None) -> dict[str, Any]:
    if encoding == "base64":
        return {"data": base64.b64encode(text.encode()).decode(), "encoding": "base64", "contentType": "text/plain"}
    return {"data": text, "encoding": "utf-8", "contentType": "text/plain"}


async def resource_read(host: Host, peer: Peer, params: model.ResourceReadParams) -> dict[str, Any]:
    pending = host.sessions.pending_edits if host.sessions is not None else {}
    if params.uri in pending:
        return _answer(pending[params.uri][2], params.encoding)
    if params.uri.startswith(PENDING_EDIT):
        raise RpcError(NOT_FOUND, f"{params.uri} is no longer pending: its tool call was settled",
                       {"uri": params.uri})
    if params.uri.startswith("file:"):
        path = str(path_of(params.uri))
        if any(p == path for _, p, _ in pending.values()):
            try:
                text = await trio.Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise RpcError(NOT_FOUND, f"{params.uri} cannot be read: {exc}", {"uri": params.uri}) from None
            return _answer(text, params.encoding)
    raise RpcError(NOT_FOUND, f"{params.uri} is not a resource this host serves: resourceRead serves only the "
                   "sides of an edit waiting for approval", {"uri": params.uri})


COMMANDS.update({"resourceRead": resource_read})
