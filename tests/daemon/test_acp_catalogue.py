"""An ACP agent's own stored conversations in the catalogue, end to end.

Conversations are made with the shipped demo agent directly (nobody's
session here), then a real daemon over the same agent store lists
them, a client opens one - its past turns rebuilt from ``session/load``'s
replay, no turn started and no agent left running - the first new turn
resumes it under its own id, and disposing deletes the agent's copy.
"""

from __future__ import annotations

from pathlib import Path

from ahpd.demo_agent.store import SessionStore
from tests.backends.acp_agents.harness import conversation, demo_backend

from .helpers import (
    Rpc,
    action_of,
    daemon_in_process,
    dispatch,
    eventually,
    fits,
    is_action,
    listed_until,
    rpc,
    start_turn,
    until,
    wire_clean,
)


async def _listed(client: Rpc, uri: str, present: bool = True) -> list[dict]:
    """listSessions once ``uri`` is (or is no longer) a row: the catalogue is
    read in the background, after the agent's boot probe, and each row it
    adds or removes is said on the root channel."""

    def settled(rows: list[dict]) -> bool:
        fits("/commands/listSessions/result", {"items": rows})
        return any(r["resource"] == uri for r in rows) == present

    return await listed_until(client, settled)


async def _no_agent_left(daemon) -> None:
    """Until the daemon has no child process: whatever read the catalogue is
    gone (an agent kept running would hang here until the guard)."""
    await eventually(lambda: not daemon.children())


async def test_a_stored_conversation_is_listed_opened_resumed_and_disposed(tmp_path: Path) -> None:
    data, cwd = tmp_path / "d", tmp_path / "work"
    cwd.mkdir()
    agent_home = data / "demo-agent"  # where the daemon's demo agent keeps its conversations
    async with conversation(demo_backend(agent_home), cwd) as (conv, _):
        await conv.prompt("remember the walrus")
        await conv.prompt("and the carpenter")
        kept = conv.backend_id
    async with conversation(demo_backend(agent_home), cwd) as (conv, _):
        await conv.prompt("a conversation nobody opens")
        other = conv.backend_id
    uri, other_uri = f"demo:/{kept}", f"demo:/{other}"

    async with daemon_in_process(data, "--sessions", "memory", "--wire", str(tmp_path / "wire.jsonl")) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("reader")
            rows = await _listed(client, uri)
            row = next(r for r in rows if r["resource"] == uri)
            assert row["provider"] == "demo" and row["title"] == "remember the walrus"
            assert row["workingDirectories"] == [cwd.resolve().as_uri()]
            assert other_uri in [r["resource"] for r in rows]
            await _no_agent_left(daemon)

            session = (await client.call("subscribe", {"channel": uri}, timeout=60))["result"]["snapshot"]["state"]
            fits("/$defs/SessionState", session)
            assert session["lifecycle"] == "ready" and session["workingDirectories"] == row["workingDirectories"]
            chat = session["defaultChat"]
            assert chat == row["defaultChat"]
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            fits("/$defs/ChatState", state)
            first, second = state["turns"]
            assert first["message"]["text"] == "remember the walrus" and first["state"] == "complete"
            assert "You said: “remember the walrus”" in first["responseParts"][-1]["content"]
            assert second["message"]["text"] == "and the carpenter"
            assert "activeTurn" not in state  # opened, not started
            rows = await _listed(client, uri)
            assert [r["resource"] for r in rows].count(uri) == 1  # the session's row, not the catalogue's too
            await _no_agent_left(daemon)
            assert len(SessionStore(agent_home).get(kept).messages) == 4  # the replay added nothing

            # The first new turn resumes the conversation the agent keeps, under its own id.
            await dispatch(client, chat, start_turn("do you remember?"), 1)
            notes = await until(client, is_action("chat/turnComplete", chat), timeout=90)
            assert not [n for n in notes if (action_of(n) or {}).get("type") == "chat/error"]
            said = [m.text for m in SessionStore(agent_home).get(kept).messages if m.role == "user"]
            assert said == ["remember the walrus", "and the carpenter", "do you remember?"]
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert len(state["turns"]) == 3

            # Disposing deletes the agent's copy, opened or not, and no row comes back for it.
            assert (await client.call("disposeSession", {"channel": uri}, timeout=60))["result"] is None
            assert (await client.call("disposeSession", {"channel": other_uri}, timeout=60))["result"] is None
            await eventually(lambda: SessionStore(agent_home).get(kept) is None)  # the agent's own files
            assert SessionStore(agent_home).get(other) is None
            rows = await _listed(client, uri, present=False)
            assert other_uri not in [r["resource"] for r in rows]
            assert (await client.call("subscribe", {"channel": other_uri}))["error"]["code"] == -32001
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(tmp_path / "wire.jsonl")
