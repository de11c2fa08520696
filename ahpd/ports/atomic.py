"""Replacing a file all at once.

Every file ahpd rewrites whole (a session's head, the serverSeq
reservation, the runtime record, the systemd unit, the demo agent's
conversations, a compacted journal, the users directory, the chat client's
remembered sessions) is written the same way: to a temporary file in the same
folder, fsynced, then renamed over the old one, and the folder fsynced so
the rename itself survives a power cut. A reader, or the next start after a
crash, sees the old file or the new one, never a part of either; a write
refused half-way (a full disk) leaves the old file and no temporary behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes | str, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8). The file is
    private (0600) unless ``mode`` says otherwise."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make what was created, renamed or removed in ``path`` durable."""
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
