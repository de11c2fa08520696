"""Reading captures back, one frame per line, in either shape.

The current shape is VS Code's: the message with ``_ahpLog`` beside it.
The older one put the frame under ``frame`` with ``at`` (timestamp),
``from`` (``client`` or ``host``) and ``peer`` (the connection) beside it;
captures taken before the change are still worth checking, so both are read.

Lines are streamed, never the whole file, so a capture of any size is read
in constant memory. Each line is parsed once, by orjson (several times the
stdlib's speed) when it is plain JSON; a line orjson refuses (NaN, Infinity,
a lone surrogate, a number out of range, another encoding) or one holding a
number of 19 digits or more (which orjson would read as a float where the
stdlib keeps the integer) is read by the stdlib's decoder instead, so every
line reads exactly as ``json.loads`` reads it and the checker reports the
same problems.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import orjson

#: Every ASCII digit to ``0``, every other byte to ``.``: a run of nineteen
#: digits (which orjson may read differently from ``json.loads``) is then a
#: plain substring search, several times cheaper than a regular expression
#: scanning every line.
_DIGITS = bytes(48 if 48 <= b <= 57 else 46 for b in range(256))
_LONG_NUMBER = b"0" * 19


def loads(raw: bytes) -> Any:
    """``json.loads(raw)``, faster."""
    if _LONG_NUMBER not in raw.translate(_DIGITS):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


_orjson_loads, _OrjsonError = orjson.loads, orjson.JSONDecodeError
_NOT_READ: Any = object()
_DIRECTIONS = {"c2s": "c2s", "s2c": "s2c", "client": "c2s", "host": "s2c", "server": "s2c"}


class ReadError(Exception):
    """A capture that cannot be read: a missing file, or a line that is not a frame."""

    def __init__(self, path: str, line: int | None, reason: str) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {reason}")
        self.path, self.line, self.reason = path, line, reason


class Frame(NamedTuple):
    """One frame as captured: where it is, who carried it, and the message."""

    path: str
    line: int
    direction: str  # "c2s" or "s2c"
    connection: str  # unique across the files read: "<file index>/<connection id>"
    client_id: str | None
    ts: str | None
    message: Any  # the JSON-RPC message; None for a frame that was not JSON (see ``unparsed``)
    unparsed: str | None = None
    closed: bool = False  # not a frame: the connection closed here


_make_frame = tuple.__new__


def read_frames(paths: Iterable[str]) -> Iterator[Frame]:
    """Every frame of every file, in file order then line order.

    One loop reads, parses and shapes each line, without a call per line of
    its own: this is the part of ``ahpd wire-check`` that runs for every
    frame of a capture, however clean."""
    for index, path in enumerate(paths):
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below; bytes: json decodes UTF-8 itself
        except OSError as exc:
            raise ReadError(path, None, exc.strerror or str(exc)) from None
        # Each connection id's name (``<file index>/<id>``), so that every frame of a
        # connection carries the same string, formatted and hashed once.
        names: dict[str, str] = {}
        with f:
            for number, raw in enumerate(f, 1):
                record = _NOT_READ  # ``loads``, written out
                if _LONG_NUMBER not in raw.translate(_DIGITS):
                    try:
                        record = _orjson_loads(raw)
                    except _OrjsonError:
                        pass
                if record is _NOT_READ:
                    if not raw.strip():  # a blank line, which no decoder reads
                        continue
                    try:
                        record = json.loads(raw)
                    except ValueError as exc:
                        raise ReadError(path, number, f"not JSON ({exc})") from None
                if not isinstance(record, dict):
                    raise ReadError(path, number, "not a JSON object")
                log = record.pop("_ahpLog", None)  # the record is ours: what is left is the message
                message: Any  # a dict, a list (a batch), anything JSON; None when there is none
                if isinstance(log, dict):
                    message = record
                    get = log.get
                    direction, conn = get("dir"), get("connectionId")
                    ts, client, unparsed = get("ts"), get("clientId"), get("unparsed")
                    closed = get("event") == "close"
                    if unparsed is not None or closed:
                        message = None
                elif "frame" in record:
                    message, unparsed, closed = record["frame"], None, False
                    direction, conn = record.get("from", record.get("dir")), record.get("peer")
                    ts, client = record.get("at", record.get("ts")), record.get("clientId")
                    if isinstance(message, str):  # the older shape kept the text itself
                        try:
                            message = json.loads(message)
                        except ValueError:
                            message, unparsed = None, record["frame"]
                else:
                    raise ReadError(path, number, "neither an _ahpLog line nor a {frame} line")
                if direction.__class__ is not str or direction not in _DIRECTIONS:
                    raise ReadError(path, number, f"unknown direction {direction!r}")
                name = names.get(conn) if conn.__class__ is str else None
                if name is None:
                    name = f"{index}/{conn if conn is not None else '-'}"
                    if conn.__class__ is str:
                        names[conn] = name
                # Every field given, in order: the tuple made directly, without the
                # NamedTuple's keyword-taking constructor (~5% of a large capture's check).
                yield _make_frame(
                    Frame,
                    (
                        path,
                        number,
                        _DIRECTIONS[direction],
                        name,
                        client if isinstance(client, str) else None,
                        ts if isinstance(ts, str) else None,
                        message,
                        unparsed,
                        closed,
                    ),
                )
