"""Reading back a file the host wrote itself, whatever now lies in its place.

A file the host keeps (a session's head, a chat's journal, a store's JSON)
may be found replaced by something else: a folder, a symlink, a FIFO (whose
``open()`` for reading waits for a writer for ever, hanging start-up with no
log line), a device. So such a file is opened with ``O_NOFOLLOW`` (a symlink
is refused, not followed) and ``O_NONBLOCK`` (a FIFO opens at once), and
``fstat`` of what was opened must say it is a regular file; anything else is
:class:`NotRegular`, which a caller sets aside like any damaged content.

What JSON read from disk holds must also be something a client can be sent:
``NaN`` and ``Infinity`` (which Python's parser takes and no JSON encoder
gives back) are refused, and a lone UTF-16 surrogate escaped in a string
(``"\\ud800"``, valid JSON, not text) becomes U+FFFD, so that nothing listed
from disk can fail to encode.

Every function blocks; a trio caller runs it in a thread or at start-up.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}
_SURROGATE = re.compile("[\ud800-\udfff]")


class NotRegular(ValueError):
    """What lies at a kept file's path is not a regular file."""


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading, only if it is a regular file (not followed
    if a symlink; never waiting on a FIFO). FileNotFoundError when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular(f"{path.name} is a symlink, not a file this host wrote") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise NotRegular(f"{path.name} is {kind}, not a file this host wrote")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path) -> bytes:
    with open_regular(path) as f:
        return f.read()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(data: bytes | str, *, constants: bool = False) -> Any:
    """JSON from disk: ``NaN``/``Infinity`` refused (ValueError) unless
    ``constants`` (for a reader that checks each value itself), lone
    surrogates made U+FFFD."""
    return text_safe(json.loads(data, parse_constant=None if constants else _no_constant))


def text_safe(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys too) made U+FFFD;
    the same object when there was none (the common case costs a look at each
    non-ASCII string)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if not value.isascii() else value
    if isinstance(value, list):
        cleaned = [text_safe(v) for v in value]
        return value if all(a is b for a, b in zip(cleaned, value, strict=True)) else cleaned
    if isinstance(value, dict):
        pairs = [(text_safe(k), text_safe(v)) for k, v in value.items()]
        same = all(k is k2 and v is v2 for (k, v), (k2, v2) in zip(pairs, value.items(), strict=True))
        return value if same else dict(pairs)
    return value
