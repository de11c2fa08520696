"""``chat/truncated`` as a rewind and ``chat/turnResume`` as a re-run, for a
Claude chat, through a real daemon and real WebSocket clients, the real
bundled CLI against the fake Messages API (offline). What the model is sent
afterwards is read off the fake API: the dropped turns are not in it. A
turn rebuilt from a transcript is rewound to at the point the transcript
names; the points and a truncation not yet acted on survive a restart, and a
turn whose point was never kept is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

from ahpd.backends.claude.backend import ClaudeBackend  # noqa: E402
from ahpd.host.sessions.store import _name  # noqa: E402
from tests.backends.claude_fixtures import fake_api  # noqa: E402
from tests.backends.claude_fixtures.harness import conversation  # noqa: E402

from .helpers import (  # noqa: E402
    listed_as,
    ROOT,
    create,
    daemon_in_process,
    dispatch,
    fits,
    listed_until,
    rpc,
    start_turn,
    wire_clean,
)
from .test_acp_tool_names import initialize, refused  # noqa: E402
from .test_claude_sessions import _env  # noqa: E402
from .test_claude_tool_stream import collect  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


async def test_truncate_rewinds_and_an_errored_turn_runs_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    capture = tmp_path / "rewind.jsonl"
    with fake_api.FakeAnthropic().running() as api:
        api.add(
            fake_api.text("ANSWER-ONE"),
            fake_api.text("ANSWER-TWO"),
            fake_api.text("ANSWER-THREE"),
            fake_api.text("never finished", hold_after=2),
            fake_api.text("ANSWER-FOUR"),
        )
        async with daemon_in_process(
            tmp_path / "d", "--sessions", "memory", "--wire", str(capture), env=_env(api.url, str(home))
        ) as daemon:
            async with rpc(daemon.url) as client, rpc(daemon.url) as watcher:
                await initialize(client, "driver")
                await initialize(watcher, "watcher")
                uri, chat = await create(client, work, provider="claude")
                await watcher.call("subscribe", {"channel": chat})
                seq = 0

                async def turn(text: str, ending: str = "chat/turnComplete") -> tuple[str, list[dict]]:
                    nonlocal seq
                    seq += 1
                    action = start_turn(text)
                    await dispatch(client, chat, action, seq)
                    seen = [await collect(each, chat, ending) for each in (client, watcher)]
                    assert seen[0] == seen[1]
                    return action["turnId"], seen[1]

                one, _ = await turn("PROMPT-ONE")
                two, _ = await turn("PROMPT-TWO")

                # What a rewind cannot be.
                words = await refused(client, chat, {"type": "chat/truncated"}, 50)
                assert "names no point" in words
                words = await refused(client, chat, {"type": "chat/truncated", "turnId": "nope"}, 51)
                assert "nope is not a turn" in words
                words = await refused(client, chat, {"type": "chat/turnResume", "turnId": two}, 52)
                assert "did not end in an error" in words

                # Keep the first turn: everyone sees the second go.
                await dispatch(client, chat, {"type": "chat/truncated", "turnId": one}, 53)
                for each in (client, watcher):
                    [truncated] = [
                        a for a in await collect(each, chat, "chat/truncated") if a["type"] == "chat/truncated"
                    ]
                    assert truncated == {"type": "chat/truncated", "turnId": one}
                state = (await watcher.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                assert [t["id"] for t in state["turns"]] == [one]

                three, _ = await turn("PROMPT-THREE")
                assert fake_api.prompts(api.requests[-1]) == ["PROMPT-ONE", "PROMPT-THREE"]
                assert "ANSWER-TWO" not in repr(api.requests[-1]["messages"])

                # A turn the agent falls silent in ends in an error the host can resume.
                await dispatch(client, ROOT, {"type": "root/configChanged", "config": {"agentSilenceTimeout": 2}}, 60)
                four, seen = await turn("PROMPT-FOUR", ending="chat/error")
                api.release()
                error = seen[-1]
                assert error["type"] == "chat/error" and error["turnId"] == four
                assert error["part"]["resumable"] is True and error["part"]["error"]["errorType"] == "AgentSilent"
                await dispatch(client, ROOT, {"type": "root/configChanged", "config": {"agentSilenceTimeout": 300}}, 61)

                words = await refused(client, chat, {"type": "chat/turnResume", "turnId": three}, 62)
                assert "not the latest turn" in words
                await dispatch(client, chat, {"type": "chat/turnResume", "turnId": four}, 63)
                resumed = [await collect(each, chat, "chat/turnComplete") for each in (client, watcher)]
                assert resumed[0] == resumed[1]
                kinds = [a["type"] for a in resumed[1]]
                assert kinds[0] == "chat/turnResume" and kinds[-1] == "chat/turnComplete"
                assert {a.get("turnId") for a in resumed[1]} == {four}
                # The errored attempt is not in the conversation; its message is, once.
                assert fake_api.prompts(api.requests[-1]) == ["PROMPT-ONE", "PROMPT-THREE", "PROMPT-FOUR"]

                state = (await watcher.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                fits("/$defs/ChatState", state)
                assert [t["id"] for t in state["turns"]] == [one, three, four]
                last = state["turns"][-1]
                assert last["state"] == "complete"
                assert [p["kind"] for p in last["responseParts"]] == ["error", "markdown"]
                assert last["responseParts"][-1]["content"] == "ANSWER-FOUR"
                part_ids = [p.get("id") for p in last["responseParts"] if p.get("id")]
                assert len(part_ids) == len(set(part_ids))
            daemon.terminate()
            assert await daemon.wait() == 0
    wire_clean(capture)


async def test_a_turn_read_back_off_a_transcript_is_rewound_to_where_the_transcript_says(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    for name in fake_api.CREDENTIAL_VARS:
        monkeypatch.delenv(name, raising=False)
    with fake_api.FakeAnthropic().running() as api:
        for name, value in fake_api.cli_env(api.url, str(home)).items():
            monkeypatch.setenv(name, value)
        api.add(
            fake_api.text("ANSWER-PAST"),
            fake_api.text("ANSWER-GONE"),
            fake_api.text("ANSWER-LIVE"),
            fake_api.text("ANSWER-DROPPED"),
            fake_api.text("ANSWER-NEXT"),
        )
        async with conversation(ClaudeBackend(), work) as (conv, _):
            await conv.prompt("PROMPT-PAST")
            await conv.prompt("PROMPT-GONE")
            uri = f"claude:/{conv.backend_id}"
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await initialize(client, "reader")
                # The catalogue is read in the background; its rows are said on the root channel.
                await listed_until(client, lambda rows: any(r["resource"] == uri for r in rows))
                opened = await client.call("subscribe", {"channel": uri})
                chat = opened["result"]["snapshot"]["state"]["defaultChat"]
                state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                past, gone = [t["id"] for t in state["turns"]]

                # Both rebuilt turns are dropped back to the first, which the transcript names a point for.
                await dispatch(client, chat, {"type": "chat/truncated", "turnId": past}, 1)
                await collect(client, chat, "chat/truncated")
                await dispatch(client, chat, start_turn("PROMPT-LIVE"), 2)
                await collect(client, chat, "chat/turnComplete")
                assert fake_api.prompts(api.requests[-1]) == ["PROMPT-PAST", "PROMPT-LIVE"]
                assert "ANSWER-GONE" not in repr(api.requests[-1]["messages"])
                # A turn this host watched run has one too, beside the rebuilt one.
                await dispatch(client, chat, start_turn("PROMPT-DROPPED"), 3)
                await collect(client, chat, "chat/turnComplete")
                state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                assert [t["id"] for t in state["turns"]][0] == past and gone not in [t["id"] for t in state["turns"]]
                live = state["turns"][1]["id"]
                await dispatch(client, chat, {"type": "chat/truncated", "turnId": live}, 4)
                await collect(client, chat, "chat/truncated")
                await dispatch(client, chat, start_turn("PROMPT-NEXT"), 5)
                await collect(client, chat, "chat/turnComplete")
                assert fake_api.prompts(api.requests[-1]) == ["PROMPT-PAST", "PROMPT-LIVE", "PROMPT-NEXT"]
            daemon.terminate()
            assert await daemon.wait() == 0


async def _turn(client, chat: str, text: str, seq: int) -> str:
    action = start_turn(text)
    await dispatch(client, chat, action, seq)
    await collect(client, chat, "chat/turnComplete")
    return action["turnId"]


async def _truncate(client, chat: str, turn_id: str, seq: int) -> None:
    await dispatch(client, chat, {"type": "chat/truncated", "turnId": turn_id}, seq)
    [truncated] = [a for a in await collect(client, chat, "chat/truncated") if a["type"] == "chat/truncated"]
    assert truncated["turnId"] == turn_id


async def test_rewinds_survive_a_restart(tmp_path: Path) -> None:
    """A truncation accepted just before a restart is made at the next turn
    after it (the dropped turns are not sent), and a turn made before the
    restart can still be rewound to. A store that kept no point for a turn
    (one an older ahpd wrote) is refused, saying so."""
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    data = tmp_path / "d"
    with fake_api.FakeAnthropic().running() as api:
        api.add(*(fake_api.text(f"ANSWER-{n}") for n in ("ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX")))
        async with daemon_in_process(data, env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await initialize(client, "before")
                uri, chat = await create(client, work, provider="claude")
                one = await _turn(client, chat, "PROMPT-ONE", 1)
                await _turn(client, chat, "PROMPT-TWO", 2)
                await _turn(client, chat, "PROMPT-THREE", 3)
                await _truncate(client, chat, one, 4)  # told to everyone; the agent hears of it at the next turn
            daemon.terminate()
            assert await daemon.wait() == 0
        assert len(api.requests) == 3

        async with daemon_in_process(data, env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await initialize(client, "after")
                await client.call("subscribe", {"channel": uri}, timeout=60)
                state = (await client.call("subscribe", {"channel": chat}, timeout=60))["result"]["snapshot"]["state"]
                assert [t["id"] for t in state["turns"]] == [one]
                four = await _turn(client, chat, "PROMPT-FOUR", 1)
                assert fake_api.prompts(api.requests[-1]) == ["PROMPT-ONE", "PROMPT-FOUR"]
                assert "ANSWER-TWO" not in repr(api.requests[-1]["messages"])
                assert "ANSWER-THREE" not in repr(api.requests[-1]["messages"])
            daemon.terminate()
            assert await daemon.wait() == 0
        # The CLI was started at the kept point once, not resumed whole and
        # then started again under a conversation already being read.
        logged = (data / "logs" / "ahpd.log").read_text()
        assert "ERROR" not in logged and "Traceback" not in logged, logged

        async with daemon_in_process(data, env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await initialize(client, "again")
                await client.call("subscribe", {"channel": uri}, timeout=60)
                await client.call("subscribe", {"channel": chat}, timeout=60)
                await _turn(client, chat, "PROMPT-FIVE", 1)
                # Back to a turn made two restarts ago, and nothing is pending: the next turn resumes there.
                await _truncate(client, chat, four, 2)
                await _turn(client, chat, "PROMPT-SIX", 3)
                assert fake_api.prompts(api.requests[-1]) == ["PROMPT-ONE", "PROMPT-FOUR", "PROMPT-SIX"]
                assert "ANSWER-FIVE" not in repr(api.requests[-1]["messages"])
            daemon.terminate()
            assert await daemon.wait() == 0

        # A store an older ahpd wrote kept no points: truncating is refused, not half done.
        head_file = data / "sessions" / _name(listed_as(uri, "claude")) / "session.json"
        head = json.loads(head_file.read_text())
        assert [c.get("rewind", {}).get("pending") for c in head["chats"]] == [None]
        for kept in head["chats"]:
            kept.pop("rewind", None)
        head_file.write_text(json.dumps(head))
        async with daemon_in_process(data, env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await initialize(client, "older")
                await client.call("subscribe", {"channel": uri}, timeout=60)
                await client.call("subscribe", {"channel": chat}, timeout=60)
                words = await refused(client, chat, {"type": "chat/truncated", "turnId": one}, 1)
                assert f"turn {one} has no rewind point" in words
            daemon.terminate()
            assert await daemon.wait() == 0
        assert len(api.requests) == 6  # the refusal reached no model
