"""moveChat against a real daemon, the demo agent and two WebSocket clients:
a chat reordered in its session, carried to another session and to a new
one, the refusals, and the moved chat surviving a restart with its next
turn continuing the same agent conversation."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from ahpd.host.sessions.store import _name

from .helpers import (
    ROOT,
    Rpc,
    action_of,
    create,
    daemon_in_process,
    dispatch,
    fits,
    is_action,
    rpc,
    start_turn,
    until,
    wire_clean,
)


async def hello(client: Rpc, client_id: str) -> None:
    """``initialize``, waited on longer than the helper does: the first hello
    starts the agents' probes, which a loaded machine takes its time over."""
    reply = await client.call(
        "initialize",
        {
            "channel": ROOT,
            "protocolVersions": ["1.0.0"],
            "clientId": client_id,
            "initialSubscriptions": [ROOT],
        },
        timeout=120,
    )
    assert "result" in reply, reply


def is_note(method: str, session: str | None = None):
    def check(note: dict) -> bool:
        return note.get("method") == method and (session is None or note["params"].get("session") == session)

    return check


def actions(notes: list[dict], channel: str) -> list[dict]:
    return [action_of(n) for n in notes if action_of(n) is not None and n["params"]["channel"] == channel]


async def new_chat(client: Rpc, session: str) -> str:
    uri = f"ahp-chat:/{uuid.uuid4()}"
    reply = await client.call("createChat", {"channel": session, "chat": uri}, timeout=60)
    assert reply.get("result", "missing") is None, reply
    return uri


async def turn(client: Rpc, chat: str, text: str, seq: int) -> list[dict]:
    await dispatch(client, chat, start_turn(text), seq)
    notes = await until(
        client,
        lambda n: (
            (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error") and n["params"]["channel"] == chat
        ),
        timeout=180,
    )
    assert action_of(notes[-1])["type"] == "chat/turnComplete", action_of(notes[-1])
    return notes


async def state_of(client: Rpc, channel: str) -> dict[str, Any]:
    reply = await client.call("subscribe", {"channel": channel}, timeout=60)
    assert "result" in reply, reply
    return reply["result"]["snapshot"]["state"]


def conversation_with(home: Path, text: str) -> dict[str, Any]:
    """The demo agent's stored conversation that holds ``text``."""
    found = [json.loads(p.read_text()) for p in home.glob("*.json") if text in p.read_text()]
    assert len(found) == 1, [p.name for p in home.glob("*.json")]
    return found[0]


def said(conversation: dict[str, Any]) -> list[str]:
    return [m["text"] for m in conversation["messages"] if m["role"] == "user"]


async def test_chats_move_within_between_and_out_of_sessions_and_survive_a_restart(tmp_path) -> None:
    data = tmp_path / "d"
    home = data / "demo-agent"  # where the daemon's demo agent keeps its conversations
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    capture = tmp_path / "moves.jsonl"
    async with daemon_in_process(data, "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as ann, rpc(daemon.url) as bob:
            await hello(ann, "ann")
            await hello(bob, "bob")
            # Named as the host lists them: the moves are what is tested here, the
            # other spellings in test_session_aliases.
            s1, default1 = await create(ann, tmp_path / "one", channel=f"demo:/{uuid.uuid4()}")
            s2, default2 = await create(ann, tmp_path / "two", channel=f"demo:/{uuid.uuid4()}")
            chat = await new_chat(ann, s1)
            side = await new_chat(ann, s1)
            for channel in (s1, s2, chat, side, default1):
                await state_of(bob, channel)
            c_state = await state_of(ann, chat)
            assert c_state["movable"] is True
            rows = {c["resource"]: c for c in (await state_of(ann, s1))["chats"]}
            assert rows[chat]["movable"] is True and "movable" not in rows[default1]

            # A turn makes the chat unmovable while it runs, and every subscriber sees it.
            await state_of(ann, side)
            await turn(ann, chat, "first words", 1)
            seen = await until(
                bob, lambda n: is_action("chat/movableChanged", chat)(n) and action_of(n)["movable"], timeout=120
            )
            assert [a["movable"] for a in actions(seen, chat) if a["type"] == "chat/movableChanged"] == [False, True]
            updates = [
                a["changes"].get("movable")
                for a in actions(seen, s1)
                if a["type"] == "session/chatUpdated" and a["chat"] == chat
            ]
            assert False in updates
            await until(
                bob,
                lambda n: is_action("session/chatUpdated", s1)(n) and action_of(n)["changes"].get("movable") is True,
            )
            await turn(ann, side, "side words", 2)

            # Refusals: each says why, and nothing moves.
            before = [c["resource"] for c in (await state_of(ann, s1))["chats"]]
            refusals = {
                "the default chat": (
                    {"channel": default1, "destination": {"kind": "session", "session": s2}},
                    "default chat",
                ),
                "an unknown destination": (
                    {"channel": chat, "destination": {"kind": "session", "session": "ahp-session:/nowhere"}},
                    "no session",
                ),
                "an anchor on itself": (
                    {"channel": chat, "destination": {"kind": "session", "session": s1, "after": chat}},
                    "after itself",
                ),
                "an anchor elsewhere": (
                    {"channel": chat, "destination": {"kind": "session", "session": s2, "after": side}},
                    "is not a chat of",
                ),
            }
            for what, case in refusals.items():
                params, words = case
                reply = await ann.call("moveChat", params)
                assert reply.get("error", {}).get("code") == -32602, (what, reply)
                assert words in reply["error"]["message"], (what, reply["error"])
            unknown = await ann.call(
                "moveChat", {"channel": "ahp-chat:/no-such-chat", "destination": {"kind": "newSession"}}
            )
            assert unknown["error"]["code"] == -32008
            await dispatch(ann, chat, start_turn("slow words", "t-slow"), 3)
            await until(ann, is_action("chat/movableChanged", chat))
            running = await ann.call("moveChat", {"channel": chat, "destination": {"kind": "session", "session": s2}})
            assert running["error"]["code"] == -32602 and "a turn is running" in running["error"]["message"]
            await dispatch(ann, chat, {"type": "chat/turnCancelled", "turnId": "t-slow", "duration": 5}, 4)
            await until(
                ann, lambda n: is_action("chat/movableChanged", chat)(n) and action_of(n)["movable"], timeout=120
            )
            assert [c["resource"] for c in (await state_of(ann, s1))["chats"]] == before
            assert [c["resource"] for c in (await state_of(ann, s2))["chats"]] == [default2]

            # Within its session: placed after an anchor, or first.
            reply = await ann.call(
                "moveChat", {"channel": chat, "destination": {"kind": "session", "session": s1, "after": side}}
            )
            assert reply["result"] == {"session": s1}
            fits("/commands/moveChat/result", reply["result"])
            seen = await until(bob, is_action("session/chatsReordered", s1))
            assert action_of(seen[-1])["chats"] == [default1, side, chat]
            await ann.call("moveChat", {"channel": chat, "destination": {"kind": "session", "session": s1}})
            seen = await until(bob, is_action("session/chatsReordered", s1))
            assert action_of(seen[-1])["chats"] == [chat, default1, side]

            # To another session, first there.
            reply = await ann.call(
                "moveChat", {"channel": chat, "destination": {"kind": "session", "session": s2}}, timeout=120
            )
            assert reply["result"] == {"session": s2}
            seen = await until(bob, is_action("session/chatsReordered", s2))
            assert {"type": "session/chatRemoved", "chat": chat} in actions(seen, s1)
            added = [a for a in actions(seen, s2) if a["type"] == "session/chatAdded"]
            assert added[0]["summary"]["resource"] == chat and added[0]["summary"]["movable"] is True
            assert action_of(seen[-1])["chats"] == [chat, default2]
            seen += await until(bob, is_note("root/sessionSummaryChanged", s2))
            summaries = {
                n["params"]["session"]: n["params"]["changes"]
                for n in seen
                if n.get("method") == "root/sessionSummaryChanged"
            }
            assert [c["resource"] for c in summaries[s1]["chats"]] == [default1, side]
            assert [c["resource"] for c in summaries[s2]["chats"]] == [chat, default2]
            assert [c["resource"] for c in (await state_of(bob, s2))["chats"]] == [chat, default2]
            assert chat not in [c["resource"] for c in (await state_of(bob, s1))["chats"]]
            await turn(ann, chat, "second words", 5)
            # The agent took up the same conversation under the destination.
            heard = said(conversation_with(home, "first words"))
            assert heard[0] == "first words" and heard[-1] == "second words"

            # Out to a session of its own, named by the agent's conversation.
            reply = await ann.call("moveChat", {"channel": side, "destination": {"kind": "newSession"}}, timeout=120)
            fresh = reply["result"]["session"]
            assert fresh == f"demo:/{conversation_with(home, 'side words')['sessionId']}"
            seen = await until(bob, is_note("root/sessionAdded"))
            assert seen[-1]["params"]["summary"]["defaultChat"] == side
            fits("/notifications/root~1sessionAdded", seen[-1]["params"])
            assert {"type": "chat/movableChanged", "movable": False} in actions(seen, side)
            assert {"type": "session/chatRemoved", "chat": side} in actions(seen, s1)
            new_state = await state_of(bob, fresh)
            assert new_state["defaultChat"] == side and [c["resource"] for c in new_state["chats"]] == [side]
            again = await ann.call("moveChat", {"channel": side, "destination": {"kind": "session", "session": s1}})
            assert again["error"]["code"] == -32602 and "default chat" in again["error"]["message"]
        daemon.terminate()
        assert await daemon.wait() == 0

    sessions = data / "sessions"
    assert (sessions / _name(s2) / f"{_name(chat)}.jsonl").exists()
    assert not (sessions / _name(s1) / f"{_name(chat)}.jsonl").exists()
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as cat:
            await hello(cat, "cat")
            assert [c["resource"] for c in (await state_of(cat, s2))["chats"]] == [chat, default2]
            assert [c["resource"] for c in (await state_of(cat, s1))["chats"]] == [default1]
            moved = await state_of(cat, chat)
            assert [t["message"]["text"] for t in moved["turns"]] == ["first words", "slow words", "second words"]
            await turn(cat, chat, "third words", 1)
            heard = said(conversation_with(home, "first words"))
            assert heard[0] == "first words" and heard[-1] == "third words"
            own = await state_of(cat, fresh)
            assert own["defaultChat"] == side
            await state_of(cat, side)
            await turn(cat, side, "more side words", 2)
            assert said(conversation_with(home, "side words")) == ["side words", "more side words"]
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(capture)


async def test_a_destination_that_will_not_take_the_conversation_leaves_the_chat(tmp_path) -> None:
    home = tmp_path / "d" / "demo-agent"
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as ann:
            await hello(ann, "ann")
            s1, _ = await create(ann, tmp_path / "one", channel=f"demo:/{uuid.uuid4()}")
            s2, _ = await create(ann, tmp_path / "two", channel=f"demo:/{uuid.uuid4()}")
            chat = await new_chat(ann, s1)
            await state_of(ann, chat)
            await turn(ann, chat, "words to lose", 1)
            # The agent's own record of the conversation is gone: it cannot load it anywhere.
            for path in home.glob("*.json"):
                if "words to lose" in path.read_text():
                    path.unlink()
            reply = await ann.call(
                "moveChat", {"channel": chat, "destination": {"kind": "session", "session": s2}}, timeout=120
            )
            assert reply["error"]["code"] == -32602 and "did not take" in reply["error"]["message"]
            assert chat in [c["resource"] for c in (await state_of(ann, s1))["chats"]]
            assert chat not in [c["resource"] for c in (await state_of(ann, s2))["chats"]]
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_a_new_session_whose_agent_will_not_start_is_undone_unseen(tmp_path) -> None:
    """moveChat to a new session, the agent unable to load the conversation
    there: the request is answered with the agent's error, and no watcher -
    of the root, the source session or the chat - is told anything moved;
    the chat is back at its place, on disk too, and stays there across a
    restart."""
    data = tmp_path / "d"
    home = data / "demo-agent"
    (tmp_path / "one").mkdir()
    capture = tmp_path / "undone.jsonl"
    async with daemon_in_process(data, "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as ann, rpc(daemon.url) as bob:
            await hello(ann, "ann")
            await hello(bob, "bob")
            s1, default1 = await create(ann, tmp_path / "one", channel=f"demo:/{uuid.uuid4()}")
            chat = await new_chat(ann, s1)
            side = await new_chat(ann, s1)
            await ann.call("moveChat", {"channel": side, "destination": {"kind": "session", "session": s1}})
            await ann.call(
                "moveChat", {"channel": chat, "destination": {"kind": "session", "session": s1, "after": side}}
            )
            order = [side, chat, default1]
            for channel in (s1, chat):
                await state_of(bob, channel)
                await state_of(ann, channel)
            await turn(ann, chat, "words to lose", 1)
            await until(bob, lambda n: is_action("chat/movableChanged", chat)(n) and action_of(n)["movable"])
            stored = conversation_with(home, "words to lose")
            would_be = f"demo:/{stored['sessionId']}"
            for path in home.glob("*.json"):  # the agent's own record gone: it cannot load the conversation
                if "words to lose" in path.read_text():
                    path.unlink()
            before = await ann.call("listSessions", {"channel": ROOT})

            reply = await ann.call("moveChat", {"channel": chat, "destination": {"kind": "newSession"}}, timeout=120)
            error = reply.get("error")
            assert error is not None and error["code"] == -32602, reply
            assert "did not take" in error["message"] and f"stays in {s1}" in error["message"], error
            assert error["data"]["path"] == "$.destination"

            # A fence: what bob heard before ann's next change is everything the failed move said.
            fence = await new_chat(ann, s1)
            seen = await until(
                bob, lambda n: is_action("session/chatAdded", s1)(n) and action_of(n)["summary"]["resource"] == fence
            )
            heard = [n.get("method") for n in seen] + [a["type"] for n in seen if (a := action_of(n))]
            for said_nothing in (
                "root/sessionAdded",
                "root/sessionRemoved",
                "session/chatRemoved",
                "session/chatsReordered",
                "chat/movableChanged",
            ):
                assert said_nothing not in heard, (said_nothing, seen)
            assert "root/activeSessionsChanged" not in heard
            assert [c["resource"] for c in (await state_of(bob, s1))["chats"]] == [*order, fence]
            assert (await state_of(bob, chat))["movable"] is True
            after = await ann.call("listSessions", {"channel": ROOT})
            listed = [s["resource"] for s in after["result"]["items"]]
            assert would_be not in listed and sorted(listed) == sorted(s["resource"] for s in before["result"]["items"])
            gone = await bob.call("subscribe", {"channel": would_be}, timeout=60)
            assert "error" in gone, gone
        daemon.terminate()
        assert await daemon.wait() == 0

    sessions = data / "sessions"
    assert (sessions / _name(s1) / f"{_name(chat)}.jsonl").exists()
    assert not (sessions / _name(would_be)).exists()
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as cat:
            await hello(cat, "cat")
            assert [c["resource"] for c in (await state_of(cat, s1))["chats"]] == [*order, fence]
            moved = await state_of(cat, chat)
            assert [t["message"]["text"] for t in moved["turns"]] == ["words to lose"]
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(capture)
