"""Where ahpd keeps its files, following the XDG base directory rules.

The data directory holds a secret (the connection token) and a socket that
answers without authentication, so it is private to the user: ``0700``. The
state home, not the data home, is the right XDG place: the token, runtime
record and socket are machine-local state, not portable user data.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)


def _xdg(var: str, fallback: str) -> Path:
    # The spec says a relative value is invalid and must be ignored.
    value = os.environ.get(var, "")
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / fallback


def default_data_dir() -> Path:
    """``$XDG_STATE_HOME/ahpd``, else ``~/.local/state/ahpd``."""
    return _xdg("XDG_STATE_HOME", ".local/state") / "ahpd"


def default_config_path() -> Path:
    """``$XDG_CONFIG_HOME/ahpd/config.toml``, else ``~/.config/ahpd/config.toml``."""
    return _xdg("XDG_CONFIG_HOME", ".config") / "ahpd" / "config.toml"


def ensure_private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and parents) if needed and make sure only we can enter it.

    A new directory is made ``0700`` (set explicitly, whatever the umask). An
    existing one that others can reach is tightened to ``0700`` when it is ours
    and not a shared sticky directory; otherwise (someone else's directory, or
    e.g. ``/tmp``) it is refused, since chmod-ing it would break other users
    and leaving it open would expose the token's neighbours.
    """
    p = Path(path).expanduser()
    try:
        p.mkdir(mode=0o700, parents=True)
        os.chmod(p, 0o700)
        return p
    except FileExistsError:
        pass
    st = p.stat()
    # Said as errno, reason and path, like the OS's own refusals: a caller words the sentence
    # around ``strerror`` and gives the one hint (the command line: "choose another with --data-dir").
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(p))
    if st.st_mode & 0o077:
        if st.st_uid != os.geteuid() or st.st_mode & stat.S_ISVTX:
            raise PermissionError(
                errno.EACCES,
                f"shared with others (mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid})",
                str(p),
            )
        log.warning("tightening %s from %04o to 0700", p, stat.S_IMODE(st.st_mode))
        os.chmod(p, 0o700)
    return p
