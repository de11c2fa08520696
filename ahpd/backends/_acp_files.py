"""The agent's ``fs/*`` requests, confined to the conversation's folder.

A path is resolved (symlinks followed, ``..`` collapsed) before it is
checked, so a link inside the folder that points outside is refused like
the outside path itself. Refusals and failures are ``RequestError``s, which
the library answers as JSON-RPC errors with our message. These functions
block; the caller runs them in a thread.
"""

from __future__ import annotations

import itertools
import os
import stat
from pathlib import Path

from acp.exceptions import RequestError

MAX_READ_BYTES = 64 * 1024 * 1024

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
    ``line``, at most ``limit`` lines, when given."""
    real = confine(root, path)
    try:
        st = real.stat()
        if not stat.S_ISREG(st.st_mode):
            raise RequestError(_INVALID_PARAMS, f"not a regular file: {path}", {"path": path})
        with open(real, encoding="utf-8", errors="replace", newline="") as f:
            if line is None and limit is None:
                if st.st_size > MAX_READ_BYTES:
                    raise RequestError(
                        _INVALID_PARAMS,
                        f"{path} is larger than {MAX_READ_BYTES} bytes; read it by line and limit",
                        {"path": path},
                    )
                return f.read()
            first = max(line or 1, 1) - 1
            lines = itertools.islice(f, first, None if limit is None else first + limit)
            out: list[str] = []
            size = 0
            for text in lines:
                size += len(text)
                if size > MAX_READ_BYTES:
                    raise RequestError(_INVALID_PARAMS, f"the lines asked of {path} are too large", {"path": path})
                out.append(text)
            return "".join(out)
    except OSError as exc:
        raise _os_error(path, exc) from None


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
