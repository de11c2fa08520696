"""Files only our user can read.

Everything ahpd keeps in its data directory is private, 0600 like the token:
logs name folders and prompts, the automations hold prompts, the chat client's
history holds what was typed. The folder is 0700, but a file's own mode is
what is left when it is copied, attached to a bug report or the folder is
opened up. Files written whole go through :mod:`ahpd.ports.atomic` (0600);
the ones a library creates itself with the umask's mode (SQLite and its
``-wal``/``-shm``, which take the database's mode; the rotating log;
prompt_toolkit's history) are made here first, or narrowed when an older ahpd
left them 0644.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

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
