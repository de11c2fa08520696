"""What the catalogue says about chats and sessions, seen by two clients of
a real daemon with the demo agent: read and archived bits, a chat renamed,
activity following the chat driving the session, ``_meta`` replaced whole,
and the literal channel of every command that declares one."""

from __future__ import annotations

import typing
import uuid


from ahpd import protocol
from ahpd.protocol import model

from ..gitrepo import make_repo
from .helpers import (
    listed_as,
    ROOT,
    Rpc,
    action_of,
    create,
    daemon_in_process,
    dispatch,
    is_action,
    rpc,
    start_turn,
    until,
    wire_clean,
)
from .test_chat_moves import hello

IS_READ, IS_ARCHIVED = 32, 64


def summary_of(session: str):
    def check(note: dict) -> bool:
        return note.get("method") == "root/sessionSummaryChanged" and note["params"]["session"] == listed_as(session)

    return check


def root_row(session: str, check):
    """A ``root/sessionSummaryChanged`` of ``session`` whose changes ``check`` accepts."""

    def matches(note: dict) -> bool:
        return summary_of(session)(note) and bool(check(note["params"]["changes"]))

    return matches


def chat_row(changes: dict, chat: str) -> dict:
    return next((c for c in changes.get("chats") or [] if c["resource"] == chat), {})


def answered(client_id: str, seq: int):
    def check(note: dict) -> bool:
        origin = note["params"].get("origin") or {} if note.get("method") == "action" else {}
        return origin.get("clientId") == client_id and origin.get("clientSeq") == seq

    return check


async def state_of(client: Rpc, channel: str) -> dict:
    return (await client.call("subscribe", {"channel": channel}, timeout=60))["result"]["snapshot"]["state"]


async def test_read_archived_titles_activity_and_meta_reach_every_subscriber(tmp_path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    capture = tmp_path / "summaries.jsonl"
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as ann, rpc(daemon.url) as bob:
            await hello(ann, "ann")
            await hello(bob, "bob")
            uri, default = await create(ann, repo, channel=f"demo:/{uuid.uuid4()}")  # as listed: rows name it so
            side = f"ahp-chat:/{uuid.uuid4()}"
            assert (await ann.call("createChat", {"channel": uri, "chat": side}))["result"] is None
            await state_of(ann, side)
            for channel in (uri, default, side):
                await state_of(bob, channel)

            # One chat marked read: its row and the root's list follow; again, nothing.
            await dispatch(ann, side, {"type": "chat/isReadChanged", "isRead": True}, 1)
            seen = await until(bob, root_row(uri, lambda c: chat_row(c, side).get("status", 0) & IS_READ))
            updated = [action_of(n) for n in seen if is_action("session/chatUpdated", uri)(n)]
            assert updated[-1]["chat"] == side and updated[-1]["changes"]["status"] & IS_READ
            assert any(is_action("chat/isReadChanged", side)(n) for n in seen)
            row = {c["resource"]: c for c in seen[-1]["params"]["changes"]["chats"]}
            assert row[side]["status"] & IS_READ and not row[default]["status"] & IS_READ
            await dispatch(ann, side, {"type": "chat/isReadChanged", "isRead": True}, 2)
            echo = await until(ann, answered("ann", 2))
            assert "rejectionReason" not in echo[-1]["params"]

            # The default chat archived is the session archived: said on the session, not the chat.
            await dispatch(ann, default, {"type": "chat/isArchivedChanged", "isArchived": True}, 3)
            seen = await until(bob, root_row(uri, lambda c: c.get("status", 0) & IS_ARCHIVED))
            assert not any(is_action("chat/isReadChanged", side)(n) for n in seen)  # setting what is set: silence
            assert {"type": "session/isArchivedChanged", "isArchived": True} in [action_of(n) for n in seen]
            assert not any(is_action("chat/isArchivedChanged", default)(n) for n in seen)
            assert seen[-1]["params"]["changes"]["status"] & IS_ARCHIVED
            mine = await until(ann, answered("ann", 3))
            assert action_of(mine[-1]) == {"type": "chat/isArchivedChanged", "isArchived": False}
            assert "rejectionReason" not in mine[-1]["params"]
            assert not (await state_of(bob, default))["status"] & IS_ARCHIVED
            assert (await state_of(bob, uri))["status"] & IS_ARCHIVED
            # Another chat's bit is its own.
            await dispatch(ann, side, {"type": "chat/isArchivedChanged", "isArchived": True}, 4)
            seen = await until(bob, root_row(uri, lambda c: chat_row(c, side).get("status", 0) & IS_ARCHIVED))
            assert [
                action_of(n)["changes"]["status"] & IS_ARCHIVED
                for n in seen
                if is_action("session/chatUpdated", uri)(n)
            ] == [IS_ARCHIVED]
            # The session's own bits move its root row.
            await dispatch(ann, uri, {"type": "session/isReadChanged", "isRead": True}, 5)
            seen = await until(bob, root_row(uri, lambda c: c.get("status", 0) & IS_READ))
            assert seen[-1]["params"]["changes"]["status"] & IS_READ
            await dispatch(ann, uri, {"type": "session/isArchivedChanged", "isArchived": False}, 6)
            seen = await until(bob, root_row(uri, lambda c: "status" in c and not c["status"] & IS_ARCHIVED))
            assert not seen[-1]["params"]["changes"]["status"] & IS_ARCHIVED

            # A title dispatched on a chat's channel renames that chat only.
            title_before = (await state_of(bob, uri))["title"]
            await dispatch(ann, side, {"type": "session/titleChanged", "title": "Side notes"}, 7)
            seen = await until(bob, root_row(uri, lambda c: chat_row(c, side).get("title") == "Side notes"))
            assert {"type": "session/chatUpdated", "chat": side, "changes": {"title": "Side notes"}} in [
                action_of(n) for n in seen
            ]
            mine = await until(ann, answered("ann", 7))
            assert "rejectionReason" not in mine[-1]["params"]
            assert (await state_of(bob, uri))["title"] == title_before
            await dispatch(ann, side, {"type": "session/titleChanged", "title": "  "}, 8)
            mine = await until(ann, answered("ann", 8))
            assert "blank title" in mine[-1]["params"]["rejectionReason"]
            await dispatch(ann, uri, {"type": "session/titleChanged", "title": "Whole session"}, 9)
            seen = await until(bob, root_row(uri, lambda c: "title" in c))
            assert seen[-1]["params"]["changes"] == {"title": "Whole session"}

            # Activity: the session says what the chat driving it does, and clears it with null.
            (repo / "b.txt").write_text("b\n")
            await dispatch(ann, default, start_turn("make a plan please"), 10)
            seen = await until(
                bob, lambda n: summary_of(uri)(n) and n["params"]["changes"].get("activity"), timeout=180
            )
            doing = seen[-1]["params"]["changes"]["activity"]
            assert {"type": "session/activityChanged", "activity": doing} in [action_of(n) for n in seen]
            assert any(
                is_action("chat/activityChanged", default)(n) and action_of(n).get("activity") == doing for n in seen
            )
            seen = await until(
                bob,
                lambda n: (
                    summary_of(uri)(n)
                    and "activity" in n["params"]["changes"]
                    and n["params"]["changes"]["activity"] is None
                ),
                timeout=180,
            )
            assert {"type": "session/activityChanged"} in [action_of(n) for n in seen]
            assert "activity" not in (await state_of(bob, uri))

            # _meta moves as a whole: the file written before the turn is counted after it.
            seen = await until(
                bob,
                lambda n: (
                    is_action("session/metaChanged", uri)(n) and action_of(n)["_meta"]["git"]["uncommittedChanges"] == 1
                ),
            )
            meta = action_of(seen[-1])["_meta"]
            assert meta["git"]["branchName"] == "main"
            seen = await until(bob, lambda n: summary_of(uri)(n) and "_meta" in n["params"]["changes"])
            assert seen[-1]["params"]["changes"]["_meta"] == meta
            assert (await state_of(bob, uri))["_meta"] == meta
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(capture)


def _literal_commands() -> dict[str, str]:
    out = {}
    for method, (cls, *_) in model.COMMANDS.items():
        field = protocol.fields_dict(cls).get("channel")
        if field is not None and typing.get_origin(field.type) is typing.Literal:
            (out[method],) = typing.get_args(field.type)
    return out


async def test_every_command_declaring_a_literal_channel_refuses_another(tmp_path) -> None:
    literal = _literal_commands()
    assert len(literal) == 20
    exempt = {"initialize", "ping"}
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await hello(client, "dee")
            for method, expected in sorted(literal.items()):
                if method in exempt:
                    continue
                wrong = "ahp-session:/not-the-one" if expected == ROOT else ROOT
                reply = await client.call(method, {"channel": wrong})
                assert reply.get("error", {}).get("code") == -32602, (method, reply)
                assert reply["error"]["data"] == {"path": "$.channel", "expected": expected}, (method, reply)
                assert method in reply["error"]["message"] and expected in reply["error"]["message"]
                absent = await client.call(method, {})
                assert (absent.get("error") or {}).get("data", {}).get("path") != "$.channel", (method, absent)
            assert (await client.call("listSessions", {}))["result"] == {"items": []}
            assert "result" in await client.call("ping", {"channel": "ahp-session:/any"})
        async with rpc(daemon.url) as other:
            reply = await other.call(
                "initialize", {"channel": "ahp-session:/any", "protocolVersions": ["1.0.0"], "clientId": "eve"}
            )
            assert "result" in reply, reply
        daemon.terminate()
        assert await daemon.wait() == 0
