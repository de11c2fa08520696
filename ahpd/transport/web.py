"""The web console's own listener: a fixed set of files from the package, nothing else.

``ahpd run`` serves a page (``ahpd/web/``) on a second port so that a person
can open the host in a browser. The page is only static files: it speaks AHP
over the daemon's WebSocket like every other client, and the WebSocket door
(``_http.decide``) keeps its rules: the token, the ``Host`` check, and an
``Origin`` that must be this listener's own (``origins()``).

Why a listener of our own rather than a framework: what it must do is small
and security-shaped. GET and HEAD of a file named in ``ahpd/web/`` (listed
once at start from the package, so no path a request spells can reach
anything else: ``..``, ``%2e%2e``, a symlink), 404 for every other path, the
same ``Host`` check as the WebSocket door (a page on a rebound DNS name is
refused), a strict Content-Security-Policy on every answer (no inline
script, no remote origin, the one WebSocket it may open), ``nosniff``, no
cookie ever, and one request per connection (``Connection: close``), so a
connection's life is one head and one answer. The token is not needed to
fetch the files (they hold no secret): without it the page shows a sign-in
line, and the WebSocket door refuses it.

Resources: at most ``MAX_CONNECTIONS`` connections at once; a newcomer beyond
them drops the oldest (a trickling client cannot hold the door), and a head
must be complete within ``websocket.HANDSHAKE_TIMEOUT`` seconds and
``_http.MAX_HEAD_BYTES`` bytes.
"""

from __future__ import annotations

import errno
import logging
import re
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib import resources
from urllib.parse import urlsplit

import h11
import trio

from ahpd.transport import _http
from ahpd.transport.websocket import HANDSHAKE_TIMEOUT, LINGER_TIMEOUT, _linger_close, _read_head

logger = logging.getLogger("ahpd.transport.web")

#: Connections served at once; a newcomer beyond them drops the oldest.
MAX_CONNECTIONS = 64
#: The files the page is made of: plain names, one level, known types.
_ASSET_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*\.(html|js|css|svg)$")
_TYPES = {
    "html": b"text/html; charset=utf-8",
    "js": b"text/javascript; charset=utf-8",
    "css": b"text/css; charset=utf-8",
    "svg": b"image/svg+xml",
}
#: Where the page learns the WebSocket's port and whether it needs a token
#: (meta tags: no inline script).
_WS_PORT_MARK = b"{{AHPD_WS_PORT}}"
_TOKEN_MARK = b"{{AHPD_TOKEN_REQUIRED}}"


@dataclass(frozen=True)
class WebListening:
    """Where the web console answers (``port`` is the bound one)."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"


def origins(host: str, web_port: int) -> frozenset[str]:
    """The ``Origin`` values the page served on ``host:web_port`` sends: the
    WebSocket door admits these and no other browser page."""
    names = {"127.0.0.1", "localhost"}
    if host not in ("0.0.0.0", "::", ""):
        names.add(f"[{host}]" if ":" in host else host)
    return frozenset(f"http://{name}:{web_port}" for name in names)


def csp(host: str, ws_port: int) -> bytes:
    """The Content-Security-Policy: our own files, and the one WebSocket."""
    names = ["127.0.0.1", "localhost"]
    if host not in ("0.0.0.0", "::", "", *names):
        names.append(f"[{host}]" if ":" in host else host)
    sockets = " ".join(f"ws://{name}:{ws_port}" for name in names)
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        f"connect-src {sockets}; img-src 'self' data:; base-uri 'none'; "
        "frame-ancestors 'none'; form-action 'none'"
    ).encode()


def load_assets(ws_port: int, token_required: bool = True) -> dict[str, tuple[bytes, bytes]]:
    """``{path: (content type, bytes)}`` for every file of ``ahpd/web``, read once.

    ``/`` is ``index.html`` with the WebSocket's port (and whether a token is
    needed) written into it."""
    assets: dict[str, tuple[bytes, bytes]] = {}
    for entry in resources.files("ahpd.web").iterdir():
        name = entry.name
        if not _ASSET_NAME.match(name) or not entry.is_file():
            continue
        body = entry.read_bytes()
        kind = name.rsplit(".", 1)[1]
        if name == "index.html":
            body = body.replace(_WS_PORT_MARK, str(ws_port).encode())
            body = body.replace(_TOKEN_MARK, b"yes" if token_required else b"no")
            assets["/"] = (_TYPES[kind], body)
        assets["/" + name] = (_TYPES[kind], body)
    return assets


def answer(
    request: h11.Request,
    assets: dict[str, tuple[bytes, bytes]],
    policy: bytes,
    token: str | None,
    listen_host: str,
) -> bytes:
    """The whole HTTP/1.1 response to ``request``: a pure function, tested without a socket."""
    if len(_http._header(request, b"host")) != 1:
        return _respond(400, b"missing 'Host'\n", policy, head=False)
    head = request.method == b"HEAD"
    if not _http.host_ok(request, token, listen_host):
        return _respond(403, b"the Host header does not name this daemon's address\n", policy, head)
    if request.method not in (b"GET", b"HEAD"):
        return _respond(405, b"only GET and HEAD\n", policy, head, [(b"Allow", b"GET, HEAD")])
    path = urlsplit(request.target.decode("latin-1")).path
    found = assets.get(path)
    if found is None:
        return _respond(404, b"not found\n", policy, head)
    kind, body = found
    return _respond(200, body, policy, head, content_type=kind)


def _respond(
    status: int,
    body: bytes,
    policy: bytes,
    head: bool,
    extra: list[tuple[bytes, bytes]] | None = None,
    content_type: bytes = b"text/plain; charset=utf-8",
) -> bytes:
    headers = [
        (b"Content-Type", content_type),
        (b"Content-Length", str(len(body)).encode()),
        (b"Content-Security-Policy", policy),
        (b"X-Content-Type-Options", b"nosniff"),
        (b"Referrer-Policy", b"no-referrer"),
        (b"Cache-Control", b"no-store"),
        (b"Connection", b"close"),
        *(extra or []),
    ]
    phrase = HTTPStatus(status).phrase
    out = f"HTTP/1.1 {status} {phrase}\r\n".encode()
    out += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return out + b"\r\n" + (b"" if head else body)


@dataclass
class _WebServer:
    assets: dict[str, tuple[bytes, bytes]]
    policy: bytes
    token: str | None
    listen_host: str
    #: Open connections, oldest first, each with the scope that drops it.
    open: dict[object, trio.CancelScope] = field(default_factory=dict)

    async def serve_stream(self, stream: trio.SocketStream) -> None:
        """One connection: one head, one answer. Never raises (except Cancelled)."""
        while len(self.open) >= MAX_CONNECTIONS:
            self.open.pop(next(iter(self.open))).cancel()
        key = object()
        scope = self.open[key] = trio.CancelScope()
        try:
            with scope:
                await self._serve(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            logger.debug("web: connection lost (%s)", exc)
        except Exception:  # noqa: BLE001 - one connection's failure, logged, must not end the others
            logger.exception("web: failure serving a request")
        finally:
            self.open.pop(key, None)
            await trio.aclose_forcefully(stream)

    async def _serve(self, stream: trio.SocketStream) -> None:
        request = None
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            try:
                request, _, _ = await _read_head(stream)
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                await self._send(stream, _respond(status, b"bad request\n", self.policy, head=False))
                return
        if request is None:
            return
        reply = answer(request, self.assets, self.policy, self.token, self.listen_host)
        path = urlsplit(request.target.decode("latin-1")).path[:80]  # never the query: it may hold the token
        logger.debug("web: %s %s -> %s", request.method.decode(), path, reply[9:12].decode())
        await self._send(stream, reply)

    async def _send(self, stream: trio.SocketStream, reply: bytes) -> None:
        with trio.move_on_after(LINGER_TIMEOUT * 5):
            await stream.send_all(reply)
        await _linger_close(stream)


async def serve_web(
    *,
    host: str,
    port: int,
    ws_port: int,
    token: str | None,
    pinned: bool = True,
    task_status: trio.TaskStatus[WebListening] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the web console on ``host:port`` until cancelled (nursery ``start`` protocol).

    ``ws_port`` is the WebSocket listener's port: the page connects there,
    and the Content-Security-Policy names it. A port that is only the
    default (not ``pinned``: the one after the WebSocket's) and is in use
    gives way to a free one, said in the log: the console is a convenience,
    not a reason for the daemon not to start."""
    assets = load_assets(ws_port, token is not None)
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        if pinned or exc.errno != errno.EADDRINUSE:
            raise
        logger.warning("the web console's default port %d is in use; it is served on a free port instead", port)
        port = 0
        listeners = await trio.open_tcp_listeners(port, host=host)
    if port == 0 and len(listeners) > 1:
        for extra in listeners[1:]:
            await extra.aclose()
        listeners = listeners[:1]
    server = _WebServer(assets, csp(host, ws_port), token, host)
    where = WebListening(host=host, port=listeners[0].socket.getsockname()[1])
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(trio.serve_listeners, server.serve_stream, [listener])
        logger.info("web console on %s (%d files)", where.url, len(assets))
        task_status.started(where)


__all__ = ["MAX_CONNECTIONS", "WebListening", "answer", "csp", "load_assets", "origins", "serve_web"]
