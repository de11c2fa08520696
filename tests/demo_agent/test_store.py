"""The demo agent's session files."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from ahpd.demo_agent.store import Message, SessionStore, valid_session_id


def test_round_trip_and_layout(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "home")
    record = store.create("/work")
    record.title = "hello"
    record.messages += [Message("user", "hello"), Message("agent", "hi “there”")]
    store.save(record)

    assert stat.S_IMODE(os.stat(tmp_path / "home").st_mode) == 0o700
    assert os.listdir(tmp_path / "home") == [f"{record.session_id}.json"]  # no temporary files left
    data = json.loads((tmp_path / "home" / f"{record.session_id}.json").read_text(encoding="utf-8"))
    assert set(data) == {"version", "sessionId", "cwd", "createdAt", "updatedAt", "title", "mode", "messages"}
    assert data["messages"][1] == {"id": record.messages[1].id, "role": "agent", "text": "hi “there”"}
    assert store.get(record.session_id) == record


def test_list_newest_first_and_by_cwd(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    old = store.create("/a")
    new = store.create("/b")
    old.updated_at, new.updated_at = "2024-01-01T00:00:00.000Z", "2025-01-01T00:00:00.000Z"
    store.save(old)
    store.save(new)
    assert [r.session_id for r in store.all()] == [new.session_id, old.session_id]
    assert [r.session_id for r in store.all("/a")] == [old.session_id]
    assert SessionStore(tmp_path / "missing").all() == []


def test_unreadable_files_are_skipped(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    good = store.create("/a")
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({**good.to_json(), "sessionId": "elsewhere"}))
    (tmp_path / "future.json").write_text(json.dumps({**good.to_json(), "sessionId": "future", "version": 99}))
    assert [r.session_id for r in store.all()] == [good.session_id]
    assert store.get("broken") is None


def test_delete_and_bad_ids(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    record = store.create("/a")
    assert store.delete(record.session_id) is True
    assert store.delete(record.session_id) is False
    assert store.get(record.session_id) is None
    for bad in ("../escape", ".hidden", "a/b", "", "x" * 200):
        assert not valid_session_id(bad)
        assert store.get(bad) is None
        assert store.delete(bad) is False


def test_default_home(monkeypatch, tmp_path: Path) -> None:
    from ahpd.demo_agent.cli import default_home

    monkeypatch.setenv("AHPD_DEMO_AGENT_HOME", str(tmp_path / "explicit"))
    assert default_home() == tmp_path / "explicit"
    monkeypatch.delenv("AHPD_DEMO_AGENT_HOME")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_home() == tmp_path / "state" / "ahpd" / "demo-agent"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/is/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_home() == tmp_path / "home" / ".local" / "state" / "ahpd" / "demo-agent"
