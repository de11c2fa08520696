"""The session journals under a real daemon: a restart keeps what was said
and set, and a chat of 10,000 turns opens with its tail and pages back."""

from __future__ import annotations

import hashlib
import json
import uuid


from ahpd.host.sessions.common import default_chat_uri
from ahpd.ports import journal

from .helpers import (
    listed_as,
    action_of,
    create,
    daemon_in_process,
    dispatch,
    eventually,
    fits,
    is_action,
    rpc,
    running_daemon,
    start_turn,
    until,
)

ROOT = "ahp-root://"


def name(uri: str) -> str:
    return hashlib.sha256(uri.encode()).hexdigest()[:32]


async def turn_done(client, chat: str) -> dict:
    notes = await until(
        client,
        lambda n: (
            (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error") and n["params"]["channel"] == chat
        ),
        timeout=60,
    )
    return action_of(notes[-1])


async def test_a_restart_keeps_sessions_chats_turns_titles_and_what_the_user_set(tmp_path) -> None:
    data = tmp_path / "d"
    side = f"ahp-chat:/{uuid.uuid4()}"
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("jo")
            uri, chat = await create(client, tmp_path)
            for seq, text in enumerate(["one", "two"], start=1):
                await dispatch(client, chat, start_turn(text, f"turn-{text}"), seq)
                assert (await turn_done(client, chat))["type"] == "chat/turnComplete"
            assert (await client.call("createChat", {"channel": uri, "chat": side}))["result"] is None
            await client.call("subscribe", {"channel": side})
            await dispatch(client, side, start_turn("aside", "turn-aside"), 3)
            assert (await turn_done(client, side))["type"] == "chat/turnComplete"
            await dispatch(client, uri, {"type": "session/titleChanged", "title": "kept"}, 4)
            await dispatch(client, uri, {"type": "session/isReadChanged", "isRead": True}, 6)
            await dispatch(client, uri, {"type": "session/isArchivedChanged", "isArchived": True}, 7)
            await dispatch(
                client,
                chat,
                {"type": "chat/draftChanged", "draft": {"text": "half a tho", "origin": {"kind": "user"}}},
                8,
            )
            await until(client, is_action("chat/draftChanged", chat))
        daemon.terminate()
        assert await daemon.wait() == 0
    folder = data / "sessions" / name(listed_as(uri))  # kept as the host lists it, demo:/<id>
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["session.json", f"{name(default_chat_uri(listed_as(uri)))}.jsonl", f"{name(side)}.jsonl"]
    )
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("jo")
            [row] = (await client.call("listSessions", {}))["result"]["items"]
            assert row["resource"] == listed_as(uri) and row["title"] == "kept" and row["status"] & (32 | 64) == 96
            session = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            fits("/$defs/SessionState", session)
            assert [c["resource"] for c in session["chats"]] == [chat, side]
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            fits("/$defs/ChatState", state)
            assert [t["id"] for t in state["turns"]] == ["turn-one", "turn-two"]
            assert state["turns"][1]["responseParts"]
            assert state["draft"]["text"] == "half a tho" and "turnsNextCursor" not in state
            aside = (await client.call("subscribe", {"channel": side}))["result"]["snapshot"]["state"]
            assert [t["id"] for t in aside["turns"]] == ["turn-aside"]
            # The conversation goes on, and that is kept too.
            await dispatch(client, chat, start_turn("three", "turn-three"), 1)
            assert (await turn_done(client, chat))["type"] == "chat/turnComplete"
        daemon.terminate()
        assert await daemon.wait() == 0
    tail = journal.read_tail(folder / f"{name(default_chat_uri(listed_as(uri)))}.jsonl", 50)
    assert [t["id"] for t in tail.turns] == ["turn-one", "turn-two", "turn-three"]


def write_long_session(data, cwd, uri: str, chat: str, count: int) -> None:
    folder = data / "sessions" / name(uri)
    folder.mkdir(parents=True)
    (folder / "session.json").write_text(
        json.dumps(
            {
                "uri": uri,
                "provider": "demo",
                "cwd": str(cwd),
                "createdAt": "2026-12-01T00:00:00Z",
                "title": "long",
                "status": 0,
                "config": None,
                "defaultChat": chat,
                "chats": [{"uri": chat, "backendId": None}],
            }
        )
    )
    fields = journal.chat_line({"resource": chat, "title": "long", "status": 1, "modifiedAt": "2026-12-01T00:00:00Z"})
    with (folder / f"{name(chat)}.jsonl").open("wb") as f:
        for n in range(count):
            f.write(
                journal.turn_line(
                    n,
                    {
                        "id": f"turn-{n}",
                        "message": {"text": f"q{n} " + "x" * 1000, "origin": {"kind": "user"}},
                        "responseParts": [{"kind": "markdown", "id": f"p{n}", "content": f"a{n}"}],
                        "state": "complete",
                    },
                )
            )
            if n % 100 == 0:
                f.write(fields)
        f.write(fields)
    data.chmod(0o700)


async def test_a_10000_turn_chat_opens_with_its_tail_and_pages_back_through_all(tmp_path) -> None:
    data = tmp_path / "d"
    uri, chat = f"demo:/{uuid.uuid4()}", f"ahp-chat:/{uuid.uuid4()}"  # as the host keeps sessions
    write_long_session(data, tmp_path, uri, chat, 10_000)
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("kim")
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            fits("/$defs/ChatState", state)
            assert [t["id"] for t in state["turns"]] == [f"turn-{n}" for n in range(9950, 10_000)]
            ids = [t["id"] for t in state["turns"]]
            cursor = state["turnsNextCursor"]
            while cursor:
                assert (await client.call("fetchTurns", {"channel": chat, "cursor": cursor}))["result"] == {}
                loaded = action_of((await until(client, is_action("chat/turnsLoaded", chat)))[-1])
                ids = [t["id"] for t in loaded["turns"]] + ids
                cursor = loaded.get("turnsNextCursor")
            assert ids == [f"turn-{n}" for n in range(10_000)]
            stale = await client.call("fetchTurns", {"channel": chat, "cursor": "older:9950"})
            assert stale["error"]["code"] == -32602
            # A turn on it, after all that paging.
            await dispatch(client, chat, start_turn("and one more", "turn-10000"), 1)
            assert (await turn_done(client, chat))["type"] == "chat/turnComplete"
        daemon.terminate()
        assert await daemon.wait() == 0
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("kim")
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert [t["id"] for t in state["turns"]] == [f"turn-{n}" for n in range(9951, 10_001)]
            assert state["turnsNextCursor"] == "older:9951"
            await client.call("fetchTurns", {"channel": chat, "cursor": "older:9951"})
            loaded = action_of((await until(client, is_action("chat/turnsLoaded", chat)))[-1])
            assert [t["id"] for t in loaded["turns"]] == [f"turn-{n}" for n in range(9901, 9951)]
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_a_daemon_killed_mid_write_loses_only_the_torn_record(tmp_path) -> None:
    """SIGKILL, then the end of the journal torn as a crash mid-append
    leaves it: the restart loads every whole record and writes on past it."""
    import signal

    data = tmp_path / "d"
    async with running_daemon(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("lu")
            uri, chat = await create(client, tmp_path)
            for seq, text in enumerate(["one", "two"], start=1):
                await dispatch(client, chat, start_turn(text, f"turn-{text}"), seq)
                assert (await turn_done(client, chat))["type"] == "chat/turnComplete"
            kept = listed_as(uri)  # the host keeps it as demo:/<id>, its default chat spelled from that
            path = data / "sessions" / name(kept) / f"{name(default_chat_uri(kept))}.jsonl"
            # The daemon process writes the turn to its journal soon after the turn.
            await eventually(lambda: b'"turn-two"' in (path.read_bytes() if path.exists() else b""))
            daemon.process.send_signal(signal.SIGKILL)
            await daemon.wait()
    with path.open("ab") as f:
        f.write(b'{"n":2,"turn":{"id":"turn-thr')  # what a crash mid-append leaves
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("lu")
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert [t["id"] for t in state["turns"]] == ["turn-one", "turn-two"]
            await dispatch(client, chat, start_turn("three", "turn-three"), 1)
            assert (await turn_done(client, chat))["type"] == "chat/turnComplete"
        daemon.terminate()
        assert await daemon.wait() == 0
    tail = journal.read_tail(path, 50)
    assert [t["id"] for t in tail.turns] == ["turn-one", "turn-two", "turn-three"] and tail.dropped == 0


async def test_a_turn_in_flight_at_a_crash_is_kept_with_what_was_said(tmp_path) -> None:
    """Issue 25, attack 12: the prompt and the reply so far reach the journal
    as the reply streams; killed (SIGKILL) mid-turn, the restarted daemon
    shows the turn ended in error, saying the host stopped, with both."""
    import shlex
    import signal
    import sys

    data = tmp_path / "d"
    slow = [sys.executable, "-m", "ahpd.demo_agent", "--home", str(tmp_path / "slow-home"), "--slow-delay", "1"]
    prompt = "slow: tell me a long story"
    async with running_daemon(data, "--sessions", "file", "--agent", "slow=" + shlex.join(slow)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("lu")
            uri, chat = await create(client, tmp_path, provider="slow")
            await dispatch(client, chat, start_turn(prompt, "turn-story"), 1)
            await until(client, is_action("chat/responsePart", chat), timeout=60)
            kept = listed_as(uri, "slow")  # the host keeps it as slow:/<id>, its default chat spelled from that
            path = data / "sessions" / name(kept) / f"{name(default_chat_uri(kept))}.jsonl"
            said: list[str] = []

            def streamed_to_disk() -> bool:
                if not path.exists():
                    return False
                turns = [t for t in journal.read_tail(path, 50).turns if t["id"] == "turn-story"]
                parts = [p for t in turns for p in t["responseParts"] if p["kind"] == "markdown" and p["content"]]
                said[:] = [p["content"] for p in parts]
                return bool(said)

            await eventually(streamed_to_disk)
            await client.call("ping", {"channel": ROOT})  # every note sent before now is read
            assert not any(
                (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error") for n in client.notes
            ), "the turn ended before the kill"
            daemon.process.send_signal(signal.SIGKILL)
            await daemon.wait()
    async with daemon_in_process(data, "--sessions", "file", "--agent", "slow=" + shlex.join(slow)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("lu")
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            fits("/$defs/ChatState", state)
            assert "activeTurn" not in state
            [turn] = state["turns"]
            assert turn["id"] == "turn-story" and turn["message"]["text"] == prompt
            assert turn["state"] == "error"
            markdown = [p["content"] for p in turn["responseParts"] if p["kind"] == "markdown"]
            assert markdown and markdown[0].startswith(said[0]) and said[0]
            [error] = [p["error"] for p in turn["responseParts"] if p["kind"] == "error"]
            assert error["errorType"] == "HostStopped" and "host stopped" in error["message"]
            # The chat goes on: a new turn after it.
            await dispatch(client, chat, start_turn("/echo again", "turn-again"), 1)
            assert (await turn_done(client, chat))["type"] == "chat/turnComplete"
        daemon.terminate()
        assert await daemon.wait() == 0
