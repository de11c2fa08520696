"""A store an older ahpd wrote, with sessions kept under ``ahp-session:/<id>``,
moved over to ``<provider>:/<id>`` at start (``ahpd.host.sessions.aliases.upgraded``)
on a real filesystem: every turn of a long chat, not only the window a loaded
session holds; what a crash between writing the new and removing the old left
behind; and a name another stored session already holds.
"""

from __future__ import annotations

import hashlib
import shutil

import trio

from ahpd.host.sessions.aliases import upgraded
from ahpd.host.sessions.common import default_chat_uri
from ahpd.host.sessions.store import WINDOW, FileSessionStore

OLD, NEW = "ahp-session:/s1", "demo:/s1"
OLD_CHAT, NEW_CHAT = default_chat_uri(OLD), default_chat_uri(NEW)


def turn(n: int) -> dict:
    return {
        "id": f"turn-{n}",
        "message": {"text": f"q{n}", "origin": {"kind": "user"}},
        "responseParts": [{"kind": "markdown", "id": f"p{n}", "content": f"a{n}"}],
        "state": "complete",
    }


def old_record(turns: int, uri: str = OLD) -> dict:
    chat = default_chat_uri(uri)
    return {
        "uri": uri,
        "provider": "demo",
        "cwd": "/tmp",
        "createdAt": "2026-12-01T00:00:00Z",
        "title": "t",
        "status": 32,
        "config": None,
        "defaultChat": chat,
        "annotations": [{"id": "a1", "origin": {"session": uri}, "entries": []}],
        "chats": [
            {
                "uri": chat,
                "backendId": "b1",
                "state": {
                    "resource": chat,
                    "title": "t",
                    "status": 1,
                    "modifiedAt": "2026-12-01T00:00:00Z",
                    "turns": [turn(n) for n in range(turns)],
                },
            }
        ],
    }


def folder(root, uri: str):
    return root / hashlib.sha256(uri.encode()).hexdigest()[:32]


def test_a_long_chat_is_moved_whole_and_the_old_name_is_gone(tmp_path) -> None:
    FileSessionStore(tmp_path).save(old_record(120))  # no writer running: written at once
    assert folder(tmp_path, OLD).is_dir()
    store = FileSessionStore(tmp_path)
    [record] = upgraded(store, store.load_all(), {"demo"})
    assert record["uri"] == NEW and record["defaultChat"] == NEW_CHAT
    [chat] = record["chats"]
    assert chat["uri"] == NEW_CHAT and chat["state"]["resource"] == NEW_CHAT
    assert chat["state"]["turnsNextCursor"] == f"older:{120 - WINDOW}"
    assert record["annotations"][0]["origin"]["session"] == NEW
    older = trio.run(store.older_turns, NEW_CHAT, 120 - WINDOW, 120 - WINDOW)
    assert [t["id"] for t in older + chat["state"]["turns"]] == [f"turn-{n}" for n in range(120)]
    assert not folder(tmp_path, OLD).exists() and folder(tmp_path, NEW).is_dir()

    # Read again, it needs no moving: every turn is in the journal under its new name.
    again = FileSessionStore(tmp_path)
    [record] = upgraded(again, again.load_all(), {"demo"})
    assert record["uri"] == NEW
    older = trio.run(again.older_turns, NEW_CHAT, 120 - WINDOW, 120 - WINDOW)
    assert len(older) == 120 - WINDOW and older[0]["id"] == "turn-0"


def test_what_a_crash_between_the_two_writes_left_of_the_old_name_goes(tmp_path) -> None:
    FileSessionStore(tmp_path).save(old_record(3))
    kept = tmp_path.parent / "kept"
    shutil.copytree(folder(tmp_path, OLD), kept)
    store = FileSessionStore(tmp_path)
    upgraded(store, store.load_all(), {"demo"})
    shutil.copytree(kept, folder(tmp_path, OLD))  # as if the old folder's removal never happened
    store = FileSessionStore(tmp_path)
    records = upgraded(store, store.load_all(), {"demo"})
    assert [r["uri"] for r in records] == [NEW]
    assert not folder(tmp_path, OLD).exists()


def test_a_name_another_stored_session_holds_is_not_taken(tmp_path) -> None:
    """Two sessions an older ahpd kept under one id (``ahp-session:/s1`` and
    ``demo:/s1``, made by two clients): neither is lost, the old one keeps its name."""
    store = FileSessionStore(tmp_path)
    store.save(old_record(2))
    store.save(old_record(1, NEW))
    store = FileSessionStore(tmp_path)
    records = upgraded(store, store.load_all(), {"demo"})
    assert sorted(r["uri"] for r in records) == sorted([OLD, NEW])
    assert folder(tmp_path, OLD).is_dir() and folder(tmp_path, NEW).is_dir()


def test_a_session_under_another_scheme_keeps_its_name(tmp_path) -> None:
    mine = "x-mine:/s1"
    FileSessionStore(tmp_path).save(old_record(1, mine))
    store = FileSessionStore(tmp_path)
    [record] = upgraded(store, store.load_all(), {"demo"})
    assert record["uri"] == mine and folder(tmp_path, mine).is_dir()


def test_what_was_set_aside_beside_a_moved_session_stays_for_a_person(tmp_path) -> None:
    FileSessionStore(tmp_path).save(old_record(2))
    aside = folder(tmp_path, OLD) / "0123.jsonl.damaged"
    aside.write_text("{not a record\n")
    store = FileSessionStore(tmp_path)
    [record] = upgraded(store, store.load_all(), {"demo"})
    assert record["uri"] == NEW
    assert [p.name for p in folder(tmp_path, OLD).iterdir()] == [aside.name]
    store = FileSessionStore(tmp_path)
    assert [r["uri"] for r in upgraded(store, store.load_all(), {"demo"})] == [
        NEW
    ]  # a folder with no head is no session
