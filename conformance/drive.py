"""The conformance scenario: every command and action served so far, against
a real daemon and the demo agent, from two clients (the resource steps are
in ``resources``).

Deterministic on purpose, so that its capture can be committed and diffed:
the client ids, session and chat URIs and turn ids are fixed, and after each
step the clients wait until the wire has been quiet for a moment, so the
next request never races what the last one set going.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from tests.daemon.helpers import Rpc, rpc

ROOT = "ahp-root://"
SESSION = "ahp-session:/00000000-0000-4000-8000-00000000c0f0"
SIDE_CHAT = "ahp-chat:/00000000-0000-4000-8000-00000000c4a7"
QUIET = 0.15  # seconds without a frame that count as "nothing more is coming"


async def settle(*clients: Rpc, quiet: float = QUIET) -> None:
    """Read every client until none has said anything for ``quiet`` seconds."""
    while True:
        heard = False

        async def listen(client: Rpc) -> None:
            nonlocal heard
            with trio.move_on_after(quiet):
                while True:
                    client.notes.append(json.loads(await client.ws.get_message()))
                    heard = True

        async with trio.open_nursery() as nursery:
            for client in clients:
                nursery.start_soon(listen, client)
        if not heard:
            return


async def until(client: Rpc, kind: str, channel: str | None = None, **fields: Any) -> dict[str, Any]:
    """Wait for the action ``kind`` (on ``channel``, with ``fields``), then for the wire to be quiet; returns it."""
    while True:
        note = json.loads(await client.ws.get_message())
        client.notes.append(note)
        params = note.get("params") or {}
        if (
            note.get("method") == "action"
            and params["action"]["type"] == kind
            and (channel is None or params["channel"] == channel)
            and "rejectionReason" not in params
            and all(params["action"].get(key) == value for key, value in fields.items())
        ):
            found = params
            break
    await settle(client)
    return found


async def call(client: Rpc, method: str, params: dict[str, Any], *others: Rpc) -> dict[str, Any]:
    """A request; with ``others``, it sets work going, so wait for all to go quiet."""
    reply = await client.call(method, params, timeout=60)
    if others:
        await settle(client, *others)
    return reply


class Dispatcher:
    """``dispatchAction`` with the client's own increasing clientSeq."""

    def __init__(self, client: Rpc) -> None:
        self.client, self.seq = client, 0

    async def __call__(self, channel: str, action: dict[str, Any]) -> None:
        self.seq += 1
        await self.client.notify("dispatchAction", {"channel": channel, "clientSeq": self.seq, "action": action})


def turn(turn_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "chat/turnStarted",
        "turnId": turn_id,
        "startedAt": "2026-12-02T00:00:00Z",
        "message": {"text": text, "origin": {"kind": "user"}},
    }


async def drive(url: str, work: Path) -> dict[str, Any]:
    """Run the scenario; returns what the test asserts on besides the capture."""
    seen: dict[str, Any] = {}
    async with rpc(url) as bob, rpc(url) as alice:
        assert "result" in await call(bob, "ping", {"channel": ROOT})  # the one request allowed before initialize
        await bob.initialize("bob")
        await alice.initialize("alice")
        await settle(alice, bob)
        await call(alice, "listSessions", {"channel": ROOT})
        await call(
            alice, "resolveSessionConfig", {"channel": ROOT, "provider": "demo", "workingDirectory": work.as_uri()}
        )
        await call(alice, "sessionConfigCompletions", {"channel": ROOT, "property": "branch", "query": ""})
        assert (
            await call(
                alice,
                "createSession",
                {
                    "channel": SESSION,
                    "workingDirectories": [work.as_uri()],
                    "progressToken": "create-1",
                },
                bob,
            )
        )["result"] is None
        session = (await call(alice, "subscribe", {"channel": SESSION}))["result"]["snapshot"]["state"]
        chat = session["defaultChat"]
        await call(alice, "subscribe", {"channel": chat})
        await call(bob, "subscribe", {"channel": SESSION})
        await call(bob, "subscribe", {"channel": chat})
        send = Dispatcher(alice)

        await send(ROOT, {"type": "root/configChanged", "config": {"defaultShell": "/bin/sh"}})
        await settle(alice, bob)
        await send(SESSION, {"type": "session/titleChanged", "title": "Conformance"})
        await settle(alice, bob)

        await send(chat, turn("turn-1", "hello there"))
        await until(alice, "chat/turnComplete", chat)
        await send(chat, turn("turn-2", "please use a tool with permission"))
        asked = await until(alice, "session/inputNeededSet", SESSION)
        call_id = asked["action"]["request"]["toolCall"]["toolCallId"]
        await send(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "turn-2",
                "toolCallId": call_id,
                "approved": True,
                "confirmed": "user-action",
            },
        )
        await until(alice, "chat/turnComplete", chat)
        # Cancelled while it runs: the agent has said it will reply slowly and
        # pauses before the first chunk (an hour, in the conformance daemon).
        await send(chat, turn("turn-3", "be slow please"))
        await until(alice, "chat/reasoning", chat, content="I will write the reply slowly.")
        await send(chat, {"type": "chat/turnCancelled", "turnId": "turn-3", "duration": 5})
        await until(alice, "chat/turnCancelled", chat)
        seen["turn-3 endings"] = [
            n["params"]["action"]["type"]
            for n in alice.notes
            if n.get("method") == "action"
            and n["params"]["action"].get("turnId") == "turn-3"
            and n["params"]["action"]["type"] in ("chat/turnComplete", "chat/turnCancelled", "chat/error")
        ]
        await send(chat, turn("turn-4", "now fail"))
        await until(alice, "chat/error", chat)
        await send(chat, turn("turn-5", "show me a plan"))
        await until(alice, "chat/turnComplete", chat)
        await send(chat, turn("turn-6", "ask me something"))
        question = await until(alice, "chat/inputRequested", chat)
        await send(
            chat,
            {"type": "chat/inputCompleted", "requestId": question["action"]["request"]["id"], "response": "accept"},
        )
        await until(alice, "chat/turnComplete", chat)
        await settle(alice, bob)

        # A refusal goes to its sender and nobody else.
        await send(
            chat, {"type": "chat/toolCallResultConfirmed", "turnId": "turn-2", "toolCallId": call_id, "approved": True}
        )
        await settle(alice, bob)
        seen["refusals"] = [n for n in alice.notes if "rejectionReason" in (n.get("params") or {})]
        seen["bob refusals"] = [n for n in bob.notes if "rejectionReason" in (n.get("params") or {})]

        await call(alice, "completions", {"channel": chat, "kind": "userMessage", "text": "/he", "offset": 3})
        await call(
            alice, "completions", {"channel": chat, "kind": "userMessage", "text": "look at @main", "offset": 13}
        )
        await call(alice, "createChat", {"channel": SESSION, "chat": SIDE_CHAT}, bob)
        await call(alice, "subscribe", {"channel": SIDE_CHAT})
        await send(SIDE_CHAT, turn("turn-7", "hello from the side"))
        await until(alice, "chat/turnComplete", SIDE_CHAT)
        await settle(alice, bob)
        await call(alice, "fetchTurns", {"channel": chat, "cursor": "made-up"})
        await call(alice, "moveChat", {"channel": SIDE_CHAT, "destination": {"kind": "session", "session": SESSION}})
        await alice.notify("unsubscribe", {"channel": SIDE_CHAT})
        await call(alice, "disposeChat", {"channel": SIDE_CHAT}, bob)
        await send(SESSION, {"type": "session/isReadChanged", "isRead": True})
        await settle(alice, bob)
        await bob.notify("unsubscribe", {"channel": chat})
        await settle(alice, bob)

        from .resources import resource_steps  # here: it builds on this module's helpers

        await resource_steps(alice, bob, work)

        # Every channel each client still watches, fresh: wire-check compares
        # each snapshot with the state its actions reduced to.
        for client, channels in ((alice, (ROOT, SESSION, chat)), (bob, (ROOT, SESSION))):
            for channel in channels:
                await call(client, "subscribe", {"channel": channel})
        seen["alice last serverSeq"] = max(
            (n["params"]["serverSeq"] for n in alice.notes if n.get("method") == "action"), default=0
        )
        seen["chat"] = chat

    # The same client again, on a new connection, picking up where it left off.
    async with rpc(url) as again:
        reply = await call(
            again,
            "reconnect",
            {
                "channel": ROOT,
                "clientId": "alice",
                "lastSeenServerSeq": seen["alice last serverSeq"],
                "subscriptions": [ROOT, SESSION, seen["chat"]],
            },
        )
        seen["reconnect"] = reply["result"]["type"]
        await settle(again)
        assert (await call(again, "disposeSession", {"channel": SESSION}))["result"] is None
        await settle(again)
        await call(again, "listSessions", {"channel": ROOT})
        await call(again, "subscribe", {"channel": ROOT})
    return seen
