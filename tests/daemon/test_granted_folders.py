"""A folder granted beside the working directory reaches the ACP agent's
file access: through a real daemon, a real WebSocket client and the demo
agent, whose ``read`` and ``write`` go through ``fs/*`` to this host."""

from __future__ import annotations

from .helpers import action_of, create, daemon_in_process, dispatch, rpc, start_turn, until


async def _reply(client, chat: str, text: str, seq: int) -> str:
    action = start_turn(text)
    await dispatch(client, chat, action, seq)
    notes = await until(
        client,
        lambda n: (
            (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error") and n["params"]["channel"] == chat
        ),
    )
    assert action_of(notes[-1])["type"] == "chat/turnComplete", action_of(notes[-1])
    state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
    turn = state["turns"][-1]
    return "".join(p.get("content", "") for p in turn["responseParts"] if p["kind"] == "markdown")


async def test_the_agent_reads_and_writes_in_a_folder_granted_beside_its_own(tmp_path) -> None:
    work, extra, elsewhere = (tmp_path / n for n in ("work", "extra", "elsewhere"))
    for folder in (work, extra, elsewhere):
        folder.mkdir()
    (extra / "notes.txt").write_text("granted beside\n")
    (elsewhere / "secret.txt").write_text("not granted\n")
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as ann:
            await ann.initialize("ann")
            uri, chat = await create(ann, work)
            set_extra = {"type": "session/workingDirectorySet", "directory": extra.as_uri()}
            await dispatch(ann, uri, set_extra, 1)
            heard = await until(ann, lambda n: n.get("params", {}).get("origin", {}).get("clientSeq") == 1)
            assert "rejectionReason" not in heard[-1]["params"], heard[-1]["params"]

            reply = await _reply(ann, chat, f"read {extra / 'notes.txt'}", 2)
            assert "granted beside" in reply, reply

            # A folder nobody granted stays out of reach, and the refusal names every folder that is.
            reply = await _reply(ann, chat, f"read {elsewhere / 'secret.txt'}", 3)
            assert "not granted" not in reply
            assert "outside the conversation's working directories" in reply, reply
            assert str(work) in reply and str(extra) in reply

            # Removed again, the folder is out of reach at the next start.
            removed = {"type": "session/workingDirectoryRemoved", "directory": extra.as_uri()}
            await dispatch(ann, uri, removed, 4)
            await until(ann, lambda n: n.get("params", {}).get("origin", {}).get("clientSeq") == 4)
            reply = await _reply(ann, chat, f"read {extra / 'notes.txt'}", 5)
            assert "granted beside" not in reply
            assert f"outside the conversation's working directory {work}" in reply, reply
        daemon.terminate()
        await daemon.wait()
