"""A long run, skipped unless AHPD_SLOW=1: many sessions and turns at once,
all of it captured, and the capture checked clean afterwards."""

from __future__ import annotations

import uuid

import pytest
import trio

from ahpd.wire.check import check_frames
from ahpd.wire.reader import read_frames

from .helpers import dispatch, is_action, rpc, running_daemon, start_turn, until

SESSIONS = 40
TURNS = 10


@pytest.mark.slow
async def test_many_sessions_and_turns_leave_a_clean_capture(tmp_path) -> None:
    capture = tmp_path / "soak.jsonl"
    async with running_daemon(tmp_path / "d", "--sessions", "memory", "--wire", str(capture)) as daemon:

        async def one(n: int) -> None:
            async with rpc(daemon.url) as client:
                await client.initialize(f"soak-{n}")
                uri = f"ahp-session:/{uuid.uuid4()}"
                reply = await client.call(
                    "createSession", {"channel": uri, "workingDirectories": [tmp_path.as_uri()]}, timeout=120
                )
                assert reply["result"] is None
                state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                chat = state["defaultChat"]
                await client.call("subscribe", {"channel": chat})
                for turn in range(TURNS):
                    words = "use a tool with permission" if turn % 2 else "hello"
                    action = start_turn(f"{words} {turn}")
                    await dispatch(client, chat, action, turn * 2 + 1)
                    if turn % 2:
                        notes = await until(client, is_action("session/inputNeededSet", uri), timeout=120)
                        request = notes[-1]["params"]["action"]["request"]
                        await dispatch(
                            client,
                            chat,
                            {
                                "type": "chat/toolCallConfirmed",
                                "turnId": action["turnId"],
                                "toolCallId": request["toolCall"]["toolCallId"],
                                "approved": True,
                                "confirmed": "user-action",
                            },
                            turn * 2 + 2,
                        )
                    await until(client, is_action("chat/turnComplete", chat), timeout=120)
                await client.call("disposeSession", {"channel": uri})

        async with trio.open_nursery() as nursery:
            for n in range(SESSIONS):
                nursery.start_soon(one, n)
        daemon.terminate()
        assert await daemon.wait() == 0
    problems = check_frames(read_frames([str(capture)]))
    assert problems == []
