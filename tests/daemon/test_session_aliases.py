"""A session under its other names (issue 26, row 4; the seed's "Session URIs").

Only the id inside a session URI is read: ``demo:/<id>`` and
``ahp-session:/<id>`` are one session, answered under the name a client used
with every URI in it spelled from that name, and found under either after a
restart. A real daemon, the demo agent, real WebSocket clients.
"""

from __future__ import annotations

import uuid

from ahpd.host.sessions.common import default_chat_uri

from ..gitrepo import make_repo
from .helpers import action_of, create, daemon_in_process, dispatch, fits, rpc, start_turn, until, wire_clean
from .test_changesets import _env, _session


def _is(kind: str, channel: str):
    return lambda n: (action_of(n) or {}).get("type") == kind and n["params"]["channel"] == channel


async def test_a_session_answers_under_its_provider_s_name(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    data = tmp_path / "d"
    capture = tmp_path / "wire.jsonl"
    async with daemon_in_process(data, "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as own, rpc(daemon.url) as other:
            await own.initialize("own")
            await other.initialize("other")
            uri, chat = await create(own, work)
            sid = uri.removeprefix("ahp-session:/")
            alias = f"demo:/{sid}"
            alias_chat = default_chat_uri(alias)

            # Subscribed as demo:/<id>: the same session, every URI in it spelled from that name.
            reply = await other.call("subscribe", {"channel": alias})
            assert "result" in reply, reply
            snapshot = reply["result"]["snapshot"]
            assert snapshot["resource"] == alias
            state = snapshot["state"]
            fits("/$defs/SessionState", state)
            assert state["defaultChat"] == alias_chat
            assert [c["resource"] for c in state["chats"]] == [alias_chat]
            assert uri not in str(state) and chat not in str(state)
            reply = await other.call("subscribe", {"channel": alias_chat})
            assert reply["result"]["snapshot"]["resource"] == alias_chat
            annotations = await other.call("subscribe", {"channel": alias + "/annotations"})
            assert annotations["result"]["snapshot"]["resource"] == alias + "/annotations"

            # A turn dispatched under the alias: echoed under it, seen under the session's own name too.
            turn = start_turn("hello there")
            await dispatch(other, alias_chat, turn, 1)
            notes = await until(other, _is("chat/turnComplete", alias_chat))
            echoed = next(n for n in notes if _is("chat/turnStarted", alias_chat)(n))
            assert echoed["params"]["origin"] == {"clientId": "other", "clientSeq": 1}
            assert not any(n["params"].get("channel") in (uri, chat) for n in notes if n.get("method") == "action")
            await until(own, _is("chat/turnComplete", chat))

            # A session action under the alias moves the one session.
            await dispatch(other, alias, {"type": "session/titleChanged", "title": "Named twice"}, 2)
            titled = (await until(other, _is("session/titleChanged", alias)))[-1]
            assert action_of(titled) == {"type": "session/titleChanged", "title": "Named twice"}
            await until(own, _is("session/titleChanged", uri))

            # A command under the alias reaches it too; an id nobody has is still no session.
            turns = await other.call("fetchTurns", {"channel": alias_chat})
            assert "result" in turns, turns
            nobody = await other.call("subscribe", {"channel": f"demo:/{uuid.uuid4()}"})
            assert nobody["error"]["code"] == -32001
        daemon.terminate()
        assert await daemon.wait() == 0

    # After a restart the stored session is found under either name: one store key.
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as back:
            await back.initialize("back")
            reply = await back.call("subscribe", {"channel": alias})
            assert "result" in reply, reply
            state = reply["result"]["snapshot"]["state"]
            assert state["title"] == "Named twice" and state["defaultChat"] == alias_chat
            turns = (await back.call("subscribe", {"channel": alias_chat}))["result"]["snapshot"]["state"]["turns"]
            assert [t["message"]["text"] for t in turns] == ["hello there"]
            # A client coming back under the alias: snapshots spelled from it.
            async with rpc(daemon.url) as again:
                reply = await again.call(
                    "reconnect",
                    {
                        "channel": "ahp-root://",
                        "clientId": "other",
                        "lastSeenServerSeq": 0,
                        "subscriptions": [alias, alias_chat],
                    },
                )
                answer = reply["result"]
                assert answer["type"] == "snapshot", answer
                assert [s["resource"] for s in answer["snapshots"]] == [alias, alias_chat]
                assert answer["snapshots"][0]["state"]["defaultChat"] == alias_chat
            gone = await back.call("disposeSession", {"channel": alias})
            assert "error" not in gone, gone
            assert (await back.call("subscribe", {"channel": uri}))["error"]["code"] == -32001
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(capture)


async def test_a_session_s_changesets_are_spelled_from_the_name_it_was_asked_by(tmp_path) -> None:
    """The subtler half: a changeset template naming ``ahp-session:/x`` would
    teach a client that asked about ``demo:/x`` a second name for the session."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "one\n"})
    (repo / "a.txt").write_text("two\n")
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c")
            uri, _, own = await _session(client, repo)
            alias = "demo:/" + uri.removeprefix("ahp-session:/")
            state = (await client.call("subscribe", {"channel": alias}))["result"]["snapshot"]["state"]
            kinds = {c["changeKind"]: c["uriTemplate"] for c in state["changesets"]}
            assert kinds["uncommitted"] == f"{alias}/changeset/uncommitted"
            assert kinds["turn"] == f"{alias}/changeset/turn/{{turnId}}"
            assert {c["changeKind"]: c["uriTemplate"] for c in own["changesets"]}["uncommitted"].startswith(uri)
            reply = await client.call("subscribe", {"channel": kinds["uncommitted"]})
            assert reply["result"]["snapshot"]["resource"] == kinds["uncommitted"], reply
            changes = reply["result"]["snapshot"]["state"]
            while changes.get("status") != "ready":
                note = (await until(client, lambda n: n["params"].get("channel") == kinds["uncommitted"]))[-1]
                assert note["params"]["channel"] == kinds["uncommitted"]
                changes = (await client.call("subscribe", {"channel": kinds["uncommitted"]}))["result"]["snapshot"][
                    "state"
                ]
            assert len(changes["files"]) == 1, changes  # a.txt, changed
            # Watched under both names: the one leaving does not close it under the other.
            own_name = kinds["uncommitted"].replace(alias, uri)
            assert "result" in await client.call("subscribe", {"channel": own_name})
            await client.notify("unsubscribe", {"channel": own_name})
            await client.call("ping", {})  # the unsubscribe has been read
            assert own_name in daemon.host.bus.channels
            await client.notify("unsubscribe", {"channel": kinds["uncommitted"]})
            await client.call("ping", {})
            assert own_name not in daemon.host.bus.channels  # nobody watches it: closed, costs nothing
        daemon.terminate()
        assert await daemon.wait() == 0
