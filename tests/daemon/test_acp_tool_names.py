"""An ACP agent's tool calls and turns, through a real daemon and real
WebSocket clients with the shipped demo agent: ``chat/toolCallStart`` names
the tool in the agent's own words (ACP carries a title and a ``kind``, no
tool name), with the ``kind`` kept as ``_meta.toolKind``; and an ACP agent,
which cannot be resumed at an earlier point of its conversation, has
``chat/truncated`` and ``chat/turnResume`` refused, saying why."""

from __future__ import annotations

from pathlib import Path

import trio

from .helpers import Rpc, action_of, create, daemon_in_process, dispatch, fits, is_action, rpc, start_turn, until


async def initialize(client: Rpc, client_id: str) -> None:
    """``initialize``, patient: the daemon loads the Claude SDK on its first use."""
    reply = await client.call(
        "initialize",
        {
            "channel": "ahp-root://",
            "protocolVersions": ["1.0.0"],
            "clientId": client_id,
            "initialSubscriptions": ["ahp-root://"],
        },
        timeout=120,
    )
    assert "result" in reply, reply


async def refused(client: Rpc, channel: str, action: dict, seq: int) -> str:
    """The refusal of a dispatched action, as its sender is told it."""
    await dispatch(client, channel, action, seq)
    with trio.fail_after(60):
        while True:
            note = await client.next_note(timeout=60)
            params = note.get("params") or {}
            if note.get("method") == "action" and (params.get("origin") or {}).get("clientSeq") == seq:
                assert "rejectionReason" in params, note
                return params["rejectionReason"]


async def test_acp_tool_names_and_refused_rewinds(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("some notes\n")
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client, rpc(daemon.url) as watcher:
            await initialize(client, "driver")
            await initialize(watcher, "watcher")
            uri, chat = await create(client, work)
            await watcher.call("subscribe", {"channel": chat})
            turn = start_turn("read notes.txt")
            await dispatch(client, chat, turn, 1)
            seen = []
            for each in (client, watcher):
                notes = await until(each, is_action("chat/turnComplete", chat), timeout=60)
                seen.append([action_of(n) for n in notes if is_action("chat/toolCallStart", chat)(n)])
            assert seen[0] == seen[1]
            [start] = seen[1]
            fits("/$defs/ChatToolCallStartAction", start)
            assert start["toolName"] == "Read notes.txt" and start["toolName"] != "read"
            assert start["_meta"] == {"toolKind": "read"}

            failing = start_turn("fail please")
            await dispatch(client, chat, failing, 2)
            notes = await until(client, is_action("chat/error", chat), timeout=60)
            error = action_of(notes[-1])
            assert "resumable" not in error["part"]  # nothing here can run it again
            await until(watcher, is_action("chat/error", chat), timeout=60)

            words = await refused(client, chat, {"type": "chat/turnResume", "turnId": failing["turnId"]}, 3)
            assert "cannot re-run" in words
            words = await refused(client, chat, {"type": "chat/truncated", "turnId": turn["turnId"]}, 4)
            assert "cannot be rewound" in words
            state = (await watcher.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert [t["id"] for t in state["turns"]] == [turn["turnId"], failing["turnId"]]
        daemon.terminate()
        assert await daemon.wait() == 0
