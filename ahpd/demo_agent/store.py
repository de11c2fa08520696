"""The demo agent's conversations on disk, so ``session/load`` works after a restart.

One JSON file per session, ``<home>/<session id>.json``, written atomically
(a temporary file in the same directory, flushed, then renamed over the old
one), so a reader or a crash never sees half a file. The layout::

    {
      "version": 1,
      "sessionId": "…", "cwd": "/abs/path",
      "createdAt": "2025-01-01T12:00:00.000Z", "updatedAt": "…",
      "title": "first prompt line" | null,
      "mode": "default",
      "messages": [{"id": "…", "role": "user" | "agent", "text": "…"}, …]
    }

Only the conversation is kept (what the user said and the agent's replies),
not tool calls or reasoning: that is what ``session/load`` replays.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from ahpd.ports.atomic import write_atomic

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def now() -> str:
    """The current time as ISO 8601 UTC with milliseconds, e.g. ``2025-01-01T12:00:00.000Z``."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id() -> str:
    return uuid.uuid4().hex


def valid_session_id(session_id: str) -> bool:
    """Whether ``session_id`` can name a file here (no separators, no leading dot)."""
    return _SESSION_ID.fullmatch(session_id) is not None


@dataclass
class Message:
    role: Literal["user", "agent"]
    text: str
    id: str = field(default_factory=new_id)


@dataclass
class SessionRecord:
    session_id: str
    cwd: str
    created_at: str
    updated_at: str
    title: str | None = None
    mode: str = "default"
    messages: list[Message] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "sessionId": self.session_id,
            "cwd": self.cwd,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "title": self.title,
            "mode": self.mode,
            "messages": [{"id": m.id, "role": m.role, "text": m.text} for m in self.messages],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionRecord:
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"unknown session file version {data.get('version')!r}")
        messages = [Message(role=m["role"], text=m["text"], id=m.get("id") or new_id()) for m in data["messages"]]
        for message in messages:
            if message.role not in ("user", "agent") or not isinstance(message.text, str):
                raise ValueError("malformed message")
        return cls(
            session_id=data["sessionId"],
            cwd=data["cwd"],
            created_at=data["createdAt"],
            updated_at=data["updatedAt"],
            title=data.get("title"),
            mode=data.get("mode") or "default",
            messages=messages,
        )


class SessionStore:
    """Session files in one directory (created ``0700`` on first write)."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def _path(self, session_id: str) -> Path:
        if not valid_session_id(session_id):
            raise ValueError(f"invalid session id {session_id!r}")
        return self.home / f"{session_id}.json"

    def create(self, cwd: str) -> SessionRecord:
        stamp = now()
        record = SessionRecord(session_id=new_id(), cwd=cwd, created_at=stamp, updated_at=stamp)
        self.save(record)
        return record

    def get(self, session_id: str) -> SessionRecord | None:
        """The stored session, or ``None`` if there is none (or it cannot be read)."""
        if not valid_session_id(session_id):
            return None
        return self._read(self._path(session_id))

    def save(self, record: SessionRecord) -> None:
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self._path(record.session_id)
        data = json.dumps(record.to_json(), ensure_ascii=False, indent=1).encode("utf-8")
        write_atomic(path, data)

    def delete(self, session_id: str) -> bool:
        """Remove a session; ``False`` if there was none."""
        if not valid_session_id(session_id):
            return False
        try:
            self._path(session_id).unlink()
        except FileNotFoundError:
            return False
        return True

    def all(self, cwd: str | None = None) -> list[SessionRecord]:
        """Every readable session (of ``cwd`` if given), most recently updated first."""
        if not self.home.is_dir():
            return []
        records = []
        for path in self.home.glob("*.json"):
            if path.name.startswith("."):
                continue
            record = self._read(path)
            if record is not None and (cwd is None or record.cwd == cwd):
                records.append(record)
        records.sort(key=lambda r: (r.updated_at, r.session_id), reverse=True)
        return records

    def _read(self, path: Path) -> SessionRecord | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read %s: %s", path, exc)
            return None
        try:
            record = SessionRecord.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring malformed session file %s: %s", path, exc)
            return None
        if f"{record.session_id}.json" != path.name:
            log.warning("ignoring session file %s: it names session %s", path, record.session_id)
            return None
        return record
