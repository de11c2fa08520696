"""The host's own tools, called by Claude Code: a real daemon, the real bundled
CLI and the fake Anthropic API, offline.

The model is offered the host's tools on the in-process MCP server ``ahp``
(``mcp__ahp__<name>``) beside any client's; it calls
``add_artifact_or_reference``, the host records the artifact on the
session's ``_meta`` (every subscriber told), and the model reads the
reference host's answer as the tool's result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

from tests.backends.claude_fixtures import fake_api  # noqa: E402

from .helpers import action_of, create, daemon_in_process, dispatch, is_action, rpc, start_turn, until  # noqa: E402
from .test_claude_sessions import _env  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

KEY = "agentHost/sessionArtifacts"


async def test_claude_records_an_artifact_with_the_host_tool(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    item = {"type": "website", "label": "Docs", "isArtifact": False, "link": "https://example.com/docs"}
    with fake_api.FakeAnthropic().running() as api:
        api.add(
            fake_api.tool_use("toolu_host", "mcp__ahp__add_artifact_or_reference", {"items": [item]}),
            fake_api.text("Recorded."),
        )
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client, rpc(daemon.url) as other:
                await client.initialize("editor")
                await other.initialize("watcher")
                uri, chat = await create(client, tmp_path, provider="claude")
                await other.call("subscribe", {"channel": uri})
                await dispatch(client, chat, start_turn("record the docs"), 1)
                notes = await until(
                    client,
                    lambda n: (
                        (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error")
                        and n["params"]["channel"] == chat
                    ),
                    timeout=120,
                )
                assert action_of(notes[-1])["type"] == "chat/turnComplete", action_of(notes[-1])
                # Offered under the host's own name on the ahp server.
                assert "mcp__ahp__add_artifact_or_reference" in json.dumps(api.requests[0])
                [meta] = [
                    action_of(n)["_meta"]
                    for n in notes
                    if is_action("session/metaChanged", uri)(n) and KEY in (action_of(n)["_meta"] or {})
                ]
                [held] = meta[KEY]
                assert {k: held[k] for k in item} == item
                seen = await until(
                    other, lambda n: is_action("session/metaChanged", uri)(n) and KEY in (action_of(n)["_meta"] or {})
                )
                assert action_of(seen[-1])["_meta"][KEY] == [held]
                # Run without asking (recording is not a confirmed tool) and answered in the reference's words.
                assert not any(is_action("session/inputNeededSet", uri)(n) for n in notes)
                [result] = api.tool_results()
                assert result["tool_use_id"] == "toolu_host" and not result.get("is_error")
                assert f"Added reference: {held['id']} (website, reference) Docs" in str(result["content"])
                completion = next(action_of(n) for n in notes if is_action("chat/toolCallComplete", chat)(n))
                assert completion["result"]["success"] is True
            daemon.terminate()
            assert await daemon.wait() == 0
