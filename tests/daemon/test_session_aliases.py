"""A session under its other names (issue 26, row 4; the seed's "Session URIs").

Only the id inside a session URI is read: ``demo:/<id>`` and
``ahp-session:/<id>`` are one session, answered under the name a client used
with every URI in it spelled from that name, and found under either after a
restart. A real daemon, the demo agent, real WebSocket clients.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

from ahpd.host.sessions.common import IS_READ, default_chat_uri

from ..gitrepo import make_repo
from .helpers import (
    ROOT,
    action_of,
    create,
    daemon_in_process,
    dispatch,
    fits,
    is_action,
    rpc,
    start_turn,
    until,
    wire_clean,
)
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
            # (The host keeps it as demo:/<id>, the name it lists; the creator's is the alias.)
            created_name = kinds["uncommitted"].replace(alias, uri)
            assert "result" in await client.call("subscribe", {"channel": created_name})
            await client.notify("unsubscribe", {"channel": created_name})
            await client.call("ping", {})  # the unsubscribe has been read
            assert kinds["uncommitted"] in daemon.host.bus.channels
            await client.notify("unsubscribe", {"channel": kinds["uncommitted"]})
            await client.call("ping", {})
            assert kinds["uncommitted"] not in daemon.host.bus.channels  # nobody watches it: closed, costs nothing
        daemon.terminate()
        assert await daemon.wait() == 0


def _said(method: str):
    return lambda n: n.get("method") == method


def _titled(title: str):
    return lambda n: n.get("method") == "root/sessionSummaryChanged" and n["params"]["changes"].get("title") == title


async def _listed(client) -> list[dict]:
    return (await client.call("listSessions", {"channel": ROOT}))["result"]["items"]


async def _turn(client, chat: str, text: str, seq: int) -> None:
    await dispatch(client, chat, start_turn(text), seq)
    await until(client, is_action("chat/turnComplete", chat))


async def _texts(client, chat: str) -> list[str]:
    reply = await client.call("subscribe", {"channel": chat})
    assert reply["result"]["snapshot"]["resource"] == chat, reply
    return [t["message"]["text"] for t in reply["result"]["snapshot"]["state"]["turns"]]


async def test_a_session_made_as_ahp_session_is_listed_and_kept_as_demo(tmp_path) -> None:
    """The seed: "This host lists a session as <provider>:/<uuid>". The
    creator keeps its own name; everyone else is told the provider's."""
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
            listed, listed_chat = f"demo:/{sid}", default_chat_uri(f"demo:/{sid}")
            assert chat == default_chat_uri(uri)  # the creator is answered in the name it chose

            added = (await until(other, _said("root/sessionAdded")))[-1]["params"]["summary"]
            assert added["resource"] == listed and added["defaultChat"] == listed_chat
            rows = await _listed(other)
            assert [r["resource"] for r in rows] == [listed] and rows[0]["defaultChat"] == listed_chat
            assert set(daemon.host.sessions.sessions) == {listed}

            snapshot = (await other.call("subscribe", {"channel": listed}))["result"]["snapshot"]
            assert snapshot["resource"] == listed and snapshot["state"]["defaultChat"] == listed_chat
            assert uri not in json.dumps(snapshot)
            assert await _texts(other, listed_chat) == []

            # Said under the creator's name: heard under it by the creator, under demo:/ by the other.
            await dispatch(own, chat, start_turn("made as ahp-session"), 1)
            seen = (await until(own, is_action("chat/turnComplete", chat)))[-1]["params"]["serverSeq"]
            await until(other, is_action("chat/turnComplete", listed_chat))
            await dispatch(own, uri, {"type": "session/titleChanged", "title": "Listed by provider"}, 2)
            await until(own, is_action("session/titleChanged", uri))
            moved = (await until(other, _titled("Listed by provider")))[-1]["params"]
            assert moved["session"] == listed, moved

            # Coming back under the name it created by, it is replayed what it missed, spelled from that name.
            async with rpc(daemon.url) as back:
                reply = await back.call(
                    "reconnect",
                    {"channel": ROOT, "clientId": "own", "lastSeenServerSeq": seen, "subscriptions": [uri, chat]},
                )
                answer = reply["result"]
                assert answer["type"] == "replay", answer
                titled = [a for a in answer["actions"] if a["action"]["type"] == "session/titleChanged"]
                assert [a["channel"] for a in titled] == [uri] and all(a["serverSeq"] > seen for a in titled)
                assert listed not in json.dumps(answer) and listed_chat not in json.dumps(answer)

            # A destination named by the creator's spelling: moveChat finds it, answers in that name.
            side = f"ahp-chat:/{uuid.uuid4()}"
            assert (await own.call("createChat", {"channel": uri, "chat": side}))["result"] is None
            moved = await own.call("moveChat", {"channel": side, "destination": {"kind": "session", "session": uri}})
            assert moved["result"] == {"session": uri}, moved

            # One id, one session: its other spelling cannot be made a second one.
            again = await other.call(
                "createSession", {"channel": listed, "workingDirectories": [work.as_uri()]}, timeout=60
            )
            assert again["error"]["code"] == -32003, again
            # A scheme that is neither a provider nor ahp-session is the client's to name, and kept.
            mine = f"x-mine:/{uuid.uuid4()}"
            made = await other.call("createSession", {"channel": mine, "workingDirectories": [work.as_uri()]})
            assert made.get("result", "missing") is None, made
            assert {r["resource"] for r in await _listed(other)} == {listed, mine}
        daemon.terminate()
        assert await daemon.wait() == 0
    heads = [json.loads(p.read_text()) for p in (data / "sessions").glob("*/session.json")]
    assert sorted(h["uri"] for h in heads) == sorted([listed, mine])

    # After a restart: listed as demo:/<id>, and continued under either name.
    async with daemon_in_process(data, "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as back:
            await back.initialize("back")
            assert {r["resource"] for r in await _listed(back)} == {listed, mine}
            for name in (uri, listed):  # a connection per name: one watching both hears each action twice
                async with rpc(daemon.url) as client:
                    await client.initialize(f"back-{name}")
                    state = (await client.call("subscribe", {"channel": name}))["result"]["snapshot"]["state"]
                    assert state["title"] == "Listed by provider" and state["defaultChat"] == default_chat_uri(name)
                    await client.call("subscribe", {"channel": default_chat_uri(name)})
                    await _turn(client, default_chat_uri(name), f"again as {name}", 1)
            assert await _texts(back, listed_chat) == ["made as ahp-session", f"again as {uri}", f"again as {listed}"]
            gone = await back.call("disposeSession", {"channel": uri})
            assert "error" not in gone, gone
            removed = (await until(back, _said("root/sessionRemoved")))[-1]["params"]
            assert removed["session"] == listed
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(capture)


#: What ahpd 14b83d3 wrote for a session created as ahp-session:/<id> (see its README).
OLD_STORE = Path(__file__).parent / "old_store"
OLD_WORK = "/tmp/ahpd-old-store/work"
OLD_ID = "7b1e6f0a-3c2d-4e5f-8a9b-0c1d2e3f4a5b"
OLD_SIDE_CHAT = "ahp-chat:/5f4e3d2c-1b0a-4987-8654-3210fedcba98"


def _old_data_dir(tmp_path: Path) -> tuple[Path, Path]:
    data, work = tmp_path / "d", tmp_path / "work"
    work.mkdir()
    for kept in ("sessions", "demo-agent"):  # the host's record, and the agent's own
        shutil.copytree(OLD_STORE / kept, data / kept)
    shutil.copy(OLD_STORE / "users.json", data / "users.json")
    for path in data.rglob("*"):
        if path.is_file():
            path.write_text(path.read_text().replace(OLD_WORK, str(work)))
    return data, work


async def test_a_store_an_older_ahpd_kept_under_ahp_session_lists_it_as_demo(tmp_path) -> None:
    """A session stored under the name it was created by, ``ahp-session:/<id>``,
    is listed as ``demo:/<id>`` after the upgrade, with everything stored for
    it: owner, folder, config, read bit, title, both chats and their turns, its
    annotation - and still answers to the old name."""
    data, work = _old_data_dir(tmp_path)
    old, listed = f"ahp-session:/{OLD_ID}", f"demo:/{OLD_ID}"
    listed_chat = default_chat_uri(listed)
    stored = json.loads(next((data / "sessions").glob("*/session.json")).read_text())
    assert stored["uri"] == old  # as the older ahpd wrote it
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("back")
            [row] = await _listed(client)
            assert row["resource"] == listed, row
            assert row["title"] == "Kept under the old name" and row["status"] & IS_READ
            assert row["_meta"]["ahpd.owner"] == "user:alice"
            assert row["workingDirectories"] == [work.as_uri()]
            assert row["defaultChat"] == listed_chat
            assert [c["resource"] for c in row["chats"]] == [listed_chat, OLD_SIDE_CHAT]
            assert row["annotations"] == {"resource": f"{listed}/annotations", "annotationCount": 1, "entryCount": 1}

            state = (await client.call("subscribe", {"channel": listed}))["result"]["snapshot"]["state"]
            fits("/$defs/SessionState", state)
            assert old not in json.dumps(state) and default_chat_uri(old) not in json.dumps(state)
            assert state["config"]["values"] == stored["config"]["values"]
            assert state["_meta"]["ahpd.owner"] == "user:alice" and state["status"] & IS_READ
            assert [c["resource"] for c in state["chats"]] == [listed_chat, OLD_SIDE_CHAT]
            marks = (await client.call("subscribe", {"channel": listed + "/annotations"}))["result"]["snapshot"]
            [mark] = marks["state"]["annotations"]
            assert mark["origin"]["session"] == listed and mark["entries"][0]["text"] == "Look here"
            assert await _texts(client, listed_chat) == ["hello before the upgrade"]
            assert await _texts(client, OLD_SIDE_CHAT) == ["and a second chat"]

        # The old name still answers, spelled from itself, and the conversation goes on.
        async with rpc(daemon.url) as client:
            await client.initialize("by the old name")
            mine = (await client.call("subscribe", {"channel": old}))["result"]["snapshot"]["state"]
            assert mine["defaultChat"] == default_chat_uri(old) and mine["title"] == "Kept under the old name"
            assert await _texts(client, default_chat_uri(old)) == ["hello before the upgrade"]
            await _turn(client, default_chat_uri(old), "after the upgrade", 1)
        daemon.terminate()
        assert await daemon.wait() == 0
    heads = [json.loads(p.read_text()) for p in (data / "sessions").glob("*/session.json")]
    assert [h["uri"] for h in heads] == [listed]  # kept once, under its listed name

    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("again")
            assert [r["resource"] for r in await _listed(client)] == [listed]
            assert await _texts(client, listed_chat) == ["hello before the upgrade", "after the upgrade"]
        daemon.terminate()
        assert await daemon.wait() == 0
