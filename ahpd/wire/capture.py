"""Writing a capture: one line per frame, in VS Code's agent host log shape.

VS Code's ``AhpJsonlLogger`` (src/vs/platform/agentHost/common/ahpJsonlLogger.ts)
writes ``{...message, "_ahpLog": {ts, dir, connectionId, transport, byteLength}}``
with ``dir`` ``c2s`` (client to server) or ``s2c``, and redacts an
``authenticate`` token as ``"<redacted>"``. roblourens/ahp-inspector reads
``_ahpLog.ts`` (ISO 8601, parsed with Date.parse) and ``_ahpLog.dir``; any
other key is ignored, so ``clientId`` rides along once the connection has
said its own in ``initialize`` or ``reconnect``.

The recorder wraps a transport ``Connection`` from the outside, so no
protocol layer knows a capture exists. A line is written and flushed per
frame, to a file opened O_APPEND|O_CREAT with mode 0600: a crash loses at
most the frame in hand, and a capture holds what a client said.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

REDACTED = "<redacted>"

#: Keys whose value is a credential wherever they appear (compared case blind).
#: ``progressToken`` is not one: it names a request, so it is not listed.
SECRET_KEYS = frozenset(
    {
        "token",
        "accesstoken",
        "refreshtoken",
        "idtoken",
        "authorization",
        "password",
        "secret",
        "clientsecret",
        "apikey",
        "api_key",
        "anthropic_api_key",
        "cookie",
        "tkn",
        "connectiontoken",
    }
)
# A cheap pre-check on the raw text, so the common frame is never parsed twice.
_MAYBE_SECRET = re.compile(
    r'"(?i:token|accessToken|refreshToken|idToken|authorization|password|secret|clientSecret|apiKey|api_key'
    r'|anthropic_api_key|cookie|tkn|connectionToken)"\s*:|[?&](?:tkn|token)=|(?i:bearer )',
)
_URL_TOKEN = re.compile(r"([?&](?:tkn|token)=)[^&#\s\"]*")
_BEARER = re.compile(r"(?i)(bearer\s+)\S+")


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def needs_redaction(text: str) -> bool:
    """Whether ``text`` may hold a credential (false positives are fine)."""
    return _MAYBE_SECRET.search(text) is not None


def redact(value: Any) -> Any:
    """``value`` with every credential replaced by ``"<redacted>"``.

    A key in ``SECRET_KEYS`` loses its value whatever it is; a string
    anywhere loses a ``?tkn=``/``?token=`` query value and what follows
    ``Bearer``. Returns a new value; the input is not changed.
    """
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and k.lower() in SECRET_KEYS and v not in (None, "") else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str) and ("=" in value or " " in value):
        return _BEARER.sub(r"\1" + REDACTED, _URL_TOKEN.sub(r"\1" + REDACTED, value))
    return value


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def capture_line(
    text: str,
    direction: str,
    connection_id: str,
    *,
    transport: str,
    client_id: str | None = None,
    ts: str | None = None,
    trusted: bool = False,
) -> str:
    """The capture line (with its newline) for one frame's ``text``.

    A frame that is a JSON object and holds nothing to redact is spliced
    rather than re-serialized, so the message in the capture is byte for
    byte what went over the wire. A frame that is not a JSON object is kept
    as a string under ``_ahpLog.unparsed``, so a bad frame is on record too.
    ``trusted`` says an ``s2c`` frame is this host's own ``json.dumps`` and
    need not be parsed to be known to be one object.
    """
    begin, end, tail = _line(
        text, direction, connection_id, transport=transport, client_id=client_id, ts=ts, trusted=trusted
    )
    return text[begin:end] + tail


def _json_space(char: str) -> bool:
    return char in " \t\r\n"


def _line(
    text: str,
    direction: str,
    connection_id: str,
    *,
    transport: str,
    client_id: str | None,
    ts: str | None,
    trusted: bool,
) -> tuple[int, int, str]:
    """The capture line as ``text[begin:end] + tail``: a spliced frame is
    not copied here (a ``resourceRead`` answer can be megabytes), only
    bounded; see ``capture_line``."""
    size = len(text) if text.isascii() else len(text.encode())
    log: dict[str, Any] = {
        "ts": ts or utc_now(),
        "dir": direction,
        "connectionId": connection_id,
        "transport": transport,
        "byteLength": size,
    }
    if client_id is not None:
        log["clientId"] = client_id
    begin, end = 0, len(text)
    while begin < end and _json_space(text[begin]):
        begin += 1
    while end > begin and _json_space(text[end - 1]):
        end -= 1
    spliceable = (
        end - begin >= 2
        and text[begin] == "{"
        and text[end - 1] == "}"
        and text.find("\n", begin, end) < 0
        and not needs_redaction(text)
    )
    message: Any = None
    own = trusted and direction == "s2c"
    if not (spliceable and own):
        message = _parsed(text)
    if spliceable and (own or (isinstance(message, dict) and "_ahpLog" not in message)):
        del message  # a large frame's parse is let go of before its line is written
        inner = end - 1
        while inner > begin + 1 and _json_space(text[inner - 1]):
            inner -= 1
        comma = "" if inner == begin + 1 else ","
        return begin, inner, f'{comma}"_ahpLog":{_dumps(log)}}}\n'
    if not isinstance(message, dict):
        log["unparsed"] = text
        return 0, 0, _dumps({"_ahpLog": log}) + "\n"
    message.pop("_ahpLog", None)
    return 0, 0, _dumps({**redact(message), "_ahpLog": log}) + "\n"


def _parsed(text: str) -> Any:
    """``text`` read as JSON, or None: by orjson when it can (several times
    faster), by ``json`` for what orjson refuses and ``json`` reads."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(text)
    except ValueError:
        return None


class CaptureFile:
    """An append-only capture file, mode 0600, flushed after every line.

    Thread-safe, since ``tools/tee.py`` and a daemon may write from more
    than one place; every write is one ``os.write`` of one whole line.
    ``trusted`` is for a host recording itself (see ``capture_line``).
    """

    def __init__(self, path: str | os.PathLike[str], *, transport: str, trusted: bool = False) -> None:
        self.path = os.fspath(path)
        self.transport = transport
        self.trusted = trusted
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(self._fd, 0o600)  # an existing file with wider bits is narrowed
        self._lock = threading.Lock()
        self._connections = 0

    def next_connection_id(self) -> str:
        """``<pid>.<n>``: unique in a file that several runs appended to."""
        with self._lock:
            self._connections += 1
            return f"{os.getpid()}.{self._connections}"

    def write(self, text: str, direction: str, connection_id: str, client_id: str | None = None) -> None:
        """The line of one frame, written without copying the frame more than
        once (into its UTF-8 bytes): a spliced line is written as those
        bytes and its tail, in one ``writev``."""
        begin, end, tail = _line(
            text, direction, connection_id, transport=self.transport, client_id=client_id, ts=None, trusted=self.trusted
        )
        data = text.encode()  # after _line, which let go of whatever it parsed
        # What lies outside text[begin:end] is JSON whitespace and "}": one byte a character.
        body = memoryview(data)[begin : len(data) - (len(text) - end)] if end else b""
        self._write_pieces([body, tail.encode()])

    def write_closed(self, connection_id: str, client_id: str | None = None) -> None:
        """The line that says a connection closed: ``_ahpLog`` alone, with
        ``"event": "close"``, so the checker knows its client left."""
        log: dict[str, Any] = {
            "ts": utc_now(),
            "dir": "c2s",
            "connectionId": connection_id,
            "transport": self.transport,
            "event": "close",
        }
        if client_id is not None:
            log["clientId"] = client_id
        self._write_line(_dumps({"_ahpLog": log}) + "\n")

    def _write_line(self, line: str) -> None:
        self._write_pieces([line.encode()])

    def _write_pieces(self, pieces: list[bytes | memoryview]) -> None:
        views = [memoryview(p) for p in pieces if len(p)]
        with self._lock:
            if self._fd < 0:
                return
            while views:
                written = os.writev(self._fd, views)
                while views and written >= len(views[0]):
                    written -= len(views.pop(0))
                if written:
                    views[0] = views[0][written:]

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> CaptureFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_HELLO = re.compile(r'"method"\s*:\s*"(?:initialize|reconnect)"')


def client_id_of(text: str) -> str | None:
    """The ``clientId`` an ``initialize`` or ``reconnect`` request names, if ``text`` is one."""
    if _HELLO.search(text) is None:
        return None
    try:
        params = json.loads(text).get("params") or {}
    except (ValueError, AttributeError):
        return None
    client = params.get("clientId") if isinstance(params, dict) else None
    return client if isinstance(client, str) else None


class RecordingConnection:
    """A transport ``Connection`` that writes every frame it carries to a capture.

    Everything else is the wrapped connection's: attributes are passed
    through, so the host cannot tell the difference.
    """

    def __init__(self, conn: Any, capture: CaptureFile) -> None:
        self._conn = conn
        self._capture = capture
        self.connection_id = capture.next_connection_id()
        self.client_id: str | None = None
        self._closed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def receive(self) -> str | None:
        text = await self._conn.receive()
        if text is not None:
            self.client_id = client_id_of(text) or self.client_id
            self._capture.write(text, "c2s", self.connection_id, self.client_id)
        elif not self._closed:
            self._closed = True
            self._capture.write_closed(self.connection_id, self.client_id)
        return text

    def send(self, text: str, size: int | None = None) -> bool:
        sent = self._conn.send(text, size)
        if sent:
            shown = text if isinstance(text, str) else text.text()  # a frame made as bytes (a large read)
            self._capture.write(shown, "s2c", self.connection_id, self.client_id)
        return sent

    def follow(self, feed: Any) -> bool:
        """Never follows a channel's feed (``ahpd.host.kernel.feed``): every
        frame for it is queued through ``send``, where it is recorded."""
        return False

    def close(self, *args: Any, **kwargs: Any) -> None:
        self._conn.close(*args, **kwargs)


def recording(handler: Callable[[Any], Awaitable[None]], capture: CaptureFile) -> Callable[[Any], Awaitable[None]]:
    """``handler`` run on a ``RecordingConnection`` around each connection it is given."""

    async def handle(conn: Any) -> None:
        await handler(RecordingConnection(conn, capture))

    return handle
