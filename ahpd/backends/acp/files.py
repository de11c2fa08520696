"""The agent's ``fs/*`` requests, confined to the conversation's folders.

The folders are the conversation's working directory and the ones granted
beside it (a session's ``workingDirectories`` past index 0): a path is
served by the folder it lies in, so an added folder reaches the agent's file
access as the primary does. Confinement is the filesystem port's
(``ahpd.ports.fs``): each path is walked one component at a time from the
opened folder, so no link, ``..`` or swap between check and use reaches
outside the folder that serves it. This module only speaks ACP: it
checks the path is absolute, as ACP requires, and turns the port's failures
into ``RequestError``s, which the library answers as JSON-RPC errors with
our message. These functions block; the caller runs them in a thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from acp.exceptions import RequestError

from ahpd.ports import fs

#: The most of a file an agent is handed at once (read where used, so a test may lower it).
MAX_READ_BYTES = fs.MAX_READ_BYTES

_INVALID_PARAMS = -32602
_NOT_FOUND = -32002
_INTERNAL = -32603

T = TypeVar("T")
#: The conversation's folders: its working directory first, then the ones granted beside it.
Roots = Path | Sequence[Path]


def _absolute(path: str) -> str:
    if not isinstance(path, str) or not os.path.isabs(path):
        raise RequestError(_INVALID_PARAMS, f"the path must be absolute: {path!r}", {"path": path})
    return path


def _listed(roots: Sequence[Path]) -> str:
    if len(roots) == 1:
        return f"working directory {roots[0]}"
    return "working directories " + ", ".join(str(r) for r in roots[:-1]) + f" and {roots[-1]}"


def _request_error(roots: Sequence[Path], path: str, exc: fs.FsError) -> RequestError:
    if isinstance(exc, fs.Outside):
        return RequestError(
            _INVALID_PARAMS,
            f"access refused: {path} is outside the conversation's {_listed(roots)}",
            {"path": path, "root": str(roots[0]), **({"roots": [str(r) for r in roots]} if len(roots) > 1 else {})},
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


def _within(roots: Roots, path: str, use: Callable[[fs.Fence, str], T]) -> T:
    """``use`` a fence on the folder ``path`` lies in: each folder is tried in
    turn, and one the path is outside of hands it to the next. A link from one
    folder into another granted one is followed by its target, which that
    folder's fence walks again. A granted folder that is gone serves nothing;
    the working directory's own failure is the answer."""
    listed = [roots] if isinstance(roots, Path) else list(roots)
    fences: list[fs.Fence] = []
    try:
        for index, root in enumerate(listed):
            try:
                fences.append(fs.Fence(root))
            except fs.FsError as exc:
                if index == 0:
                    raise _request_error(listed, path, exc) from None
        target = os.path.realpath(path) if len(fences) > 1 else path
        for spelling in dict.fromkeys([path, target]):
            for fence in fences:
                try:
                    return use(fence, spelling)
                except fs.Outside:
                    continue
                except fs.FsError as exc:
                    raise _request_error(listed, path, exc) from None
    finally:
        for fence in fences:
            fence.close()
    raise _request_error(listed, path, fs.Outside(path, f"{path} is outside every folder"))


def confine(roots: Roots, path: str) -> Path:
    """Where ``path`` leads inside the conversation's folders, links
    followed; refused outside them.

    Only for a terminal's starting folder, which the kernel resolves again
    when the process starts: that is no boundary (the command may ``cd``
    anywhere), so the name is enough there."""
    _absolute(path)
    return _within(roots, path, lambda fence, at: fence.resolve(at))


def read_text(roots: Roots, path: str, line: int | None = None, limit: int | None = None) -> str:
    """The file's text (UTF-8, undecodable bytes replaced); from 1-based
    ``line``, at most ``limit`` lines, when given. Reading by lines never
    holds more of the file than the lines asked for."""
    _absolute(path)

    def read(fence: fs.Fence, at: str) -> bytes:
        try:
            if line is None and limit is None:
                return fence.read_bytes(at, MAX_READ_BYTES)
            return fence.read_lines(at, line or 1, limit, MAX_READ_BYTES)
        except fs.TooLarge as exc:
            hint = "" if line is not None or limit is not None else "; read it by line and limit"
            raise RequestError(_INVALID_PARAMS, f"{exc}{hint}", {"path": path}) from None

    return _within(roots, path, read).decode("utf-8", errors="replace")


def write_text(roots: Roots, path: str, content: str) -> None:
    """Create or replace the file (and its missing parent folders), atomically."""
    _absolute(path)
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RequestError(_INVALID_PARAMS, f"the content is not valid Unicode: {exc.reason}", {"path": path}) from None
    _within(roots, path, lambda fence, at: fence.write_bytes(at, data, parents=True))
