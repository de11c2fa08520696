"""The connection token: the one secret an AHP client must present.

ahpd listens on loopback, where every local user (and any browser page that
can reach 127.0.0.1) could connect, so clients must prove they can read a file
only our user can read. The token is generated once and reused, so a client
configured with it keeps working across restarts; delete the file to rotate.

Permissions are *refused*, not repaired: a token file that others could read
may already have been read, and silently tightening it would hide that. The
error says to delete the file so a fresh token is made.

Creation is atomic without a window where the file is empty or open to others:
the token is written to a private temporary file (created ``0600`` with
``O_EXCL``) and then hard-linked into place, which fails if another ahpd won
the race; the loser then reads the winner's token, so both agree.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from ahpd.ops.paths import ensure_private_dir

TOKEN_FILE = "token"
#: Fewer characters than this can be guessed by anyone who can try them (the generated one has 43).
MIN_TOKEN_CHARS = 16


class TokenError(Exception):
    """A token file is missing, empty or unsafe; the message names the file."""


def _read_private(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise TokenError(f"cannot open token file {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "r", encoding="utf-8") as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.geteuid():
            raise TokenError(f"token file {path} belongs to uid {st.st_uid}, not to us; delete it")
        if st.st_mode & 0o077:
            raise TokenError(
                f"token file {path} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                f"it may have leaked: delete it and ahpd will make a new one"
            )
        token = f.read().strip()
    if not token:
        raise TokenError(f"token file {path} is empty; delete it and ahpd will make a new one")
    return token


def load_or_create_token(data_dir: str | os.PathLike[str]) -> str:
    """Return the token kept in ``<data_dir>/token``, creating it on first use."""
    directory = ensure_private_dir(data_dir)
    path = directory / TOKEN_FILE
    if os.path.lexists(path):
        return _read_private(path)
    token = secrets.token_urlsafe(32)
    tmp = directory / f".{TOKEN_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask can only narrow it, but be explicit
        os.write(fd, (token + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return _read_private(path)  # another ahpd created it first: share its token
    finally:
        os.unlink(tmp)
    return token


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in a user-given file (``--connection-token-file``), whitespace stripped.

    Its permissions are not checked: the file is the caller's to manage (an
    editor may hand one over), unlike the token ahpd keeps itself.
    """
    p = Path(path)
    try:
        token = p.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise TokenError(f"cannot read connection token file {p}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise TokenError(f"connection token file {p} is not UTF-8 text") from exc
    if not token:
        raise TokenError(f"connection token file {p} is empty")
    return token


def token_warning(token: str | None, where: str) -> str | None:
    """What to warn about at start-up for the daemon's token choice at ``where`` (its address,
    no token in it), or None: the token is the only fence between whoever reaches the port and
    agents that run as this user."""
    if token is None:
        return (
            f"no connection token (--without-connection-token): anyone who can reach {where} "
            "can drive the agents, with your rights"
        )
    if len(token) < MIN_TOKEN_CHARS:
        return (
            f"the connection token is only {len(token)} characters: anyone who can reach {where} could guess it "
            f"and drive the agents; use one of {MIN_TOKEN_CHARS} or more (the generated one has 43)"
        )
    return None
