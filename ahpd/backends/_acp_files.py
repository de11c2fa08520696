"""The agent's ``fs/*`` requests, confined to the conversation's folder.

A path is resolved (symlinks followed, ``..`` collapsed) before it is
checked, so a link inside the folder that points outside is refused like
the outside path itself. Refusals and failures are ``RequestError``s, which
the library answers as JSON-RPC errors with our message. These functions
block; the caller runs them in a thread.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from acp.exceptions import RequestError

MAX_READ_BYTES = 64 * 1024 * 1024
_PIECE = 1024 * 1024  # how much of a line is read at once

_INVALID_PARAMS = -32602


def confine(root: Path, path: str) -> Path:
    """``path`` resolved, if it lies inside ``root`` (itself resolved)."""
    if not path or not os.path.isabs(path):
        raise RequestError(_INVALID_PARAMS, f"the path must be absolute: {path!r}", {"path": path})
    real = Path(os.path.realpath(path))
    if real != root and root not in real.parents:
        raise RequestError(
            _INVALID_PARAMS,
            f"access refused: {path} is outside the conversation's working directory {root}",
            {"path": path, "root": str(root)},
        )
    return real


def _os_error(path: str, exc: OSError) -> RequestError:
    if isinstance(exc, FileNotFoundError):
        return RequestError(-32002, f"no such file: {path}", {"uri": path})
    return RequestError(-32603, f"{path}: {exc.strerror or exc}", {"path": path})


def read_text(root: Path, path: str, line: int | None = None, limit: int | None = None) -> str:
    """The file's text (UTF-8, undecodable bytes replaced); from 1-based
    ``line``, at most ``limit`` lines, when given. Never more than
    ``MAX_READ_BYTES`` is held, whatever the file's size or line lengths."""
    real = confine(root, path)
    try:
        st = real.stat()
        if not stat.S_ISREG(st.st_mode):
            raise RequestError(_INVALID_PARAMS, f"not a regular file: {path}", {"path": path})
        with open(real, "rb") as f:
            if line is None and limit is None:
                data: bytes | bytearray = f.read(MAX_READ_BYTES + 1)  # it may have grown since stat
                if len(data) > MAX_READ_BYTES:
                    raise RequestError(
                        _INVALID_PARAMS,
                        f"{path} is larger than {MAX_READ_BYTES} bytes; read it by line and limit",
                        {"path": path},
                    )
            else:
                data = _lines(f, path, max(line or 1, 1) - 1, limit)
            return data.decode("utf-8", errors="replace")
    except OSError as exc:
        raise _os_error(path, exc) from None


def _lines(f: BinaryIO, path: str, first: int, limit: int | None) -> bytearray:
    """Lines ``first`` (0-based) onwards, at most ``limit`` of them, read in
    bounded pieces: a line of gigabytes is refused before it is held, and the
    lines skipped are never held at all."""
    skipped = 0
    while skipped < first:
        piece = f.readline(_PIECE)
        if not piece:
            return bytearray()
        skipped += piece.endswith(b"\n")
    out = bytearray()
    taken = 0
    while limit is None or taken < limit:
        piece = f.readline(min(_PIECE, MAX_READ_BYTES + 1 - len(out)))
        if not piece:
            break
        out += piece
        if len(out) > MAX_READ_BYTES:
            raise RequestError(_INVALID_PARAMS, f"the lines asked of {path} are more than "
                               f"{MAX_READ_BYTES} bytes; ask for fewer", {"path": path})
        taken += piece.endswith(b"\n")
    return out


def write_text(root: Path, path: str, content: str) -> None:
    """Create or replace the file (and its missing parent folders)."""
    real = confine(root, path)
    try:
        if real.exists() and not real.is_file():
            raise RequestError(_INVALID_PARAMS, f"not a regular file: {path}", {"path": path})
        real.parent.mkdir(parents=True, exist_ok=True)
        with open(real, "w", encoding="utf-8", newline="") as f:
            f.write(content)
    except OSError as exc:
        raise _os_error(path, exc) from None
