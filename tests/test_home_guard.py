"""The suite runs under a temporary HOME, and a write under the real one is caught."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from . import home_guard
from .home_guard import CLAUDE_QUIET, HomeGuard, project_name


def test_the_session_runs_under_a_temporary_home() -> None:
    guard = home_guard.SESSION
    assert guard is not None, "the root conftest.py did not start the guard"
    home = Path(os.environ["HOME"])
    assert home != guard.real_home
    assert home in guard.roots and home.is_dir()
    assert Path.home() == home and Path("~").expanduser() == home


def test_a_child_process_inherits_the_temporary_home_and_a_quiet_claude() -> None:
    names = ["HOME", "CLAUDE_CONFIG_DIR", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", *CLAUDE_QUIET]
    run = subprocess.run(
        [sys.executable, "-c", f"import json, os; print(json.dumps({{n: os.environ.get(n) for n in {names!r}}}))"],
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(run.stdout)
    assert seen["HOME"] == os.environ["HOME"] and Path(seen["HOME"]) != home_guard.SESSION.real_home
    # Unset: the CLI's config and every XDG place default under the temporary HOME.
    assert (
        seen["CLAUDE_CONFIG_DIR"] is seen["XDG_STATE_HOME"] is seen["XDG_CONFIG_HOME"] is seen["XDG_CACHE_HOME"] is None
    )
    assert all(seen[name] == "1" for name in CLAUDE_QUIET)


def test_isolate_drops_a_users_claude_config_dir(tmp_path: Path) -> None:
    env = {
        "HOME": "/home/someone",
        "CLAUDE_CONFIG_DIR": "/home/someone/.claude",
        "XDG_STATE_HOME": "/x",
        "PATH": "/bin",
    }
    home_guard.isolate(env, tmp_path)
    assert env == {"HOME": str(tmp_path), "PATH": "/bin", **CLAUDE_QUIET}


def _home_in_use(home: Path) -> None:
    """A HOME someone lives in: ahpd's token, a Claude Code with one project."""
    (home / ".local/state/ahpd").mkdir(parents=True)
    (home / ".local/state/ahpd/token").write_text("secret\n")
    (home / ".claude/projects/-home-someone-work").mkdir(parents=True)
    (home / ".claude.json").write_text("{}")
    (home / ".cache/pip").mkdir(parents=True)


def test_the_guard_sees_nothing_when_nothing_is_written(tmp_path: Path) -> None:
    _home_in_use(tmp_path)
    guard = HomeGuard(tmp_path)
    assert guard.writes() == []


def test_the_guard_catches_writes_to_ahpds_places(tmp_path: Path) -> None:
    _home_in_use(tmp_path)
    guard = HomeGuard(tmp_path)
    token = tmp_path / ".local/state/ahpd/token"
    token.write_text("another secret, longer\n")
    (tmp_path / ".local/state/ahpd/ahpd.json").write_text("{}")
    (tmp_path / ".local/state/ahpd/demo-agent/conversations").mkdir(parents=True)
    (tmp_path / ".config/systemd/user").mkdir(parents=True)
    (tmp_path / ".config/systemd/user/ahpd.service").write_text("[Unit]\n")
    assert guard.writes() == [
        str(tmp_path / rel)
        for rel in (
            ".config/systemd/user/ahpd.service",
            ".local/state/ahpd/ahpd.json",
            ".local/state/ahpd/demo-agent",
            ".local/state/ahpd/demo-agent/conversations",
            ".local/state/ahpd/token",
        )
    ]


def test_the_guard_catches_a_removal(tmp_path: Path) -> None:
    _home_in_use(tmp_path)
    guard = HomeGuard(tmp_path)
    (tmp_path / ".local/state/ahpd/token").unlink()
    assert guard.writes() == [str(tmp_path / ".local/state/ahpd/token")]


def test_the_guard_catches_claude_folders_the_suite_creates(tmp_path: Path) -> None:
    guard = HomeGuard(tmp_path)  # a fresh machine: no Claude Code has run here
    (tmp_path / ".claude/sessions").mkdir(parents=True)
    (tmp_path / ".claude.json").write_text("{}")
    (tmp_path / ".cache/claude-cli-nodejs/-x").mkdir(parents=True)
    assert guard.writes() == [str(tmp_path / rel) for rel in (".cache/claude-cli-nodejs", ".claude", ".claude.json")]


def test_the_guard_tells_the_suites_claude_projects_from_the_users(tmp_path: Path) -> None:
    _home_in_use(tmp_path)
    guard = HomeGuard(tmp_path)
    session_temp = Path("/tmp/pytest-of-someone/pytest-7")
    guard.roots.append(session_temp)
    ours = project_name(session_temp / "test_x0" / "work")
    assert ours == "-tmp-pytest-of-someone-pytest-7-test-x0-work"
    (tmp_path / ".claude/projects" / ours).mkdir()
    (tmp_path / ".cache/claude-cli-nodejs" / ours).mkdir(parents=True)
    # The user's own Claude Code, busy meanwhile: not the suite's doing.
    (tmp_path / ".claude/projects/-home-someone-other").mkdir()
    (tmp_path / ".claude/telemetry").mkdir()
    (tmp_path / ".claude.json").write_text('{"numStartups": 2}')
    # Installing, not testing.
    (tmp_path / ".cache/pip/http").mkdir()
    assert guard.writes() == [
        str(tmp_path / ".cache/claude-cli-nodejs"),
        str(tmp_path / ".cache/claude-cli-nodejs" / ours),
        str(tmp_path / ".claude/projects" / ours),
    ]


def test_a_write_under_the_real_home_fails_the_run(tmp_path: Path) -> None:
    # The root conftest.py and the guard, in a tree of their own, with a test
    # that writes where ahpd keeps its token in the HOME pytest started with.
    root = Path(__file__).resolve().parent.parent
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    for rel in ("conftest.py", "pyproject.toml", "tests/__init__.py", "tests/home_guard.py"):
        (tree / rel).write_text((root / rel).read_text())
    (tree / "tests/test_leak.py").write_text(
        "from pathlib import Path\n"
        "from tests import home_guard\n\n"
        "def test_writes_the_token() -> None:\n"
        "    state = home_guard.SESSION.real_home / '.local/state/ahpd'\n"
        "    state.mkdir(parents=True)\n"
        "    (state / 'token').write_text('x')\n\n"
        "def test_writes_its_own_home() -> None:\n"
        "    (Path.home() / '.claude.json').write_text('{}')\n"
    )
    real = tmp_path / "real-home"
    real.mkdir()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(tmp_path / "inner-tmp"),
            "tests/test_leak.py",
        ],
        cwd=tree,
        env={**os.environ, "HOME": str(real), "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "2 passed" in out, out
    section = out[out.index("the suite wrote under the real HOME") :]
    assert str(real / ".local/state/ahpd") in section and str(real / ".local/state/ahpd/token") in section, out
    assert ".claude.json" not in section, out  # the temporary HOME is the suite's to write
    assert not (real / ".claude.json").exists()
