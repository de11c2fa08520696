"""Sessions, chats and turns against the shipped demo agent, end to end.

A real daemon (``ahpd.daemon.run`` in the test's trio run), a real
WebSocket, and behind it the demo agent as a real ACP subprocess. Every action a client receives is also replayed
through the reducers and compared with a fresh snapshot.
"""

from __future__ import annotations

import uuid

import trio

from ahpd import state as reducers

from .helpers import (
    action_of,
    create,
    daemon_in_process,
    dispatch,
    fits,
    is_action,
    listed_as,
    rpc,
    start_turn,
    until,
)


async def test_a_conversation_with_the_demo_agent(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            init = await client.initialize("alice")
            agents = init["snapshots"][0]["state"]["agents"]
            assert [a["provider"] for a in agents][0] == "demo"  # the default provider
            uri = f"ahp-session:/{uuid.uuid4()}"
            reply = await client.call(
                "createSession",
                {
                    "channel": uri,
                    "workingDirectories": [work.as_uri()],
                    "progressToken": "p1",
                    "activeClient": {"clientId": "someone-else", "tools": []},
                },
                timeout=60,
            )
            assert reply["result"] is None
            notes = client.notes[:]
            methods = [n["method"] for n in notes]
            progress = [n["params"] for n in notes if n["method"] == "root/progress"]
            assert [p["progress"] for p in progress] == [0, 1, 2] and progress[-1]["total"] == 2
            counts = [action_of(n)["activeSessions"] for n in notes if is_action("root/activeSessionsChanged")(n)]
            assert counts == [1] and "root/sessionAdded" in methods
            added = next(n["params"] for n in notes if n["method"] == "root/sessionAdded")
            fits("/notifications/root~1sessionAdded", added)
            client.notes.clear()

            sub = await client.call("subscribe", {"channel": uri})
            state = sub["result"]["snapshot"]["state"]
            assert state["lifecycle"] == "ready"
            assert [c["clientId"] for c in state["activeClients"]] == ["alice"]  # its connection's id
            chat = state["defaultChat"]
            snap = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]
            chat_state = snap["state"]

            await dispatch(client, chat, start_turn("hello there"), 1)
            notes = await until(
                client, lambda n: (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error")
            )
            chat_actions = [
                n["params"] for n in notes if n.get("method") == "action" and n["params"]["channel"] == chat
            ]
            types = [e["action"]["type"] for e in chat_actions]
            assert types[0] == "chat/turnStarted" and chat_actions[0]["origin"]["clientId"] == "alice"
            assert types[-1] == "chat/turnComplete" and chat_actions[-1]["action"]["duration"] >= 0
            assert "chat/reasoning" in types or types.count("chat/responsePart") >= 2
            for env in chat_actions:
                chat_state = reducers.reduce("chat", chat_state, env["action"])
            fresh = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert fresh["turns"] == chat_state["turns"]  # the actions and the snapshot agree
            [turn] = fresh["turns"]
            kinds = [p["kind"] for p in turn["responseParts"]]
            assert kinds[0] == "reasoning" and "markdown" in kinds
            assert "hello there" in "".join(
                p.get("content", "") for p in turn["responseParts"] if p["kind"] == "markdown"
            )

            listed = (await client.call("listSessions", {}))["result"]["items"]
            assert [row["resource"] for row in listed] == [listed_as(uri)]
            fits("/commands/listSessions/result", {"items": listed})
            assert listed[0]["title"] == "hello there"
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_a_tool_confirmation_round_trip(tmp_path) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("bob")
            uri, chat = await create(client, tmp_path)
            turn = start_turn("please use a tool with permission")
            await dispatch(client, chat, turn, 1)
            notes = await until(client, is_action("session/inputNeededSet", uri))
            ready = [action_of(n) for n in notes if is_action("chat/toolCallReady")(n)]
            assert ready and "confirmed" not in ready[-1]
            request = action_of(notes[-1])["request"]
            assert request["kind"] == "toolConfirmation" and request["chat"] == chat
            call_id = request["toolCall"]["toolCallId"]
            assert call_id == ready[-1]["toolCallId"]
            await dispatch(
                client,
                chat,
                {
                    "type": "chat/toolCallConfirmed",
                    "turnId": turn["turnId"],
                    "toolCallId": call_id,
                    "approved": True,
                    "confirmed": "user-action",
                },
                2,
            )
            notes = await until(client, is_action("chat/turnComplete", chat))
            types = [action_of(n)["type"] for n in notes if action_of(n)]
            assert "session/inputNeededRemoved" in types
            assert "chat/toolCallComplete" in types
            fresh = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            call = next(p["toolCall"] for p in fresh["turns"][0]["responseParts"] if p["kind"] == "toolCall")
            assert call["status"] == "completed" and call["confirmed"] == "user-action"
            session_state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert not session_state.get("inputNeeded")
        daemon.terminate()
        await daemon.wait()


async def test_cancel_a_slow_turn_and_a_failing_one(tmp_path) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("carol")
            uri, chat = await create(client, tmp_path)
            turn = start_turn("be slow please")
            await dispatch(client, chat, turn, 1)
            await until(client, is_action("chat/delta", chat))
            await dispatch(client, chat, {"type": "chat/turnCancelled", "turnId": turn["turnId"], "duration": 5}, 2)
            await until(client, is_action("chat/turnCancelled", chat))
            # Nothing else ends that turn, and the chat takes a new one.
            await dispatch(client, chat, start_turn("now fail"), 3)
            notes = await until(
                client, lambda n: (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error")
            )
            ending = action_of(notes[-1])
            assert ending["type"] == "chat/error"
            assert "fail" in ending["part"]["error"]["message"]
            fresh = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert [t["state"] for t in fresh["turns"]] == ["cancelled", "error"]
            assert "activeTurn" not in fresh
        daemon.terminate()
        await daemon.wait()


async def test_refusals_for_sessions(tmp_path) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("dan")
            uri, chat = await create(client, tmp_path)
            again = await client.call("createSession", {"channel": uri, "workingDirectories": [tmp_path.as_uri()]})
            assert again["error"]["code"] == -32003
            other = await client.call("createSession", {"channel": "ahp-session:/x", "provider": "nope"})
            assert other["error"]["code"] == -32002 and "demo" in other["error"]["message"]
            missing = await client.call(
                "createSession", {"channel": "ahp-session:/y", "workingDirectories": [(tmp_path / "absent").as_uri()]}
            )
            assert missing["error"]["code"] == -32602
            await dispatch(
                client,
                chat,
                {"type": "chat/toolCallResultConfirmed", "turnId": "t", "toolCallId": "c", "approved": True},
                1,
            )
            note = await until(client, lambda n: "rejectionReason" in n.get("params", {}))
            assert "not served" in note[-1]["params"]["rejectionReason"]
            gone = await client.call("disposeSession", {"channel": uri})
            assert gone["result"] is None
            notes = await until(client, lambda n: n.get("method") == "root/sessionRemoved")
            assert notes[-1]["params"]["session"] == listed_as(uri)
            assert (await client.call("subscribe", {"channel": uri}))["error"]["code"] == -32001
            assert (await client.call("listSessions", {}))["result"]["items"] == []
        daemon.terminate()
        await daemon.wait()


async def test_sessions_come_back_after_a_restart(tmp_path) -> None:
    data = tmp_path / "d"
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("erin")
            uri, chat = await create(client, tmp_path)
            await dispatch(client, chat, start_turn("remember me"), 1)
            await until(client, is_action("chat/turnComplete", chat))
            await dispatch(client, uri, {"type": "session/isReadChanged", "isRead": True}, 2)
            await until(client, is_action("session/isReadChanged", uri))
        daemon.terminate()
        assert await daemon.wait() == 0
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("erin")
            listed = (await client.call("listSessions", {}))["result"]["items"]
            assert [row["resource"] for row in listed] == [listed_as(uri)]
            assert listed[0]["status"] & 32  # read survives
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert len(state["turns"]) == 1
            # A new turn resumes the agent's own conversation.
            await dispatch(client, chat, start_turn("and again"), 1)
            notes = await until(
                client, lambda n: (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error")
            )
            assert action_of(notes[-1])["type"] == "chat/turnComplete"
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_ahpd_chat_holds_a_conversation(tmp_path) -> None:
    import subprocess
    import sys

    data = tmp_path / "d"
    async with daemon_in_process(data, "--sessions", "memory") as daemon:
        run = await trio.run_process(
            [
                sys.executable,
                "-m",
                "ahpd",
                "chat",
                "--data-dir",
                str(data),
                "--cwd",
                str(tmp_path),
                "--yes",
                "--dispose",
                "use the tool with permission please",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        out = run.stdout.decode()
        assert run.returncode == 0, run.stderr.decode()
        assert "Reading the prompt" in out and "Allow Run the demo tool? yes (--yes)" in out
        assert "✓ Run the demo tool" in out
        assert "You said" in out
        async with rpc(daemon.url) as client:
            await client.initialize("x")
            assert (await client.call("listSessions", {}))["result"]["items"] == []  # --dispose
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_queued_messages_refusals_and_leaving(tmp_path) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as watcher:
            await watcher.initialize("watcher")
            async with rpc(daemon.url) as client:
                await client.initialize("ivy")
                uri, chat = await create(client, tmp_path, activeClient={"clientId": "ivy", "tools": []})
                await watcher.call("subscribe", {"channel": uri})
                slow = start_turn("slow answer please")
                await dispatch(client, chat, slow, 1)
                await until(client, is_action("chat/delta", chat))
                # Queued while the turn runs; the host takes it up when the turn ends.
                await dispatch(
                    client,
                    chat,
                    {
                        "type": "chat/pendingMessageSet",
                        "kind": "queued",
                        "id": "q1",
                        "message": {"text": "queued hello", "origin": {"kind": "user"}},
                    },
                    2,
                )
                notes = await until(
                    client,
                    lambda n: is_action("chat/turnStarted", chat)(n) and action_of(n).get("queuedMessageId") == "q1",
                    timeout=60,
                )
                queued_turn = action_of(notes[-1])["turnId"]
                notes = await until(
                    client,
                    lambda n: is_action("chat/turnComplete", chat)(n) and action_of(n)["turnId"] == queued_turn,
                    timeout=60,
                )
                fresh = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                assert [t["message"]["text"] for t in fresh["turns"]] == ["slow answer please", "queued hello"]
                assert "queuedMessages" not in fresh

                for action, words in [
                    ({"type": "session/titleChanged", "title": "   "}, "blank"),
                    ({"type": "chat/truncated", "turnId": queued_turn}, "rewound"),
                    ({"type": "chat/turnResume", "turnId": queued_turn}, "re-run"),
                ]:
                    channel = uri if action["type"].startswith("session/") else chat
                    await dispatch(client, channel, action, 9)
                    note = await until(client, lambda n: "rejectionReason" in n.get("params", {}))
                    assert words in note[-1]["params"]["rejectionReason"]
                await dispatch(client, uri, {"type": "session/titleChanged", "title": "Renamed"}, 10)
                await until(client, is_action("session/titleChanged", uri))
            # ivy's connection is gone: the watcher sees it leave the session.
            notes = await until(watcher, is_action("session/activeClientRemoved", uri))
            assert action_of(notes[-1])["clientId"] == "ivy"
        daemon.terminate()
        await daemon.wait()
