"""The stores on a disk that refuses writes, and on files that are damaged.

A real small filesystem (a tmpfs the test mounts, filled up or made
read-only) where this machine allows one; a shortage of file descriptors
is injected at the store's port, where no real one can be made safely
inside the test process.
"""

from __future__ import annotations

import errno
import json
import logging
import tempfile

import pytest
import trio

from ahpd.ports import atomic
from ahpd.host.kernel.seqstore import BLOCK, FileSeqStore, Sequencer
from ahpd.host.kernel.rootconfig import RootConfigStore
from ahpd.host.sessions.store import FileSessionStore, write_atomic

from ...smalldisk import small_disk
from ...waits import until_step

CHAT = "ahp-chat:/c1"


def record(uri: str = "ahp-session:/s1", title: str = "", chat: str = CHAT, **extra) -> dict:
    return {
        "uri": uri,
        "provider": "demo",
        "cwd": "/tmp",
        "createdAt": "2026-12-01T00:00:00Z",
        "title": title,
        "status": 32,
        "chats": [
            {
                "uri": chat,
                "backendId": "b1",
                "state": {
                    "resource": chat,
                    "title": title,
                    "status": 1,
                    "modifiedAt": "2026-12-01T00:00:00Z",
                    "turns": [
                        {
                            "id": "t1",
                            "message": {"text": "hi", "origin": {"kind": "user"}},
                            "responseParts": [{"kind": "markdown", "id": "p1", "content": "hello"}],
                            "state": "complete",
                        }
                    ],
                },
            }
        ],
        **extra,
    }


def errors(caplog, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR and text in r.getMessage()]


# -- writes the disk refuses ----------------------------------------------------


def test_a_write_to_a_full_disk_leaves_the_old_file_whole(tmp_path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        path = disk.path / "f.json"
        write_atomic(path, b'{"old": true}')
        disk.fill()
        with pytest.raises(OSError) as caught:
            write_atomic(path, json.dumps({"new": "x" * 100_000}).encode())
        assert caught.value.errno == errno.ENOSPC
        assert json.loads(path.read_bytes()) == {"old": True}
        assert sorted(p.name for p in disk.path.iterdir()) == [".filler", "f.json"]  # no temporary left


@pytest.mark.parametrize("fault", ["full", "read-only"])
async def test_session_saves_on_a_failing_disk_are_kept_retried_and_logged_once(tmp_path, caplog, fault) -> None:
    with small_disk(tmp_path / "disk") as disk:
        store = FileSessionStore(disk.path / "sessions")
        store.save(record(title="before"))
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            disk.fill() if fault == "full" else disk.read_only()
            for n in range(200):  # a save per token, say
                store.save(record(title=f"title {n}"))
                await trio.lowlevel.checkpoint()
            await until_step(lambda: store.writes.failing is not None)
            assert store.writes.pending == 1
            assert [r["title"] for r in FileSessionStore(disk.path / "sessions").load_all()] == ["before"]
            disk.free() if fault == "full" else disk.writable()
            await until_step(lambda: store.writes.pending == 0)
            nursery.cancel_scope.cancel()
        assert len(errors(caplog, "a write failed")) == 1
        assert any("takes writes again" in r.getMessage() for r in caplog.records)
        assert [r["title"] for r in FileSessionStore(disk.path / "sessions").load_all()] == ["title 199"]


async def test_out_of_file_descriptors_is_retried(tmp_path, caplog, monkeypatch) -> None:
    real = tempfile.mkstemp
    refusals = [OSError(errno.EMFILE, "Too many open files")] * 3

    def mkstemp(*args, **kwargs):
        if refusals:
            raise refusals.pop()
        return real(*args, **kwargs)

    monkeypatch.setattr(atomic.tempfile, "mkstemp", mkstemp)
    store = FileSessionStore(tmp_path / "sessions")
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        store.save(record(title="kept"))
        await until_step(lambda: store.writes.pending == 0)
        nursery.cancel_scope.cancel()
    assert refusals == []
    assert len(errors(caplog, "Too many open files")) == 1
    assert [r["title"] for r in store.load_all()] == ["kept"]


async def test_the_latest_write_of_a_session_wins_and_stopping_flushes_what_is_pending(tmp_path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        store = FileSessionStore(disk.path / "sessions")
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            store.save(record("ahp-session:/gone", chat="ahp-chat:/g"))
            store.save(record(title="one"))
            await until_step(lambda: store.writes.pending == 0)
            disk.read_only()
            store.save(record(title="two"))
            store.delete("ahp-session:/gone")
            store.save(record(title="three"))
            await until_step(lambda: store.writes.failing is not None)
            nursery.cancel_scope.cancel()
        assert store.writes.pending == 2
        disk.writable()
        store.close()  # what the host does on the way out
        assert store.writes.pending == 0
        assert [r["title"] for r in FileSessionStore(disk.path / "sessions").load_all()] == ["three"]


async def test_root_config_saves_on_a_full_disk_are_retried(tmp_path, caplog) -> None:
    with small_disk(tmp_path / "disk") as disk:
        config = RootConfigStore(disk.path / "root-config.json")
        async with trio.open_nursery() as nursery:
            await nursery.start(config.run)
            disk.fill()
            config.save({"telemetryLevel": "off"})
            config.save({"telemetryLevel": "off", "sandboxEnabled": True})
            await until_step(lambda: config.writes.failing is not None)
            assert not (disk.path / "root-config.json").exists()
            disk.free()
            await until_step(lambda: config.writes.pending == 0)
            nursery.cancel_scope.cancel()
        assert RootConfigStore(disk.path / "root-config.json").load() == {
            "telemetryLevel": "off",
            "sandboxEnabled": True,
        }
        assert len(errors(caplog, "a write failed")) == 1


# -- the serverSeq reservation ------------------------------------------------------


async def test_the_reservation_moves_only_once_written_and_a_crash_never_repeats_a_number(tmp_path, caplog) -> None:
    with small_disk(tmp_path / "disk") as disk:
        path = disk.path / "serverSeq"
        sequencer = Sequencer(FileSeqStore(path))
        assert sequencer.reserved == BLOCK and int(path.read_text()) == BLOCK
        async with trio.open_nursery() as nursery:
            await nursery.start(sequencer.run)
            disk.read_only()
            handed = [sequencer.next() for _ in range(BLOCK)]
            await until_step(lambda: sequencer.failing is not None)
            # Nothing past what the disk holds was handed out...
            assert sequencer.reserved == BLOCK and max(handed) == BLOCK
            assert errors(caplog, "past the reservation") == []
            # ...so a crash now resumes above every number handed out.
            assert Sequencer(_ReadOnly(path)).current >= max(handed)
            # Past the block, no number is handed out: the reason is said (loudly, once).
            for _ in range(3):
                assert "cannot be written (Read-only file system)" in (sequencer.unavailable() or "")
            with pytest.raises(RuntimeError):
                sequencer.next()
            assert sequencer.current == max(handed)
            assert len(errors(caplog, "the last one reserved on disk")) == 1
            assert len(errors(caplog, "cannot be written")) == 1
            disk.writable()
            await until_step(lambda: sequencer.failing is None and sequencer.unavailable() is None)
            handed += [sequencer.next() for _ in range(10)]
            assert sequencer.reserved > max(handed)
            nursery.cancel_scope.cancel()
        crashed = Sequencer(FileSeqStore(path))  # no close(): a crash
        assert crashed.current > max(handed)
        assert crashed.next() > max(handed)


class _ReadOnly(FileSeqStore):
    """The store as the next start reads it, without writing anything."""

    def reserve(self, upto: int) -> None:
        pass


@pytest.mark.parametrize("content", [b"", b"garbage\n", b"-5\n", b"\xff\xfe", str(2**60).encode()])
def test_a_damaged_server_seq_is_set_aside_and_numbering_resumes_above_any_count(tmp_path, caplog, content) -> None:
    path = tmp_path / "serverSeq"
    path.write_bytes(content)
    sequencer = Sequencer(FileSeqStore(path))
    assert sequencer.current > 10**15  # microseconds since 1970: no counter reached that
    assert sequencer.current < 2**53
    assert (tmp_path / "serverSeq.damaged").read_bytes() == content
    assert int(path.read_text()) == sequencer.reserved
    assert errors(caplog, "serverSeq is damaged") or errors(caplog, "serverSeq.damaged")


# -- damaged files at start -----------------------------------------------------------


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


DAMAGED = {
    "not-json": b'{"uri": ',
    "not-utf8": b"\xff\xfe{}",
    "absurd-nesting": deep(100_000),
    "nested-record": b'{"uri": "ahp-session:/n", "title": ' + deep(100_000) + b"}",
    "not-an-object": b"[1, 2]",
    "missing-cwd": json.dumps({k: v for k, v in record("ahp-session:/m").items() if k != "cwd"}).encode(),
    "wrong-title": json.dumps(record("ahp-session:/w", title=None) | {"title": 7}).encode(),
    "status-bool": json.dumps(record("ahp-session:/b") | {"status": True}).encode(),
    "chats-not-list": json.dumps(record("ahp-session:/c") | {"chats": {"uri": "x"}}).encode(),
    "turns-wrong": json.dumps(
        record("ahp-session:/t", chat="ahp-chat:/t")
        | {
            "chats": [
                {
                    "uri": "ahp-chat:/t",
                    "state": {
                        "resource": "ahp-chat:/t",
                        "title": "",
                        "status": 1,
                        "modifiedAt": "x",
                        "turns": [{"id": 5}],
                    },
                }
            ]
        }
    ).encode(),
    "state-deep": json.dumps(
        record("ahp-session:/d", chat="ahp-chat:/d")
        | {"config": {"schema": {"type": "object", "properties": {}}, "values": {"v": json.loads(deep(900))}}}
    ).encode(),
    "config-wrong": json.dumps(record("ahp-session:/g", chat="ahp-chat:/g") | {"config": {"values": 3}}).encode(),
}


def test_damaged_session_files_are_set_aside_and_the_others_load(tmp_path, caplog) -> None:
    folder = tmp_path / "sessions"
    good = FileSessionStore(folder)
    good.save(record("ahp-session:/ok-1", title="one", chat="ahp-chat:/1"))
    good.save(record("ahp-session:/ok-2", title="two", chat="ahp-chat:/2"))
    for name, content in DAMAGED.items():
        (folder / f"{name}.json").write_bytes(content)
    (folder / "x.json.abc123.tmp").write_bytes(b"{")  # a write a crash cut short
    (folder / "twin.json").write_text(json.dumps(record("ahp-session:/twin", chat="ahp-chat:/1")))
    loaded = FileSessionStore(folder).load_all()
    assert sorted(r["title"] for r in loaded) == ["one", "two"]
    for name in [*DAMAGED, "twin"]:
        assert (folder / f"{name}.json.damaged").exists(), name
        assert not (folder / f"{name}.json").exists(), name
        assert [r for r in caplog.records if f"{name}.json is damaged" in r.getMessage()], name
    assert not (folder / "x.json.abc123.tmp").exists()
    reasons = " ".join(r.getMessage() for r in caplog.records)
    assert "nested deeper" in reasons and "cwd is missing" in reasons and "not JSON" in reasons
    # The next start finds only the good ones, and says nothing more.
    caplog.clear()
    assert len(FileSessionStore(folder).load_all()) == 2
    assert errors(caplog, "damaged") == []


def test_a_damaged_root_config_is_set_aside_and_bad_values_dropped(tmp_path, caplog) -> None:
    path = tmp_path / "root-config.json"
    path.write_bytes(deep(100_000))
    assert RootConfigStore(path).load() == {}
    assert (tmp_path / "root-config.json.damaged").exists()
    path.write_text(json.dumps({"telemetryLevel": "off", "replayBytes": "big", "nonsense": 1, "defaultShell": "sh"}))
    assert RootConfigStore(path).load() == {"telemetryLevel": "off"}
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "replayBytes must be a number" in said and "nonsense is not a config key" in said
