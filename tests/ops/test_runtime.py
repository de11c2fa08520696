"""The runtime record: atomic, private, and stale once its pid has gone."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
from pathlib import Path

import pytest

from .conftest import wait_for
from ahpd.ops.runtime import pid_alive, pid_is_ahpd, read_runtime, remove_runtime, write_runtime


def test_write_is_private_and_complete(tmp_path: Path) -> None:
    path = write_runtime(tmp_path / "d", host="127.0.0.1", port=8123, url="ws://127.0.0.1:8123")
    assert path == tmp_path / "d" / "ahpd.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    record = json.loads(path.read_text())
    assert record["pid"] == os.getpid()
    assert record["startedAt"].endswith("Z") and "T" in record["startedAt"]
    assert {k: record[k] for k in ("host", "port", "url")} == {
        "host": "127.0.0.1",
        "port": 8123,
        "url": "ws://127.0.0.1:8123",
    }
    assert read_runtime(tmp_path / "d") == record
    write_runtime(tmp_path / "d", host="127.0.0.1", port=9000, url="ws://127.0.0.1:9000")
    assert read_runtime(tmp_path / "d")["port"] == 9000
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["ahpd.json"]  # temporaries renamed away


def test_absent_record_is_none(tmp_path: Path) -> None:
    assert read_runtime(tmp_path) is None


def test_dead_pid_makes_the_record_stale(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        write_runtime(tmp_path, pid=proc.pid, host="127.0.0.1", port=1, url="ws://127.0.0.1:1")
        assert read_runtime(tmp_path)["pid"] == proc.pid
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    with caplog.at_level(logging.WARNING, logger="ahpd.ops.runtime"):
        assert read_runtime(tmp_path) is None
    assert f"stale: pid {proc.pid}" in caplog.text


def test_unreaped_zombie_counts_as_gone(sleeper: subprocess.Popen[bytes]) -> None:
    assert pid_alive(sleeper.pid)
    sleeper.kill()
    # Not waited for: the child stays a zombie, which kill(pid, 0) alone would call alive.
    wait_for(lambda: not pid_alive(sleeper.pid), what="the killed child to count as gone")
    assert sleeper.returncode is None  # still unreaped


def test_corrupt_record_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "ahpd.json").write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert read_runtime(tmp_path) is None
    assert "unreadable" in caplog.text


def test_remove_only_our_own_record(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    write_runtime(tmp_path, pid=sleeper.pid, url="ws://x")
    assert remove_runtime(tmp_path) is False
    assert (tmp_path / "ahpd.json").exists()
    write_runtime(tmp_path, url="ws://x")
    assert remove_runtime(tmp_path) is True
    assert not (tmp_path / "ahpd.json").exists()
    assert remove_runtime(tmp_path) is False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs procfs")
def test_pid_is_ahpd_reads_the_command_line(sleeper: subprocess.Popen[bytes]) -> None:
    assert not pid_is_ahpd(sleeper.pid)
