"""The agent's ``fs/*`` requests, confined to the conversation's folder.

Confinement is the filesystem port's (``ahpd.ports.fs``): each path is walked
one component at a time from the opened folder, so no link, ``..`` or swap
between check and use reaches outside. This module only speaks ACP: it
checks the path is absolute, as ACP requires, and turns the port's failures
into ``RequestError``s, which the library answers as JSON-RPC errors with
our message. These functions block; the caller runs them in a thread.
"""

from __future__ import annotations

import os
from pathlib import Path

from acp.exceptions import RequestError

from ahpd.ports import fs

#: The most of a file an agent is handed at once (read where used, so a test may lower it).
MAX_READ_BYTES = fs.MAX_READ_BYTES

_INVALID_PARAMS = -32602
_NOT_FOUND = -32002
_INTERNAL = -32603


def _absolute(path: str) -> str:
    if not isinstance(path, str) or not os.path.isabs(path):
        raise RequestError(_INVALID_PARAMS, f"the path must be absolute: {path!r}", {"path": path})
    return path


def _request_error(root: Path, path: str, exc: fs.FsError) -> RequestError:
    if isinstance(exc, fs.Outside):
        return RequestError(
            _INVALID_PARAMS,
            f"access refused: {path} is outside the conversation's working directory {root}",
            {"path": path, "root": str(root)},
        )
    if isinstance(exc, fs.NotFound):
        return RequestError(_NOT_FOUND, f"no such file: {path}", {"uri": path})
    if isinstance(exc, fs.IsADirectory):
        return RequestError(_INVALID_PARAMS, f"not a regular file: {path} is a folder", {"path": path})
    if isinstance(exc, fs.Refused):
        return RequestError(_INVALID_PARAMS, f"access refused: {exc}", {"path": path})
    if isinstance(exc, (fs.TooLarge, fs.NotADirectory, fs.Exists)):
        return RequestError(_INVALID_PARAMS, str(exc), {"path": path})
    return RequestError(_INTERNAL, str(exc), {"path": path})


def confine(root: Path, path: str) -> Path:
    """Where ``path`` leads inside ``root``, links followed; refused outside.

    Only for a terminal's starting folder, which the kernel resolves again
    when the process starts: that is no boundary (the command may ``cd``
    anywhere), so the name is enough there."""
    _absolute(path)
    try:
        with fs.Fence(root) as fence:
            return fence.resolve(path)
    except fs.FsError as exc:
        raise _request_error(root, path, exc) from None


def read_text(root: Path, path: str, line: int | None = None, limit: int | None = None) -> str:
    """The file's text (UTF-8, undecodable bytes replaced); from 1-based
    ``line``, at most ``limit`` lines, when given. Reading by lines never
    holds more of the file than the lines asked for."""
    _absolute(path)
    try:
        with fs.Fence(root) as fence:
            if line is None and limit is None:
                data = fence.read_bytes(path, MAX_READ_BYTES)
            else:
                data = fence.read_lines(path, line or 1, limit, MAX_READ_BYTES)
    except fs.TooLarge as exc:
        hint = "" if line is not None or limit is not None else "; read it by line and limit"
        raise RequestError(_INVALID_PARAMS, f"{exc}{hint}", {"path": path}) from None
    except fs.FsError as exc:
        raise _request_error(root, path, exc) from None
    return data.decode("utf-8", errors="replace")


def write_text(root: Path, path: str, content: str) -> None:
    """Create or replace the file (and its missing parent folders), atomically."""
    _absolute(path)
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RequestError(_INVALID_PARAMS, f"the content is not valid Unicode: {exc.reason}", {"path": path}) from None
    try:
        with fs.Fence(root) as fence:
            fence.write_bytes(path, data, parents=True)
    except fs.FsError as exc:
        raise _request_error(root, path, exc) from None
