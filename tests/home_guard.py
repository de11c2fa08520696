"""Keep the test suite out of the user's HOME, and notice when it is not.

The repository's root ``conftest.py`` calls :func:`isolate` before any test
module is imported: every test, and every process a test starts, sees a
temporary HOME, and the Claude CLI's non-essential traffic (telemetry, error
reports, update checks) is switched off. A :class:`HomeGuard` photographs the
real HOME first and compares at the end of the session; a write fails the run.

What is compared, and why only that:

* ahpd's own places (:data:`OURS`): its state and config directories and its
  systemd unit. Nothing else writes there, so any change is the suite's.
* Claude Code's folders (:data:`CLAUDE_FOLDERS`): created where there were
  none. Once they exist, any Claude Code the user runs meanwhile writes into
  them (sessions, telemetry, settings backups), so a change there names no
  writer. A CLI started from a test also leaves an entry named after its
  working directory under :data:`CLAUDE_BY_PROJECT`; one named after a path of
  this session (:attr:`HomeGuard.roots`, a path or the beginning of one) is
  the suite's.

The rest of HOME (shells, editors, package caches such as ``~/.cache/pip``,
which installing writes and testing does not) is left out: other programs
write there while the suite runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from pathlib import Path

#: Claude Code's switches for everything but the model call (names as the
#: bundled CLI reads them).
CLAUDE_QUIET = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}

#: Unset, so each falls back under the temporary HOME. A user's
#: CLAUDE_CONFIG_DIR would point the CLI at their real settings; and tests
#: that give a process a HOME of their own expect its config under it.
DERIVED_FROM_HOME = ("CLAUDE_CONFIG_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME")

#: ahpd's places under HOME (``ahpd/ops/paths.py``, ``ahpd/ops/service.py``,
#: the demo agent's store), compared file by file.
OURS = (".local/state/ahpd", ".config/ahpd", ".config/systemd/user/ahpd.service")

#: Claude Code's folders and files: the suite must not create them.
CLAUDE_FOLDERS = (".claude", ".claude.json", ".cache/claude-cli-nodejs")

#: Claude Code's folders with one entry per working directory.
CLAUDE_BY_PROJECT = (".claude/projects", ".cache/claude-cli-nodejs")

#: Depth to which :data:`OURS` is walked (the demo agent's store is the deepest).
MAX_DEPTH = 6

#: The beginning of the name of each test process's temporary HOME (in the
#: system's temporary folder).
TEMP_HOME_PREFIX = "ahpd-test-home-"


def isolate(environ: MutableMapping[str, str], home: Path) -> None:
    """Point ``environ`` at a temporary ``home`` and quiet the Claude CLI."""
    environ["HOME"] = str(home)
    for name in DERIVED_FROM_HOME:
        environ.pop(name, None)
    environ.update(CLAUDE_QUIET)


def project_name(path: Path | str) -> str:
    """The folder name Claude Code gives a working directory (every other character a dash)."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(path))


def _stamp(path: Path) -> tuple[int, int] | None:
    st = path.lstat()
    return None if path.is_dir() and not path.is_symlink() else (st.st_mtime_ns, st.st_size)


def snapshot(home: Path) -> dict[str, tuple[int, int] | None]:
    """What the guard compares: path under ``home`` -> (mtime, size) of a file, None otherwise."""
    seen: dict[str, tuple[int, int] | None] = {}
    for rel in OURS:
        top = home / rel
        if not (top.exists() or top.is_symlink()):
            continue
        seen[rel] = _stamp(top)
        if top.is_dir() and not top.is_symlink():
            for dirpath, dirnames, filenames in os.walk(top):
                here = Path(dirpath)
                if len(here.relative_to(home).parts) >= MAX_DEPTH:
                    dirnames.clear()
                for name in dirnames + filenames:
                    seen[str((here / name).relative_to(home))] = _stamp(here / name)
    for rel in CLAUDE_FOLDERS:
        if (home / rel).exists():
            seen[rel] = None
    for rel in CLAUDE_BY_PROJECT:
        if (home / rel).is_dir():
            for child in (home / rel).iterdir():
                seen[f"{rel}/{child.name}"] = None
    return seen


class HomeGuard:
    """A photograph of ``real_home``, to compare with at the end."""

    def __init__(self, real_home: Path) -> None:
        self.real_home = real_home
        self.before = snapshot(real_home)
        #: This session's own directories (the temporary HOME, pytest's base
        #: temp), or the beginnings of their paths (every worker's HOME).
        self.roots: list[Path] = []

    def writes(self) -> list[str]:
        """Paths under the real HOME that the suite created, changed or removed."""
        after = snapshot(self.real_home)
        names = [project_name(root) for root in self.roots]
        missing = object()
        out = []
        for rel in sorted(self.before.keys() | after.keys()):
            was, now = self.before.get(rel, missing), after.get(rel, missing)
            if was == now:
                continue
            parent, _, name = rel.rpartition("/")
            if parent in CLAUDE_BY_PROJECT:
                if was is missing and any(name.startswith(n) for n in names):
                    out.append(rel)
            elif rel in CLAUDE_FOLDERS:
                if was is missing:
                    out.append(rel)
            else:
                out.append(rel)
        return [str(self.real_home / rel) for rel in out]


#: The guard of the running session (set by the root ``conftest.py``).
SESSION: HomeGuard | None = None
