"""A fake Anthropic Messages API on 127.0.0.1, scripted per test.

The real Claude Code CLI is pointed at it with ``ANTHROPIC_BASE_URL`` and a
fake ``ANTHROPIC_API_KEY``, so the end-to-end tests run offline. What it
serves:

* ``POST /v1/messages`` with ``"stream": true`` - the model. Each request
  takes the next scripted :class:`Reply` (a list of Messages API stream
  events, sent as server-sent events), and the request body is kept in
  :attr:`FakeAnthropic.requests` so a test can read what the CLI sent back
  (a tool result, a denial). A reply may stop part-way at a :data:`HOLD`
  and wait until the test releases it or the server stops - which is how a
  turn is still running when a test cancels it. With the script empty, a
  short text reply is served rather than an error.
* ``POST /v1/messages`` without streaming (the CLI's side calls, such as a
  title) - one small text message.
* ``POST /v1/messages/count_tokens`` - a small count. Anything else - 404.

It is a stdlib ``ThreadingHTTPServer`` on a thread of its own, so it is
independent of the test's trio loop and of how loaded the machine is.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-sonnet-5-5"
HOLD = "hold"  # a step in a reply: wait here until released
#: Message ids: unique, since the CLI joins the frames of one message id into one message.
_MESSAGE_IDS = itertools.count(1)


class Reply(list):
    """One model response: stream events (dicts) and :data:`HOLD` marks."""


def message(
    *blocks: tuple,
    stop_reason: str = "end_turn",
    model: str = MODEL,
    input_tokens: int = 11,
    output_tokens: int = 7,
    cache_read: int = 3,
    cache_write: int = 2,
    hold_after: int | None = None,
) -> Reply:
    """A reply made of content blocks: ``("text", str)``, ``("thinking", str)``,
    ``("tool_use", id, name, input)``. Text and thinking stream in two deltas.
    ``hold_after`` puts a :data:`HOLD` after that many events."""
    events: list[Any] = [
        {
            "type": "message_start",
            "message": {
                "id": f"msg_{next(_MESSAGE_IDS):04d}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": input_tokens,
                    "output_tokens": 1,
                    "cache_read_input_tokens": cache_read,
                    "cache_creation_input_tokens": cache_write,
                },
            },
        }
    ]
    for index, block in enumerate(blocks):
        kind = block[0]
        if kind == "text":
            text = block[1]
            half = max(1, len(text) // 2)
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            for piece in (text[:half], text[half:]):
                if piece:
                    events.append(
                        {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
                    )
        elif kind == "thinking":
            thought = block[1]
            half = max(1, len(thought) // 2)
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                }
            )
            for piece in (thought[:half], thought[half:]):
                if piece:
                    events.append(
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "thinking_delta", "thinking": piece},
                        }
                    )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": "fake-signature"},
                }
            )
        elif kind == "tool_use":
            _, call_id, name, tool_input = block
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
                }
            )
            # The arguments arrive as the model writes them: in pieces.
            for piece in json_pieces(json.dumps(tool_input)):
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
        else:
            raise ValueError(f"unknown block kind {kind!r}")
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    if hold_after is not None:
        events.insert(hold_after, HOLD)
    return Reply(events)


def json_pieces(encoded: str, count: int = 3) -> list[str]:
    """``encoded`` cut in ``count`` pieces (fewer when it is that short)."""
    size = max(1, -(-len(encoded) // count))
    return [encoded[i : i + size] for i in range(0, len(encoded), size)]


def text(words: str, **kwargs: Any) -> Reply:
    return message(("text", words), **kwargs)


def tool_use(call_id: str, name: str, tool_input: dict[str, Any], *, thought: str | None = None) -> Reply:
    blocks: list[tuple] = [("thinking", thought)] if thought else []
    blocks.append(("tool_use", call_id, name, tool_input))
    return message(*blocks, stop_reason="tool_use")


def _sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


class FakeAnthropic:
    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        #: Bodies of the streaming requests, in order.
        self.requests: list[dict[str, Any]] = []
        #: Set when a reply reaches a HOLD; cleared by :meth:`release`.
        self.holding = threading.Event()
        self._release = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}"

    def add(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def release(self) -> None:
        self._release.set()

    def tool_results(self) -> list[dict[str, Any]]:
        """Every ``tool_result`` block the CLI sent, in order."""
        out = []
        for body in self.requests:
            for msg in body.get("messages", []):
                content = msg.get("content")
                if msg.get("role") == "user" and isinstance(content, list):
                    out += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        # Each request repeats the history: keep one of each.
        seen, unique = set(), []
        for block in out:
            if block.get("tool_use_id") not in seen:
                seen.add(block.get("tool_use_id"))
                unique.append(block)
        return unique

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            return self.script.popleft() if self.script else text("(nothing more was scripted)")

    def _steps(self, reply: Reply) -> Iterator[bytes]:
        for step in reply:
            if step == HOLD:
                self.holding.set()
                while not (self._release.is_set() or self._stopped.is_set()):
                    self._release.wait(0.05)
                self._release.clear()
                self.holding.clear()
                if self._stopped.is_set():
                    return
                continue
            yield _sse(step)

    @contextmanager
    def running(self) -> Iterator[FakeAnthropic]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not here"}})

            def do_HEAD(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?", 1)[0]
                if path == "/v1/messages/count_tokens":
                    self._json(200, {"input_tokens": 1})
                elif path == "/v1/messages" and body.get("stream"):
                    self._stream(fake._next(body))
                elif path == "/v1/messages":
                    self._json(
                        200,
                        {
                            "id": "msg_side",
                            "type": "message",
                            "role": "assistant",
                            "model": body.get("model", MODEL),
                            "content": [{"type": "text", "text": "A title"}],
                            "stop_reason": "end_turn",
                            "stop_sequence": None,
                            "usage": {"input_tokens": 1, "output_tokens": 1},
                        },
                    )
                else:
                    self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not here"}})

            def _stream(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in fake._steps(reply):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass  # the CLI hung up (an interrupt): nothing to tell

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        thread = threading.Thread(target=server.serve_forever, name="fake-anthropic", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stopped.set()
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


def cli_env(url: str, home: str, *, api_key: str | None = "sk-ant-fake-key") -> dict[str, str]:
    """The environment the CLI needs to stay offline and talk to the fake."""
    env = {
        "HOME": home,
        "ANTHROPIC_BASE_URL": url,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK": "1",
    }
    if api_key:
        env["ANTHROPIC_API_KEY"] = api_key
    return env


#: Variables that would hand the CLI real credentials or another config dir.
CREDENTIAL_VARS: Iterable[str] = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CONFIG_DIR",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDECODE",
)


def prompts(body: dict[str, Any]) -> list[str]:
    """The words of the user messages in one request, in order (the CLI's
    ``<system-reminder>`` blocks left out): what the model is shown was said."""
    out = []
    for msg in body.get("messages", []):
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        out += [
            b["text"]
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "text" and not b.get("text", "").startswith("<system-reminder>")
        ]
    return out
