"""Requests this host makes of a client, and ``resource*`` requests it
forwards to the client that publishes a resource.

AHP's ``resource*`` family is symmetrical: a client may publish resources
this host cannot reach (a plugin's virtual files, an editor's unsaved
buffers) under ``<scheme>://<clientId>/...``. A request naming a connected
client's id as its URI's authority is sent on to that client, and its answer
comes back to the asker verbatim, a refusal included: this host has no
standing to soften another peer's answer. A refusal is logged with the
method, the URI, the client that refused and the code, the only place all
four are seen together.

``Outgoing`` is one connection's table of requests awaiting an answer: a
fresh id per request, the answer routed back by id, a timeout, and every
request still waiting failed when the connection goes, so an asker is never
left waiting on a client that is no longer there.

A connection's frames are handled in the order they come, each request to
its end before the next frame is read (``Turn``), so what a client sends
after a request sees what that request did. A request that is about to wait
on another party (a forward, a web server) lets go of its turn first
(``let_go``): its connection reads on, answers pings and takes dispatches,
and the answer goes out under the request's id whenever it comes. At most
``WAITING_PER_CONNECTION`` of one connection's requests may wait so; past
that a request is refused, naming the limit.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
from typing import TYPE_CHECKING, Any

import trio

from ahpd.host.kernel import jsonrpc
from ahpd.host.kernel.jsonrpc import INTERNAL_ERROR, RpcError

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer

log = logging.getLogger("ahpd.host")

#: How long a forwarded request waits for the publishing client's answer.
TIMEOUT = 60.0
#: How many of one connection's requests may wait on other parties at once.
WAITING_PER_CONNECTION = 16


class Turn:
    """One request's hold on its connection's frame loop, released when it
    ends or lets go (``let_go``)."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.released = trio.Event()
        self._waiting = False

    def let_go(self, what: str) -> None:
        if self.released.is_set():
            return
        if self.peer.waiting >= WAITING_PER_CONNECTION:
            raise RpcError(
                INTERNAL_ERROR,
                f"{WAITING_PER_CONNECTION} requests of this connection already wait on other "
                f"clients or servers; {what} is refused until one of them is answered",
                {"limit": WAITING_PER_CONNECTION},
            )
        self.peer.waiting += 1
        self._waiting = True
        self.released.set()

    def done(self) -> None:
        if self._waiting:
            self.peer.waiting -= 1
            self._waiting = False
        self.released.set()


#: The turn of the request the current task is answering, if any.
TURN: contextvars.ContextVar[Turn | None] = contextvars.ContextVar("ahpd_request_turn", default=None)


def let_go(what: str) -> None:
    """The request this task answers is about to wait on another party
    (``what``, for the refusal): its connection's next frames are read
    meanwhile. -32603 past ``WAITING_PER_CONNECTION``."""
    turn = TURN.get()
    if turn is not None:
        turn.let_go(what)


class Outgoing:
    """The requests sent on one connection that still wait for an answer."""

    def __init__(self, peer: Peer) -> None:
        self._peer = peer
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel[jsonrpc.Response | RpcError]] = {}
        self.gone = False

    async def request(self, method: str, params: dict[str, Any], timeout: float = TIMEOUT) -> Any:
        """Send ``method`` and wait for the answer: its ``result``, or an
        ``RpcError`` carrying the peer's error object as it sent it."""
        if self.gone:
            raise RpcError(INTERNAL_ERROR, f"{self._peer.name} is disconnected")
        ident = next(self._ids)
        send, receive = trio.open_memory_channel[jsonrpc.Response | RpcError](1)
        self._waiting[ident] = send
        try:
            if not self._peer.send(jsonrpc.request_frame(ident, method, params)):
                raise RpcError(INTERNAL_ERROR, f"{self._peer.name} cannot be written to: it is closing")
            with trio.move_on_after(timeout) as waited:
                answer = await receive.receive()
            if waited.cancelled_caught:
                raise RpcError(INTERNAL_ERROR, f"{self._peer.name} did not answer {method} within {timeout:g} s")
        finally:
            self._waiting.pop(ident, None)
        if isinstance(answer, RpcError):
            raise RpcError(answer.code, f"{answer.message} before answering {method}")
        if answer.error is not None:
            raise _verbatim(answer.error, self._peer.name, method)
        return answer.result

    def settle(self, response: jsonrpc.Response) -> bool:
        """Hand ``response`` to the request it answers; False when none waits for it."""
        waiting = self._waiting.pop(response.id, None) if isinstance(response.id, int) else None
        if waiting is None:
            return False
        waiting.send_nowait(response)
        return True

    def fail_all(self, reason: str) -> None:
        """The connection is gone: every request still waiting fails with ``reason``."""
        self.gone = True
        for waiting in self._waiting.values():
            waiting.send_nowait(RpcError(INTERNAL_ERROR, reason))
        self._waiting.clear()


def _verbatim(error: dict[str, Any], name: str, method: str) -> RpcError:
    code, message = error.get("code"), error.get("message")
    if not isinstance(code, int) or isinstance(code, bool) or not isinstance(message, str):
        return RpcError(INTERNAL_ERROR, f"{name} answered {method} with a malformed error: {error!r}")
    return RpcError(code, message, error.get("data"))


def authority(uri: str) -> str | None:
    """The authority of ``scheme://authority/...``; None for ``file:``, an
    ``ahp-`` scheme (whose authority is part of a channel's name) or a URI
    with none."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme == "file" or scheme.startswith("ahp-"):
        return None
    return rest.split("/", 1)[0] or None


def publisher(host: Host, uri: str, asker: Peer) -> Peer | None:
    """The connection of the client whose id is ``uri``'s authority, if one
    is connected: another of the asker's connections rather than the asking
    one, which cannot answer while it waits for its own answer."""
    client = authority(uri)
    if client is None:
        return None
    found = [p for p in host.peers if p.client_id == client and not p.outgoing.gone]
    found.sort(key=lambda p: p is asker)
    return found[0] if found else None


async def forward(host: Host, asker: Peer, owner: Peer, method: str, params: dict[str, Any], uri: str) -> Any:
    """``method`` sent to ``owner`` on ``asker``'s behalf; its answer as given."""
    if owner is asker:
        raise RpcError(
            jsonrpc.INVALID_PARAMS,
            f"{uri} is published by the asking connection itself "
            f"({owner.client_id}): it cannot answer {method} while it waits for the answer",
            {"uri": uri},
        )
    let_go(f"{method} of {uri}")
    try:
        return await owner.outgoing.request(method, params)
    except RpcError as err:
        log.info(
            "%s: %s of %s refused by client %s: %d %s", asker.name, method, uri, owner.client_id, err.code, err.message
        )
        raise
