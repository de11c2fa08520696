"""The filesystem, confined to one directory tree: a ``Fence``.

Why it is built this way. Checking a path and then using it is a race:
between ``realpath`` saying "inside" and ``open`` using the string, anyone
who can write inside the tree can swap a directory for a symlink to ``/``,
and the open lands outside. So a path is never checked as a string. A
``Fence`` opens its root once and keeps the descriptor; every path is walked
from it one component at a time, each directory opened relative to the one
before with ``O_NOFOLLOW`` (``os.open(name, ..., dir_fd=parent)``), and the
last component is used through its parent's descriptor (``openat``,
``renameat``, ``unlinkat``, ...), again never following a link. Whatever is
swapped in meanwhile, the kernel refuses to cross a link we did not read.

Symlinks inside the tree are followed rather than refused: repositories are
full of them (``CLAUDE.md -> AGENTS.md``, ``node_modules/.bin``) and an agent
that cannot read them is broken. A link is read with ``readlinkat`` and its
target walked the same way, a relative target from the link's own folder,
an absolute one only when its leading components are the root's, so a link
that leads out is refused exactly like a path that does. A link swapped in
after its name was looked at is not followed (the ``O_NOFOLLOW`` open fails)
and the operation is refused: a race ends in a refusal, never outside.
Deleting or moving a link acts on the link itself, as ``rm`` and ``mv`` do.

``..`` steps back along the descriptors already opened, so it never climbs
above the root; at the root it is refused. An absolute path is accepted when
its leading components are the root's (as given, or with its links
resolved), which is how agents name files; nothing is compared as a string
prefix.

A write goes to a temporary file in the same folder, is flushed to disk and
renamed over the old one, so a failure half-way leaves the old file whole
(its permission bits are kept; a hard link to it is not). Reads are capped,
and reading by lines never holds more than the lines asked for.

Every function blocks; a trio caller runs it in a thread. Failures are this
module's own exceptions (``FsError`` and its kinds), which each caller maps
to its protocol's errors.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat as st_
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from ahpd.ports.fs_kinds import (
    Conflict,
    Entry,
    Exists,
    Failed,
    FileStat,
    FsError,
    Invalid,
    IsADirectory,
    NotADirectory,
    NotEmpty,
    NotFound,
    Outside,
    Refused,
    TooLarge,
    error_of,
    etag,
    file_stat,
    kind_of,
)

__all__ = [
    "MAX_READ_BYTES",
    "Entry",
    "Exists",
    "Fence",
    "FileStat",
    "FsError",
    "Failed",
    "Invalid",
    "IsADirectory",
    "Conflict",
    "NotADirectory",
    "NotEmpty",
    "NotFound",
    "Outside",
    "Refused",
    "TooLarge",
]

#: The most a read returns, whole or by lines, unless the caller asks for less.
MAX_READ_BYTES = 64 * 1024 * 1024

_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)  # Linux: walk folders we may not list
_DIR = _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 40  # as the kernel's MAXSYMLINKS
_CHUNK = 1024 * 1024
#: Placing bytes by offset reads the old file and renames a new one over it;
#: writes through this process take turns, so two appenders never both build
#: on the same old end and lose one another's bytes.
_PLACING = threading.Lock()
WriteMode = Literal["truncate", "append", "insert"]


def _names(path: str) -> list[str]:
    return [n for n in path.split("/") if n not in ("", ".")]


def _readlink(name: str, dir_fd: int) -> str | None:
    """The link's target; None when ``name`` is not a link (or not there)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


class Fence:
    """A directory tree, opened once, that paths are resolved inside of.

    Paths are relative to the root, or absolute under it. A ``Fence`` holds a
    descriptor: close it (or use it as a context manager).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        given = os.path.abspath(root)
        try:
            self._fd = os.open(given, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise error_of(os.fspath(root), exc) from None
        self.root = Path(os.path.realpath(given))
        self._spellings = [tuple(_names(p)) for p in dict.fromkeys([given, str(self.root)])]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Fence:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- resolution ------------------------------------------------------------------

    def _parts(self, path: str) -> list[str]:
        if not isinstance(path, str) or not path or "\0" in path:
            raise Refused(str(path), f"not a path: {path!r}")
        names = _names(path)
        if not path.startswith("/"):
            return names
        for spelling in self._spellings:
            if tuple(names[: len(spelling)]) == spelling:
                return names[len(spelling) :]
        raise Outside(path, f"{path} is outside {self.root}")

    @contextmanager
    def _spot(
        self, path: str, *, follow: bool, create: bool = False, names: list[str] | None = None
    ) -> Iterator[tuple[int, str | None]]:
        """The folder holding ``path``'s last component, as a descriptor open
        while the block runs, and that component's name (None: the folder
        itself). ``follow``: a last component that is a link is replaced by
        its target; ``create``: missing folders on the way are made;
        ``names`` is filled with the folder's own path below the root."""
        stack: list[int] = []  # descriptors opened below the root, innermost last
        try:
            yield self._walk(path, stack, [] if names is None else names, follow=follow, create=create)
        except OSError as exc:
            raise error_of(path, exc) from None
        finally:
            for fd in stack:
                os.close(fd)

    def _walk(
        self, path: str, stack: list[int], names: list[str], *, follow: bool, create: bool
    ) -> tuple[int, str | None]:
        todo = deque(self._parts(path))
        hops = 0

        def here() -> int:
            return stack[-1] if stack else self._fd

        while todo:
            name = todo.popleft()
            if name == "..":
                if not stack:
                    raise Outside(path, f"{path} leads outside {self.root}: '..' climbs above it")
                os.close(stack.pop())
                names.pop()
                continue
            if todo:
                try:
                    stack.append(os.open(name, _DIR, dir_fd=here()))
                    names.append(name)
                    continue
                except FileNotFoundError:
                    if not create:
                        raise
                    hops += 1
                    if hops > _MAX_LINKS:
                        raise Refused(path, f"{path} keeps changing under us") from None
                    try:
                        os.mkdir(name, 0o777, dir_fd=here())
                    except FileExistsError:
                        pass
                    todo.appendleft(name)  # opened (without following) on the next round
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                target = _readlink(name, here())
                if target is None:
                    raise NotADirectory(path, f"{path}: {name} is not a folder")
            else:
                target = _readlink(name, here()) if follow else None
                if target is None:
                    return here(), name
            hops += 1
            if hops > _MAX_LINKS:
                raise Refused(path, f"{path}: too many symbolic links")
            if target.startswith("/"):
                try:
                    parts = self._parts(target)
                except Refused:
                    raise Outside(path, f"{path}: the link {name} -> {target} leads outside {self.root}") from None
                while stack:
                    os.close(stack.pop())
                names.clear()
            else:
                parts = _names(target)
            todo.extendleft(reversed(parts))
        return here(), None

    def resolve(self, path: str, *, follow: bool = True) -> Path:
        """Where ``path`` leads, links inside the fence followed, as a path
        under the root. Only a name: whoever uses it later by that name is
        not protected from a race (use the other methods for that)."""
        names: list[str] = []
        with self._spot(path, follow=follow, names=names) as (_, name):
            return self.root.joinpath(*names, *([name] if name else []))

    def _open_file(self, path: str) -> tuple[int, os.stat_result]:
        """A descriptor on the regular file at ``path``, read-only, and its stat."""
        with self._spot(path, follow=True) as (folder, name):
            if name is None:
                raise IsADirectory(path, f"{path} is a folder")
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise Refused(path, f"{path} became a symbolic link while it was opened") from None
                raise
        try:
            info = os.fstat(fd)
            if st_.S_ISDIR(info.st_mode):
                raise IsADirectory(path, f"{path} is a folder")
            if not st_.S_ISREG(info.st_mode):
                raise Refused(path, f"{path} is not a regular file")
        except BaseException:
            os.close(fd)
            raise
        return fd, info

    # -- reading ---------------------------------------------------------------------

    def read_bytes(self, path: str, max_bytes: int = MAX_READ_BYTES) -> bytes:
        """The whole file, if it is at most ``max_bytes``."""
        fd, info = self._open_file(path)
        with open(fd, "rb") as f:
            if info.st_size > max_bytes:
                raise TooLarge(path, f"{path} is larger than {max_bytes} bytes")
            try:
                data = f.read(max_bytes + 1)
            except OSError as exc:
                raise error_of(path, exc) from None
        if len(data) > max_bytes:
            raise TooLarge(path, f"{path} is larger than {max_bytes} bytes")
        return data

    def read_chunks(self, path: str, chunk: int, max_bytes: int = MAX_READ_BYTES) -> Iterator[bytes]:
        """The file ``chunk`` bytes at a time, never held whole; ``TooLarge``
        past ``max_bytes`` as ``read_bytes``."""
        fd, info = self._open_file(path)
        with open(fd, "rb") as f:
            if info.st_size > max_bytes:
                raise TooLarge(path, f"{path} is larger than {max_bytes} bytes")
            total = 0
            while True:
                try:
                    data = f.read(chunk)
                except OSError as exc:
                    raise error_of(path, exc) from None
                if not data:
                    return
                total += len(data)
                if total > max_bytes:
                    raise TooLarge(path, f"{path} is larger than {max_bytes} bytes")
                yield data

    def read_lines(self, path: str, line: int = 1, limit: int | None = None, max_bytes: int = MAX_READ_BYTES) -> bytes:
        """At most ``limit`` lines from 1-based ``line`` (each with its
        ``\\n``). Lines before ``line`` are skipped a chunk at a time and the
        lines taken never total more than ``max_bytes``, so the file is never
        held whole."""
        if limit is not None and limit < 0:
            raise Refused(path, f"the line limit must not be negative: {limit}")
        fd, _ = self._open_file(path)
        out = bytearray()
        with open(fd, "rb") as f:
            try:
                for _ in range(max(line, 1) - 1):
                    while not (chunk := f.readline(_CHUNK)).endswith(b"\n"):
                        if not chunk:
                            return b""
                taken = 0
                while limit is None or taken < limit:
                    piece = f.readline(max_bytes + 1 - len(out))
                    if not piece:
                        break
                    out += piece
                    if len(out) > max_bytes:
                        raise TooLarge(path, f"the lines asked of {path} are larger than {max_bytes} bytes")
                    taken += 1  # a whole line: it ends in \n, or at the end of the file
            except OSError as exc:
                raise error_of(path, exc) from None
        return bytes(out)

    def stat(self, path: str, *, follow: bool = True) -> FileStat:
        with self._spot(path, follow=follow) as (folder, name):
            info = os.fstat(folder) if name is None else os.stat(name, dir_fd=folder, follow_symlinks=False)
        return file_stat(info)

    def list_dir(self, path: str = "") -> list[Entry]:
        """The folder's entries, sorted by name; links are reported as links."""
        with self._spot(path or ".", follow=True) as (folder, name):
            fd = os.open(name or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
            try:
                with os.scandir(fd) as entries:
                    found = [Entry(e.name, kind_of(e.stat(follow_symlinks=False).st_mode)) for e in entries]
            finally:
                os.close(fd)
        return sorted(found, key=lambda e: e.name)

    # -- writing ---------------------------------------------------------------------

    def write_bytes(self, path: str, data: bytes, *, parents: bool = False) -> None:
        """Create or replace the file, atomically; ``parents``: make missing folders."""
        view = memoryview(data)

        def fill(fd: int) -> None:
            rest = view
            while rest:
                rest = rest[os.write(fd, rest[:_CHUNK]) :]

        with self._spot(path, follow=True, create=parents) as (folder, name):
            self._replace(path, folder, name, fill)

    def place(
        self,
        path: str,
        data: bytes,
        *,
        mode: WriteMode = "truncate",
        position: int = 0,
        create_only: bool = False,
        if_match: str | None = None,
        parents: bool = False,
    ) -> None:
        """Put ``data`` into the file as ``resourceWrite`` places it, atomically.

        ``truncate`` keeps the first ``position`` bytes, ``append`` writes
        ``position`` bytes before the end, ``insert`` splices at ``position``.
        The new content (the old bytes kept, ``data``, the old bytes after)
        is composed in a temporary file beside the old one and renamed over
        it, so a reader sees the old file or the new one, never half of
        either. ``create_only`` links the new file in instead of renaming, so
        a file that appeared meanwhile is not replaced; ``if_match`` is the
        ``etag`` the file must still have."""
        if position < 0:
            raise Invalid(path, f"{path}: the position must not be negative: {position}")
        with _PLACING, self._spot(path, follow=True, create=parents) as (folder, name):
            if name is None:
                raise IsADirectory(path, f"{path} is a folder")
            try:
                old = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
            except FileNotFoundError:
                old = None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise Refused(path, f"{path} became a symbolic link while it was opened") from None
                raise
            try:
                info = os.fstat(old) if old is not None else None
                if info is not None and st_.S_ISDIR(info.st_mode):
                    raise IsADirectory(path, f"{path} is a folder")
                if info is not None and not st_.S_ISREG(info.st_mode):
                    raise Refused(path, f"{path} is not a regular file")
                if create_only and info is not None:
                    raise Exists(path, f"{path} already exists")
                if if_match is not None and (info is None or etag(info) != if_match):
                    now = "no longer exists" if info is None else f"is at etag {etag(info)}"
                    raise Conflict(path, f"{path} changed: it {now}, not {if_match}")
                size = info.st_size if info is not None else 0
                if position > size:
                    raise Invalid(path, f"{path}: position {position} is past the end of the file ({size} bytes)")
                keep = {"truncate": position, "append": size - position, "insert": position}[mode]
                after = keep if mode != "truncate" else size

                def fill(fd: int) -> None:
                    if old is not None:
                        _pour_range(old, fd, 0, keep)
                    rest = memoryview(data)
                    while rest:
                        rest = rest[os.write(fd, rest[:_CHUNK]) :]
                    if old is not None:
                        _pour_range(old, fd, after, size)

                self._replace(path, folder, name, fill, exclusive=create_only)
            finally:
                if old is not None:
                    os.close(old)

    def _replace(
        self, path: str, folder: int, name: str | None, fill: Callable[[int], None], *, exclusive: bool = False
    ) -> None:
        """Write ``name`` in ``folder`` through a temporary file renamed over
        it (linked in, when ``exclusive``: then nothing there is replaced)."""
        if name is None:
            raise IsADirectory(path, f"{path} is a folder")
        old = _lstat(name, folder)
        if old is not None and st_.S_ISDIR(old.st_mode):
            raise IsADirectory(path, f"{path} is a folder")
        if old is not None and not st_.S_ISREG(old.st_mode):
            raise Refused(path, f"{path} is not a regular file")
        temp = f".{name[:64]}.{secrets.token_hex(6)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=folder)
        try:
            try:
                if old is not None:
                    os.fchmod(fd, st_.S_IMODE(old.st_mode))
                fill(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            if exclusive:
                try:
                    os.link(temp, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
                except FileExistsError:
                    raise Exists(path, f"{path} already exists") from None
                os.unlink(temp, dir_fd=folder)
            else:
                os.rename(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=folder)
            except OSError:
                pass
            raise
        _sync_folder(folder)

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        with self._spot(path, follow=False, create=parents) as (folder, name):
            if name is None:
                if exist_ok:
                    return
                raise Exists(path, f"{path} already exists")
            try:
                os.mkdir(name, 0o777, dir_fd=folder)
            except FileExistsError:
                there = _lstat(name, folder)
                if not (exist_ok and there is not None and st_.S_ISDIR(there.st_mode)):
                    raise Exists(path, f"{path} already exists") from None

    def delete(self, path: str, *, recursive: bool = False) -> None:
        """Remove the file, link or folder (a folder with entries only if ``recursive``)."""
        with self._spot(path, follow=False) as (folder, name):
            if name is None:
                raise Refused(path, f"{path} is the root of the fence, or above it")
            there = _lstat(name, folder)
            if there is None:
                raise NotFound(path, f"{path}: no such file or folder")
            if not st_.S_ISDIR(there.st_mode):
                os.unlink(name, dir_fd=folder)
            elif recursive:
                shutil.rmtree(name, dir_fd=folder)  # descriptor-based on Linux: it follows no link
            else:
                os.rmdir(name, dir_fd=folder)

    def move(self, source: str, target: str, *, overwrite: bool = False) -> None:
        with self._spot(source, follow=False) as (src, src_name), self._spot(target, follow=False) as (dst, dst_name):
            if src_name is None or dst_name is None:
                raise Refused(source if src_name is None else target, "the root of the fence is not moved")
            if _lstat(src_name, src) is None:
                raise NotFound(source, f"{source}: no such file or folder")
            if not overwrite and _lstat(dst_name, dst) is not None:
                raise Exists(target, f"{target} already exists")
            os.rename(src_name, dst_name, src_dir_fd=src, dst_dir_fd=dst)

    def copy(self, source: str, target: str, *, overwrite: bool = False) -> None:
        """Copy a file, or a folder and everything in it (links are copied as links)."""
        with self._spot(source, follow=True) as (src, src_name), self._spot(target, follow=False) as (dst, dst_name):
            if src_name is None or dst_name is None:
                raise Refused(source if src_name is None else target, "the root of the fence is not copied")
            if _lstat(src_name, src) is None:
                raise NotFound(source, f"{source}: no such file or folder")
            if not overwrite and _lstat(dst_name, dst) is not None:
                raise Exists(target, f"{target} already exists")
            self._copy(source, src, src_name, dst, dst_name, set())

    def _copy(self, path: str, src: int, name: str, dst: int, dst_name: str, made: set[tuple[int, int]]) -> None:
        info = os.stat(name, dir_fd=src, follow_symlinks=False)
        if (info.st_dev, info.st_ino) in made:
            return  # a folder copied into itself: the copy is not copied again
        if st_.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(name, dir_fd=src), dst_name, dir_fd=dst)
        elif st_.S_ISREG(info.st_mode):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
            try:
                self._replace(path, dst, dst_name, lambda out: _pour(fd, out))
            finally:
                os.close(fd)
        elif st_.S_ISDIR(info.st_mode):
            try:
                os.mkdir(dst_name, st_.S_IMODE(info.st_mode) | 0o700, dir_fd=dst)
            except FileExistsError:
                pass
            inner_src = os.open(name, _DIR, dir_fd=src)
            try:
                inner_dst = os.open(dst_name, _DIR, dir_fd=dst)
                try:
                    made.add((os.fstat(inner_dst).st_dev, os.fstat(inner_dst).st_ino))
                    listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=inner_src)
                    try:
                        with os.scandir(listing) as entries:
                            children = [e.name for e in entries]
                    finally:
                        os.close(listing)
                    for child in children:
                        self._copy(f"{path}/{child}", inner_src, child, inner_dst, child, made)
                finally:
                    os.close(inner_dst)
            finally:
                os.close(inner_src)
        else:
            raise Refused(path, f"{path} is neither a file, a folder nor a link")


def _pour(source: int, target: int) -> None:
    while chunk := os.read(source, _CHUNK):
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view) :]


def _pour_range(source: int, target: int, start: int, end: int) -> None:
    """Bytes ``start`` to ``end`` of ``source`` appended to ``target``, a chunk at a time."""
    while start < end:
        chunk = os.pread(source, min(_CHUNK, end - start), start)
        if not chunk:
            return
        start += len(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view) :]


def _sync_folder(folder: int) -> None:
    """Make a rename durable; a filesystem that cannot sync a folder is let be."""
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
