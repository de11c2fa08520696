"""XDG locations and the private data directory."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ahpd.ops.paths import default_config_path, default_data_dir, ensure_private_dir


def test_xdg_variables_are_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert default_data_dir() == tmp_path / "state" / "ahpd"
    assert default_config_path() == tmp_path / "config" / "ahpd" / "config.toml"


def test_home_fallbacks_and_relative_xdg_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/not/allowed")
    assert default_data_dir() == tmp_path / ".local" / "state" / "ahpd"
    assert default_config_path() == tmp_path / ".config" / "ahpd" / "config.toml"


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_ensure_private_dir_creates_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o000)
    try:
        d = ensure_private_dir(tmp_path / "a" / "b")
    finally:
        os.umask(old)
    assert d.is_dir() and mode(d) == 0o700
    assert ensure_private_dir(d) == d  # idempotent


def test_ensure_private_dir_tightens_our_open_dir(tmp_path: Path) -> None:
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o755)
    ensure_private_dir(d)
    assert mode(d) == 0o700


def test_ensure_private_dir_refuses_a_shared_sticky_dir(tmp_path: Path) -> None:
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o1777)
    with pytest.raises(PermissionError, match="shared"):
        ensure_private_dir(d)
    assert mode(d) == 0o1777  # left as it was
