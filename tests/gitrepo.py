"""Real git repositories for tests, made with the ``git`` command.

Every call runs with a HOME and a global config of the test's own, so
nothing reads or writes the config of whoever runs the suite.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    config = home / ".gitconfig"
    if not config.exists():
        config.write_text(
            "[user]\n\tname = Test Person\n\temail = test@example.invalid\n[init]\n\tdefaultBranch = main\n"
        )
    return {
        **os.environ,
        "HOME": str(home),
        "GIT_CONFIG_GLOBAL": str(config),
        "GIT_CONFIG_NOSYSTEM": "1",
        "XDG_CONFIG_HOME": str(home / ".config"),
    }


def git(repo: Path, *args: str, home: Path | None = None) -> str:
    env = git_env(home or repo.parent / "git-home")
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True)
    return done.stdout


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A repository at ``path`` with one commit of ``files`` (if any)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test Person")
    git(path, "config", "user.email", "test@example.invalid")
    for name, text in (files or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    if files:
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", "first")
    return path


def porcelain(repo: Path) -> list[str]:
    """``git status --porcelain`` lines (untracked files listed one by one)."""
    out = git(repo, "status", "--porcelain", "-uall")
    return sorted(line for line in out.splitlines() if line)


def mixed_repo(path: Path) -> Path:
    """A repository with every kind of change: a rename, a delete, an
    untracked file, a staged-and-remodified file and a nested folder."""
    make_repo(
        path,
        {
            "README.md": "hello\n",
            "old.txt": "a file that moves\n" * 5,
            "gone.txt": "bye\n",
            "both.txt": "one\n",
            "src/pkg/mod.py": "x = 1\n",
            "keep.txt": "kept\n",
        },
    )
    git(path, "mv", "old.txt", "new.txt")
    (path / "gone.txt").unlink()
    (path / "fresh.txt").write_text("new\n")
    (path / "both.txt").write_text("two\n")
    git(path, "add", "both.txt")
    (path / "both.txt").write_text("three\n")
    (path / "src/pkg/mod.py").write_text("x = 2\n")
    (path / "src/pkg/added.py").write_text("y = 1\n")
    return path
