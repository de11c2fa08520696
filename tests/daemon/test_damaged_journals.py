"""One damaged chat journal or session head costs that file, never the list
(issue 25, attack 4).

Two sessions are written by the store; one of them is then damaged on disk
the way a crash, a person or a bad disk leaves it; a real daemon starts on
the folder, and a client lists sessions and opens both. Every case must
list: the damaged file is set aside (``.damaged``, logged) or its damaged
record skipped, and nothing listed fails to encode (a lone surrogate read
from disk is shown as U+FFFD).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from ahpd.host.sessions.store import FileSessionStore

from .helpers import daemon_in_process, rpc

KEPT, HURT = "demo:/kept", "demo:/hurt"  # as the host keeps sessions, <provider>:/<id>


def _name(uri: str) -> str:
    return hashlib.sha256(uri.encode()).hexdigest()[:32]


def _chat(uri: str) -> str:
    return f"ahp-chat:/{uri.rsplit('/', 1)[1]}"


def _turn(n: int) -> dict:
    return {
        "id": f"turn-{n}",
        "message": {"text": f"q{n}", "origin": {"kind": "user"}},
        "responseParts": [{"kind": "markdown", "id": f"p{n}", "content": f"a{n}"}],
        "state": "complete",
    }


def _record(uri: str, work: Path) -> dict:
    chat = _chat(uri)
    return {
        "uri": uri,
        "provider": "demo",
        "cwd": str(work),
        "createdAt": "2026-12-01T00:00:00Z",
        "title": uri.rsplit("/", 1)[1],
        "status": 32,
        "defaultChat": chat,
        "chats": [
            {
                "uri": chat,
                "backendId": None,
                "state": {
                    "resource": chat,
                    "title": "t",
                    "status": 1,
                    "modifiedAt": "2026-12-01T00:00:00Z",
                    "turns": [_turn(0), _turn(1)],
                },
            }
        ],
    }


def _journal(sessions: Path) -> Path:
    return sessions / _name(HURT) / f"{_name(_chat(HURT))}.jsonl"


def _head(sessions: Path) -> Path:
    return sessions / _name(HURT) / "session.json"


def _append(path: Path, line: str) -> None:
    with path.open("a") as f:
        f.write(line + "\n")


def _empty(s: Path) -> None:
    _journal(s).write_bytes(b"")  # a crash between its creation and its first write


def _folder(s: Path) -> None:
    _journal(s).unlink()
    _journal(s).mkdir()


def _symlink(s: Path) -> None:
    outside = s.parent / "elsewhere.jsonl"
    _journal(s).rename(outside)
    _journal(s).symlink_to(outside)


def _fifo(s: Path) -> None:
    _journal(s).unlink()
    os.mkfifo(_journal(s))  # open() for reading would wait for a writer for ever


def _wrong_types(s: Path) -> None:
    _append(_journal(s), json.dumps({"chat": {"resource": 5, "title": [], "status": "x", "modifiedAt": None}}))


def _huge_n(s: Path) -> None:
    _append(_journal(s), '{"n":100000000000000000000,"turn":' + json.dumps(_turn(2)) + "}")


def _nan(s: Path) -> None:
    _append(_journal(s), '{"chat":{"resource":"ahp-chat:/hurt","title":NaN,"status":1,"modifiedAt":"x"}}')


def _surrogate_journal(s: Path) -> None:
    _append(
        _journal(s), '{"chat":{"resource":"ahp-chat:/hurt","title":"a\\ud800b","status":1,"modifiedAt":"2026-12-02"}}'
    )


def _surrogate_head(s: Path) -> None:
    head = json.loads(_head(s).read_text())
    head["title"] = "a\ud800b"
    _head(s).write_text(json.dumps(head))  # ASCII: the lone surrogate escaped, as JSON allows


def _head_folder(s: Path) -> None:
    _head(s).unlink()
    _head(s).mkdir()


def _head_fifo(s: Path) -> None:
    _head(s).unlink()
    os.mkfifo(_head(s))


#: case -> (damage, what is set aside - the journal, or the session's folder
#: for a damaged head - or None when the damage is read through or skipped)
CASES: dict[str, tuple[Callable[[Path], None], str | None]] = {
    "empty journal": (_empty, "journal"),
    "folder for a journal": (_folder, "journal"),
    "symlink for a journal": (_symlink, "journal"),
    "fifo for a journal": (_fifo, "journal"),
    "wrong types": (_wrong_types, "journal"),
    "n = 10^20": (_huge_n, None),
    "NaN": (_nan, None),  # a damaged record: skipped, the journal kept
    "lone surrogate in a journal": (_surrogate_journal, None),
    "lone surrogate in session.json": (_surrogate_head, None),
    "folder for session.json": (_head_folder, "head"),
    "fifo for session.json": (_head_fifo, "head"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_damaged_file_costs_that_file_and_the_list_still_answers(tmp_path, case) -> None:
    data = tmp_path / "d"
    sessions = data / "sessions"
    store = FileSessionStore(sessions)
    for uri in (KEPT, HURT):
        store.save(_record(uri, tmp_path))
    store.close()  # written
    damage, set_aside = CASES[case]
    damage(sessions)
    with trio.fail_after(60):  # a FIFO used to hang start-up here for ever
        async with daemon_in_process(data, "--sessions", "file") as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("eve")
                reply = await client.call("listSessions", {})
                assert "result" in reply, reply
                rows = {r["resource"]: r for r in reply["result"]["items"]}
                assert KEPT in rows and rows[KEPT]["title"] == "kept"
                kept = await client.call("subscribe", {"channel": _chat(KEPT)})
                assert [t["id"] for t in kept["result"]["snapshot"]["state"]["turns"]] == ["turn-0", "turn-1"]
                if set_aside != "head":
                    assert HURT in rows, rows
                    hurt = await client.call("subscribe", {"channel": _chat(HURT)})
                    assert "result" in hurt, hurt
                    json.dumps(hurt, allow_nan=False).encode()  # what was served encodes
                if case == "lone surrogate in session.json":
                    assert rows[HURT]["title"] == "a\ufffdb"
                if case == "lone surrogate in a journal":
                    assert hurt["result"]["snapshot"]["state"]["title"] == "a\ufffdb"
                if case == "n = 10^20":
                    assert [t["id"] for t in hurt["result"]["snapshot"]["state"]["turns"]] == ["turn-0", "turn-1"]
            daemon.terminate()
            assert await daemon.wait() == 0
    if set_aside == "head":
        assert (sessions / f"{_name(HURT)}.damaged" / "session.json").exists()
        return
    damaged = sorted(p.name for p in (sessions / _name(HURT)).iterdir() if "damaged" in p.name)
    assert damaged == ([_journal(sessions).name + ".damaged"] if set_aside == "journal" else [])
