"""The decisions kept for a folder and for every session, in a real file."""

from __future__ import annotations

import json
from pathlib import Path

from ahpd.ports.decisions import DecisionStore


def test_decisions_survive_a_new_store_and_stay_in_their_folder(tmp_path: Path) -> None:
    path = tmp_path / "data" / "customizations.json"
    here, there = (tmp_path / "here").as_uri(), (tmp_path / "there").as_uri()
    store = DecisionStore(path)
    assert store.enablement("p", here) == []
    assert store.decide("p", here, [{"kind": "session", "enabled": True},
                                    {"kind": "workspace", "uri": here, "enabled": False},
                                    {"kind": "workspace", "uri": there, "enabled": True},  # not this session's
                                    {"kind": "global", "enabled": True}])
    assert not store.decide("p", here, [{"kind": "workspace", "uri": here, "enabled": False},
                                        {"kind": "global", "enabled": True}])  # nothing moved
    again = DecisionStore(path)  # as after a restart
    assert again.enablement("p", here) == [{"kind": "workspace", "uri": here, "enabled": False},
                                           {"kind": "global", "enabled": True}]
    assert again.enablement("p", there) == [{"kind": "global", "enabled": True}]
    assert again.decide("p", here, [])  # every scope left out: taken back
    assert DecisionStore(path).enablement("p", here) == []
    assert json.loads(path.read_text()) == {"global": {}, "workspace": {}}
    assert [p.name for p in path.parent.iterdir()] == ["customizations.json"]  # no temporary left behind


def test_an_unreadable_file_keeps_nothing_and_is_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "customizations.json"
    path.write_text("{not json")
    store = DecisionStore(path)
    assert store.enablement("p", "file:///x") == []
    store.decide("p", "file:///x", [{"kind": "global", "enabled": False}])
    assert DecisionStore(path).enablement("p", "file:///y") == [{"kind": "global", "enabled": False}]


def test_in_memory_it_writes_nothing(tmp_path: Path) -> None:
    store = DecisionStore(None)
    assert store.decide("p", "file:///x", [{"kind": "global", "enabled": False}])
    assert store.enablement("p", "file:///x") == [{"kind": "global", "enabled": False}]
    assert list(tmp_path.iterdir()) == []
