"""A hung agent does not wedge its chat.

``raw_agent.py hang`` never answers its prompt and ignores ``session/cancel``
(and, with ``--ignore-sigterm``, SIGTERM too). Against it: a cancel frees
the chat after ``CANCEL_GRACE`` (the agent is killed, the next turn resumes
it), and an agent that says nothing for ``agentSilenceTimeout`` seconds ends
its turn with ``chat/error`` saying so. The demo agent shows the other
side: a slow agent that keeps talking, and one waiting on a person, are not
silent.
"""

from __future__ import annotations

import uuid

from pathlib import Path

import pytest
import trio

import ahpd.host.sessions.chats.turns
from tests.backends.acp_agents.harness import demo_backend, raw_backend, reaped
from tests.daemon.helpers import action_of, dispatch, is_action, rpc, start_turn, until

from ..live import assert_alive, create, ending_of, live_host, run_turn


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ahpd.host.sessions.chats.turns, "CANCEL_GRACE", 0.5)


def backends(tmp_path: Path) -> dict:
    return {
        "demo": demo_backend(tmp_path / "demo-home"),
        "raw": raw_backend("--ignore-sigterm", shutdown_grace=0.3),
    }


async def _hung(live, client, chat: str) -> tuple[int, trio.Event]:
    """The hung agent's pid once the turn's prompt is with it (it says so
    before it hangs), and the event the host sets when it has let go of it."""
    await until(client, is_action("chat/responsePart", chat))
    owner = live.host.sessions.chat_owner[chat]
    return owner.conversation.pid, owner._agent_ended


async def _gone(pid: int, ended: trio.Event) -> None:
    """Killed and reaped: the host's task for the agent is over (the process
    is reaped a moment before)."""
    await ended.wait()
    assert reaped(pid)


async def test_a_cancel_frees_the_chat_of_an_agent_that_ignores_it(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    async with live_host(tmp_path, backends(tmp_path)) as live, rpc(live.url) as client:
        await client.initialize("hal")
        _, other = await create(client, tmp_path / "w")
        _, chat = await create(client, tmp_path / "w", provider="raw", channel=f"raw:/{uuid.uuid4()}")
        hung = start_turn("hang")
        await dispatch(client, chat, hung, 1)
        pid, ended = await _hung(live, client, chat)
        await dispatch(client, chat, {"type": "chat/turnCancelled", "turnId": hung["turnId"], "duration": 1}, 2)
        await until(client, is_action("chat/turnCancelled", chat))
        # The next message is taken at once and runs once the hung agent is gone.
        after = start_turn("hello again")
        await dispatch(client, chat, after, 3)
        notes = await until(client, ending_of(chat))
        ending = action_of(notes[-1])
        assert ending["type"] == "chat/turnComplete" and ending["turnId"] == after["turnId"], ending
        await _gone(pid, ended)  # killed (it ignores SIGTERM too) and reaped
        owner = live.host.sessions.chat_owner[chat]
        assert owner.conversation is not None and owner.conversation.pid != pid
        state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
        assert [t["state"] for t in state["turns"]] == ["cancelled", "complete"]
        assert "echo: hello again" in state["turns"][-1]["responseParts"][-1]["content"]
        await assert_alive(live, client, other, 10)


async def test_a_silent_agent_ends_its_turn_with_an_error(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    async with live_host(tmp_path, backends(tmp_path), agentSilenceTimeout=1) as live, rpc(live.url) as client:
        await client.initialize("sid")
        _, other = await create(client, tmp_path / "w")
        _, chat = await create(client, tmp_path / "w", provider="raw", channel=f"raw:/{uuid.uuid4()}")
        await dispatch(client, chat, start_turn("hang"), 1)
        pid, ended = await _hung(live, client, chat)
        notes = await until(client, ending_of(chat))
        ending = action_of(notes[-1])
        assert ending["type"] == "chat/error", ending
        assert ending["part"]["error"] == {
            "errorType": "AgentSilent",
            "message": "the agent produced nothing for 1 seconds",
        }
        await _gone(pid, ended)
        assert (await run_turn(client, chat, "hello", 2))["type"] == "chat/turnComplete"
        await assert_alive(live, client, other, 10)


async def test_talking_or_waiting_on_a_person_is_not_silence(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    # A chunk every 0.1 s against a 3 s timeout: thirty times the gap, so that
    # an agent process a loaded machine starves for a second is not silent.
    async with live_host(tmp_path, backends(tmp_path), agentSilenceTimeout=3) as live, rpc(live.url) as client:
        await client.initialize("tia")
        uri, chat = await create(client, tmp_path / "w")
        # About four seconds of reply, a chunk every 0.1 s.
        assert (await run_turn(client, chat, "slow please", 1))["type"] == "chat/turnComplete"
        turn = start_turn("use a tool with permission")
        await dispatch(client, chat, turn, 2)
        notes = await until(client, is_action("session/inputNeededSet", uri))
        request = action_of(notes[-1])["request"]
        # The person takes twice the silence timeout to answer: what is tested is
        # that time passing while the agent waits on a person is not silence.
        await trio.sleep(6)
        await dispatch(
            client,
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": turn["turnId"],
                "toolCallId": request["toolCall"]["toolCallId"],
                "approved": True,
                "confirmed": "user-action",
            },
            3,
        )
        notes = await until(client, ending_of(chat))
        assert action_of(notes[-1])["type"] == "chat/turnComplete", action_of(notes[-1])
        assert not live.host_ended


async def test_the_silence_timeout_is_a_root_config_key(tmp_path: Path) -> None:
    async with live_host(tmp_path, {}) as live, rpc(live.url) as client:
        init = await client.initialize("cfg")
        config = init["snapshots"][0]["state"]["config"]
        assert config["values"]["agentSilenceTimeout"] == 300
        assert config["schema"]["properties"]["agentSilenceTimeout"]["type"] == "number"
        await dispatch(client, "ahp-root://", {"type": "root/configChanged", "config": {"agentSilenceTimeout": -1}}, 1)
        notes = await until(client, lambda n: n.get("method") == "action")
        assert "agentSilenceTimeout must be 0" in notes[-1]["params"]["rejectionReason"]
        await dispatch(client, "ahp-root://", {"type": "root/configChanged", "config": {"agentSilenceTimeout": 5}}, 2)
        await until(client, lambda n: n.get("method") == "action" and "rejectionReason" not in n["params"])
        assert live.host.config("agentSilenceTimeout") == 5
