"""Where ``serverSeq`` survives a restart.

A client remembers the highest serverSeq it saw; a host whose counter came
back at 0 could never replay to it again, and worse, would number new
actions below what the client already holds. So the counter is reserved
ahead in blocks: the file holds a value no action has reached yet, written
(and fsynced) before the counter passes it. After a crash the host resumes
from the reservation: numbers may skip, but never repeat or go backwards.
"""

from __future__ import annotations

import os
from pathlib import Path

BLOCK = 1024


class MemorySeqStore:
    """For tests and embedding: starts where it is told, keeps nothing."""

    def __init__(self, start: int = 0) -> None:
        self._reserved = start

    def load(self) -> int:
        return self._reserved

    def reserve(self, upto: int) -> None:
        self._reserved = upto


class FileSeqStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> int:
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return 0
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{self.path}: not a serverSeq reservation: {text[:40]!r}") from None
        if value < 0:
            raise ValueError(f"{self.path}: negative serverSeq reservation {value}")
        return value

    def reserve(self, upto: int) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, f"{upto}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)


class Sequencer:
    """The one counter every state change is numbered by."""

    def __init__(self, store: MemorySeqStore | FileSeqStore) -> None:
        self._store = store
        self.current = store.load()
        self._reserved = self.current
        self._reserve()

    def _reserve(self) -> None:
        self._reserved = self.current + BLOCK
        self._store.reserve(self._reserved)

    def next(self) -> int:
        self.current += 1
        if self.current >= self._reserved:
            self._reserve()
        return self.current

    def close(self) -> None:
        """A clean stop: the next start resumes right after the last number."""
        self._store.reserve(self.current)
