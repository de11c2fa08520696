"""A fake GitHub REST API on 127.0.0.1, for the pull request tests.

It serves the three shapes the host asks for - a repository, a branch's
pull requests, opening one - from memory, checks the bearer token against
the ones it was told to take, and keeps every request it got so a test can
say who asked what, with which token. A thread of its own serves it, so it
answers whatever event loop the daemon under test runs on.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class FakeGitHub:
    def __init__(self, tokens: set[str], repos: dict[str, dict[str, Any]]) -> None:
        self.tokens = tokens
        self.repos = repos
        #: ``owner/repo`` -> its pull requests, oldest first.
        self.pulls: dict[str, list[dict[str, Any]]] = {name: [] for name in repos}
        #: ``(method, path with query, token)`` of every request, in order.
        self.seen: list[tuple[str, str, str]] = []
        #: While set, opening a pull request is answered 502, as a GitHub having a bad moment does.
        self.failing = False
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _serve(self, method: str) -> None:
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                with fake.lock:
                    fake.seen.append((method, self.path, token))
                if token not in fake.tokens:
                    self._answer(401, {"message": "Bad credentials"})
                    return
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size)) if size else None
                status, answer = fake.route(method, self.path, body)
                self._answer(status, answer)

            def do_GET(self) -> None:  # noqa: N802 - the http.server spelling
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGitHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        parsed = urlparse(path)
        parts = parsed.path.strip("/").split("/")
        if len(parts) < 3 or parts[0] != "repos" or f"{parts[1]}/{parts[2]}" not in self.repos:
            return 404, {"message": "Not Found"}
        name = f"{parts[1]}/{parts[2]}"
        if len(parts) == 3 and method == "GET":
            return 200, {"full_name": name, **self.repos[name]}
        if parts[3:] == ["pulls"] and method == "GET":
            query = parse_qs(parsed.query)
            head = query.get("head", [""])[0].split(":", 1)[-1]
            with self.lock:
                found = [p for p in self.pulls[name] if p["head"]["ref"] == head]
            return 200, list(reversed(found))[: int(query.get("per_page", ["30"])[0])]
        if parts[3:] == ["pulls"] and method == "POST":
            if self.failing:
                return 502, {"message": "Server Error"}
            with self.lock:
                if any(p["head"]["ref"] == body["head"] and p["state"] == "open" for p in self.pulls[name]):
                    return 422, {
                        "message": "Validation Failed",
                        "errors": [{"message": "A pull request already exists"}],
                    }
                number = sum(len(v) for v in self.pulls.values()) + 1
                pull = {
                    "number": number,
                    "html_url": f"https://github.com/{name}/pull/{number}",
                    "state": "open",
                    "merged_at": None,
                    "title": body["title"],
                    "body": body.get("body"),
                    "draft": body.get("draft", False),
                    "head": {"ref": body["head"]},
                    "base": {"ref": body["base"]},
                }
                self.pulls[name].append(pull)
            return 201, pull
        return 404, {"message": "Not Found"}

    def merge(self, name: str, number: int) -> None:
        with self.lock:
            for pull in self.pulls[name]:
                if pull["number"] == number:
                    pull["state"], pull["merged_at"] = "closed", "2026-12-05T00:00:00Z"
