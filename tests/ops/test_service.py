"""The systemd user unit: its text, and install/uninstall/status with or without systemctl."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Callable

import pytest

from ahpd.ops import service


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"


def exec_start(text: str) -> str:
    [line] = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    return line.removeprefix("ExecStart=")


def test_unit_text() -> None:
    text = service.unit_text("/opt/ahpd/bin/ahpd", ["--port", "8123"])
    assert "[Unit]\nDescription=" in text
    assert "\nType=notify\n" in text
    assert "\nRestart=on-failure\n" in text
    assert "\nLimitNOFILE=8192\n" in text
    assert "[Install]\nWantedBy=default.target\n" in text
    assert exec_start(text) == "/opt/ahpd/bin/ahpd run --port 8123"


def test_unit_text_quotes_what_systemd_would_expand() -> None:
    text = service.unit_text(["/usr/bin/python3", "-m", "ahpd"], ["--data-dir", "/home/a b/50%$x"])
    assert exec_start(text) == '/usr/bin/python3 -m ahpd run --data-dir "/home/a b/50%%$$x"'
    with pytest.raises(ValueError, match="absolute"):
        service.unit_text("ahpd", [])


def test_ahpd_command_is_absolute(monkeypatch: pytest.MonkeyPatch, no_systemctl: None) -> None:
    monkeypatch.setattr(sys, "argv", ["-c"])
    command = service.ahpd_command()  # nothing on PATH: falls back to this interpreter
    assert command == [os.path.abspath(sys.executable), "-m", "ahpd"]


def test_ahpd_command_prefers_the_running_executable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "venv" / "bin" / "ahpd"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["venv/bin/ahpd", "service", "install"])
    assert service.ahpd_command() == [str(exe.resolve())]


def test_install_without_systemctl(config_home: Path, no_systemctl: None) -> None:
    lines = service.install(extra_args=["--port", "8123"])
    unit = config_home / "systemd" / "user" / "ahpd.service"
    assert lines[0] == f"wrote {unit}"
    assert any("systemctl not found" in ln for ln in lines)
    assert lines[-1] == "next: systemctl --user enable --now ahpd"
    text = unit.read_text()
    assert os.path.isabs(exec_start(text).split()[0])
    assert exec_start(text).endswith(" run --port 8123")
    assert "Type=notify" in text and "Restart=on-failure" in text


def test_install_reports_a_failing_systemctl(config_home: Path, fake_systemctl: Callable[..., Path]) -> None:
    calls = fake_systemctl(exit_code=1, output="Failed to connect to bus: No medium found")
    lines = service.install(exec_path="/x/ahpd")
    assert (config_home / "systemd" / "user" / "ahpd.service").exists()
    assert "`systemctl --user daemon-reload` failed (exit status 1): Failed to connect to bus: No medium found" in lines
    assert calls.read_text() == "--user daemon-reload\n"


def test_install_with_the_machines_own_systemctl(tmp_path: Path) -> None:
    # Only daemon-reload runs, which is harmless; it may succeed or fail (no user bus).
    if shutil.which("systemctl") is None:
        pytest.skip("no systemctl here")
    lines = service.install(unit_dir=tmp_path, exec_path="/x/ahpd")
    assert any("daemon-reload" in ln for ln in lines)


def test_reinstall_then_uninstall(config_home: Path, fake_systemctl: Callable[..., Path]) -> None:
    calls = fake_systemctl()
    unit = config_home / "systemd" / "user" / "ahpd.service"
    service.install(exec_path="/x/ahpd")
    lines = service.install(exec_path="/y/ahpd")
    assert lines[0] == f"updated {unit}" and "ran `systemctl --user daemon-reload`" in lines
    assert exec_start(unit.read_text()) == "/y/ahpd run"
    lines = service.uninstall()
    assert not unit.exists()
    assert f"removed {unit}" in lines
    assert calls.read_text().splitlines() == ["--user daemon-reload"] * 2 + [
        "--user disable --now ahpd",
        "--user daemon-reload",
    ]
    assert service.uninstall() == [f"no unit to remove at {unit}"]


def test_status_lines(config_home: Path, fake_systemctl: Callable[..., Path], no_systemctl: None) -> None:
    unit = config_home / "systemd" / "user" / "ahpd.service"
    assert service.status() == [f"unit file: {unit} (absent)", "systemctl not found on PATH; cannot ask systemd"]
    fake_systemctl(exit_code=3, output="inactive")
    service.install(exec_path="/x/ahpd")
    assert service.status() == [
        f"unit file: {unit} (present)",
        "systemctl --user is-enabled ahpd: inactive",
        "systemctl --user is-active ahpd: inactive",
    ]
