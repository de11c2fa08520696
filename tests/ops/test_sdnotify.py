"""sd_notify against a real AF_UNIX datagram socket, as systemd would listen."""

from __future__ import annotations

import os
import secrets
import socket
import sys
from pathlib import Path

import pytest

from ahpd.ops.sdnotify import notify


def test_unset_notify_socket_is_false(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False


def test_datagram_reaches_a_path_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(path))
        listener.settimeout(10)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        assert notify("READY=1") is True
        assert notify("STATUS=listening on ws://127.0.0.1:1") is True
        assert listener.recv(4096) == b"READY=1"
        assert listener.recv(4096) == b"STATUS=listening on ws://127.0.0.1:1"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets are Linux-only")
def test_datagram_reaches_an_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"ahpd-test-{os.getpid()}-{secrets.token_hex(4)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)
        listener.settimeout(10)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("READY=1") is True
        assert listener.recv(4096) == b"READY=1"


def test_nobody_listening_is_false_not_an_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone.sock"))
    assert notify("READY=1") is False
