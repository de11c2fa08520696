"""`ahpd status`, `ahpd stop` and `ahpd service`, end to end against real processes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from ahpd.ops.commands import format_duration
from ahpd.ops.runtime import write_runtime

from .conftest import run_cli

Spawn = Callable[..., tuple[subprocess.Popen[bytes], Path]]


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 45, 192, 7500, 3 * 86400 + 4 * 3600 + 5)] == [
        "0s",
        "45s",
        "3m12s",
        "2h05m",
        "3d4h",
    ]


def test_nothing_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("status", "--data-dir", str(tmp_path)) == 3
    assert capsys.readouterr().out == f"ahpd is not running (no {tmp_path / 'ahpd.json'})\n"
    assert run_cli("status", "--json", "--data-dir", str(tmp_path)) == 3
    assert json.loads(capsys.readouterr().out)["running"] is False
    assert run_cli("stop", "--data-dir", str(tmp_path)) == 3


def test_status_reads_live_counts(spawn_fake_daemon: Spawn, capsys: pytest.CaptureFixture[str]) -> None:
    proc, data = spawn_fake_daemon()
    assert run_cli("status", "--data-dir", str(data)) == 0
    out = capsys.readouterr().out
    assert "ahpd is running at ws://127.0.0.1:1234\n" in out
    assert f"pid: {proc.pid}\n" in out
    assert "uptime: " in out
    assert "connections: 2\n" in out and "sessions: 5\n" in out
    assert run_cli("status", "--json", "--data-dir", str(data)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["running"] is True and doc["pid"] == proc.pid and doc["port"] == 1234
    assert doc["live"] == {"connections": 2, "sessions": 5}


def test_status_without_a_control_socket(spawn_fake_daemon: Spawn, capsys: pytest.CaptureFixture[str]) -> None:
    proc, data = spawn_fake_daemon("--no-control")
    assert run_cli("status", "--data-dir", str(data)) == 0
    out = capsys.readouterr().out
    assert f"pid: {proc.pid}\n" in out
    assert "connections: unavailable" in out


def test_stop_stops_a_running_daemon(spawn_fake_daemon: Spawn, capsys: pytest.CaptureFixture[str]) -> None:
    proc, data = spawn_fake_daemon()
    assert run_cli("stop", "--data-dir", str(data)) == 0
    assert capsys.readouterr().out == f"stopped ahpd (pid {proc.pid})\n"
    assert proc.wait(timeout=30) == 0
    assert not (data / "ahpd.json").exists() and not (data / "control.sock").exists()
    assert run_cli("status", "--data-dir", str(data)) == 3


def test_stop_times_out(spawn_fake_daemon: Spawn, capsys: pytest.CaptureFixture[str]) -> None:
    proc, data = spawn_fake_daemon("--ignore-term")
    assert run_cli("stop", "--timeout", "0.3", "--data-dir", str(data)) == 1
    assert "did not exit within 0.3s" in capsys.readouterr().err
    assert proc.poll() is None


def test_stop_refuses_a_reused_pid(
    tmp_path: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    write_runtime(tmp_path, pid=sleeper.pid, host="127.0.0.1", port=1, url="ws://127.0.0.1:1")
    assert run_cli("stop", "--data-dir", str(tmp_path)) == 3
    assert "now another program" in capsys.readouterr().out
    assert sleeper.poll() is None  # not signalled


def test_service_install_passes_a_custom_data_dir(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_systemctl: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    unit = tmp_path / "config" / "systemd" / "user" / "ahpd.service"

    assert run_cli("service", "install") == 0
    assert f"wrote {unit}" in capsys.readouterr().out
    assert "--data-dir" not in unit.read_text()

    assert run_cli("service", "install", "--data-dir", str(tmp_path / "elsewhere"), "--", "--port", "9") == 0
    assert f" run --data-dir {tmp_path / 'elsewhere'} --port 9\n" in unit.read_text()

    assert run_cli("service", "status") == 0
    assert "(present)" in capsys.readouterr().out
    assert run_cli("service", "uninstall") == 0
    assert not unit.exists()
