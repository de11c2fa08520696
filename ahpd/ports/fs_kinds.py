"""What the confined file system (``ahpd.ports.fs``) answers and raises:
its error kinds, one per way an operation can fail, and the stat and
directory entries it returns. Kept apart so that a caller mapping them to
its protocol's errors reads them without the walking code.
"""

from __future__ import annotations

import errno
import os
import stat as st_
from dataclasses import dataclass
from typing import Literal

Kind = Literal["file", "directory", "symlink", "other"]


class FsError(Exception):
    """The port could not do what was asked of ``path``; the message says why."""

    def __init__(self, path: str, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        #: The operating system's error number, when it said one.
        self.errno = errno


class NotFound(FsError):
    """Nothing is there."""


class Refused(FsError):
    """The path leads outside the fence, or changed under us, or names what
    the operation does not touch; the message is the reason."""


class Outside(Refused):
    """The path, or a link on its way, leads outside the fence."""


class IsADirectory(FsError):
    """A file was expected."""


class NotADirectory(FsError):
    """A folder was expected, or a component on the way is a file."""


class Exists(FsError):
    """Something is already there and replacing it was not asked for."""


class NotEmpty(FsError):
    """A folder deleted without ``recursive`` still has entries."""


class Conflict(FsError):
    """The file is no longer the version the caller named (its etag moved)."""


class Invalid(FsError):
    """The request cannot be carried out as asked (a position past the end of the file...)."""


class TooLarge(FsError):
    """The content is over the read cap."""


class Failed(FsError):
    """Any other failure of the operating system (permissions, a full disk, ...)."""


_BY_ERRNO: dict[int, type[FsError]] = {
    errno.ENOENT: NotFound,
    errno.EISDIR: IsADirectory,
    errno.ENOTDIR: NotADirectory,
    errno.EEXIST: Exists,
    errno.ENOTEMPTY: NotEmpty,
    errno.ELOOP: Refused,
    errno.EFBIG: TooLarge,
}


def error_of(path: str, exc: OSError) -> FsError:
    kind = _BY_ERRNO.get(exc.errno or 0, Failed)
    return kind(path, f"{path}: {exc.strerror or exc}", exc.errno)


@dataclass(frozen=True)
class FileStat:
    kind: Kind
    size: int
    mtime: float
    mode: int  # the permission bits
    ctime: float = 0.0
    #: A version token: changes whenever the content can have changed.
    etag: str = ""


def etag(info: os.stat_result) -> str:
    """The file's version: its inode, size, and change and modify times in
    nanoseconds. Any write moves the modify time and the change time (and a
    write through this port makes a new inode, being a rename), so two reads
    of the same etag saw the same bytes; content is never hashed, which would
    cost a read of the whole file on every look."""
    return f"{info.st_ino:x}-{info.st_size:x}-{info.st_mtime_ns:x}-{info.st_ctime_ns:x}"


def file_stat(info: os.stat_result) -> FileStat:
    return FileStat(
        kind_of(info.st_mode),
        info.st_size,
        info.st_mtime,
        st_.S_IMODE(info.st_mode),
        info.st_ctime,
        etag(info) if st_.S_ISREG(info.st_mode) else "",
    )


@dataclass(frozen=True)
class Entry:
    name: str
    kind: Kind


def kind_of(mode: int) -> Kind:
    if st_.S_ISREG(mode):
        return "file"
    if st_.S_ISDIR(mode):
        return "directory"
    if st_.S_ISLNK(mode):
        return "symlink"
    return "other"
