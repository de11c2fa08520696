"""A chat's journal on disk: JSON records appended one per line.

Why a journal. A chat grows by one turn at a time and is read mostly at its
end: a client opening it sees the newest turns and pages back only if it
scrolls. Rewriting the whole conversation on every turn costs what the
conversation weighs (megabytes, twice fsynced); appending costs what the
turn weighs. So each chat is a file of records, each one line of JSON:

* ``{"chat": {...}}`` - the chat's own fields (title, status bits,
  modifiedAt, origin...), everything but its turns; the last one counts.
* ``{"n": i, "turn": {...}}`` - the completed turn at position ``i``; a
  later record for the same position replaces it and everything after it.
* ``{"cut": n}`` - only the first ``n`` turns remain (a truncation, or the
  last turn taken back to be resumed).

Records are written in that key order (``"n"`` first), so finding where
each live turn lies needs no JSON parsing, only a look at a line's start.

Why it survives a crash. A write appends whole lines after the length the
writer knows to be good, cutting anything past it first: a write torn by a
crash or refused half-way by a full disk is replaced by the next one. A
reader takes the records up to the last whole one; a torn or garbled end is
dropped, never the file. A damaged line in the middle is skipped and said.

Why it stays small. Superseded records are dead weight; :func:`compact`
rewrites the file with only the live ones (atomically: a temporary file,
fsynced, renamed over), which the store does in the background when the
journal has grown past twice what it holds.

A journal is opened only if it is a regular file (``ahpd.ports.regular``:
a folder, a symlink or a FIFO in its place is ``NotRegular``), and what a
record holds is text a client can be sent (no NaN; a lone surrogate is
U+FFFD). Every function blocks; a trio caller runs it in a thread. Nothing
here knows the host.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ahpd.ports import regular
from ahpd.ports.atomic import fsync_dir, write_atomic

log = logging.getLogger("ahpd.store")

#: How much of the end of a journal is read at a time when reading its tail.
BLOCK = 64 * 1024

#: A turn's position past this is damage, not a chat (and would not fit a client's number).
MAX_POSITION = 2**31

_TURN = b'{"n":'
_CUT = b'{"cut":'
_CHAT = b'{"chat":'


def encode(record: dict[str, Any]) -> bytes:
    """One record as the line that keeps it (ASCII, so a lone surrogate a
    client sent is escaped rather than failing to encode)."""
    return json.dumps(record, allow_nan=False, separators=(",", ":")).encode() + b"\n"


def chat_line(fields: dict[str, Any]) -> bytes:
    return encode({"chat": fields})


def turn_line(n: int, turn: dict[str, Any]) -> bytes:
    return encode({"n": n, "turn": turn})


def cut_line(n: int) -> bytes:
    return encode({"cut": n})


def _record(line: bytes) -> dict[str, Any] | None:
    """A line's record, or None when it is not one of ours, whole."""
    try:
        record = regular.loads(line)  # NaN refused, lone surrogates made U+FFFD
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    if isinstance(record.get("chat"), dict) and len(record) == 1:
        return record
    cut = record.get("cut")
    if isinstance(cut, int) and not isinstance(cut, bool) and len(record) == 1 and 0 <= cut < MAX_POSITION:
        return record
    n = record.get("n")
    if (
        isinstance(n, int)
        and not isinstance(n, bool)
        and 0 <= n < MAX_POSITION
        and isinstance(record.get("turn"), dict)
        and len(record) == 2
    ):
        return record
    return None


# -- writing -------------------------------------------------------------------


def append(path: Path, at: int, data: bytes) -> int:
    """Write ``data`` at byte ``at`` of ``path``, cutting whatever lies past
    ``at`` first (a torn end, or a write that failed half-way); fsync it.
    Returns the new length. The folder is made, and fsynced, with the file."""
    created = not path.exists()
    if created:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, at)
        view = memoryview(data)
        offset = at
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)
    return at + len(data)


# -- reading the tail ------------------------------------------------------------


@dataclass
class Tail:
    """What the end of a journal says."""

    #: The chat's own fields (the last ``chat`` record), None if none was read.
    chat: dict[str, Any] | None = None
    #: The newest live turns, oldest first, at most the window asked for.
    turns: list[dict[str, Any]] = field(default_factory=list)
    #: The position of ``turns[0]``: how many live turns lie before the window.
    first: int = 0
    #: How many turns the chat holds.
    total: int = 0
    #: Bytes of whole records: where the next record goes.
    length: int = 0
    #: Bytes of a torn or garbled end, dropped.
    dropped: int = 0
    #: Bytes read that no longer count (superseded records, skipped lines).
    dead: int = 0
    #: The byte size of each line in ``turns``.
    sizes: list[int] = field(default_factory=list)


def _lines_backwards(f: Any, end: int) -> Any:
    """(start, line without its newline) from the end of ``f`` back, reading
    ``BLOCK`` bytes at a time; ``end`` is just past a newline (or 0)."""
    buffer = b""
    position = end
    while position > 0:
        size = min(BLOCK, position)
        position -= size
        f.seek(position)
        buffer = f.read(size) + buffer
        cut = buffer.rfind(b"\n", 0, len(buffer) - 1)
        while cut >= 0:
            line = buffer[cut + 1 : -1]
            yield position + cut + 1, line
            buffer = buffer[: cut + 1]
            cut = buffer.rfind(b"\n", 0, len(buffer) - 1)
    if buffer:
        yield 0, buffer[:-1]


def good_end(f: Any, size: int) -> tuple[int, int]:
    """(where the last whole record ends, the bytes past it that are torn or
    garbled)."""
    position = size
    while position > 0:  # the last newline
        start = max(0, position - BLOCK)
        f.seek(start)
        found = f.read(position - start).rfind(b"\n")
        if found >= 0:
            end = start + found + 1
            break
        position = start
    else:
        end = 0
    for start, line in _lines_backwards(f, end):
        if _record(line) is not None:
            return start + len(line) + 1, size - (start + len(line) + 1)
    return 0, size


def read_tail(path: Path, window: int) -> Tail:
    """The chat's fields and its newest ``window`` turns, reading the journal
    from its end back only as far as it must."""
    tail = Tail()
    with regular.open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        tail.length, tail.dropped = good_end(f, size)
        if tail.dropped:
            log.warning(
                "%s: the last %d byte(s) are not a whole record (a write cut short); dropped", path, tail.dropped
            )
        limit: int | None = None  # positions at or past it are superseded
        total: int | None = None
        newest: list[dict[str, Any]] = []
        for start, line in _lines_backwards(f, tail.length):
            if len(newest) >= window and tail.chat is not None:
                break
            size_of = len(line) + 1
            record = _record(line)
            if record is None:
                log.error("%s: the record at byte %d is damaged; skipped", path, start)
                tail.dead += size_of
            elif "chat" in record:
                if tail.chat is None:
                    tail.chat = record["chat"]
                else:
                    tail.dead += size_of
            elif "cut" in record:
                if total is None:
                    total = record["cut"]
                limit = record["cut"] if limit is None else min(limit, record["cut"])
                tail.dead += size_of
            else:
                n = record["n"]
                if limit is not None and n >= limit:
                    tail.dead += size_of
                    continue
                if total is None:
                    total = n + 1
                limit = n
                if len(newest) < window:
                    newest.append(record["turn"])
                    tail.sizes.append(size_of)
                    tail.first = n
        tail.turns = newest[::-1]
        tail.sizes.reverse()
        tail.total = total or 0
        if not newest:
            tail.first = tail.total
    return tail


# -- reading older turns ---------------------------------------------------------


@dataclass
class Index:
    """Where each live turn of a journal lies, for one version of the file
    (its inode and the length indexed): a compaction makes a new one."""

    inode: int
    length: int
    spans: list[tuple[int, int]]
    chat: tuple[int, int] | None
    dead: int


def index(f: Any, length: int, inode: int) -> Index:
    """Index ``length`` bytes of the journal: a look at each line's start,
    no JSON parsing, since the writer puts the position first."""
    f.seek(0)
    data = f.read(length)
    spans: list[tuple[int, int]] = []
    chat: tuple[int, int] | None = None
    dead = 0
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            break
        end += 1
        if data.startswith(_TURN, start):
            comma = data.find(b",", start, end)
            try:
                n = int(data[start + len(_TURN) : comma])
            except ValueError:
                n = -1
            if 0 <= n <= len(spans):
                dead += sum(e - s for s, e in spans[n:])
                del spans[n:]
                spans.append((start, end))
            else:
                dead += end - start
        elif data.startswith(_CUT, start):
            record = _record(data[start : end - 1])
            if record is not None:
                n = record["cut"]
                dead += sum(e - s for s, e in spans[n:])
                del spans[n:]
            dead += end - start
        elif data.startswith(_CHAT, start):
            if chat is not None:
                dead += chat[1] - chat[0]
            chat = (start, end)
        else:
            dead += end - start
        start = end
    return Index(inode, length, spans, chat, dead)


def read_turns(
    path: Path, length: int, lo: int, hi: int, known: Index | None = None
) -> tuple[list[dict[str, Any]], Index]:
    """The live turns at positions ``lo`` to ``hi`` (exclusive), and the index
    used to find them (``known`` again when it still fits the file)."""
    with regular.open_regular(path) as f:
        stat = os.fstat(f.fileno())
        if known is None or known.inode != stat.st_ino or known.length > stat.st_size:
            known = index(f, min(length, stat.st_size), stat.st_ino)
        turns = []
        for start, end in known.spans[lo:hi]:
            f.seek(start)
            record = _record(f.read(end - start - 1))
            if record is None or "turn" not in record:
                log.error("%s: the turn at byte %d is damaged; skipped", path, start)
                continue
            turns.append(record["turn"])
    return turns, known


# -- compaction ------------------------------------------------------------------


def compact(path: Path, length: int) -> tuple[int, int]:
    """Rewrite the journal with its live records only: each live turn,
    copied as it is, then the last ``chat`` record (last, so that reading
    the tail finds it at once). Returns (the new length, the inode of the
    new file)."""
    with regular.open_regular(path) as f:
        stat = os.fstat(f.fileno())
        found = index(f, min(length, stat.st_size), stat.st_ino)
        parts = []
        for start, end in found.spans:
            f.seek(start)
            parts.append(f.read(end - start))
        if found.chat is not None:
            f.seek(found.chat[0])
            parts.append(f.read(found.chat[1] - found.chat[0]))
    data = b"".join(parts)
    write_atomic(path, data)
    return len(data), os.stat(path).st_ino
