"""Disposing a session or a chat in every phase of a turn and of an agent's
start-up, against a real daemon and the demo agent.

Each case disposes the thing while it is busy, waits until every task of
the disposed thing (its agent, its turns and what they do once they end) has
ended, and then checks that the daemon lived through it: the other session
still runs a turn to the end, a fresh client is served, and the disposed
thing is gone from the catalogue. The daemon runs in the test's trio run, so
a fault in any of its tasks fails the test too.
"""

from __future__ import annotations

import uuid

import pytest
import trio

from .helpers import (
    Rpc,
    action_of,
    create,
    listed_as,
    daemon_in_process,
    dispatch,
    is_action,
    rpc,
    start_turn,
    tasks_ended,
    until,
)


async def _still_serving(daemon, client: Rpc, other_chat: str, gone: str | None, seq: int) -> None:
    """The daemon lives: another session's turn completes and a new client is served."""
    assert daemon.alive
    await dispatch(client, other_chat, start_turn("still there?"), seq)
    await _turn_completes(client, other_chat)
    async with rpc(daemon.url) as fresh:
        await fresh.initialize("fresh")
        listed = (await fresh.call("listSessions", {}))["result"]["items"]
        if gone is not None:
            assert gone not in [row["resource"] for row in listed]
        assert listed, "the other session is still listed"
    assert daemon.alive


async def _turn_completes(client: Rpc, chat: str) -> None:
    notes = await until(
        client,
        lambda n: (
            (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error") and n["params"]["channel"] == chat
        ),
    )
    assert action_of(notes[-1])["type"] == "chat/turnComplete", action_of(notes[-1])


async def _busy(client: Rpc, uri: str, chat: str, phase: str) -> None:
    """Bring ``chat``'s turn to ``phase``."""
    if phase == "starting":
        await dispatch(client, chat, start_turn("hello"), 1)
    elif phase == "streaming":
        await dispatch(client, chat, start_turn("slow please"), 1)
        await until(client, is_action("chat/responsePart", chat))
    elif phase == "confirming":
        await dispatch(client, chat, start_turn("use a tool with permission"), 1)
        await until(client, is_action("session/inputNeededSet", uri))
    elif phase == "asking":
        await dispatch(client, chat, start_turn("ask me"), 1)
        await until(client, is_action("chat/inputRequested", chat))
    elif phase == "cancelled":
        turn = start_turn("slow please")
        await dispatch(client, chat, turn, 1)
        await until(client, is_action("chat/responsePart", chat))
        await dispatch(client, chat, {"type": "chat/turnCancelled", "turnId": turn["turnId"], "duration": 1}, 2)
        await until(client, is_action("chat/turnCancelled", chat))
    elif phase == "queued":
        await dispatch(client, chat, start_turn("slow please"), 1)
        await dispatch(
            client,
            chat,
            {
                "type": "chat/pendingMessageSet",
                "kind": "queued",
                "id": "q1",
                "message": {"text": "after that", "origin": {"kind": "user"}},
            },
            2,
        )
        await until(client, is_action("chat/pendingMessageSet", chat))
    else:
        raise AssertionError(phase)


PHASES = ["starting", "streaming", "confirming", "asking", "cancelled", "queued"]


def _its_work(*owners: object) -> list[object]:
    """The daemon's objects whose tasks a disposal must end: sessions and
    chats, and each chat's turns (the latest, and those it waits behind)."""
    found = list(owners)
    for owner in owners:
        turn = getattr(owner, "turn", None)
        while turn is not None:
            found.append(turn)
            turn = turn.previous
    return found


@pytest.mark.parametrize("phase", PHASES)
async def test_dispose_session_in_each_phase_of_a_turn(tmp_path, phase: str) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "file") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("dee")
            _, other_chat = await create(client, tmp_path)
            uri, chat = await create(client, tmp_path)
            await _busy(client, uri, chat, phase)
            session = daemon.host.sessions.sessions[listed_as(uri)]
            busy = _its_work(session, *session.chats.values())
            reply = await client.call("disposeSession", {"channel": uri})
            assert reply["result"] is None, reply
            await until(client, lambda n: n.get("method") == "root/sessionRemoved")
            await tasks_ended(*busy)  # whatever the turn's ending would do, it has done
            await _still_serving(daemon, client, other_chat, uri, 10)
        daemon.terminate()
        assert await daemon.wait() == 0
    assert not [p for p in (tmp_path / "d" / "sessions").rglob("*") if p.is_file() and uri in p.read_text()]


@pytest.mark.parametrize("phase", PHASES)
async def test_dispose_chat_in_each_phase_of_a_turn(tmp_path, phase: str) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("dot")
            uri, main_chat = await create(client, tmp_path)
            side = f"ahp-chat:/{uuid.uuid4()}"
            assert (await client.call("createChat", {"channel": uri, "chat": side}))["result"] is None
            await client.call("subscribe", {"channel": side})
            await _busy(client, uri, side, phase)
            busy = _its_work(daemon.host.sessions.chat_owner[side])
            assert (await client.call("disposeChat", {"channel": side}))["result"] is None
            await tasks_ended(*busy)  # whatever the turn's ending would do, it has done
            # The session goes on: its remaining chat runs a turn, and so does a new one.
            await _still_serving(daemon, client, main_chat, None, 10)
            state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert [c["resource"] for c in state["chats"]] == [main_chat]
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_dispose_chat_right_after_create_chat_with_an_initial_message(tmp_path) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ida")
            uri, main_chat = await create(client, tmp_path)
            busy = []
            for _ in range(3):
                side = f"ahp-chat:/{uuid.uuid4()}"
                created = await client.call(
                    "createChat",
                    {
                        "channel": uri,
                        "chat": side,
                        "initialMessage": {"text": "hello", "origin": {"kind": "user"}},
                    },
                )
                assert created["result"] is None, created
                busy += _its_work(daemon.host.sessions.chat_owner[side])
                # Its agent is starting: the chat goes while it does.
                assert (await client.call("disposeChat", {"channel": side}))["result"] is None
            await tasks_ended(*busy)
            await _still_serving(daemon, client, main_chat, None, 10)
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_dispose_session_while_another_client_creates_it(tmp_path) -> None:
    """The agent's start-up is raced by a second client's disposeSession: the
    creator is answered with an error, nobody else notices."""
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as creator, rpc(daemon.url) as other:
            await creator.initialize("cy")
            await other.initialize("oz")
            _, other_chat = await create(other, tmp_path)
            uri = f"ahp-session:/{uuid.uuid4()}"
            answers: dict[str, dict] = {}

            async def make() -> None:
                answers["create"] = await creator.call(
                    "createSession", {"channel": uri, "workingDirectories": [tmp_path.as_uri()]}, timeout=60
                )

            async def dispose() -> None:
                with trio.fail_after(30):
                    while True:  # as soon as the session exists, while its agent starts
                        reply = await other.call("disposeSession", {"channel": uri})
                        if "result" in reply:
                            answers["dispose"] = reply
                            return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(make)
                nursery.start_soon(dispose)
            assert answers["dispose"]["result"] is None
            # Either the agent was up before the disposal (created, then gone) or not (refused).
            create_reply = answers["create"]
            assert create_reply.get("result", "x") is None or create_reply["error"]["code"] == -32603, create_reply
            await _still_serving(daemon, other, other_chat, uri, 10)
        daemon.terminate()
        assert await daemon.wait() == 0
