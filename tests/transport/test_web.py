"""The web console's listener without a browser: real sockets on 127.0.0.1.

What it answers (a fixed set of files from the package, 404 for the rest,
GET and HEAD only, the Host check), the headers every answer carries (the
Content-Security-Policy, nosniff, never a cookie), and the WebSocket door's
Origin rule with a console: its own page's origin is admitted, another
page's is not, token or no token."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from importlib import resources

import pytest
import trio

from ahpd.transport import web as web_module
from ahpd.transport.web import WebListening, csp, serve_web
from tests.daemon.helpers import daemon_in_process

from .conftest import LIMIT
from .test_websocket import UPGRADE_HEAD, http

WS_PORT = 45678
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; "
    f"connect-src ws://127.0.0.1:{WS_PORT} ws://localhost:{WS_PORT}; img-src 'self' data:; "
    "base-uri 'none'; frame-ancestors 'none'; form-action 'none'"
)


@asynccontextmanager
async def web(token: str | None = "s3cret") -> AsyncIterator[WebListening]:
    async with trio.open_nursery() as nursery:
        where = await nursery.start(partial(serve_web, host="127.0.0.1", port=0, ws_port=WS_PORT, token=token))
        yield where
        nursery.cancel_scope.cancel()


def _get(path: str, method: str = "GET", host: str = "127.0.0.1") -> str:
    return f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"


async def test_the_page_and_its_files_with_a_strict_policy_and_no_cookie():
    with trio.fail_after(LIMIT):
        async with web() as where:
            status, headers, body = await http(where.port, _get("/?tkn=s3cret"))
            assert status == 200
            assert headers["content-type"] == "text/html; charset=utf-8"
            assert headers["content-security-policy"] == POLICY
            assert headers["x-content-type-options"] == "nosniff"
            assert "set-cookie" not in headers
            assert b"s3cret" not in body  # the page never carries the token
            assert f'<meta name="ahpd-ws-port" content="{WS_PORT}">'.encode() in body
            # no inline script: every <script> names its file and has no body
            scripts = re.findall(rb"<script([^>]*)>(.*?)</script>", body, re.S)
            assert scripts and all(b'src="/' in attrs and not inner.strip() for attrs, inner in scripts)
            assert not re.search(rb"\son[a-z]+\s*=", body)  # no inline handler (onclick= ...)
            names = sorted(e.name for e in resources.files("ahpd.web").iterdir() if e.name.endswith((".js", ".css")))
            assert "app.js" in names and "style.css" in names
            for name in names:
                status, headers, payload = await http(where.port, _get("/" + name))
                assert status == 200, name
                assert headers["content-security-policy"] == POLICY
                assert headers["x-content-type-options"] == "nosniff"
                assert "set-cookie" not in headers
                kind = "text/javascript" if name.endswith(".js") else "text/css"
                assert headers["content-type"].startswith(kind)
                assert payload == resources.files("ahpd.web").joinpath(name).read_bytes()


async def test_head_answers_the_headers_without_the_body():
    with trio.fail_after(LIMIT):
        async with web() as where:
            _, got, body = await http(where.port, _get("/app.js"))
            status, headers, empty = await http(where.port, _get("/app.js", "HEAD"))
            assert status == 200 and empty == b""
            assert headers["content-length"] == str(len(body)) == got["content-length"]
            assert headers["content-security-policy"] == POLICY


@pytest.mark.parametrize(
    "path",
    [
        "/nope",
        "/../pyproject.toml",
        "/%2e%2e/daemon.py",
        "/..%2f..%2fetc%2fpasswd",
        "//etc/passwd",
        "/__init__.py",
        "/web.py",
        "/app.js/",
        "/APP.JS",
        "/./app.js",
    ],
)
async def test_anything_but_a_listed_file_is_404(path):
    with trio.fail_after(LIMIT):
        async with web() as where:
            status, headers, body = await http(where.port, _get(path))
            assert status == 404, (path, status, body)
            assert headers["content-security-policy"] == POLICY
            assert headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS"])
async def test_only_get_and_head(method):
    with trio.fail_after(LIMIT):
        async with web() as where:
            head = f"{method} / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
            status, headers, _ = await http(where.port, head)
            assert status == 405 and headers["allow"] == "GET, HEAD"
            assert headers["content-security-policy"] == POLICY


async def test_a_foreign_host_is_refused_as_at_the_websocket_door():
    with trio.fail_after(LIMIT):
        async with web() as where:
            status, headers, _ = await http(where.port, _get("/", host=f"evil.example:{where.port}"))
            assert status == 403 and headers["content-security-policy"] == POLICY
            status, _, _ = await http(where.port, _get("/", host=f"localhost:{where.port}"))
            assert status == 200
            status, _, _ = await http(where.port, "GET / HTTP/1.0\r\n\r\n")  # no Host at all
            assert status == 400


async def test_a_garbled_head_is_answered_and_the_listener_serves_on():
    with trio.fail_after(LIMIT):
        async with web() as where:
            status, _, _ = await http(where.port, "NOT HTTP AT ALL\r\n\r\n")
            assert status == 400
            status, _, _ = await http(where.port, _get("/"))
            assert status == 200


def test_the_policy_names_the_websocket_of_a_non_loopback_address_too():
    policy = csp("192.0.2.7", 9).decode()
    assert "connect-src ws://127.0.0.1:9 ws://localhost:9 ws://192.0.2.7:9;" in policy
    assert "connect-src ws://127.0.0.1:9 ws://localhost:9;" in csp("0.0.0.0", 9).decode()


# -- the door, with a real daemon ----------------------------------------------------


async def _upgrade(port: int, origin: str | None, token: str = "tok") -> int:
    head = UPGRADE_HEAD.format(target=f"/?tkn={token}")
    if origin is not None:
        head = head.replace("Host: 127.0.0.1", f"Host: 127.0.0.1\r\nOrigin: {origin}")
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(head.encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            answer += chunk
    return int(answer.split()[1])


async def test_the_door_admits_the_console_origin_and_no_other(tmp_path):
    with trio.fail_after(60):
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--connection-token", "tok") as daemon:
            port = int(daemon.url.split(":")[2].split("/")[0])
            web_port = int(daemon.web_url.split(":")[2].split("/")[0])
            assert daemon.web_url == f"http://127.0.0.1:{web_port}/?tkn=tok"
            assert await _upgrade(port, f"http://127.0.0.1:{web_port}") == 101
            assert await _upgrade(port, f"http://localhost:{web_port}") == 101
            assert await _upgrade(port, None) == 101  # a program: no Origin
            # another page, on loopback too, with the token in hand: refused
            assert await _upgrade(port, f"http://127.0.0.1:{web_port + 1}") == 403
            assert await _upgrade(port, "http://evil.example") == 403
            assert await _upgrade(port, "null") == 403
            assert await _upgrade(port, f"http://127.0.0.1:{web_port}", token="wrong") == 401
            status, headers, _ = await http(web_port, _get("/"))
            assert status == 200 and f"ws://127.0.0.1:{port}" in headers["content-security-policy"]


async def test_without_the_console_the_door_keeps_its_older_rule(tmp_path):
    with trio.fail_after(60):
        async with daemon_in_process(
            tmp_path / "d", "--sessions", "memory", "--connection-token", "tok", "--no-web"
        ) as daemon:
            port = int(daemon.url.split(":")[2].split("/")[0])
            assert daemon.web_url == ""
            assert await _upgrade(port, "http://127.0.0.1:3000") == 101  # a token-holder, as before
            record = (daemon.data_dir / "ahpd.json").read_text()
            assert "webUrl" not in record


async def test_connections_that_never_speak_are_dropped_oldest_first(monkeypatch):
    """Past ``MAX_CONNECTIONS`` a newcomer drops the oldest connection still
    in its head: silent connections cannot pile up until the head timeout."""
    monkeypatch.setattr(web_module, "MAX_CONNECTIONS", 4)
    with trio.fail_after(LIMIT):
        async with web() as where:
            idle = [await trio.open_tcp_stream("127.0.0.1", where.port) for _ in range(6)]
            try:
                status, _, _ = await http(where.port, _get("/"))
                assert status == 200
                # the three oldest were dropped for the newer ones, well before the head timeout
                with trio.fail_after(web_module.HANDSHAKE_TIMEOUT / 2):
                    for stream in idle[:3]:
                        assert await stream.receive_some(1) == b""
            finally:
                for stream in idle:
                    await stream.aclose()
