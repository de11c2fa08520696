"""Answers typed into an open question are one form for everyone: held on the
session's ``inputNeeded`` entry as well as the chat's request, and handed to
the agent when ``chat/inputCompleted`` carries none of its own. A real
daemon, real WebSocket clients, the demo agent asking (``ask``)."""

from __future__ import annotations

from .helpers import action_of, create, daemon_in_process, dispatch, fits, is_action, rpc, start_turn, until, wire_clean


def _answer(value: str) -> dict:
    return {"state": "draft", "value": {"kind": "selected", "value": value}}


async def test_answers_typed_so_far_show_on_the_session_and_reach_the_agent(tmp_path) -> None:
    async with daemon_in_process(
        tmp_path / "d", "--sessions", "memory", "--wire", str(tmp_path / "wire.jsonl")
    ) as daemon:
        async with rpc(daemon.url) as asker, rpc(daemon.url) as watcher:
            await asker.initialize("asker")
            await watcher.initialize("watcher")
            uri, chat = await create(asker, tmp_path)
            await watcher.call("subscribe", {"channel": uri})  # the session only, not the chat

            await dispatch(asker, chat, start_turn("ask me"), 1)
            notes = await until(asker, is_action("chat/inputRequested", chat), timeout=90)
            request = action_of(notes[-1])["request"]
            [question] = request["questions"]
            await until(watcher, is_action("session/inputNeededSet", uri), timeout=90)

            # Somebody types an answer: the watcher, who holds no chat, sees it on the session.
            await dispatch(
                asker,
                chat,
                {
                    "type": "chat/inputAnswerChanged",
                    "requestId": request["id"],
                    "questionId": question["id"],
                    "answer": _answer("yes"),
                },
                2,
            )
            notes = await until(watcher, is_action("session/inputNeededSet", uri), timeout=90)
            entry = action_of(notes[-1])["request"]
            assert entry["id"] == request["id"] and entry["kind"] == "chatInput"
            assert entry["request"]["answers"] == {question["id"]: _answer("yes")}
            # ...and changes their mind; a client arriving now reads the latest from the snapshot.
            await dispatch(
                asker,
                chat,
                {
                    "type": "chat/inputAnswerChanged",
                    "requestId": request["id"],
                    "questionId": question["id"],
                    "answer": _answer("no"),
                },
                3,
            )
            await until(watcher, is_action("session/inputNeededSet", uri), timeout=90)
            async with rpc(daemon.url) as late:
                await late.initialize("late")
                state = (await late.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                fits("/$defs/SessionState", state)
                [needed] = state["inputNeeded"]
                assert needed["request"]["answers"] == {question["id"]: _answer("no")}

            # An answer to a question nobody asked is refused, and moves nothing.
            await dispatch(
                asker,
                chat,
                {
                    "type": "chat/inputAnswerChanged",
                    "requestId": "nobody-asked",
                    "questionId": question["id"],
                    "answer": _answer("yes"),
                },
                4,
            )
            notes = await until(
                asker, lambda n: n.get("method") == "action" and (n["params"].get("origin") or {}).get("clientSeq") == 4
            )
            assert "nobody-asked is not open" in notes[-1]["params"]["rejectionReason"]

            # Completed with no answers of its own: the agent is handed what was synced.
            await dispatch(
                asker, chat, {"type": "chat/inputCompleted", "requestId": request["id"], "response": "accept"}, 5
            )
            await until(watcher, is_action("session/inputNeededRemoved", uri), timeout=90)
            await until(asker, is_action("chat/turnComplete", chat), timeout=90)
            state = (await asker.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            reply = "".join(
                p.get("content", "") for p in state["turns"][-1]["responseParts"] if p["kind"] == "markdown"
            )
            assert "you answered **no**" in reply, reply
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(tmp_path / "wire.jsonl")
