"""Fault injection: make the host fail at chosen points while real clients
and real demo-agent processes are connected, and check every time that

* the host lives (its task still runs),
* another, pre-existing session still runs a turn to completion,
* a fresh client is served,
* and the failing thing reported its failure in protocol terms (the turn
  ended with ``chat/error``, the session's summary has the Error bit, the
  connection was closed with 1011, the action was refused).

Each entry of ``FAULTS`` is one fault point: it patches one function,
brings the victim session there, and checks the report.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_websocket

import ahpd.host.kernel.bus
import ahpd.host.sessions.chats.turns
from ahpd import state as reducers
from ahpd.backends.acp.backend import AcpBackend
from ahpd.backends.port import PermissionRequest, Update
from ahpd.host.assembly import Host
from ahpd.transport.websocket import WebSocketConnection
from tests.daemon.helpers import Rpc, action_of, dispatch, rpc, start_turn, until

from ..live import LiveHost, assert_alive, create, live_host, run_turn

LIMIT = 60


def _handle_events_with(v: Victim, on_event: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's events go to ``on_event``, through the sessions' hook
    table (``SessionHooks.agent_event``), the way the host hands them on."""
    sessions = v.live.host.sessions
    monkeypatch.setattr(sessions, "hooks", dataclasses.replace(sessions.hooks, agent_event=on_event))


class Victim:
    """The session the fault is aimed at, and the client watching it."""

    def __init__(self, live: LiveHost, client: Rpc, uri: str, chat: str, cwd: Path) -> None:
        self.live = live
        self.client = client
        self.uri = uri
        self.chat = chat
        self.cwd = cwd
        self.seq = 100

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    async def new_chat(self) -> str:
        """A chat of the victim session whose agent has not started yet."""
        chat = f"ahp-chat:/{uuid.uuid4()}"
        reply = await self.client.call("createChat", {"channel": self.uri, "chat": chat})
        assert reply.get("result", "x") is None, reply
        await self.client.call("subscribe", {"channel": chat})
        return chat


def _error_of(ending: dict) -> dict:
    assert ending["type"] == "chat/error", ending
    return ending["part"]["error"]


async def _summary_status(client: Rpc, uri: str) -> int:
    rows = (await client.call("listSessions", {}))["result"]["items"]
    return next(r["status"] for r in rows if r["resource"] == uri)


# -- the fault points -------------------------------------------------------------


async def store_save(v: Victim, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed store write is the session's error, shown on its summary."""
    store = v.live.host.sessions.store
    real = store.save

    def save(record: dict) -> None:
        if record["uri"] == v.uri:
            raise OSError(28, "No space left on device")
        real(record)

    monkeypatch.setattr(store, "save", save)
    ending = await run_turn(v.client, v.chat, "hello", v.next_seq())
    assert ending["type"] == "chat/turnComplete"  # the turn itself went well
    assert await _summary_status(v.client, v.uri) & 2
    monkeypatch.undo()
    assert (await run_turn(v.client, v.chat, "hello again", v.next_seq()))["type"] == "chat/turnComplete"
    assert not await _summary_status(v.client, v.uri) & 2  # written again: no longer in error


async def agent_event(v: Victim, monkeypatch: pytest.MonkeyPatch) -> None:
    """Handling one of the agent's updates fails: its turn ends with chat/error."""
    real = ahpd.host.sessions.chats.turns.on_event

    def on_event(chat: Any, event: Any) -> None:
        if (
            chat.uri == v.chat
            and isinstance(event, Update)
            and event.update.get("sessionUpdate") == "agent_message_chunk"
        ):
            raise RuntimeError("injected: cannot handle this update")
        real(chat, event)

    _handle_events_with(v, on_event, monkeypatch)
    error = _error_of(await run_turn(v.client, v.chat, "hello", v.next_seq()))
    assert error["errorType"] == "RuntimeError" and "cannot handle" in error["message"]
    monkeypatch.undo()
    assert (await run_turn(v.client, v.chat, "and now?", v.next_seq()))["type"] == "chat/turnComplete"


async def permission_event(v: Victim, monkeypatch: pytest.MonkeyPatch) -> None:
    """Handling a tool confirmation request fails: the turn ends with
    chat/error, the agent is told to stop, and the chat is free again."""
    real = ahpd.host.sessions.chats.turns.on_event

    def on_event(chat: Any, event: Any) -> None:
        if chat.uri == v.chat and isinstance(event, PermissionRequest):
            raise KeyError("injected: no such tool")
        real(chat, event)

    _handle_events_with(v, on_event, monkeypatch)
    error = _error_of(await run_turn(v.client, v.chat, "use a tool with permission", v.next_seq()))
    assert error["errorType"] == "KeyError"
    monkeypatch.undo()
    assert (await run_turn(v.client, v.chat, "and now?", v.next_seq()))["type"] == "chat/turnComplete"


async def encode(v: Victim, monkeypatch: pytest.MonkeyPatch) -> None:
    """An action frame that cannot be encoded never happened; its turn ends with chat/error."""
    real = ahpd.host.kernel.bus.notification_frame

    def frame(method: str, params: Any) -> str:
        action = params.get("action") if isinstance(params, dict) else None
        if params.get("channel") == v.chat and action and action["type"] == "chat/responsePart":
            raise ValueError("injected: Out of range float values are not JSON compliant")
        return real(method, params)

    monkeypatch.setattr(ahpd.host.kernel.bus, "notification_frame", frame)
    error = _error_of(await run_turn(v.client, v.chat, "hello", v.next_seq()))
    assert error["errorType"] == "ValueError"
    monkeypatch.undo()
    state = (await v.client.call("subscribe", {"channel": v.chat}))["result"]["snapshot"]["state"]
    last = state["turns"][-1]
    assert last["state"] == "error"
    assert [p["kind"] for p in last["responseParts"] if p["kind"] == "markdown"] == []  # never said


async def reducer_agent_action(v: Victim, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reducer fails on an action the agent's event made: chat/error."""
    real = reducers.reduce

    def reduce(kind: str, state: Any, action: dict, **kw: Any) -> Any:
        if kind == "chat" and state.get("resource") == v.chat and action["type"] == "chat/reasoning":
            raise TypeError("injected: reducer bug")
        return real(kind, state, action, **kw)

    monkeypatch.setattr(reducers, "reduce", reduce)
    error = _error_of(await run_turn(v.client, v.chat, "hello", v.next_seq()))
    assert error["errorType"] == "TypeError"


async def reducer_client_action(v: Victim, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reducer fails on a client's action: that action is refused, saying why."""
    real = reducers.reduce

    def reduce(kind: str, state: Any, action: dict, **kw: Any) -> Any:
        if kind == "session" and action["type"] == "session/titleChanged":
            raise TypeError("injected: reducer bug")
        return real(kind, state, action, **kw)

    monkeypatch.setattr(reducers, "reduce", reduce)
    await v.client.call("subscribe", {"channel": v.uri})
    seq = v.next_seq()
    await dispatch(v.client, v.uri, {"type": "session/titleChanged", "title": "new name"}, seq)
    notes = await until(
        v.client, lambda n: n.get("method") == "action" and (n["params"].get("origin") or {}).get("clientSeq") == seq
    )
    assert "internal error: TypeError" in notes[-1]["params"]["rejectionReason"]


async def _closed_code(ws: trio_websocket.WebSocketConnection) -> int:
    with trio.fail_after(LIMIT):
        try:
            while True:
                await ws.get_message()
        except trio_websocket.ConnectionClosed as closed:
            return closed.reason.code


async def writer(v: Victim, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection's writer fails: that connection is closed with 1011."""
    real = WebSocketConnection._write_frames

    async def write(self: WebSocketConnection, frames: Any) -> None:
        if any("poison-pill" in text for text in frames):
            raise RuntimeError("injected: the writer broke")
        await real(self, frames)

    monkeypatch.setattr(WebSocketConnection, "_write_frames", write)
    async with rpc(v.live.url) as doomed:
        await doomed.initialize("doomed")
        await doomed.ws.send_message('{"jsonrpc": "2.0", "id": 7, "method": "poison-pill"}')
        assert await _closed_code(doomed.ws) == 1011


async def connection_handler(v: Victim, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's connection handler fails: that connection is closed with 1011."""
    real = Host.handle_frame

    async def handle_frame(self: Host, peer: Any, text: str) -> None:
        if "explode-handler" in text:
            raise RuntimeError("injected: the handler broke")
        await real(self, peer, text)

    monkeypatch.setattr(Host, "handle_frame", handle_frame)
    async with rpc(v.live.url) as doomed:
        await doomed.initialize("doomed")
        await doomed.ws.send_message('{"jsonrpc": "2.0", "id": 7, "method": "explode-handler"}')
        assert await _closed_code(doomed.ws) == 1011


async def backend_start(v: Victim, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend fails to start an agent: the turn that needed it ends with chat/error."""
    real = AcpBackend.run_conversation

    async def run_conversation(self: AcpBackend, *, cwd: Path, **kw: Any) -> None:
        if cwd == v.cwd:
            raise RuntimeError("injected: cannot spawn the agent")
        await real(self, cwd=cwd, **kw)

    monkeypatch.setattr(AcpBackend, "run_conversation", run_conversation)
    chat = await v.new_chat()
    error = _error_of(await run_turn(v.client, chat, "hello", v.next_seq()))
    assert error["errorType"] == "RuntimeError" and "cannot spawn" in error["message"]
    monkeypatch.undo()
    assert (await run_turn(v.client, chat, "now start", v.next_seq()))["type"] == "chat/turnComplete"


async def backend_after_start(v: Victim, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend's task fails after its agent started, mid-turn: the turn
    ends with chat/error, and the next one starts the agent again."""
    real = AcpBackend.run_conversation
    streaming = trio.Event()

    async def run_conversation(self: AcpBackend, *, cwd: Path, task_status: Any, **kw: Any) -> None:
        async with trio.open_nursery() as nursery:
            conversation = await nursery.start(lambda task_status: real(self, cwd=cwd, task_status=task_status, **kw))
            task_status.started(conversation)
            if cwd == v.cwd:
                await streaming.wait()
                raise RuntimeError("injected: the backend broke")

    monkeypatch.setattr(AcpBackend, "run_conversation", run_conversation)
    chat = await v.new_chat()
    await dispatch(v.client, chat, start_turn("slow please"), v.next_seq())
    await until(v.client, lambda n: (action_of(n) or {}).get("type") == "chat/responsePart")
    streaming.set()
    notes = await until(
        v.client,
        lambda n: (
            (action_of(n) or {}).get("type") in ("chat/error", "chat/turnComplete") and n["params"]["channel"] == chat
        ),
    )
    # Said by whichever noticed first: the prompt losing its agent, or the agent's task ending.
    assert _error_of(action_of(notes[-1]))["errorType"] in ("AgentError", "AgentGone")
    monkeypatch.undo()
    with trio.fail_after(LIMIT):  # its task has ended (the process reaped)
        await v.live.host.sessions.chat_owner[chat]._agent_ended.wait()
    again = await run_turn(v.client, chat, "again", v.next_seq())
    assert again["type"] == "chat/turnComplete", again


async def session_nursery(v: Victim, monkeypatch: pytest.MonkeyPatch) -> None:
    """Something unsupervised fails inside a session's nursery: the session
    reports its error (its running turn ends with chat/error, its summary
    has the Error bit) and goes on with a fresh nursery."""
    session = v.live.host.sessions.sessions[v.uri]
    await dispatch(v.client, v.chat, start_turn("slow please"), v.next_seq())
    await until(v.client, lambda n: (action_of(n) or {}).get("type") == "chat/responsePart")

    async def bug() -> None:
        raise RuntimeError("injected: a task without a boundary")

    session.nursery.start_soon(bug)
    notes = await until(v.client, lambda n: (action_of(n) or {}).get("type") == "chat/error")
    assert _error_of(action_of(notes[-1]))["errorType"] == "RuntimeError"
    assert await _summary_status(v.client, v.uri) & 2
    assert (await run_turn(v.client, v.chat, "hello again", v.next_seq()))["type"] == "chat/turnComplete"


FAULTS: list[Callable[[Victim, pytest.MonkeyPatch], Awaitable[None]]] = [
    store_save,
    agent_event,
    permission_event,
    encode,
    reducer_agent_action,
    reducer_client_action,
    writer,
    connection_handler,
    backend_start,
    backend_after_start,
    session_nursery,
]


@pytest.mark.parametrize("fault", FAULTS, ids=[f.__name__ for f in FAULTS])
async def test_a_fault_ends_only_the_thing_that_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: Callable[..., Awaitable[None]]
) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "victim").mkdir()
    with trio.fail_after(3 * LIMIT):
        async with live_host(tmp_path) as live, rpc(live.url) as client:
            await client.initialize("watcher")
            _, other_chat = await create(client, tmp_path / "other")
            uri, chat = await create(client, tmp_path / "victim", channel=f"demo:/{uuid.uuid4()}")  # as listed
            victim = Victim(live, client, uri, chat, tmp_path / "victim")
            await fault(victim, monkeypatch)
            monkeypatch.undo()
            await assert_alive(live, client, other_chat, 1)
