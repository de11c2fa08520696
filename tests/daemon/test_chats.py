"""Chats inside a session, turn paging, completions and session config,
against the demo agent behind a real daemon."""

from __future__ import annotations

import uuid

from ahpd.host.sessions.common import default_chat_uri
from ahpd.host.sessions.store import FileSessionStore

from .helpers import action_of, create, daemon_in_process, dispatch, fits, is_action, listed_as, rpc, start_turn, until


async def test_chats_fork_side_chat_and_disposal(tmp_path) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("fay")
            uri, chat = await create(client, tmp_path)
            first = start_turn("the first question")
            await dispatch(client, chat, first, 1)
            await until(client, is_action("chat/turnComplete", chat))

            side = f"ahp-chat:/{uuid.uuid4()}"
            reply = await client.call("createChat", {"channel": uri, "chat": side})
            assert reply["result"] is None
            notes = await until(client, is_action("session/chatAdded", uri))
            assert action_of(notes[-1])["summary"]["resource"] == side
            fork = f"ahp-chat:/{uuid.uuid4()}"
            reply = await client.call(
                "createChat",
                {
                    "channel": uri,
                    "chat": fork,
                    "source": {"kind": "fork", "chat": chat, "turnId": first["turnId"]},
                },
            )
            assert reply["result"] is None
            forked = (await client.call("subscribe", {"channel": fork}))["result"]["snapshot"]["state"]
            fits("/$defs/ChatState", forked)
            assert [t["id"] for t in forked["turns"]] == [first["turnId"]]
            # A chat not named from the session is not an alias: it names the source as the host keeps it.
            own_chat = default_chat_uri(listed_as(uri))
            assert forked["origin"] == {"kind": "fork", "chat": own_chat, "turnId": first["turnId"]}
            # The fork talks to its own agent conversation.
            await client.call("subscribe", {"channel": fork})
            await dispatch(client, fork, start_turn("and in the fork?"), 2)
            await until(client, is_action("chat/turnComplete", fork))

            bad = await client.call(
                "createChat",
                {
                    "channel": uri,
                    "chat": f"ahp-chat:/{uuid.uuid4()}",
                    "source": {"kind": "fork", "chat": chat, "turnId": "no-such-turn"},
                },
            )
            assert bad["error"]["code"] == -32602
            again = await client.call("createChat", {"channel": uri, "chat": side})
            assert again["error"]["code"] == -32010

            assert (await client.call("disposeChat", {"channel": side}))["result"] is None
            assert (await client.call("disposeChat", {"channel": fork}))["result"] is None
            last = await client.call("disposeChat", {"channel": chat})
            assert last["error"]["code"] == -32602 and "dispose the session" in last["error"]["message"]
            state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert [c["resource"] for c in state["chats"]] == [chat]
            move = await client.call("moveChat", {"channel": chat, "destination": {"kind": "newSession"}})
            assert move["error"]["code"] == -32602
        daemon.terminate()
        await daemon.wait()


async def test_completions_and_session_config(tmp_path) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "main.py").write_text("print('hi')\n")
    (work / "README.md").write_text("# hi\n")
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("gus")
            uri, chat = await create(client, work)
            await dispatch(client, chat, start_turn("hello"), 1)
            await until(client, is_action("chat/turnComplete", chat))
            slash = (
                await client.call("completions", {"channel": chat, "kind": "userMessage", "text": "/he", "offset": 3})
            )["result"]
            fits("/commands/completions/result", slash)
            assert [i["attachment"]["_meta"]["command"] for i in slash["items"]] == ["help"]
            assert slash["items"][0]["insertText"] == "/help "
            files = (
                await client.call(
                    "completions", {"channel": chat, "kind": "userMessage", "text": "look at @main", "offset": 13}
                )
            )["result"]
            fits("/commands/completions/result", files)
            assert [i["attachment"]["label"] for i in files["items"]] == ["src/main.py"]
            assert all("_meta" in i["attachment"] for i in files["items"])

            other = f"ahp-chat:/{uuid.uuid4()}"
            await client.call("createChat", {"channel": uri, "chat": other})
            chats = (
                await client.call(
                    "completions", {"channel": other, "kind": "userMessage", "text": "#chat:", "offset": 6}
                )
            )["result"]
            assert [i["attachment"]["resource"] for i in chats["items"]] == [chat]

            resolved = (
                await client.call(
                    "resolveSessionConfig",
                    {"provider": "demo", "workingDirectory": work.as_uri(), "config": {"unknownKey": 1}},
                )
            )["result"]
            fits("/commands/resolveSessionConfig/result", resolved)
            # The unknown key is dropped; the demo agent's own defaults come back.
            assert resolved["values"] == {"model": "demo-swift", "effortLevel": "medium", "mode": "default"}
            bad = await client.call("resolveSessionConfig", {"provider": "nope"})
            assert bad["error"]["code"] == -32002
            items = await client.call("sessionConfigCompletions", {"property": "branch", "query": ""})
            assert items["result"] == {"items": []}
            unnamed = await client.call("sessionConfigCompletions", {"query": ""})
            assert unnamed["error"]["data"]["path"] == "$.property"
        daemon.terminate()
        await daemon.wait()


async def test_older_turns_are_paged_in(tmp_path) -> None:
    data = tmp_path / "d"
    uri = f"ahp-session:/{uuid.uuid4()}"
    chat = f"ahp-chat:/{uuid.uuid4()}"
    turns = [
        {
            "id": f"turn-{n}",
            "message": {"text": f"q{n}", "origin": {"kind": "user"}},
            "responseParts": [{"kind": "markdown", "id": f"p{n}", "content": f"a{n}"}],
            "state": "complete",
        }
        for n in range(60)
    ]
    FileSessionStore(data / "sessions").save(
        {
            "uri": uri,
            "provider": "demo",
            "cwd": str(tmp_path),
            "createdAt": "2026-12-01T00:00:00Z",
            "title": "old",
            "status": 0,
            "chats": [
                {
                    "uri": chat,
                    "backendId": None,
                    "state": {
                        "resource": chat,
                        "title": "",
                        "status": 1,
                        "modifiedAt": "2026-12-01T00:00:00Z",
                        "turns": turns,
                    },
                }
            ],
        }
    )
    data.chmod(0o700)
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("hal")
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            fits("/$defs/ChatState", state)
            assert [t["id"] for t in state["turns"]] == [f"turn-{n}" for n in range(10, 60)]
            cursor = state["turnsNextCursor"]
            bad = await client.call("fetchTurns", {"channel": chat, "cursor": "made-up"})
            assert bad["error"]["code"] == -32602
            assert (await client.call("fetchTurns", {"channel": chat, "cursor": cursor}))["result"] == {}
            notes = await until(client, is_action("chat/turnsLoaded", chat))
            loaded = action_of(notes[-1])
            assert [t["id"] for t in loaded["turns"]] == [f"turn-{n}" for n in range(10)]
            assert "turnsNextCursor" not in loaded
            fresh = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert len(fresh["turns"]) == 60 and "turnsNextCursor" not in fresh
        daemon.terminate()
        await daemon.wait()
