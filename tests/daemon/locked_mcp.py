"""A tiny MCP server over HTTP on 127.0.0.1 that a test can lock: while
locked, every request is answered 401 with the RFC 9728 discovery a client
needs to sign in (protected resource metadata, an authorization server that
offers dynamic registration), which the Claude Code CLI reports as
``needs-auth``. Unlocked, it serves one tool, ``hello``, whose calls are held
until the test releases them - so a call can still be running when the
server starts asking for a sign-in."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LockedMcp:
    def __init__(self) -> None:
        self.locked = False
        self.release = threading.Event()
        self.called = threading.Event()
        self.url = ""

    @contextmanager
    def running(self) -> Iterator[LockedMcp]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                base = owner.url.rsplit("/", 1)[0]
                if self.path.startswith("/.well-known/oauth-protected-resource"):
                    self._json(
                        200, {"resource": owner.url, "authorization_servers": [base], "scopes_supported": ["read"]}
                    )
                elif self.path.startswith("/.well-known/oauth-authorization-server"):
                    self._json(
                        200,
                        {
                            "issuer": base,
                            "authorization_endpoint": f"{base}/authorize",
                            "token_endpoint": f"{base}/token",
                            "registration_endpoint": f"{base}/register",
                            "response_types_supported": ["code"],
                            "code_challenge_methods_supported": ["S256"],
                        },
                    )
                else:
                    self._json(405, {})

            def do_DELETE(self) -> None:  # noqa: N802
                self._json(200, {})

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                base = owner.url.rsplit("/", 1)[0]
                if owner.locked:
                    self._json(
                        401,
                        {"error": "invalid_token"},
                        {
                            "WWW-Authenticate": (
                                f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource", scope="read"'
                            )
                        },
                    )
                    return
                message = json.loads(body or b"{}")
                if "id" not in message:
                    self.send_response(202)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                method = message.get("method")
                if method == "initialize":
                    result: Any = {
                        "protocolVersion": message["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "locked", "version": "1"},
                    }
                elif method == "tools/list":
                    result = {
                        "tools": [
                            {
                                "name": "hello",
                                "description": "Says hello",
                                "inputSchema": {"type": "object", "properties": {}},
                            }
                        ]
                    }
                elif method == "tools/call":
                    owner.called.set()
                    owner.release.wait(120)
                    if owner.locked:  # asked for a sign-in mid-call
                        self._json(
                            401,
                            {"error": "insufficient_scope"},
                            {
                                "WWW-Authenticate": (
                                    f'Bearer error="insufficient_scope", scope="read write", '
                                    f'resource_metadata="{base}/.well-known/oauth-protected-resource"'
                                )
                            },
                        )
                        return
                    result = {"content": [{"type": "text", "text": "hello"}]}
                else:
                    result = {}
                self._json(200, {"jsonrpc": "2.0", "id": message["id"], "result": result}, {"Mcp-Session-Id": "s1"})

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self.url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.release.set()
            server.shutdown()
            server.server_close()
