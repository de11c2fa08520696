"""Where sessions survive a restart: the session store port.

The host writes down what it added on top of the agent's own conversation:
which client URI a session answers to, its provider and folder, its title,
the read and archived bits, its config, and each chat's turns as clients
last saw them. ``--sessions file`` keeps one JSON file per session;
``--sessions memory`` keeps nothing across a restart.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("ahpd.host")


class SessionStore(Protocol):
    def load_all(self) -> list[dict[str, Any]]: ...
    def save(self, record: dict[str, Any]) -> None: ...
    def delete(self, uri: str) -> None: ...


class MemorySessionStore:
    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}

    def load_all(self) -> list[dict[str, Any]]:
        return [json.loads(json.dumps(r, allow_nan=False)) for r in self.records.values()]

    def save(self, record: dict[str, Any]) -> None:
        self.records[record["uri"]] = json.loads(json.dumps(record, allow_nan=False))

    def delete(self, uri: str) -> None:
        self.records.pop(uri, None)


class FileSessionStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, uri: str) -> Path:
        return self.directory / (hashlib.sha256(uri.encode()).hexdigest()[:32] + ".json")

    def load_all(self) -> list[dict[str, Any]]:
        records = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                log.error("session record %s is unreadable (%s); skipped", path, exc)
                continue
            if isinstance(record, dict) and isinstance(record.get("uri"), str):
                records.append(record)
        return records

    def save(self, record: dict[str, Any]) -> None:
        path = self._path(record["uri"])
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, ensure_ascii=False, allow_nan=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def delete(self, uri: str) -> None:
        self._path(uri).unlink(missing_ok=True)
