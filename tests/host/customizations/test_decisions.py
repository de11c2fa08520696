"""The decisions kept for a folder and for every session, in a real file."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import trio

from ahpd.host.customizations import decisions as store_module
from ahpd.host.customizations.decisions import DecisionStore
from tests.waits import until_step


def test_decisions_survive_a_new_store_and_stay_in_their_folder(tmp_path: Path) -> None:
    path = tmp_path / "data" / "customizations.json"
    here, there = (tmp_path / "here").as_uri(), (tmp_path / "there").as_uri()
    store = DecisionStore(path)
    assert store.enablement("p", here) == []
    assert store.decide(
        "p",
        here,
        [
            {"kind": "session", "enabled": True},
            {"kind": "workspace", "uri": here, "enabled": False},
            {"kind": "workspace", "uri": there, "enabled": True},  # not this session's
            {"kind": "global", "enabled": True},
        ],
    )
    assert not store.decide(
        "p", here, [{"kind": "workspace", "uri": here, "enabled": False}, {"kind": "global", "enabled": True}]
    )  # nothing moved
    again = DecisionStore(path)  # as after a restart
    assert again.enablement("p", here) == [
        {"kind": "workspace", "uri": here, "enabled": False},
        {"kind": "global", "enabled": True},
    ]
    assert again.enablement("p", there) == [{"kind": "global", "enabled": True}]
    assert again.decide("p", here, [])  # every scope left out: taken back
    assert DecisionStore(path).enablement("p", here) == []
    assert json.loads(path.read_text()) == {"global": {}, "workspace": {}}
    assert [p.name for p in path.parent.iterdir()] == ["customizations.json"]  # no temporary left behind


def test_an_unreadable_file_is_set_aside_not_written_over(tmp_path: Path) -> None:
    path = tmp_path / "customizations.json"
    path.write_text("{not json")
    store = DecisionStore(path)
    assert store.enablement("p", "file:///x") == []
    assert (tmp_path / "customizations.json.damaged").read_text() == "{not json"  # kept for whoever looks
    store.decide("p", "file:///x", [{"kind": "global", "enabled": False}])
    assert DecisionStore(path).enablement("p", "file:///y") == [{"kind": "global", "enabled": False}]


async def test_a_write_the_disk_refuses_is_retried_off_the_loop(tmp_path: Path, monkeypatch) -> None:
    """The decision is kept in memory at once and written by the store's
    writer in a thread; a refused write (a full disk) is retried until the
    disk takes it, nothing raised to the client's dispatch."""
    path = tmp_path / "customizations.json"
    refusals = []
    real = store_module.write_atomic

    def full_once(target: Path, data: bytes, **kwargs) -> None:
        if not refusals:
            refusals.append(target)
            raise OSError(errno.ENOSPC, "No space left on device")
        real(target, data, **kwargs)

    monkeypatch.setattr(store_module, "write_atomic", full_once)
    store = DecisionStore(path)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        assert store.decide("p", "file:///x", [{"kind": "global", "enabled": False}])
        assert store.enablement("p", "file:///x") == [{"kind": "global", "enabled": False}]
        await until_step(path.exists)  # refused once, written on the retry
        nursery.cancel_scope.cancel()
    assert refusals == [path]
    assert json.loads(path.read_text()) == {"global": {"p": False}, "workspace": {}}


def test_in_memory_it_writes_nothing(tmp_path: Path) -> None:
    store = DecisionStore(None)
    assert store.decide("p", "file:///x", [{"kind": "global", "enabled": False}])
    assert store.enablement("p", "file:///x") == [{"kind": "global", "enabled": False}]
    assert list(tmp_path.iterdir()) == []
