"""The sign-in join, through a real host, its turn machinery and a real
WebSocket: a call running against an MCP server that starts asking for a
sign-in is paused (``chat/toolCallAuthRequired`` and a ``toolAuthentication``
entry in the session's ``inputNeeded``), and resumed once the server is
ready again (``chat/toolCallAuthResolved``, the entry lifted).

The real Claude Code CLI fails such a call on the spot (see
``tests/daemon/test_claude_mcp.py``), so the backend here is a small scripted
one in the CLI's place: it reports a call of its server ``locked`` and its
servers' status the way the Claude backend does, and lets the test say when
the server asks and when it is signed in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

import ahpd.host.customizations.customizations
from ahpd.backends.port import PromptResult, Update
from ahpd.backends.translate import CONTRIBUTOR_META
from tests.daemon.helpers import action_of, create, dispatch, fits, is_action, rpc, start_turn, until

from ..live import ending_of, live_host

LOCKED = "scripted.mcp:locked"


class _Conversation:
    backend_id = "scripted-1"

    def __init__(self, backend: ScriptedBackend, events: Any) -> None:
        self.backend = backend
        self.events = events

    async def prompt(self, text: str, attachments: Any = ()) -> PromptResult:
        self.events(
            Update(
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "call-1",
                    "title": "hello",
                    "kind": "other",
                    "status": "in_progress",
                    "rawInput": {},
                    "_meta": {CONTRIBUTOR_META: {"kind": "mcp", "customizationId": LOCKED}},
                }
            )
        )
        await self.backend.finish.wait()
        self.events(
            Update(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "call-1",
                    "status": "completed",
                    "content": [{"type": "content", "content": {"type": "text", "text": "hello"}}],
                }
            )
        )
        return PromptResult(stop_reason="end_turn")

    async def cancel(self) -> None:
        self.backend.finish.set()

    def answer_permission(self, request_id: str, option_id: str | None) -> None:
        pass

    def answer_input(self, request_id: str, response: str, answers: Any) -> None:
        pass

    async def mcp_status(self) -> list[dict[str, Any]]:
        return [{"name": "locked", "status": self.backend.status, "config": {"type": "http", "url": self.backend.url}}]

    async def toggle_mcp(self, name: str, enabled: bool) -> None:
        self.backend.status = "connected" if enabled else "disabled"

    async def reconnect_mcp(self, name: str) -> None:
        pass


class ScriptedBackend:
    provider = "scripted"
    url = "https://mcp.example.com/mcp"

    def __init__(self) -> None:
        self.status = "connected"
        self.finish = trio.Event()
        #: The servers it reports before any conversation (the boot probe's, for Claude).
        self.mcp_servers = [{"name": "locked", "status": "connected"}]

    def agent_info(self) -> dict[str, Any]:
        return {"provider": self.provider, "displayName": "Scripted", "description": "scripted", "models": []}

    async def run_conversation(
        self, *, cwd: Path, events: Any, task_status: Any = trio.TASK_STATUS_IGNORED, **_: Any
    ) -> None:
        task_status.started(_Conversation(self, events))
        await trio.sleep_forever()

    async def list_conversations(self) -> list[Any]:
        return []

    async def delete_conversation(self, backend_id: str) -> bool:
        return False


async def test_a_running_call_waits_on_its_servers_sign_in(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ahpd.host.customizations.customizations, "WATCH_SECONDS", 0.05)
    backend = ScriptedBackend()
    (tmp_path / "w").mkdir()
    with trio.fail_after(60):
        async with live_host(tmp_path, {"scripted": backend}) as live, rpc(live.url) as alice, rpc(live.url) as bob:
            await alice.initialize("alice")
            await bob.initialize("bob")
            uri, chat = await create(alice, tmp_path / "w", provider="scripted")
            await alice.call("subscribe", {"channel": chat})
            state = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert [c["id"] for c in state["customizations"]] == [LOCKED]
            turn = start_turn("call the server")
            await dispatch(alice, chat, turn, 1)
            await until(alice, is_action("chat/toolCallReady", chat))

            backend.status = "needs-auth"  # the server starts asking
            for who in (alice, bob):
                notes = await until(
                    who,
                    lambda n: (
                        is_action("session/inputNeededSet", uri)(n)
                        and action_of(n)["request"]["kind"] == "toolAuthentication"
                    ),
                )
                request = action_of(notes[-1])["request"]
                fits("/$defs/SessionInputRequest", request)
                assert request["id"] == "auth:call-1" and request["chat"] == chat
                assert request["turnId"] == turn["turnId"]
                assert request["toolCall"]["status"] == "auth-required"
                assert request["toolCall"]["auth"] == {"reason": "required", "resource": {"resource": backend.url}}
            paused = [action_of(n) for n in notes if is_action("chat/toolCallAuthRequired", chat)(n)]
            assert not paused  # bob watches the session only
            chat_state = (await alice.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            fits("/$defs/ChatState", chat_state)
            [part] = [p for p in chat_state["activeTurn"]["responseParts"] if p["kind"] == "toolCall"]
            assert part["toolCall"]["status"] == "auth-required"
            session = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            fits("/$defs/SessionState", session)
            assert session["status"] & 24 == 24  # InputNeeded
            assert session["customizations"][0]["state"]["kind"] == "authRequired"

            backend.status = "connected"  # signed in
            for who in (bob, alice):
                notes = await until(
                    who,
                    lambda n: is_action("session/inputNeededRemoved", uri)(n) and action_of(n)["id"] == "auth:call-1",
                )
            resumed = [action_of(n) for n in notes if is_action("chat/toolCallAuthResolved", chat)(n)]
            assert resumed[-1] == {
                "type": "chat/toolCallAuthResolved",
                "turnId": turn["turnId"],
                "toolCallId": "call-1",
            }

            backend.finish.set()
            notes = await until(alice, ending_of(chat))
            assert action_of(notes[-1])["type"] == "chat/turnComplete"
            session = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert not session.get("inputNeeded") and session["customizations"][0]["state"] == {"kind": "ready"}


async def test_a_turn_that_ends_leaves_no_sign_in_waiting(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ahpd.host.customizations.customizations, "WATCH_SECONDS", 0.05)
    backend = ScriptedBackend()
    (tmp_path / "w").mkdir()
    with trio.fail_after(60):
        async with live_host(tmp_path, {"scripted": backend}) as live, rpc(live.url) as alice:
            await alice.initialize("alice")
            uri, chat = await create(alice, tmp_path / "w", provider="scripted")
            await alice.call("subscribe", {"channel": chat})
            turn = start_turn("call the server")
            await dispatch(alice, chat, turn, 1)
            await until(alice, is_action("chat/toolCallReady", chat))
            backend.status = "needs-auth"
            await until(
                alice,
                lambda n: (
                    is_action("session/inputNeededSet", uri)(n)
                    and action_of(n)["request"]["kind"] == "toolAuthentication"
                ),
            )
            # Cancelled while it waits: the entry goes with the turn.
            await dispatch(alice, chat, {"type": "chat/turnCancelled", "turnId": turn["turnId"], "duration": 1}, 2)
            await until(
                alice, lambda n: is_action("session/inputNeededRemoved", uri)(n) and action_of(n)["id"] == "auth:call-1"
            )
            session = (await alice.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert not session.get("inputNeeded")


async def test_stopping_the_server_lifts_what_waited_on_its_sign_in(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ahpd.host.customizations.customizations, "WATCH_SECONDS", 0.05)
    backend = ScriptedBackend()
    (tmp_path / "w").mkdir()
    with trio.fail_after(60):
        async with live_host(tmp_path, {"scripted": backend}) as live, rpc(live.url) as alice:
            await alice.initialize("alice")
            uri, chat = await create(alice, tmp_path / "w", provider="scripted")
            await alice.call("subscribe", {"channel": chat})
            await dispatch(alice, chat, start_turn("call the server"), 1)
            await until(alice, is_action("chat/toolCallReady", chat))
            backend.status = "needs-auth"
            await until(
                alice,
                lambda n: (
                    is_action("session/inputNeededSet", uri)(n)
                    and action_of(n)["request"]["kind"] == "toolAuthentication"
                ),
            )
            await dispatch(alice, uri, {"type": "session/mcpServerStopRequested", "id": LOCKED}, 2)
            notes = await until(
                alice, lambda n: is_action("session/inputNeededRemoved", uri)(n) and action_of(n)["id"] == "auth:call-1"
            )
            assert any(is_action("session/mcpServerStopRequested", uri)(n) for n in notes)
            assert backend.status == "disabled"  # carried through to the backend's own switch
            session = (await alice.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            fits("/$defs/SessionState", session)
            assert not session.get("inputNeeded")
            [server] = session["customizations"]
            assert server["state"] == {"kind": "stopped"} and server["enablement"][0]["enabled"] is False
            backend.finish.set()
