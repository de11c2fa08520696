"""What every module of the sessions package reads: the status bits a
summary carries, and the URIs a session and its chats are named by.

Only the id inside a session URI is ever read, so these are plain functions
of strings, importable by anything without reaching the session objects.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

IDLE = 1
ERROR = 2
INPUT_NEEDED = 24
ACTIVITY_BITS = 1 | 2 | 8 | 16
TURN_WINDOW = 50
IS_READ = 32
IS_ARCHIVED = 64


def session_id(uri: str) -> str:
    """Only the id inside a session URI is ever read: its last path segment."""
    parsed = urlparse(uri)
    return (parsed.path or parsed.netloc).rstrip("/").rsplit("/", 1)[-1]


def default_chat_uri(session_uri: str) -> str:
    encoded = base64.urlsafe_b64encode(session_uri.encode()).decode().rstrip("=")
    return f"ahp-chat://default/{encoded}"


#: The scheme the spec names sessions by. This host lists a session as
#: ``<provider>:/<id>`` instead, and answers this spelling too (``aliases``).
SESSION_SCHEME = "ahp-session"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def session_uri(provider: str, sid: str) -> str:
    """The name this host keeps and lists a session by: ``<provider>:/<id>``,
    what the reference client computes both when it creates a session and
    when it reopens one it listed. A provider whose name is not a URI scheme
    (an ACP agent named ``my_agent``) keeps the spec's ``ahp-session:/<id>``."""
    return f"{provider if _SCHEME.fullmatch(provider) else SESSION_SCHEME}:/{sid}"


def catalogue_uri(provider: str, backend_id: str) -> str:
    """A stored conversation's session URI: ``claude:/<id>``."""
    return f"{provider}:/{backend_id}"


def path_of(file_uri: str) -> Path:
    parsed = urlparse(file_uri)
    if parsed.scheme != "file":
        raise ValueError(f"{file_uri} is not a file: URI")
    return Path(unquote(parsed.path))


def transcript(turns: list[dict[str, Any]]) -> str:
    """What a conversation said, as plain text for a model to read (a new
    conversation handed what an older one said)."""
    lines = []
    for turn in turns:
        lines.append(f"User: {turn.get('message', {}).get('text', '')}")
        reply = "".join(p.get("content", "") for p in turn.get("responseParts", []) if p.get("kind") == "markdown")
        if reply:
            lines.append(f"Assistant: {reply}")
    return "\n".join(lines)
