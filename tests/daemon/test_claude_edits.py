"""A Claude edit waiting for approval is drawn as a diff: ``chat/toolCallReady``
carries ``edits``, whose after side this host serves under
``ahp-edit://pending/<toolCallId>`` through ``resourceRead`` until the call
is settled. Offline, against the fake Messages API."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

from tests.backends.claude_fixtures import fake_api  # noqa: E402

from .helpers import (  # noqa: E402
    Rpc,
    action_of,
    create,
    daemon_in_process,
    dispatch,
    fits,
    is_action,
    rpc,
    start_turn,
    until,
)
from .test_claude_sessions import _env  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


async def _read(client: Rpc, uri: str, **extra: str) -> dict:
    return await client.call("resourceRead", {"channel": "ahp-root://", "uri": uri, **extra})


async def test_an_edit_asks_with_a_diff_served_until_settled(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    target = work / "notes.txt"
    target.write_text("alpha\nbeta\n")
    with fake_api.FakeAnthropic().running() as api:
        api.add(
            fake_api.tool_use(
                "toolu_edit", "Edit", {"file_path": str(target), "old_string": "beta", "new_string": "gamma"}
            ),
            fake_api.text("Edited."),
        )
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("editor")
                uri, chat = await create(client, work, provider="claude")
                turn = start_turn("change beta to gamma")
                await dispatch(client, chat, turn, 1)
                notes = await until(client, is_action("session/inputNeededSet", uri), timeout=90)
                ready = [action_of(n) for n in notes if is_action("chat/toolCallReady", chat)(n)][-1]
                assert ready["toolCallId"] == "toolu_edit" and "confirmed" not in ready
                [edit] = ready["edits"]["items"]
                fits("/$defs/FileEdit", edit)
                file_uri = Path(target).resolve().as_uri()  # noqa: ASYNC240 - a test's look at a local path
                assert edit["before"] == {"uri": file_uri, "content": {"uri": file_uri}}
                assert edit["after"]["uri"] == file_uri
                after = edit["after"]["content"]["uri"]
                assert after == "ahp-edit://pending/toolu_edit"
                # The pending call in the session's inputNeeded carries the diff as well.
                request = action_of(notes[-1])["request"]
                assert request["toolCall"]["edits"] == ready["edits"]

                served = await _read(client, after)
                fits("/commands/resourceRead/result", served["result"])
                assert served["result"] == {"data": "alpha\ngamma\n", "encoding": "utf-8", "contentType": "text/plain"}
                before = await _read(client, file_uri)
                assert before["result"]["data"] == "alpha\nbeta\n"
                assert (await _read(client, after, encoding="base64"))["result"]["encoding"] == "base64"
                other = await _read(client, (work / "elsewhere.txt").as_uri())
                assert other["error"]["code"] == -32008 and "elsewhere.txt" in other["error"]["message"]

                await dispatch(
                    client,
                    chat,
                    {
                        "type": "chat/toolCallConfirmed",
                        "turnId": turn["turnId"],
                        "toolCallId": "toolu_edit",
                        "approved": True,
                        "confirmed": "user-action",
                    },
                    2,
                )
                await until(client, is_action("chat/turnComplete", chat), timeout=90)
                assert target.read_text() == "alpha\ngamma\n"
                gone = await _read(client, after)
                assert gone["error"]["code"] == -32008 and "settled" in gone["error"]["message"]
                assert (await _read(client, file_uri))["result"]["data"] == "alpha\ngamma\n"
                state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                fits("/$defs/ChatState", state)
                call = next(p["toolCall"] for p in state["turns"][0]["responseParts"] if p["kind"] == "toolCall")
                assert call["status"] == "completed" and call["confirmed"] == "user-action"
            daemon.terminate()
            assert await daemon.wait() == 0
