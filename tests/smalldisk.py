"""A small filesystem a test owns: a tmpfs it can fill up or make read-only.

Mounting needs root (or CAP_SYS_ADMIN); a test that cannot mount one is
skipped, and its fault is also injected at the store's port by a test of
its own that always runs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


class SmallDisk:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / ".filler"
        self._binds: list[Path] = []

    def fill(self) -> None:
        """Take every free block, so the next write fails ENOSPC (again,
        should somebody free a block meanwhile)."""
        for _ in range(5):
            fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                while True:
                    os.write(fd, b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
            finally:
                os.close(fd)
            probe = self.path / ".probe"
            try:
                probe.write_bytes(b"x" * 8192)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                probe.unlink(missing_ok=True)
                return
            probe.unlink()
        raise AssertionError(f"{self.path} does not stay full")

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def read_only(self) -> None:
        _mount("-o", "remount,ro", str(self.path))

    def writable(self) -> None:
        _mount("-o", "remount,rw", str(self.path))

    def bind(self, source: Path, target: Path) -> None:
        """Put a folder of the ordinary disk inside this one (unaffected by
        what this one suffers)."""
        target.mkdir(parents=True, exist_ok=True)
        _mount("--bind", str(source), str(target))
        self._binds.append(target)


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@contextlib.contextmanager
def small_disk(path: Path, size: str = "512k") -> Iterator[SmallDisk]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    disk = SmallDisk(path)
    try:
        yield disk
    finally:
        for target in reversed(disk._binds):
            subprocess.run(["umount", "-l", str(target)], capture_output=True)
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
