"""The annotations channel over a real daemon: all five actions, every
refusal, marks surviving a restart, and marks handed to the agent."""

from __future__ import annotations


import trio

from ahpd import state as reducers

from .helpers import action_of, create, daemon_in_process, dispatch, fits, listed_as, rpc, start_turn, until, wire_clean


def mark(mark_id: str, *entries: tuple[str, str], session: str = "ahp-session:/x") -> dict:
    return {
        "id": mark_id,
        "resource": "file:///w/app.py",
        "resolved": False,
        "origin": {"session": session},
        "range": {"start": {"line": 2, "character": 0}, "end": {"line": 4, "character": 1}},
        "entries": [{"id": e, "text": t} for e, t in entries],
    }


async def answer(client, channel: str, action: dict, seq: int) -> dict:
    """The envelope that answers this connection's dispatch ``seq``."""
    await dispatch(client, channel, action, seq)
    notes = await until(client, lambda n: (n.get("params") or {}).get("origin", {}).get("clientSeq") == seq)
    return notes[-1]["params"]


async def test_annotations_are_kept_refused_by_rule_survive_a_restart_and_reach_the_agent(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    data = tmp_path / "d"
    capture = tmp_path / "wire.jsonl"
    async with daemon_in_process(data, "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("w1")
            uri, chat = await create(client, work)
            channel = f"{uri}/annotations"
            snap = (await client.call("subscribe", {"channel": channel}))["result"]["snapshot"]
            fits("/$defs/AnnotationsState", snap["state"])
            assert snap["state"] == {"annotations": []}
            held = snap["state"]

            applied = [
                {"type": "annotations/set", "annotation": mark("a1", ("e1", "Rename this variable"), session=uri)},
                {
                    "type": "annotations/entrySet",
                    "annotationId": "a1",
                    "entry": {"id": "e2", "text": {"markdown": "*Also* here"}},
                },
                {
                    "type": "annotations/set",
                    "annotation": mark("a2", ("x1", "Gone soon"), ("x2", "me too"), session=uri),
                },
                {"type": "annotations/entryRemoved", "annotationId": "a2", "entryId": "x2"},
                {"type": "annotations/updated", "annotationId": "a2", "resolved": True},
                {"type": "annotations/removed", "annotationId": "a2"},
            ]
            seq = 0
            for action in applied:
                seq += 1
                env = await answer(client, channel, action, seq)
                assert "rejectionReason" not in env and env["serverSeq"] > 0, env
                held = reducers.reduce("annotations", held, env["action"])

            refused = {
                "no annotation zz": {"type": "annotations/updated", "annotationId": "zz", "resolved": True},
                "no annotation gone": {"type": "annotations/removed", "annotationId": "gone"},
                "no annotation nope": {
                    "type": "annotations/entrySet",
                    "annotationId": "nope",
                    "entry": {"id": "q", "text": "t"},
                },
                "has no entry e9": {"type": "annotations/entryRemoved", "annotationId": "a1", "entryId": "e9"},
                "holds entry id d more than once": {
                    "type": "annotations/set",
                    "annotation": mark("a3", ("d", "one"), ("d", "two"), session=uri),
                },
                "has no entries": {"type": "annotations/set", "annotation": mark("a4", session=uri)},
                "names session ahp-session:/elsewhere": {
                    "type": "annotations/set",
                    "annotation": mark("a5", ("f", "x"), session="ahp-session:/elsewhere"),
                },
            }
            for reason, action in refused.items():
                seq += 1
                env = await answer(client, channel, action, seq)
                assert reason in env["rejectionReason"], env
            seq += 1
            await answer(
                client,
                channel,
                {"type": "annotations/set", "annotation": mark("solo", ("only", "last one"), session=uri)},
                seq,
            )
            held = reducers.reduce(
                "annotations",
                held,
                {"type": "annotations/set", "annotation": mark("solo", ("only", "last one"), session=uri)},
            )
            seq += 1
            env = await answer(
                client, channel, {"type": "annotations/entryRemoved", "annotationId": "solo", "entryId": "only"}, seq
            )
            assert "dispatch annotations/removed instead" in env["rejectionReason"]

            fresh = (await client.call("subscribe", {"channel": channel}))["result"]["snapshot"]["state"]
            assert fresh == held and [m["id"] for m in fresh["annotations"]] == ["a1", "solo"]
            row = next(
                r
                for r in (await client.call("listSessions", {"channel": "ahp-root://"}))["result"]["items"]
                if r["resource"] == listed_as(uri)
            )
            assert row["annotations"] == {
                "resource": f"{listed_as(uri)}/annotations",
                "annotationCount": 2,
                "entryCount": 3,
            }

            # Handed to the agent: the demo agent echoes what it was given.
            client.notes.clear()
            turn = start_turn("Look at these")
            turn["message"]["attachments"] = [
                {"type": "annotations", "label": "review", "resource": channel, "annotationIds": ["a1", "missing"]}
            ]
            await dispatch(client, chat, turn, 1000)
            notes = await until(
                client, lambda n: (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error")
            )
            assert action_of(notes[-1])["type"] == "chat/turnComplete"
            said = "".join(
                a.get("content", "") + (a.get("part") or {}).get("content", "")
                for a in map(action_of, notes)
                if a and a["type"] in ("chat/delta", "chat/responsePart")
            )
            assert "Rename this variable" in said and "*Also* here" in said and "lines 3-5" in said
            assert "last one" not in said and "not found on this host: missing" in said
        daemon.terminate()
        assert await daemon.wait() == 0

    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("w2")
            again = (await client.call("subscribe", {"channel": channel}))["result"]["snapshot"]["state"]
            assert again == held
            with trio.fail_after(30):
                env = await answer(client, channel, {"type": "annotations/removed", "annotationId": "a1"}, 1)
            assert "rejectionReason" not in env
    wire_clean(capture)
