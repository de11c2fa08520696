"""The connection token: created once, private, reused, shared under a race."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ahpd.ops.token import TokenError, load_or_create_token, read_token_file

from .conftest import py_env


def test_token_created_0600_and_reused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = load_or_create_token(data)
    path = data / "token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert len(token) >= 40 and token.replace("-", "").replace("_", "").isalnum()
    assert path.read_text().strip() == token
    assert load_or_create_token(data) == token
    assert sorted(p.name for p in data.iterdir()) == ["token"]  # no temporary left behind


def test_concurrent_first_runs_agree_on_one_token(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code = "import sys; from ahpd.ops.token import load_or_create_token as f; print(f(sys.argv[1]))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(data)], stdout=subprocess.PIPE, env=py_env(), text=True)
        for _ in range(4)
    ]
    outs = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert outs == {(data / "token").read_text().strip()}
    assert sorted(p.name for p in data.iterdir()) == ["token"]


def test_token_readable_by_others_is_refused(tmp_path: Path) -> None:
    load_or_create_token(tmp_path)
    (tmp_path / "token").chmod(0o644)
    with pytest.raises(TokenError, match=r"token.*readable by others.*delete it"):
        load_or_create_token(tmp_path)
    assert stat.S_IMODE((tmp_path / "token").stat().st_mode) == 0o644  # not silently repaired


def test_empty_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").touch(mode=0o600)
    with pytest.raises(TokenError, match="empty"):
        load_or_create_token(tmp_path)


def test_read_token_file_strips_whitespace(tmp_path: Path) -> None:
    f = tmp_path / "tok"
    f.write_text("  s3cret-token\n\n")
    assert read_token_file(f) == "s3cret-token"


def test_read_token_file_errors_name_the_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty-token"
    empty.write_text(" \n")
    with pytest.raises(TokenError, match="empty-token.*empty"):
        read_token_file(empty)
    with pytest.raises(TokenError, match="missing-token"):
        read_token_file(tmp_path / "missing-token")
