"""The HTTP door in front of the WebSocket: who may upgrade, and what the rest hear.

Pure functions of a parsed request head (an ``h11.Request``), no I/O, so the
rules are tested without a socket. ``websocket.py`` reads the head, asks
``decide()`` and either answers with ``response()`` or hands the connection
to ``wsconnection.WebSocketConnection``.

The rules:

* The ``Host`` header must name this machine's loopback (``localhost``,
  ``*.localhost``, ``127.x.x.x``, ``[::1]``) or the address ``--host`` gave,
  else 403. A web page that rebinds its own DNS name to 127.0.0.1 reaches the
  port with its own name in ``Host``; this is what stops it. When ``--host``
  named an address that is not loopback and a token is required, any ``Host``
  is admitted (the token is the guard there); when it named a wildcard
  address (``0.0.0.0``, ``::``), any address literal is.
* With a token configured, an upgrade is admitted only with ``?tkn=TOKEN`` or
  ``?token=TOKEN`` in the request target, or ``Authorization: Bearer TOKEN``;
  compared in constant time. Otherwise: 401, and no WebSocket opens.
* Without a token, an upgrade whose ``Origin`` is present and is not a
  loopback origin (``http(s)://localhost``, ``127.x.x.x`` or ``[::1]``, any
  port) is refused 403: browsers send ``Origin`` on every WebSocket, so this
  is how a page the user merely visits is kept from driving their agents.
  Programs (VS Code's agent host, ``ahpd chat``) send none.
* With the web console on (``origins`` given: its own page's origins), an
  upgrade carrying an ``Origin`` is admitted only when it is one of them,
  token or not: the console's page is the one web page that may drive the
  daemon, and another page (on another loopback port too) may not, even
  with the token in hand.
* A request that is not a WebSocket upgrade gets 401 when its upgrade would be
  refused and 426 (Upgrade Required) when it would be admitted, so a plain
  ``curl`` tells a user whether the token is right.
* Every answer carries ``Access-Control-Allow-Origin: *``: a browser page
  probing the port can read the status.
* A malformed upgrade (wrong method or version, a ``Sec-WebSocket-Key`` that
  is not 16 bytes in base64) is answered here too, so the handshake
  (wsproto's) only ever sees requests it will accept.
"""

from __future__ import annotations

import binascii
import hmac
import ipaddress
from base64 import b64decode
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
    for header in _header(request, b"authorization"):
        scheme, _, credentials = header.strip().partition(b" ")
        if scheme.lower() == b"bearer":
            offered.append(credentials.strip())
    # compare every candidate, so the time taken does not say which one matched
    ok = False
    for candidate in offered:
        ok |= hmac.compare_digest(candidate, expected)
    return ok


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def _is_loopback_name(name: str) -> bool:
    """``localhost``, a name under ``.localhost`` (RFC 6761), or a loopback address."""
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    address = _address(name)
    return address is not None and address.is_loopback


def _host_name(authority: str) -> str:
    """The host part of ``host[:port]`` or ``[v6]:port``."""
    if authority.startswith("["):
        return authority[: authority.find("]") + 1] if "]" in authority else authority
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


def host_ok(request: h11.Request, token: str | None, listen_host: str) -> bool:
    """Whether the ``Host`` header names this daemon as ``listen_host`` allows (see the rules)."""
    values = _header(request, b"host")
    if len(values) != 1:
        return False
    name = _host_name(values[0].decode("latin-1").strip()).lower().rstrip(".")
    if _is_loopback_name(name):
        return True
    if _is_loopback_name(listen_host):
        return False
    if token is not None:
        return True
    bound, asked = _address(listen_host), _address(name)
    if bound is not None and bound.is_unspecified:
        return asked is not None
    if bound is not None and asked is not None:
        return bound == asked
    return name == listen_host.lower().rstrip(".")


def origin_ok(request: h11.Request) -> bool:
    """Whether the request has no ``Origin`` or a loopback one (http or https, any port)."""
    values = _header(request, b"origin")
    if not values:
        return True
    if len(values) != 1:
        return False
    parts = urlsplit(values[0].decode("latin-1").strip())
    if parts.scheme not in ("http", "https"):
        return False
    try:
        name = parts.hostname or ""
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return False
    if name == "localhost":
        return True
    address = _address(name)
    return address is not None and address.is_loopback


def own_origin(request: h11.Request, origins: frozenset[str] | set[str]) -> bool:
    """Whether the request has no ``Origin`` (a program) or exactly one of ``origins``."""
    values = _header(request, b"origin")
    if not values:
        return True
    return len(values) == 1 and values[0].decode("latin-1").strip().lower() in origins


def key_ok(request: h11.Request) -> bool:
    """Whether there is one ``Sec-WebSocket-Key`` and it is 16 bytes in base64 (RFC 6455 4.1)."""
    values = _header(request, b"sec-websocket-key")
    if len(values) != 1:
        return False
    try:
        return len(b64decode(values[0].strip(), validate=True)) == 16
    except (binascii.Error, ValueError):
        return False


def decide(
    request: h11.Request,
    token: str | None,
    listen_host: str = "127.0.0.1",
    origins: frozenset[str] | set[str] | None = None,
) -> Refusal | None:
    """None to admit the upgrade; otherwise the answer to give instead.

    ``listen_host`` is the address the daemon was asked to listen on (``--host``);
    ``origins``, when given, the only ``Origin`` values admitted (the web console's).
    """
    if len(_header(request, b"host")) != 1:
        return Refusal(400, "missing 'Host'")  # h11 refuses two, and none in HTTP/1.1
    if not host_ok(request, token, listen_host):
        return Refusal(
            403,
            "the Host header does not name this daemon's address "
            "(ahpd answers on loopback names and the address it listens on)",
        )
    if not token_ok(request, token):
        return Refusal(
            401,
            "a valid token is required (?tkn=, ?token= or Authorization: Bearer)",
            [(b"WWW-Authenticate", b'Bearer realm="ahpd"')],
        )
    if not is_websocket_upgrade(request):
        return Refusal(
            426,
            "this is an Agent Host Protocol WebSocket endpoint",
            [(b"Upgrade", b"websocket"), (b"Sec-WebSocket-Version", b"13")],
        )
    if origins is not None and not own_origin(request, origins):
        return Refusal(
            403,
            "a WebSocket from a web page is admitted only from ahpd's own web console",
        )
    if token is None and not origin_ok(request):
        return Refusal(
            403,
            "a WebSocket from a web page whose origin is not loopback is refused "
            "by a daemon without a connection token",
        )
    if request.method != b"GET":
        return Refusal(405, "a WebSocket upgrade must use GET", [(b"Allow", b"GET")])
    if [value.strip().lower() for value in _header(request, b"upgrade")] != [b"websocket"]:
        return Refusal(400, "expected exactly 'Upgrade: websocket'")
    if b"upgrade" not in _tokens(_header(request, b"connection")):
        return Refusal(400, "missing 'Connection: Upgrade'")
    if _header(request, b"sec-websocket-version") != [b"13"]:
        return Refusal(
            426,
            "only WebSocket version 13 is supported",
            [(b"Upgrade", b"websocket"), (b"Sec-WebSocket-Version", b"13")],
        )
    if not key_ok(request):
        return Refusal(400, "'Sec-WebSocket-Key' must be one 16-byte value in base64")
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
