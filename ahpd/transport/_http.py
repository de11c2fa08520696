"""The HTTP door in front of the WebSocket: who may upgrade, and what the rest hear.

Pure functions of a parsed request head (an ``h11.Request``), no I/O, so the
rules are tested without a socket. ``websocket.py`` reads the head, asks
``decide()`` and either answers with ``response()`` or hands the connection
to trio-websocket.

The rules:

* With a token configured, an upgrade is admitted only with ``?tkn=TOKEN`` or
  ``?token=TOKEN`` in the request target, or ``Authorization: Bearer TOKEN``;
  compared in constant time. Otherwise: 401, and no WebSocket opens.
* A request that is not a WebSocket upgrade gets 401 when its upgrade would be
  refused and 426 (Upgrade Required) when it would be admitted, so a plain
  ``curl`` tells a user whether the token is right.
* Every answer carries ``Access-Control-Allow-Origin: *``: a browser page
  probing the port can read the status.
* A malformed upgrade (wrong method or version, no key) is answered here too,
  so trio-websocket only ever sees handshakes it will accept.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

import h11

#: Largest request head we read before answering 431.
MAX_HEAD_BYTES = 16 * 1024


@dataclass(frozen=True)
class Refusal:
    """An HTTP answer instead of a WebSocket."""

    status: int
    message: str
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def _header(request: h11.Request, name: bytes) -> list[bytes]:
    return [value for key, value in request.headers if key == name]


def _tokens(values: list[bytes]) -> set[bytes]:
    return {part.strip().lower() for value in values for part in value.split(b",")}


def is_websocket_upgrade(request: h11.Request) -> bool:
    """Whether the client asks for a WebSocket (``Upgrade: websocket``)."""
    return b"websocket" in _tokens(_header(request, b"upgrade"))


def token_ok(request: h11.Request, token: str | None) -> bool:
    """Whether the request carries ``token`` (always true when no token is configured)."""
    if token is None:
        return True
    expected = token.encode()
    offered: list[bytes] = []
    query = urlsplit(request.target.decode("latin-1")).query
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in ("tkn", "token"):
            offered.append(value.encode())
    for value in _header(request, b"authorization"):
        scheme, _, credentials = value.strip().partition(b" ")
        if scheme.lower() == b"bearer":
            offered.append(credentials.strip())
    # compare every candidate, so the time taken does not say which one matched
    ok = False
    for candidate in offered:
        ok |= hmac.compare_digest(candidate, expected)
    return ok


def decide(request: h11.Request, token: str | None) -> Refusal | None:
    """None to admit the upgrade; otherwise the answer to give instead."""
    if not token_ok(request, token):
        return Refusal(401, "a valid token is required (?tkn=, ?token= or Authorization: Bearer)",
                       [(b"WWW-Authenticate", b'Bearer realm="ahpd"')])
    if not is_websocket_upgrade(request):
        return Refusal(426, "this is an Agent Host Protocol WebSocket endpoint",
                       [(b"Upgrade", b"websocket"), (b"Sec-WebSocket-Version", b"13")])
    if request.method != b"GET":
        return Refusal(405, "a WebSocket upgrade must use GET", [(b"Allow", b"GET")])
    if [value.strip().lower() for value in _header(request, b"upgrade")] != [b"websocket"]:
        return Refusal(400, "expected exactly 'Upgrade: websocket'")
    if b"upgrade" not in _tokens(_header(request, b"connection")):
        return Refusal(400, "missing 'Connection: Upgrade'")
    if _header(request, b"sec-websocket-version") != [b"13"]:
        return Refusal(426, "only WebSocket version 13 is supported",
                       [(b"Upgrade", b"websocket"), (b"Sec-WebSocket-Version", b"13")])
    if len(_header(request, b"sec-websocket-key")) != 1:
        return Refusal(400, "missing 'Sec-WebSocket-Key'")
    if not _header(request, b"host"):
        return Refusal(400, "missing 'Host'")
    return None


def response(refusal: Refusal) -> bytes:
    """The whole HTTP/1.1 response for ``refusal``; the connection closes after it."""
    body = (refusal.message + "\n").encode()
    status = refusal.status
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    headers = [
        (b"Content-Type", b"text/plain; charset=utf-8"),
        (b"Content-Length", str(len(body)).encode()),
        (b"Access-Control-Allow-Origin", b"*"),
        (b"Cache-Control", b"no-store"),
        (b"Connection", b"Upgrade, close" if status == 426 else b"close"),
        *refusal.headers,
    ]
    head = f"HTTP/1.1 {status} {phrase}\r\n".encode()
    head += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return head + b"\r\n" + body
