"""Files of ours: replaced all at once, and private.

Every file ahpd rewrites whole (a session's head, the serverSeq
reservation, the runtime record, the systemd unit, the demo agent's
conversations, a compacted journal, the users directory, the chat client's
remembered sessions) is written the same way: to a temporary file in the same
folder, fsynced, then renamed over the old one, and the folder fsynced so
the rename itself survives a power cut. A reader, or the next start after a
crash, sees the old file or the new one, never a part of either; a write
refused half-way (a full disk) leaves the old file and no temporary behind.

Everything ahpd keeps in its data directory is private, 0600 like the token:
logs name folders and prompts, the automations hold prompts, the chat client's
history holds what was typed. The folder is 0700, but a file's own mode is
what is left when it is copied, attached to a bug report or the folder is
opened up. Files written whole go through :func:`write_atomic` (0600);
the ones a library creates itself with the umask's mode (SQLite and its
``-wal``/``-shm``, which take the database's mode; the rotating log;
prompt_toolkit's history) are made here first, or narrowed when an older ahpd
left them 0644.
"""

from __future__ import annotations

import contextlib
import os
import stat
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


PRIVATE = 0o600


def private_file(path: Path, *, create: bool = True) -> Path:
    """Make sure ``path`` is a regular file of ours with mode 0600 (created so unless
    ``create`` is false, or narrowed) before a library opens it; returns it. Raises OSError for
    a symlink or a FIFO there (not followed, not waited on), or FileNotFoundError for a file
    not to be created; a file another user owns is left as it is."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    fd = os.open(path, flags, PRIVATE)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != PRIVATE:
            os.fchmod(fd, PRIVATE)
    finally:
        os.close(fd)
    return path
