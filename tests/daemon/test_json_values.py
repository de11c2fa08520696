"""Values that are not JSON stay out, over a real WebSocket on 127.0.0.1.

A client sends ``NaN``, ``Infinity``, a number that overflows to infinity or
a lone UTF-16 surrogate, in a dispatch and in a command. Each is refused at
the door naming where, the state and serverSeq do not move, and a second
client watching the same channel hears nothing. On the way out, a value
with no JSON form fails the one frame it is in: an action is dropped before
state moves, a result answers -32603, and everyone else is served on.
"""

from __future__ import annotations

import copy
import json

import pytest
import trio

from ahpd.host.assembly import Host
from ahpd.host import table
from tests.host.live import serve

from .helpers import rpc

ROOT = "ahp-root://"


def dispatch(value_text: str) -> str:
    """A config push whose value is ``value_text``, spliced in as raw JSON text."""
    return (
        '{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"ahp-root://","clientSeq":1,'
        '"action":{"type":"root/configChanged","config":{"replayBytes":' + value_text + "}}}}"
    )


def command(value_text: str) -> str:
    return '{"jsonrpc":"2.0","id":"bad","method":"subscribe","params":{"channel":' + value_text + "}}"


CASES = [
    # (frame, code, reply id, path)
    (dispatch("NaN"), -32700, None, "$.params.action.config.replayBytes"),
    (dispatch("Infinity"), -32700, None, "$.params.action.config.replayBytes"),
    (dispatch("-Infinity"), -32700, None, "$.params.action.config.replayBytes"),
    (dispatch("1e400"), -32602, None, "$.params.action.config.replayBytes"),
    (dispatch('"\\ud83d"'), -32602, None, "$.params.action.config.replayBytes"),
    (command("NaN"), -32700, None, "$.params.channel"),
    (command("-1e400"), -32602, "bad", "$.params.channel"),
    (command('"ahp-root://\\udc00"'), -32602, "bad", "$.params.channel"),
    (command('["ok", {"k": "x\\ud800y"}]'), -32602, "bad", "$.params.channel[1].k"),
]


@pytest.fixture
async def served():
    host = Host()
    async with trio.open_nursery() as nursery:
        listening = await serve(nursery, host)
        yield host, f"ws://127.0.0.1:{listening.port}/"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("frame", "code", "reply_id", "path"), CASES)
async def test_a_value_that_is_not_json_is_refused_at_the_door(served, frame, code, reply_id, path) -> None:
    host, url = served
    async with rpc(url) as watcher, rpc(url) as sender:
        await watcher.initialize("watcher")
        await sender.initialize("sender")
        state, seq = copy.deepcopy(host.bus.channels[ROOT].state), host.bus.server_seq
        await sender.ws.send_message(frame)
        with trio.fail_after(10):
            reply = json.loads(await sender.ws.get_message())
        assert reply["id"] == reply_id
        assert reply["error"]["code"] == code
        assert reply["error"]["data"]["path"] == path
        assert path in reply["error"]["message"]
        assert host.bus.server_seq == seq and host.bus.channels[ROOT].state == state
        # Both are still served; the watcher was told nothing.
        assert (await sender.call("ping"))["result"] is None
        assert (await watcher.call("ping"))["result"] is None
        assert watcher.notes == []


async def test_a_surrogate_pair_is_text_and_goes_through(served) -> None:
    host, url = served
    async with rpc(url) as sender:
        await sender.initialize("sender")
        await sender.ws.send_message(
            '{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"channel":"ahp-root://\\ud83d\\ude00"}}'
        )
        with trio.fail_after(10):
            reply = json.loads(await sender.ws.get_message())
        # Well-formed text: refused for what it names (no such channel), not as a broken string.
        assert "\U0001f600" in reply["error"]["message"]


async def test_an_action_with_no_json_form_moves_nothing_and_the_next_one_does(served) -> None:
    host, url = served
    async with rpc(url) as watcher:
        await watcher.initialize("watcher")
        state, seq = host.bus.channels[ROOT].state, host.bus.server_seq
        for bad in (float("nan"), float("inf")):
            assert host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": bad}) is None
        assert (
            host.bus.emit(
                ROOT,
                {
                    "type": "root/terminalsChanged",
                    "terminals": [
                        {
                            "resource": "t:/1",
                            "title": "x\ud800",
                            "claim": {"kind": "client", "clientId": "c"},
                            "lifecycle": {"status": "running"},
                        }
                    ],
                },
            )
            is None
        )
        assert host.bus.channels[ROOT].state is state and host.bus.server_seq == seq
        assert host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 3}) == seq + 1
        note = await watcher.next_note()
        assert note["params"]["serverSeq"] == seq + 1 and note["params"]["action"]["activeSessions"] == 3
        assert (await watcher.call("ping"))["result"] is None
        assert watcher.notes == []
        # A reconnect replays what moved, and only that.
        replayed = [e["action"] for e in host.bus.replay.since(seq, host.bus.server_seq, [ROOT])]
        assert replayed == [{"type": "root/activeSessionsChanged", "activeSessions": 3}]


async def test_a_result_with_no_json_form_fails_that_request_only(served, monkeypatch) -> None:
    host, url = served
    monkeypatch.setitem(table.COMMANDS, "ping", lambda host, peer, params: {"load": float("nan")})
    async with rpc(url) as a, rpc(url) as b:
        await a.initialize("a")
        await b.initialize("b")
        reply = await a.call("ping")
        assert reply["error"]["code"] == -32603
        assert reply["error"]["data"]["path"] == "$.load"
        monkeypatch.undo()
        assert (await a.call("ping"))["result"] is None
        assert (await b.call("ping"))["result"] is None


async def test_an_agents_broken_text_is_repaired_and_modified_at_follows_the_turn(tmp_path) -> None:
    """The agent writes half a surrogate pair (``\\ud83d``): the client reads
    U+FFFD where it was, the turn goes on, and the chat's ``modifiedAt`` is
    the turn's ``startedAt + duration``, as the client computes it."""
    from tests.backends.acp_agents.harness import raw_backend

    from .helpers import action_of, create, dispatch, is_action, start_turn, until

    host = Host(backends={"raw": raw_backend()})
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        listening = await serve(nursery, host)
        async with rpc(f"ws://127.0.0.1:{listening.port}/") as client:
            await client.initialize("alice")
            _, chat = await create(client, tmp_path)
            turn = start_turn("cut")
            turn["startedAt"] = "2026-12-02T10:00:00.000Z"
            await dispatch(client, chat, turn, 1)
            notes = await until(client, is_action("chat/turnComplete", chat))
            said = "".join(
                a.get("content") or a.get("part", {}).get("content", "")
                for a in map(action_of, notes)
                if a and a["type"] in ("chat/responsePart", "chat/delta")
            )
            assert said == "half an emoji: \ufffd and on"
            duration = action_of(notes[-1])["duration"]
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert state["turns"][-1]["responseParts"][0]["content"] == said
            seconds, ms = divmod(duration, 1000)
            assert state["modifiedAt"] == f"2026-12-02T10:00:{seconds:02d}.{ms:03d}Z"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("action", "path"),
    [
        ({"type": "root/nope"}, "$.action"),
        ({"type": "root/activeSessionsChanged", "activeSessions": "many"}, "$.action.activeSessions"),
    ],
)
async def test_an_undecodable_action_is_refused_to_its_clientseq(served, action, path) -> None:
    host, url = served
    async with rpc(url) as watcher, rpc(url) as sender:
        await watcher.initialize("watcher")
        await sender.initialize("sender")
        seq = host.bus.server_seq
        await sender.notify("dispatchAction", {"channel": ROOT, "clientSeq": 41, "action": action})
        refusal = (await sender.next_note())["params"]
        assert refusal["origin"] == {"clientId": "sender", "clientSeq": 41}
        assert refusal["action"] == action and refusal["serverSeq"] == seq
        assert path in refusal["rejectionReason"]
        assert host.bus.server_seq == seq
        assert (await watcher.call("ping"))["result"] is None
        assert watcher.notes == []
