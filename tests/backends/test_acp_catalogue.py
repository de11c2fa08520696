"""An ACP agent's stored conversations, read for the catalogue: listed with
``session/list`` and rebuilt from ``session/load``'s replay, each in a
short-lived child process whose agent is gone once it has answered."""

from __future__ import annotations

from pathlib import Path

import pytest

from ahpd.backends.acp.catalogue import history_turns
from tests.backends.acp_agents.harness import conversation, demo_backend, raw_backend


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def _user(text: str, mid: str = "m") -> dict:
    return {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}, "messageId": mid}


def _agent(text: str) -> dict:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def test_a_replay_is_cut_into_turns_at_each_user_message() -> None:
    commands = {"sessionUpdate": "available_commands_update", "availableCommands": []}
    call = {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read", "status": "completed"}
    turns = history_turns(
        [
            commands,
            _agent("a reply to nobody"),  # before any message: not a turn
            _user("hel"),
            _user("lo"),
            _agent("hi"),
            call,
            _agent(" there"),
            _user("again"),
            commands,
            _agent("yes"),
        ]
    )
    assert [t.text for t in turns] == ["hello", "again"]
    assert turns[0].updates == [_agent("hi"), call, _agent(" there")]
    assert turns[1].updates == [_agent("yes")]  # what describes the session now is no turn's
    assert history_turns([commands]) == []


async def test_the_demo_agents_conversation_is_listed_and_read_back(home: Path, cwd: Path) -> None:
    backend = demo_backend(home)
    async with conversation(backend, cwd) as (conv, _):
        await conv.prompt("remember the walrus")
        await conv.prompt("and the carpenter")
        session_id = conv.backend_id
    [listed] = await backend.list_conversations()
    assert (listed.backend_id, listed.title, listed.cwd) == (session_id, "remember the walrus", str(cwd))

    first, second = await backend.read_history(session_id)
    assert (first.text, second.text) == ("remember the walrus", "and the carpenter")
    said = "".join(u["content"]["text"] for u in first.updates if u["sessionUpdate"] == "agent_message_chunk")
    assert "You said: “remember the walrus”" in said
    # Reading it back changed nothing the agent keeps.
    assert await backend.list_conversations() == [listed]
    # A conversation the agent does not keep has no history.
    assert await backend.read_history("no-such-conversation") == []


async def test_an_agent_that_neither_lists_nor_loads_has_no_catalogue(cwd: Path) -> None:
    backend = raw_backend()
    assert await backend.list_conversations() == []
    assert await backend.read_history("old") == []
