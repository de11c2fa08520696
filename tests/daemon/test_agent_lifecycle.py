"""Agents only while needed: no agent process before a chat's first turn,
an idle one stopped after ``agentIdleTimeout``, and the next turn resuming
the same conversation - with nothing of it seen by clients."""

from __future__ import annotations

import uuid

import json
import os
from pathlib import Path


from tests.backends.acp_agents.harness import raw_backend
from tests.host.live import live_host, run_turn

from .helpers import Rpc, action_of, create, daemon_in_process, dispatch, is_action, rpc, start_turn, until

ROOT = "ahp-root://"


def alive(pid: int) -> bool:
    """Whether ``pid`` is still a process (a zombie not yet reaped counts)."""
    return Path(f"/proc/{pid}").exists()


async def heard_until_stopped(client: Rpc, owner) -> list[dict]:
    """Every note the client heard until ``owner``'s agent (an in-process
    host's chat, whose agent runs now) has stopped: its task over, its
    process reaped a moment before. A ping's answer comes after anything the
    host sent the client before it."""
    await owner._agent_ended.wait()
    await client.call("ping", {"channel": ROOT})
    heard, client.notes[:] = list(client.notes), []
    return heard


def assert_nothing_but_idle(notes: list[dict]) -> None:
    """What a client heard says nothing but that the chat is idle: the
    summary rows that trail a turn's end, never an error or a status change.
    Another provider's boot probe answering (``root/agentsChanged``, Claude's
    probe runs in a child process and can end late) is not about this chat."""
    for note in notes:
        action = action_of(note) or {}
        if action.get("type") == "root/agentsChanged":
            continue
        assert action.get("type", "session/chatUpdated") == "session/chatUpdated", note
        assert note.get("method") in ("action", "root/sessionSummaryChanged"), note
        changes = action.get("changes") or note["params"].get("changes") or {}
        if "status" in changes:
            assert changes["status"] & 1 and not changes["status"] & 2, note


async def test_an_idle_agent_is_stopped_and_the_next_turn_continues_its_conversation(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    data = tmp_path / "d"
    async with daemon_in_process(data, "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("idle")
            await dispatch(client, ROOT, {"type": "root/configChanged", "config": {"agentIdleTimeout": 1}}, 1)
            await until(client, is_action("root/configChanged"))
            uri, chat = await create(
                client, work, channel=f"demo:/{uuid.uuid4()}"
            )  # named as the host lists it: this test reaches its objects
            # createSession waited for the boot probe, whose process is gone: no agent runs.
            assert daemon.agents() == []

            # A slow turn, so its agent is seen while it runs.
            await dispatch(client, chat, start_turn("slow first"), 2)
            await until(client, is_action("chat/responsePart", chat))
            [agent] = daemon.agents()
            await until(client, is_action("chat/turnComplete", chat))

            # Idle for a second: the process ends (and is reaped), and clients hear nothing.
            heard = await heard_until_stopped(client, daemon.host.sessions.chat_owner[chat])
            assert not alive(agent)
            assert_nothing_but_idle(heard)
            assert daemon.agents() == []

            await dispatch(client, chat, start_turn("/echo second"), 3)
            notes = await until(
                client,
                lambda n: (
                    (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error")
                    and n["params"]["channel"] == chat
                ),
            )
            assert action_of(notes[-1])["type"] == "chat/turnComplete", notes[-1]
            chat_state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert [t["message"]["text"] for t in chat_state["turns"]] == ["slow first", "/echo second"]
            session = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert session["status"] & 2 == 0  # never in error

        # The agent kept one conversation - resumed with session/load, not begun anew -
        # holding both turns (the probe's was deleted).
        [stored] = list((data / "demo-agent").glob("*.json"))
        said = [(m["role"], m["text"]) for m in json.loads(stored.read_text())["messages"]]
        assert [text for role, text in said if role == "user"] == ["slow first", "/echo second"]
        assert ("agent", "second") in said
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_no_agent_runs_for_idle_sessions(tmp_path: Path) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("many")
            for _ in range(5):
                await create(client, tmp_path)
            assert daemon.agents() == []
            # The slash commands and models are what the boot probe learned.
            root = (await client.call("subscribe", {"channel": ROOT}))["result"]["snapshot"]["state"]
            [demo] = [a for a in root["agents"] if a["provider"] == "demo"]
            names = {c["name"] for c in demo["customizations"][0]["children"]}
            assert names == {"help", "echo"}
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_a_missing_agent_command_is_refused_at_create_session(tmp_path: Path) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--agent", "ghost=/no/such/agent") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ghost")
            reply = await client.call(
                "createSession",
                {"channel": "ahp-session:/ghost-1", "provider": "ghost", "workingDirectories": [tmp_path.as_uri()]},
            )
            assert "the ghost agent did not start" in reply["error"]["message"]
            assert "/no/such/agent" in reply["error"]["message"]
            listed = (await client.call("listSessions", {}))["result"]["items"]
            assert listed == []
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_an_agent_that_cannot_load_is_handed_the_transcript_after_an_idle_stop(tmp_path: Path) -> None:
    backends = {"raw": raw_backend("--no-load")}
    async with live_host(tmp_path, backends, agentIdleTimeout=1) as live, rpc(live.url) as client:
        await client.initialize("no-load")
        uri, chat = await create(
            client, tmp_path, channel=f"raw:/{uuid.uuid4()}"
        )  # named as the host lists it: this test reaches its objects
        owner = live.host.sessions.chat_owner[chat]
        assert owner.conversation is None

        assert (await run_turn(client, chat, "remember apples", 1))["type"] == "chat/turnComplete"
        agent = owner.conversation.pid
        assert owner.conversation.resumable is False
        await heard_until_stopped(client, owner)
        assert not alive(agent) and owner.conversation is None

        ended = await run_turn(client, chat, "what did I say", 2)
        assert ended["type"] == "chat/turnComplete", ended
        assert owner.conversation.pid != agent
        reply = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]["turns"][-1]
        text = "".join(p.get("content", "") for p in reply["responseParts"] if p.get("kind") == "markdown")
        # The raw agent echoes its prompt: the new conversation was handed the old one.
        assert "User: remember apples" in text and text.rstrip().endswith("what did I say")
        assert os.path.exists(f"/proc/{owner.conversation.pid}")  # noqa: ASYNC240 - /proc: answered at once
