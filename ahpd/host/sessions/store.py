"""Where sessions and the root config survive a restart: the stores.

The host writes down what it added on top of the agent's own conversation:
which client URI a session answers to, its provider and folder, its title,
the read and archived bits, its config, and each chat's turns as clients
last saw them. ``--sessions file`` keeps a folder per session (its own
fields in ``session.json``, and an append-only journal per chat, see
:mod:`ahpd.ports.journal`) and the root config values a client pushed;
``--sessions memory`` keeps nothing across a restart.

A save is told the session as the host holds it; the store appends only what
moved since the last (a chat's fields, new turns, a cut when turns were taken
back): a turn on a chat of 10,000 turns writes one turn. A loaded session
holds each chat's newest ``WINDOW`` turns; ``older_turns`` reads the rest.

A disk that refuses a write (read-only, full, out of descriptors) must cost
nothing a user set nor stop the daemon: a write is asked for, never awaited.
:class:`PendingWrites` holds each file's latest record until the disk takes
it, writes off the loop, retries with a backoff, and logs once when writes
start failing and once when they are taken again. A whole file is written
atomically (temporary file, fsync, rename) and a journal appended past its
last whole record, so a failed write leaves what was there whole; what is
pending when the host stops is written on the way out.

A damaged file found at start (not JSON, a record ``record_checks`` refuses,
a journal holding no chat record, a folder, symlink or FIFO where a file
should be) is set aside as ``<name>.damaged`` with a logged reason, and every
other session is still listed and opened; a damaged record inside a journal
is skipped and said. Files are opened only if regular (``ahpd.ports.regular``),
and a lone surrogate read from disk becomes U+FFFD, so nothing listed fails to encode.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import trio

from ahpd.ports import journal
from ahpd.host.kernel.writes import PendingWrites, disk_reason, read_json, set_aside
from ahpd.host.sessions.record_checks import record_problem, shape_problem
from ahpd.ports.atomic import write_atomic
from ahpd.ports import threads

log = logging.getLogger("ahpd.host")


class SessionStore(Protocol):
    def load_all(self) -> list[dict[str, Any]]: ...
    def save(self, record: dict[str, Any]) -> None: ...
    def delete(self, uri: str) -> None: ...
    def rename(self, uri: str, respell: Callable[[Any], Any]) -> dict[str, Any] | None: ...
    def move_chat(self, chat_uri: str, source_uri: str, target_uri: str) -> None: ...
    async def older_turns(self, chat_uri: str, before: int, count: int) -> list[dict[str, Any]]: ...


# -- sessions ----------------------------------------------------------------

#: The newest turns of a chat a loaded session holds; older ones are read
#: from the store when ``fetchTurns`` asks (the seed: "newest 50 in the
#: snapshot and a cursor for the rest").
WINDOW = 50
#: Turns the store keeps a reference to after they are on disk, to tell
#: what moved at the next save.
KEEP = 2 * WINDOW
#: A journal is compacted when it is more than ``COMPACT_RATIO`` times what
#: it holds, and at least this big.
COMPACT_MIN = 64 * 1024
COMPACT_RATIO = 2
#: A chat's fields are said again once this many bytes of turns followed
#: them, so that reading a journal's tail never walks far to find them.
FIELDS_EVERY = 256 * 1024
#: A session's own fields, as its head file keeps them (the turns are the chats').
HEAD_KEYS = ("uri", "provider", "cwd", "createdAt", "title", "status", "config", "defaultChat")


def cursor_position(state: dict[str, Any]) -> int:
    """How many turns lie before a chat state's window (its ``older:<n>`` cursor)."""
    cursor = state.get("turnsNextCursor")
    if isinstance(cursor, str) and cursor.startswith("older:") and cursor[6:].isdigit():
        return int(cursor[6:])
    return 0


def _name(uri: str) -> str:
    return hashlib.sha256(uri.encode()).hexdigest()[:32]


def _chat_head(chat: dict[str, Any]) -> dict[str, Any]:
    """What a session's head keeps of one chat: its name, its agent's id,
    the folder it works in when that is not its session's, and its rewind
    points."""
    head = {"uri": chat["uri"], "backendId": chat.get("backendId")}
    if isinstance(chat.get("cwd"), str):
        head["cwd"] = chat["cwd"]
    if isinstance(chat.get("rewind"), dict):
        head["rewind"] = chat["rewind"]  # where its turns can be rewound to (ahpd.host.sessions.chats.rewind)
    return head


class ChatLog:
    """What the store knows of one chat: what it last recorded, and the
    lines not yet on disk. Turns are compared by reference first: a reducer
    makes a new dict for a turn it changes and keeps the others."""

    def __init__(self, uri: str, path: Path | None) -> None:
        self.uri = uri
        self.path = path
        self.fields: dict[str, Any] | None = None
        self.fields_size = 0
        #: Bytes of turns written since the fields were (see ``FIELDS_EVERY``).
        self.since_fields = 0
        #: Turns at positions ``base`` to ``total``, as last recorded.
        self.base = 0
        self.written: list[dict[str, Any]] = []
        self.sizes: list[int] = []
        self.total = 0
        self.unwritten: list[bytes] = []
        #: Bytes of whole records on disk, and how many of them are dead.
        self.length = 0
        self.dead = 0
        self.index: journal.Index | None = None
        #: Where the journal still is when the chat moved to another session
        #: and its file has not followed yet (see ``move_chat``).
        self.moved_from: Path | None = None

    def record(self, state: dict[str, Any]) -> None:
        """The chat as the host holds it now; what moved becomes lines to
        append. Everything is encoded before anything is noted, so a value
        JSON cannot hold (NaN) is refused with the log as it was."""
        fields = {k: v for k, v in state.items() if k not in ("turns", "turnsNextCursor")}
        said = fields != self.fields or self.since_fields > FIELDS_EVERY
        fields_line = journal.chat_line(fields) if said else b""
        turns = state.get("turns") or []
        first = cursor_position(state)
        total = first + len(turns)
        # Turns before the store's own window came from the journal: the same.
        n = min(max(first, self.base), total)
        while n < min(total, self.total):
            mine, theirs = self.written[n - self.base], turns[n - first]
            if mine is not theirs and mine != theirs:
                break
            n += 1
        added = [journal.turn_line(p, turns[p - first]) for p in range(max(n, first), total)]
        if said:
            self.unwritten.append(fields_line)
            self.dead += self.fields_size
            self.fields, self.fields_size, self.since_fields = fields, len(fields_line), 0
        if n < self.total:
            self.unwritten.append(journal.cut_line(n))
            keep = max(0, n - self.base)
            self.dead += sum(self.sizes[keep:])
            del self.written[keep:], self.sizes[keep:]
            self.base = min(self.base, n)
            self.total = n
        self.unwritten += added
        self.written += turns[max(n, first) - first :]
        self.sizes += [len(line) for line in added]
        self.since_fields += sum(len(line) for line in added)
        self.total = max(self.total, total)

    def whole(self) -> dict[str, Any] | None:
        """The chat with every turn: those before the window read from its journal."""
        if self.fields is None or self.base == 0 or self.path is None:
            return self.state(window=self.total)
        older, self.index = journal.read_turns(self.path, self.length, 0, self.base, self.index)
        return {**self.fields, "turns": older + self.written}

    def trim(self) -> None:
        """Forget the turns past ``KEEP``: they are on disk."""
        if self.path is not None and not self.unwritten and len(self.written) > KEEP:
            drop = len(self.written) - KEEP
            del self.written[:drop], self.sizes[:drop]
            self.base += drop

    def state(self, window: int = WINDOW) -> dict[str, Any] | None:
        """The chat as a loaded session holds it: its newest turns and a cursor to the rest."""
        if self.fields is None:
            return None
        turns = self.written[-window:]
        first = self.total - len(turns)
        state = {**self.fields, "turns": list(turns)}
        if first > 0:
            state["turnsNextCursor"] = f"older:{first}"
        return state


class SessionLog:
    """What the store knows of one session: its head (the session's own
    fields and its chats' names) and a journal per chat."""

    def __init__(self, uri: str, folder: Path | None) -> None:
        self.uri = uri
        self.folder = folder
        self.head: dict[str, Any] | None = None
        #: The head as JSON, as it was compared and is written.
        self.head_json: str | None = None
        self.head_dirty = False
        self.chats: dict[str, ChatLog] = {}
        #: Journals of chats the session no longer has.
        self.gone: list[Path] = []
        #: The whole-record file of an older ahpd, removed once the journal is written.
        self.legacy: Path | None = None

    def chat_path(self, chat_uri: str) -> Path | None:
        return self.folder / f"{_name(chat_uri)}.jsonl" if self.folder is not None else None

    def record(self, record: dict[str, Any]) -> list[str]:
        """The session as the host holds it now; the URIs of chats it dropped."""
        # Everything beside its chats (owner, annotations, changeset reviews...)
        # is the head: a key the store does not know is still the host's to keep.
        head = {**{k: record.get(k) for k in HEAD_KEYS}, **{k: v for k, v in record.items() if k != "chats"}}
        head["chats"] = [_chat_head(c) for c in record.get("chats") or []]
        # Kept as a copy: the record shares live dicts (a changeset's reviews) that change in place.
        encoded = json.dumps(head, allow_nan=False)  # refused here, not in the writer
        if encoded != self.head_json:
            self.head, self.head_json, self.head_dirty = json.loads(encoded), encoded, True
        seen = set()
        for chat in record.get("chats") or []:
            seen.add(chat["uri"])
            log_ = self.chats.get(chat["uri"])
            if log_ is None:
                log_ = self.chats[chat["uri"]] = ChatLog(chat["uri"], self.chat_path(chat["uri"]))
            if chat.get("state") is not None:
                log_.record(chat["state"])
        dropped = [uri for uri in self.chats if uri not in seen]
        for uri in dropped:
            path = self.chats.pop(uri).path
            if path is not None:
                self.gone.append(path)
        return dropped

    def loaded(self) -> dict[str, Any]:
        """The session as a loaded one starts: each chat's newest turns."""
        assert self.head is not None
        return {
            **self.head,
            "chats": [
                {**c, "state": self.chats[c["uri"]].state() if c["uri"] in self.chats else None}
                for c in self.head["chats"]
            ],
        }


class _Deleted:
    def __init__(self, session: SessionLog) -> None:
        self.session = session


class MemorySessionStore:
    """Sessions kept in memory only (``--sessions memory``), told what moved
    the same way the file store is."""

    def __init__(self) -> None:
        self.sessions: dict[str, SessionLog] = {}
        self.chat_logs: dict[str, ChatLog] = {}

    def load_all(self) -> list[dict[str, Any]]:
        return [json.loads(json.dumps(s.loaded(), allow_nan=False)) for s in self.sessions.values()]

    def _folder(self, uri: str) -> Path | None:
        return None

    def save(self, record: dict[str, Any]) -> None:
        session = self.sessions.get(record["uri"])
        if session is None:
            session = self.sessions[record["uri"]] = SessionLog(record["uri"], self._folder(record["uri"]))
        for uri in session.record(record):
            self.chat_logs.pop(uri, None)
        self.chat_logs.update(session.chats)
        self._changed(session)

    def _changed(self, session: SessionLog) -> None:
        for chat in session.chats.values():
            chat.unwritten.clear()
        session.head_dirty = False
        session.gone.clear()

    def move_chat(self, chat_uri: str, source_uri: str, target_uri: str) -> None:
        """A chat changes session: its journal (every turn, and what is not
        written yet) goes with it, so the source's next save does not take it
        for a chat it dropped and the target's appends where it left off. The
        file follows at the target's next write, after the source's (the two
        saves are asked in that order): a crash between them loses no turn."""
        source = self.sessions.get(source_uri)
        chat = source.chats.pop(chat_uri, None) if source is not None else None
        if chat is None:
            return
        target = self.sessions.get(target_uri)
        if target is None:
            target = self.sessions[target_uri] = SessionLog(target_uri, self._folder(target_uri))
        if chat.path is not None:
            chat.moved_from = chat.moved_from or chat.path
            chat.path = target.chat_path(chat_uri)
        target.chats[chat_uri] = chat

    def delete(self, uri: str) -> None:
        session = self.sessions.pop(uri, None)
        if session is not None:
            for chat_uri in session.chats:
                self.chat_logs.pop(chat_uri, None)
            self._deleted(session)

    def _deleted(self, session: SessionLog) -> None:
        pass

    def rename(self, uri: str, respell: Callable[[Any], Any]) -> dict[str, Any] | None:
        """The session stored as ``uri`` kept under the name ``respell`` gives its
        whole record (every turn), written before the old is removed (the head
        says ``renamedFrom``: a crash's leftover is told apart). The record as
        loaded, or None (no such session, the name taken, the disk refused)."""
        old = self.sessions.get(uri)
        if old is None or old.head is None:
            return None
        try:
            logs = old.chats
            chats = [{**c, "state": logs[c["uri"]].whole() if c["uri"] in logs else None} for c in old.head["chats"]]
        except (OSError, ValueError) as exc:
            log.error("session %s keeps its name: its turns cannot be read (%s)", uri, exc)
            return None
        record = respell({**old.head, "chats": chats})
        if record["uri"] in self.sessions:
            return None
        new = SessionLog(record["uri"], self._folder(record["uri"]))
        new.record({**record, "renamedFrom": uri})
        self.sessions[new.uri] = new
        if not self._replaced(old, new):
            del self.sessions[new.uri]
            return None
        del self.sessions[uri]
        for chat_uri in old.chats:
            self.chat_logs.pop(chat_uri, None)
        self.chat_logs.update(new.chats)
        return new.loaded()

    def _replaced(self, old: SessionLog, new: SessionLog) -> bool:
        self._changed(new)
        return True

    async def older_turns(self, chat_uri: str, before: int, count: int) -> list[dict[str, Any]]:
        """The turns of ``chat_uri`` at positions ``before - count`` to ``before``."""
        chat = self.chat_logs.get(chat_uri)
        if chat is None:
            return []
        lo, before = max(0, before - count), min(before, chat.total)
        if lo >= chat.base or chat.path is None:
            return list(chat.written[max(0, lo - chat.base) : max(0, before - chat.base)])
        path, length, index = chat.moved_from or chat.path, chat.length, chat.index
        turns, chat.index = await threads.run(
            "store", journal.read_turns, path, length, lo, min(before, chat.base), index
        )
        return turns + chat.written[: max(0, before - chat.base)]


class FileSessionStore(MemorySessionStore):
    """Each session a folder: ``session.json`` (its own fields, rewritten
    whole when they change, which is rarely) and a journal per chat
    (:mod:`ahpd.ports.journal`) that a turn appends to. Loading a session
    reads each journal's tail window only. A session file of an older ahpd
    (``<name>.json``, the whole record) still loads, and is turned into a
    folder at once."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            log.error(
                "cannot make the session folder %s (%s); sessions are kept in memory until it can be",
                directory,
                disk_reason(exc),
            )
        self.writes = PendingWrites(f"session store {directory}", self._prepare)

    def _folder(self, uri: str) -> Path | None:
        return self.directory / _name(uri)

    def load_all(self) -> list[dict[str, Any]]:
        records: dict[str, dict[str, Any]] = {}
        chat_uris: set[str] = set()
        try:
            for stale in [*self.directory.glob("*.json.*.tmp"), *self.directory.glob("*/*.tmp")]:
                stale.unlink()  # a write a crash cut short
            # The folders first: what an older ahpd wrote yields to them.
            paths = sorted(p for p in self.directory.iterdir() if p.is_dir() and "." not in p.name) + sorted(
                self.directory.glob("*.json")
            )
        except OSError as exc:
            log.error(
                "cannot list the session folder %s (%s); no stored session is offered", self.directory, disk_reason(exc)
            )
            return []
        legacy = []
        for path in paths:
            if path.is_dir():
                session = self._read_folder(path)
                if session is None:
                    continue
                record = session.loaded()
            else:
                if path.with_suffix("").is_dir() and (path.with_suffix("") / "session.json").exists():
                    with contextlib.suppress(OSError):
                        path.unlink()  # turned into a folder already; a crash came before its removal
                    continue
                try:
                    record = read_json(path)
                except OSError as exc:
                    log.error("session file %s cannot be read (%s); skipped", path, disk_reason(exc))
                    continue
                except ValueError as exc:
                    set_aside(path, str(exc))
                    continue
                reason = record_problem(record)
                if reason is not None:
                    set_aside(path, reason)
                    continue
                session = None
            chats = {c["uri"] for c in record.get("chats") or []}
            if record["uri"] in records or record["uri"] in chat_uris or chats & (chat_uris | set(records)):
                set_aside(path, f"names a session or chat another record holds ({record['uri']})")
                continue
            if session is None:
                session = SessionLog(record["uri"], self._folder(record["uri"]))
                session.legacy = path
                session.record(record)
                legacy.append(session)
                record = session.loaded()
            self.sessions[record["uri"]] = session
            self.chat_logs.update(session.chats)
            records[record["uri"]] = record
            chat_uris |= chats
        for session in legacy:  # written now (or, on a failing disk, retried once the host runs)
            self.writes.put(session.uri, object())
        return list(records.values())

    def _read_folder(self, folder: Path) -> SessionLog | None:
        try:
            head = read_json(folder / "session.json")
        except FileNotFoundError:
            return None  # a session whose first write never completed
        except OSError as exc:
            log.error("session %s cannot be read (%s); skipped", folder, disk_reason(exc))
            return None
        except ValueError as exc:
            set_aside(folder, f"session.json: {exc}")
            return None
        reason = record_problem(head)
        if reason is not None:
            set_aside(folder, f"session.json: {reason}")
            return None
        session = SessionLog(head["uri"], folder)
        session.head = {
            **{k: head.get(k) for k in HEAD_KEYS},
            **{k: v for k, v in head.items() if k != "chats"},
            "chats": [_chat_head(c) for c in head.get("chats") or []],
        }
        session.head_json = json.dumps(session.head)  # as record() encodes it: unchanged, not rewritten
        for chat in session.head["chats"]:
            path = session.chat_path(chat["uri"])
            assert path is not None
            chat_log = session.chats[chat["uri"]] = ChatLog(chat["uri"], path)
            try:
                tail = journal.read_tail(path, WINDOW)
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.error("the journal of %s cannot be read (%s); the chat starts empty", chat["uri"], disk_reason(exc))
                continue
            except ValueError as exc:  # a folder, a symlink, a FIFO in its place
                set_aside(path, str(exc))
                continue
            state = {**(tail.chat or {}), "turns": tail.turns}
            if tail.chat is None:  # empty (a crash before its first write), or nothing whole
                problem: str | None = f"{chat['uri']}: the journal holds no record of the chat"
            else:
                problem = shape_problem(chat["uri"], "ChatState", state)
            if problem is None:
                problem = next((p for p in (shape_problem(chat["uri"], "Turn", t) for t in tail.turns) if p), None)
            if problem is not None:
                set_aside(path, problem)
                continue
            chat_log.fields = tail.chat
            chat_log.base, chat_log.written, chat_log.sizes = tail.first, tail.turns, tail.sizes
            chat_log.total, chat_log.length, chat_log.dead = tail.total, tail.length, tail.dead
        return session

    def _changed(self, session: SessionLog) -> None:
        self.writes.put(session.uri, object())

    def _deleted(self, session: SessionLog) -> None:
        self.writes.put(session.uri, _Deleted(session))

    def _replaced(self, old: SessionLog, new: SessionLog) -> bool:
        """A renamed session written at once (at the start), then the old removed."""
        try:
            then = self._prepare(new.uri, object())()
        except OSError as exc:
            log.error("session %s could not be written under its new name (%s)", new.uri, disk_reason(exc))
            if new.folder is not None:
                shutil.rmtree(new.folder, ignore_errors=True)
            return False
        if then is not None:
            then()
        # What was moved goes, the head first; anything set aside beside it stays for a person.
        moved = [old.folder / "session.json"] if old.folder is not None else []
        moved += [c.path for c in old.chats.values() if c.path is not None] + ([old.legacy] if old.legacy else [])
        for path in moved:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        if old.folder is not None:
            with contextlib.suppress(OSError):
                old.folder.rmdir()
        return True

    def _prepare(self, uri: str, op: Any) -> Callable[[], Callable[[], None] | None]:
        """Encode on the loop what a thread then writes: each chat's new
        lines appended (and its journal compacted when it is mostly dead),
        the head when it moved, the older file gone once all is written."""
        if isinstance(op, _Deleted):
            folder, legacy = op.session.folder, op.session.legacy

            def delete() -> None:
                if folder is not None:
                    shutil.rmtree(folder, ignore_errors=True)
                if legacy is not None:
                    legacy.unlink(missing_ok=True)
                if folder is not None:
                    folder.with_suffix(".json").unlink(missing_ok=True)

            return delete  # nothing to note after it: the session is gone
        session = self.sessions.get(uri)
        if session is None or session.folder is None:
            return lambda: lambda: None
        folder = session.folder
        chats = []
        for chat in session.chats.values():
            assert chat.path is not None  # a chat of a session with a folder has its journal in it
            data = b"".join(chat.unwritten)
            size = chat.length + len(data)
            compact = size >= COMPACT_MIN and chat.dead * COMPACT_RATIO > size
            if data or compact or chat.moved_from is not None:
                chats.append(
                    (chat, chat.path, chat.length, data, len(chat.unwritten), compact and chat.dead, chat.moved_from)
                )
        head = session.head_json if session.head_dirty else None  # encoded once, by record()
        gone, legacy = list(session.gone), session.legacy

        def write() -> Callable[[], None]:
            results = []
            for chat, path, at, data, _, compact, moved_from in chats:
                if moved_from is not None:
                    folder.mkdir(mode=0o700, exist_ok=True)
                    with contextlib.suppress(FileNotFoundError):  # a chat whose journal was never written
                        os.replace(moved_from, path)
                length = journal.append(path, at, data) if data else at
                if compact:
                    length, _ = journal.compact(path, length)
                    log.info("%s: journal compacted to %d bytes", chat.uri, length)
                results.append(length)
            if head is not None:
                folder.mkdir(mode=0o700, exist_ok=True)
                write_atomic(folder / "session.json", head.encode())
            for path in gone:
                path.unlink(missing_ok=True)
            if legacy is not None:
                legacy.unlink(missing_ok=True)

            def then() -> None:
                for (chat, _, _, _, count, compact, moved_from), length in zip(chats, results, strict=True):
                    if moved_from is not None and chat.moved_from is moved_from:
                        chat.moved_from = None
                    del chat.unwritten[:count]
                    chat.length = length
                    if compact:  # what died since the snapshot is still dead
                        chat.dead, chat.index = max(0, chat.dead - compact), None
                    chat.trim()
                if head is not None and session.head_json is head:
                    session.head_dirty = False
                del session.gone[: len(gone)]
                if legacy is not None and session.legacy is legacy:
                    session.legacy = None

            return then

        return write

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.writes.run(task_status=task_status)

    def close(self) -> None:
        self.writes.close()
