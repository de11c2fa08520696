"""The root catalogue says InputNeeded while an agent waits on a person.

A client showing the session list from ``root/sessionSummaryChanged`` (the
web console's list, VS Code's) must see a session turn to InputNeeded when
its agent asks permission for a tool or asks a question, and back when it
is answered, as ``listSessions`` and the session's own snapshot already
say. Found by the web console's browser test: the list said "in progress"
while the chat waited for an approval."""

from __future__ import annotations

from typing import Any

import trio

from .helpers import ROOT, create, daemon_in_process, dispatch, is_action, listed_as, rpc, start_turn, until

INPUT_NEEDED = 24


def _rows(notes: list[dict[str, Any]], session: str) -> list[int]:
    return [
        n["params"]["changes"]["status"]
        for n in notes
        if n.get("method") == "root/sessionSummaryChanged"
        and n["params"]["session"] == session
        and "status" in n["params"]["changes"]
    ]


async def _waits(tmp_path, prompt: str, answer) -> None:
    with trio.fail_after(120):
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("lister")
                session, chat = await create(client, tmp_path)
                await dispatch(client, chat, start_turn(prompt, "t1"), 1)
                notes = await until(client, is_action("session/inputNeededSet", session))
                await client.call("ping", {"channel": ROOT})  # answered after whatever was queued before it
                notes += client.notes
                client.notes.clear()
                row = [r for r in (await client.call("listSessions", {"channel": ROOT}))["result"]["items"]]
                assert row[0]["status"] & INPUT_NEEDED == INPUT_NEEDED  # what a fresh list says
                statuses = _rows(notes, listed_as(session))  # rows name the session as listed
                assert statuses and statuses[-1] & INPUT_NEEDED == INPUT_NEEDED, statuses
                request = next(n for n in notes if is_action("session/inputNeededSet", session)(n))
                await answer(client, chat, request["params"]["action"]["request"])
                notes = await until(client, is_action("chat/turnComplete", chat))
                await client.call("ping", {"channel": ROOT})
                statuses = _rows(notes + client.notes, listed_as(session))
                assert statuses and statuses[-1] & INPUT_NEEDED != INPUT_NEEDED, statuses


async def test_a_tool_waiting_for_approval_shows_in_the_catalogue(tmp_path) -> None:
    async def approve(client, chat, request) -> None:
        confirm = {
            "type": "chat/toolCallConfirmed",
            "turnId": "t1",
            "toolCallId": request["toolCall"]["toolCallId"],
            "approved": True,
            "confirmed": "user-action",
        }
        await dispatch(client, chat, confirm, 2)

    await _waits(tmp_path, "permission", approve)


async def test_a_question_shows_in_the_catalogue(tmp_path) -> None:
    async def answer(client, chat, request) -> None:
        asked = request["request"]
        question = asked["questions"][0]
        value = (
            {"kind": "selected", "value": question["options"][0]["id"]}
            if question.get("options")
            else {"kind": "boolean", "value": True}
        )
        answers = {question["id"]: {"state": "submitted", "value": value}}
        action = {"type": "chat/inputCompleted", "requestId": asked["id"], "response": "accept", "answers": answers}
        await dispatch(client, chat, action, 2)

    await _waits(tmp_path, "ask", answer)
