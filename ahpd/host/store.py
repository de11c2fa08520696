"""Where sessions and the root config survive a restart: the stores.

The host writes down what it added on top of the agent's own conversation:
which client URI a session answers to, its provider and folder, its title,
the read and archived bits, its config, and each chat's turns as clients
last saw them. ``--sessions file`` keeps one JSON file per session and the
root config values a client pushed; ``--sessions memory`` keeps nothing
across a restart.

A disk that refuses a write (read-only, full, out of file descriptors) must
cost nothing a user set, and must not stop the daemon: a write is asked
for, never awaited. :class:`PendingWrites` holds the latest record of each
file until the disk takes it, writes off the event loop, and retries with
a backoff, logging once when the writes start failing and once when they
are taken again. Every write is atomic (a temporary file in the same
folder, fsynced, renamed over the old one), so a failed write leaves the
previous file whole. What is still pending when the host stops is written
on the way out.

A damaged file found at start (not JSON, nested past what the parser can
follow, a record missing what the host reads or holding the wrong types) is
set aside as ``<name>.damaged`` with a logged reason, and every other
session is still listed and opened.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import trio

log = logging.getLogger("ahpd.host")

#: The first retry of a refused write, and the longest wait between two.
FIRST_RETRY = 0.25
LAST_RETRY = 5.0
#: How deep a stored record may nest: far beyond any state a client is
#: served, far below where encoding it again would run out of stack.
MAX_DEPTH = 200


class SessionStore(Protocol):
    def load_all(self) -> list[dict[str, Any]]: ...
    def save(self, record: dict[str, Any]) -> None: ...
    def delete(self, uri: str) -> None: ...


# -- files -------------------------------------------------------------------


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` all at once: a reader (or the next start
    after a crash) sees the old file or the new one, never a part of either."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # The rename itself is durable only once the folder is.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def set_aside(path: Path, reason: str) -> None:
    """Move a damaged file out of the way, keeping it for whoever wants to
    look: ``<name>.damaged`` (``.damaged.1``... when that is taken)."""
    target = path.with_name(path.name + ".damaged")
    n = 0
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged.{n}")
    try:
        path.rename(target)
    except OSError as exc:
        log.error("%s is damaged (%s) and could not be set aside (%s); ignored", path, reason, exc.strerror or exc)
        return
    log.error("%s is damaged (%s); set aside as %s", path, reason, target.name)


def read_json(path: Path) -> Any:
    """The JSON in ``path``; ValueError naming what is wrong with it."""
    try:
        return json.loads(path.read_bytes())
    except RecursionError:
        raise ValueError("nested deeper than a record can be") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason})") from None
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None


def _reason(exc: OSError) -> str:
    """Why the disk refused, without the name of the temporary file it refused."""
    return exc.strerror or str(exc) or type(exc).__name__


class PendingWrites:
    """The latest write of each file, kept until the disk takes it.

    ``put(key, op)`` replaces whatever was pending for ``key``: only the
    latest record of a file is ever worth writing. ``prepare(key, op)`` runs
    on the event loop (it encodes the record, so no thread reads state the
    loop may be changing) and returns what a thread then does to the disk.

    While :meth:`run` runs, writes go through one task, in a thread, in the
    order they were asked for per key. Without it (before the host runs,
    and after it stopped) a write is done at once. A write the disk refuses
    stays pending and is retried; nothing is raised to whoever asked.
    """

    def __init__(self, what: str, prepare: Callable[[str, Any], Callable[[], None]]) -> None:
        self.what = what
        self._prepare = prepare
        self._pending: dict[str, Any] = {}
        self._wake: trio.Event | None = None
        #: Why writes are failing, while they are; None when the disk takes them.
        self.failing: str | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def put(self, key: str, op: Any) -> None:
        self._pending.pop(key, None)  # to the end: written in the order asked
        self._pending[key] = op
        if self._wake is not None:
            self._wake.set()
        else:
            self.flush()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._wake = trio.Event()
        task_status.started()
        delay = FIRST_RETRY
        try:
            while True:
                if not self._pending:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    continue
                key, op = next(iter(self._pending.items()))
                write = self._encode(key, op)
                if write is None:
                    continue
                try:
                    await trio.to_thread.run_sync(write)
                except OSError as exc:
                    self._failed(exc, key)
                    # Another file may be luckier (a file-descriptor
                    # shortage passes); this one waits its turn again.
                    if self._pending.get(key) is op:
                        self._pending[key] = self._pending.pop(key)
                    await trio.sleep(delay)
                    delay = min(delay * 2, LAST_RETRY)
                    continue
                self._done(key, op)
                delay = FIRST_RETRY
        finally:
            self._wake = None

    def flush(self) -> bool:
        """Write what is pending now, here; True when nothing is left."""
        for key, op in list(self._pending.items()):
            write = self._encode(key, op)
            if write is None:
                continue
            try:
                write()
            except OSError as exc:
                self._failed(exc, key)
                break
            self._done(key, op)
        return not self._pending

    def close(self) -> None:
        """The host stops: the last chance to write what a user set."""
        if self._pending and not self.flush():
            log.error("%s: %d record(s) could not be written before stopping (%s); what they held is lost",
                      self.what, len(self._pending), self.failing)

    def _encode(self, key: str, op: Any) -> Callable[[], None] | None:
        try:
            return self._prepare(key, op)
        except Exception:  # noqa: BLE001 - a record that cannot be written at all is dropped, said once
            log.exception("%s: the record of %s cannot be written; dropped", self.what, key)
            if self._pending.get(key) is op:
                del self._pending[key]
            return None

    def _done(self, key: str, op: Any) -> None:
        if self._pending.get(key) is op:
            del self._pending[key]
        if self.failing is not None:
            log.warning("%s: the disk takes writes again (after: %s); %d more pending",
                        self.what, self.failing, len(self._pending))
            self.failing = None

    def _failed(self, exc: OSError, key: str) -> None:
        if self.failing is None:
            log.error("%s: a write failed (%s, writing %s); kept in memory and retried until the disk takes it",
                      self.what, _reason(exc), key)
        self.failing = _reason(exc)


# -- sessions ----------------------------------------------------------------


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
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            log.error("cannot make the session folder %s (%s); sessions are kept in memory until it can be",
                      directory, _reason(exc))
        self.writes = PendingWrites(f"session store {directory}", self._prepare)

    def _path(self, uri: str) -> Path:
        return self.directory / (hashlib.sha256(uri.encode()).hexdigest()[:32] + ".json")

    def load_all(self) -> list[dict[str, Any]]:
        records: dict[str, dict[str, Any]] = {}
        chat_uris: set[str] = set()
        try:
            for stale in self.directory.glob("*.json.*.tmp"):  # a write a crash cut short
                stale.unlink()
            paths = sorted(self.directory.glob("*.json"))
        except OSError as exc:
            log.error("cannot list the session folder %s (%s); no stored session is offered",
                      self.directory, _reason(exc))
            return []
        for path in paths:
            try:
                record = read_json(path)
            except OSError as exc:
                log.error("session file %s cannot be read (%s); skipped", path, _reason(exc))
                continue
            except ValueError as exc:
                set_aside(path, str(exc))
                continue
            reason = record_problem(record)
            if reason is not None:
                set_aside(path, reason)
                continue
            chats = {c["uri"] for c in record.get("chats") or []}
            if record["uri"] in records or record["uri"] in chat_uris or chats & (chat_uris | set(records)):
                set_aside(path, f"names a session or chat another record holds ({record['uri']})")
                continue
            records[record["uri"]] = record
            chat_uris |= chats
        return list(records.values())

    def save(self, record: dict[str, Any]) -> None:
        self.writes.put(record["uri"], record)

    def delete(self, uri: str) -> None:
        self.writes.put(uri, None)

    def _prepare(self, uri: str, record: dict[str, Any] | None) -> Callable[[], None]:
        path = self._path(uri)
        if record is None:
            return lambda: path.unlink(missing_ok=True)
        data = json.dumps(record, allow_nan=False).encode()
        return lambda: write_atomic(path, data)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.writes.run(task_status=task_status)

    def close(self) -> None:
        self.writes.close()


def record_problem(record: Any) -> str | None:
    """What is wrong with a stored session record, or None: the keys the
    host reads, of the types it reads them as, and each chat's state in
    the shape a client is served (``ChatState``)."""
    if not isinstance(record, dict):
        return f"a record is an object, not {type(record).__name__}"
    if too_deep(record):
        return f"nested deeper than {MAX_DEPTH} levels"
    for key in ("uri", "provider", "cwd", "createdAt"):
        if not isinstance(record.get(key), str) or not record[key]:
            return f"{key} is missing or not a string"
    if not isinstance(record.get("title", ""), str):
        return "title is not a string"
    if record.get("defaultChat") is not None and not isinstance(record["defaultChat"], str):
        return "defaultChat is not a string"
    status = record.get("status", 0)
    if isinstance(status, bool) or not isinstance(status, int):
        return "status is not an integer"
    chats = record.get("chats")
    if chats is not None and not isinstance(chats, list):
        return "chats is not a list of chats"
    problem = _shape_problem("config", "SessionConfigState", record.get("config"))
    for n, chat in enumerate(chats or []):
        if problem is not None:
            break
        if not isinstance(chat, dict) or not isinstance(chat.get("uri"), str):
            return f"chats[{n}] has no uri"
        if chat.get("backendId") is not None and not isinstance(chat["backendId"], str):
            return f"chats[{n}].backendId is not a string"
        problem = _shape_problem(f"chats[{n}].state", "ChatState", chat.get("state"))
    return problem


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON ``value`` nests deeper than ``limit`` (looked at without recursing)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return False


def _shape_problem(where: str, model_name: str, value: Any) -> str | None:
    from ahpd.protocol import DecodeError, codec, model

    if value is None:
        return None
    try:
        codec.decode(getattr(model, model_name), value, strict=False)
    except DecodeError as err:
        return f"{where}: {err.reason} at {err.path}"
    except RecursionError:
        return f"{where} is nested deeper than a record can be"
    return None


# -- the root config -----------------------------------------------------------


class RootConfigStore:
    """The root config values a client pushed, kept across restarts
    (``--sessions file``), or not at all (``--sessions memory``). A value
    the host no longer accepts is dropped at start, by name."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.writes = PendingWrites(f"root config {path}", self._prepare)

    def load(self) -> dict[str, Any]:
        from ahpd.host import rootconfig

        if self.path is None:
            return {}
        try:
            values = read_json(self.path)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.error("%s cannot be read (%s); starting from the defaults", self.path, _reason(exc))
            return {}
        except ValueError as exc:
            set_aside(self.path, str(exc))
            return {}
        if not isinstance(values, dict):
            set_aside(self.path, f"the values are an object, not {type(values).__name__}")
            return {}
        kept = {}
        for key, value in values.items():
            problem = rootconfig.check_value(key, value)
            if problem is None and key not in rootconfig.CONNECTION_KEYS:
                kept[key] = value
            else:
                log.error("%s: %s; the default applies", self.path, problem or f"{key} is a connection's own")
        return kept

    def save(self, values: dict[str, Any]) -> None:
        if self.path is not None:
            self.writes.put("values", values)

    def _prepare(self, _: str, values: dict[str, Any]) -> Callable[[], None]:
        assert self.path is not None
        path, data = self.path, json.dumps(values, indent=1, sort_keys=True, allow_nan=False).encode()
        return lambda: write_atomic(path, data)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.writes.run(task_status=task_status)

    def close(self) -> None:
        self.writes.close()
