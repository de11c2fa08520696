"""The session store's journals on a real filesystem: what a torn write, a
garbled end, compaction, an older ahpd's files and a long chat leave loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os

import pytest
import trio

from ahpd.host.sessions import store as store_module
from ahpd.host.sessions.store import WINDOW, FileSessionStore, MemorySessionStore
from ahpd.ports import journal

from ...smalldisk import small_disk
from ...waits import until_step

SESSION, CHAT = "ahp-session:/s1", "ahp-chat:/c1"


def turn(n: int, text: str = "") -> dict:
    return {
        "id": f"turn-{n}",
        "message": {"text": text or f"q{n}", "origin": {"kind": "user"}},
        "responseParts": [{"kind": "markdown", "id": f"p{n}", "content": f"a{n}"}],
        "state": "complete",
    }


def chat_state(turns: list[dict], title: str = "", cursor: int = 0) -> dict:
    state = {"resource": CHAT, "title": title, "status": 1, "modifiedAt": "2026-12-01T00:00:00Z", "turns": turns}
    if cursor:
        state["turnsNextCursor"] = f"older:{cursor}"
    return state


def record(turns: list[dict], title: str = "", cursor: int = 0, **extra) -> dict:
    return {
        "uri": SESSION,
        "provider": "demo",
        "cwd": "/tmp",
        "createdAt": "2026-12-01T00:00:00Z",
        "title": title,
        "status": 32,
        "config": None,
        "defaultChat": CHAT,
        "chats": [{"uri": CHAT, "backendId": "b1", "state": chat_state(turns, title, cursor)}],
        **extra,
    }


def name(uri: str) -> str:
    return hashlib.sha256(uri.encode()).hexdigest()[:32]


def journal_of(folder, chat: str = CHAT):
    return folder / name(SESSION) / f"{name(chat)}.jsonl"


def loaded_turns(folder) -> list[str]:
    [rec] = FileSessionStore(folder).load_all()
    return [t["id"] for t in rec["chats"][0]["state"]["turns"]]


# -- what a turn writes -------------------------------------------------------------


def test_a_turn_appends_its_own_records_and_nothing_else(tmp_path) -> None:
    store = FileSessionStore(tmp_path)
    turns = [turn(n) for n in range(3)]
    store.save(record(turns))
    path = journal_of(tmp_path)
    before = path.read_bytes()
    head = (tmp_path / name(SESSION) / "session.json").stat().st_mtime_ns
    store.save(record(turns + [turn(3)]))
    after = path.read_bytes()
    assert after.startswith(before)
    assert [json.loads(line) for line in after[len(before) :].splitlines()] == [{"n": 3, "turn": turn(3)}]
    assert (tmp_path / name(SESSION) / "session.json").stat().st_mtime_ns == head  # the head did not move
    assert loaded_turns(tmp_path) == ["turn-0", "turn-1", "turn-2", "turn-3"]


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_a_record_changed_in_place_since_the_last_save_is_written(tmp_path, kind) -> None:
    """The host's record shares its live dicts with whatever keeps them (a
    changeset's reviews are one): a dict changed in place between two saves
    is a change to write, though it is the same object as last time."""
    store = FileSessionStore(tmp_path) if kind == "file" else MemorySessionStore()
    reviewed: dict = {}
    store.save(record([turn(0)], changesets={"reviewed": reviewed}))
    reviewed.setdefault("uncommitted", {})["file:///r/a.txt"] = "M.:1:2:3"
    store.save(record([turn(0)], changesets={"reviewed": reviewed}))
    reviewed["uncommitted"].pop("file:///r/a.txt")
    reviewed["session"] = {"file:///r/b.txt": "A.:0:4:5"}
    store.save(record([turn(0)], changesets={"reviewed": reviewed}))
    loaded = FileSessionStore(tmp_path).load_all() if kind == "file" else store.load_all()
    [rec] = loaded
    assert rec["changesets"] == {"reviewed": {"uncommitted": {}, "session": {"file:///r/b.txt": "A.:0:4:5"}}}


def test_a_loaded_session_saved_unchanged_does_not_rewrite_its_head(tmp_path) -> None:
    FileSessionStore(tmp_path).save(record([turn(0)], changesets={"reviewed": {"uncommitted": {"a": "b"}}}))
    head = tmp_path / name(SESSION) / "session.json"
    before = head.stat().st_mtime_ns, head.stat().st_ino
    store = FileSessionStore(tmp_path)
    [loaded] = store.load_all()
    store.save(record([turn(0)], changesets=loaded["changesets"]))
    assert (head.stat().st_mtime_ns, head.stat().st_ino) == before  # write_atomic would make a new inode
    store.save(record([turn(0)], changesets={"reviewed": {}}))
    assert json.loads(head.read_text())["changesets"] == {"reviewed": {}}


def test_truncation_and_a_resumed_turn_are_kept_as_cuts(tmp_path) -> None:
    store = FileSessionStore(tmp_path)
    turns = [turn(n) for n in range(5)]
    store.save(record(turns))
    store.save(record(turns[:2]))  # chat/truncated to turn-1
    store.save(record(turns[:2] + [turn(9, "again")]))
    store.save(record(turns[:2]))  # chat/turnResume takes the last back
    store.save(record(turns[:2] + [turn(9, "resumed")]))
    [rec] = FileSessionStore(tmp_path).load_all()
    assert rec["chats"][0]["state"]["turns"] == turns[:2] + [turn(9, "resumed")]
    store.save(record([]))  # truncated whole
    assert loaded_turns(tmp_path) == []


def test_the_memory_store_keeps_older_turns_too() -> None:
    store = MemorySessionStore()
    turns = [turn(n) for n in range(120)]
    store.save(record(turns))
    store.save(record(turns[-WINDOW:] + [turn(120)], cursor=120 - WINDOW))
    page = trio.run(store.older_turns, CHAT, 120 - WINDOW, 50)
    assert [t["id"] for t in page] == [f"turn-{n}" for n in range(20, 70)]
    [rec] = store.load_all()
    state = rec["chats"][0]["state"]
    assert len(state["turns"]) == WINDOW and state["turnsNextCursor"] == f"older:{121 - WINDOW}"


# -- torn and garbled ends ---------------------------------------------------------


@pytest.mark.parametrize("damage", ["cut-mid-record", "garbage", "cut-and-garbage", "no-newline-garbage"])
def test_a_torn_end_drops_that_record_only_and_the_next_write_replaces_it(tmp_path, caplog, damage) -> None:
    store = FileSessionStore(tmp_path)
    turns = [turn(n) for n in range(4)]
    store.save(record(turns))
    path = journal_of(tmp_path)
    whole = path.read_bytes()
    last = whole.rindex(b"\n", 0, len(whole) - 1) + 1  # where turn-3's record starts
    if damage in ("cut-mid-record", "cut-and-garbage"):
        path.write_bytes(whole[: last + 20])
    if damage in ("garbage", "cut-and-garbage"):
        with path.open("ab") as f:
            f.write(b'\x00\xffnot json at all\n{"n": 7, "turn": \n')
    if damage == "no-newline-garbage":
        with path.open("ab") as f:
            f.write(b'{"n":4,"turn":{"id":"half')
    expected = ["turn-0", "turn-1", "turn-2"] if damage.startswith("cut") else [f"turn-{n}" for n in range(4)]
    assert loaded_turns(tmp_path) == expected
    assert any("not a whole record" in r.getMessage() for r in caplog.records)
    # The store that loaded it writes past the whole records, cutting the rest.
    again = FileSessionStore(tmp_path)
    [rec] = again.load_all()
    kept = rec["chats"][0]["state"]["turns"]
    again.save(record(kept + [turn(10)]))
    assert loaded_turns(tmp_path) == expected + ["turn-10"]
    assert all(json.loads(line) for line in path.read_bytes().splitlines())


def test_a_damaged_line_inside_is_skipped_and_said(tmp_path, caplog) -> None:
    store = FileSessionStore(tmp_path)
    store.save(record([turn(n) for n in range(3)]))
    path = journal_of(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(2, b"{ this is not a record\n")
    path.write_bytes(b"".join(lines))
    assert loaded_turns(tmp_path) == ["turn-0", "turn-1", "turn-2"]
    assert any("is damaged; skipped" in r.getMessage() for r in caplog.records)


def test_a_journal_whose_turn_is_not_a_turn_is_set_aside(tmp_path, caplog) -> None:
    FileSessionStore(tmp_path).save(record([turn(0)]))
    path = journal_of(tmp_path)
    with path.open("ab") as f:
        f.write(journal.turn_line(1, {"id": 5}))
    [rec] = FileSessionStore(tmp_path).load_all()
    assert rec["chats"][0]["state"] is None  # the chat opens empty; the session still loads
    assert path.with_name(path.name + ".damaged").exists()


# -- compaction ------------------------------------------------------------------------


async def test_compaction_runs_in_the_background_and_keeps_what_the_chat_holds(tmp_path, monkeypatch, caplog) -> None:
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(store_module, "COMPACT_MIN", 4096)
    store = FileSessionStore(tmp_path)
    turns = [turn(n) for n in range(10)]
    path = journal_of(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        store.save(record(turns))
        await until_step(path.exists)  # the first write landed: the loop below samples a file that is there
        for n in range(400):  # a title typed a letter at a time: superseded records pile up
            store.save(record(turns, title="t" * (n % 50)))
            # Each record is on disk before the next is typed, however busy the
            # machine: a writer that fell behind would only keep the latest.
            await until_step(lambda: store.writes.pending == 0)
        nursery.cancel_scope.cancel()
    assert any("journal compacted" in r.getMessage() for r in caplog.records)
    size = path.stat().st_size
    with path.open("rb") as f:
        live = journal.index(f, size, 0)
    assert len(live.spans) == 10 and (live.dead * 2 <= size or size < 4096)
    [rec] = FileSessionStore(tmp_path).load_all()
    assert rec["chats"][0]["state"]["turns"] == turns and rec["title"] == "t" * 49
    assert rec["chats"][0]["state"]["title"] == "t" * 49


def test_compact_copies_the_live_records(tmp_path) -> None:
    path = tmp_path / "j.jsonl"
    data = b"".join(
        [
            journal.chat_line({"title": "a"}),
            journal.turn_line(0, turn(0)),
            journal.turn_line(1, turn(1)),
            journal.cut_line(1),
            journal.turn_line(1, turn(5)),
            journal.chat_line({"title": "b"}),
        ]
    )
    path.write_bytes(data)
    length, _ = journal.compact(path, len(data))
    assert path.read_bytes() == b"".join(
        [journal.turn_line(0, turn(0)), journal.turn_line(1, turn(5)), journal.chat_line({"title": "b"})]
    )
    assert length == path.stat().st_size


# -- a long chat -----------------------------------------------------------------------


def write_long_chat(folder, count: int) -> None:
    """A session of ``count`` turns, its journal written directly."""
    session = folder / name(SESSION)
    session.mkdir(parents=True)
    head = {k: v for k, v in record([]).items() if k != "chats"} | {"chats": [{"uri": CHAT, "backendId": None}]}
    (session / "session.json").write_text(json.dumps(head))
    with (session / f"{name(CHAT)}.jsonl").open("wb") as f:
        for n in range(count):
            f.write(journal.turn_line(n, turn(n, "x" * 2000)))
            if n % 100 == 0:  # as the writer says them again (FIELDS_EVERY)
                f.write(journal.chat_line({k: v for k, v in chat_state([]).items() if k != "turns"}))


def read_bytes_so_far() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


async def test_a_long_chat_loads_its_tail_and_pages_back_through_all_of_it(tmp_path) -> None:
    write_long_chat(tmp_path, 10_000)
    size = journal_of(tmp_path).stat().st_size
    store = FileSessionStore(tmp_path)
    before = read_bytes_so_far()
    [rec] = store.load_all()
    read = read_bytes_so_far() - before
    assert read < size / 20, (read, size)  # the tail, not the history
    state = rec["chats"][0]["state"]
    assert [t["id"] for t in state["turns"]] == [f"turn-{n}" for n in range(10_000 - WINDOW, 10_000)]
    assert state["turnsNextCursor"] == f"older:{10_000 - WINDOW}"
    seen, before = [], 10_000 - WINDOW
    while before > 0:
        page = await store.older_turns(CHAT, before, 50)
        seen = page + seen
        before -= 50
    assert [t["id"] for t in seen] == [f"turn-{n}" for n in range(10_000 - WINDOW)]
    # A turn on it appends one record.
    size = journal_of(tmp_path).stat().st_size
    store.save(record(state["turns"] + [turn(10_000)], cursor=10_000 - WINDOW))
    grown = journal_of(tmp_path).stat().st_size - size
    assert grown < 1000


# -- an older ahpd's files -----------------------------------------------------------------


async def test_a_whole_record_file_of_an_older_ahpd_loads_and_becomes_a_folder(tmp_path) -> None:
    turns = [turn(n) for n in range(120)]
    legacy = tmp_path / f"{name(SESSION)}.json"
    legacy.write_text(json.dumps(record(turns, title="old")))
    store = FileSessionStore(tmp_path)
    [rec] = store.load_all()
    state = rec["chats"][0]["state"]
    assert rec["title"] == "old" and [t["id"] for t in state["turns"]] == [f"turn-{n}" for n in range(70, 120)]
    assert not legacy.exists() and journal_of(tmp_path).exists()
    assert [t["id"] for t in await store.older_turns(CHAT, 70, 50)] == [f"turn-{n}" for n in range(20, 70)]
    assert loaded_turns(tmp_path) == [f"turn-{n}" for n in range(70, 120)]


def test_an_older_file_on_a_read_only_disk_still_loads_and_is_turned_later(tmp_path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        folder = disk.path / "sessions"
        folder.mkdir()
        legacy = folder / f"{name(SESSION)}.json"
        legacy.write_text(json.dumps(record([turn(n) for n in range(3)], title="old")))
        disk.read_only()
        store = FileSessionStore(folder)
        [rec] = store.load_all()
        assert rec["title"] == "old" and len(rec["chats"][0]["state"]["turns"]) == 3
        assert store.writes.failing is not None and legacy.exists()
        disk.writable()
        store.close()
        assert not legacy.exists()
        assert loaded_turns(folder) == ["turn-0", "turn-1", "turn-2"]


# -- a failing disk ---------------------------------------------------------------------------


async def test_an_append_cut_short_by_a_full_disk_is_rewritten_whole(tmp_path) -> None:
    with small_disk(tmp_path / "disk", size="1m") as disk:
        folder = disk.path / "sessions"
        store = FileSessionStore(folder)
        turns = [turn(0)]
        store.save(record(turns))
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            disk.fill()
            os.unlink(disk.filler)  # a little room: the next append starts, and is cut short
            room = os.statvfs(disk.path)
            with open(disk.filler, "wb") as f:  # noqa: ASYNC230 - filling the small disk is the point
                f.write(b"\0" * ((room.f_bavail - 2) * room.f_bsize))
            turns = turns + [turn(n, "y" * 30_000) for n in range(1, 30)]
            store.save(record(turns))
            await until_step(lambda: store.writes.failing is not None)
            assert loaded_turns(folder) == ["turn-0"]  # what is torn is not loaded
            disk.free()
            await until_step(lambda: store.writes.pending == 0)
            nursery.cancel_scope.cancel()
        assert loaded_turns(folder) == [f"turn-{n}" for n in range(30)]
        assert all(json.loads(line) for line in journal_of(folder).read_bytes().splitlines())
