"""A Claude Code session through the daemon, offline: the real bundled CLI
talks to a fake Anthropic API on 127.0.0.1."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("claude_agent_sdk")

from tests.backends.claude_fixtures import fake_api  # noqa: E402

from .helpers import action_of, create, daemon_in_process, dispatch, is_action, rpc, start_turn, until  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def _env(url: str | None, home: str) -> dict[str, str]:
    env = {name: "" for name in fake_api.CREDENTIAL_VARS if name in os.environ}
    env.update(fake_api.cli_env(url or "http://127.0.0.1:9", home, api_key="sk-ant-fake" if url else None))
    return env


async def test_a_claude_turn_streams_and_reports_usage(tmp_path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with fake_api.FakeAnthropic().running() as api:
        api.add(fake_api.text("Hello from the fake Claude"))
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                init = await client.initialize("claude-user")
                agents = {a["provider"]: a for a in init["snapshots"][0]["state"]["agents"]}
                assert {"resource": "https://api.anthropic.com", "required": False} in agents["claude"][
                    "protectedResources"
                ]
                uri, chat = await create(client, tmp_path, provider="claude")
                await dispatch(client, chat, start_turn("say hello"), 1)
                notes = await until(
                    client,
                    lambda n: (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error"),
                    timeout=90,
                )
                actions = [action_of(n) for n in notes if action_of(n) and n["params"]["channel"] == chat]
                assert actions[-1]["type"] == "chat/turnComplete", actions[-1]
                usage = next(a["usage"] for a in actions if a["type"] == "chat/usage")
                assert usage["model"] == fake_api.MODEL and usage["inputTokens"] > 0
                state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
                reply = "".join(
                    p.get("content", "") for p in state["turns"][0]["responseParts"] if p["kind"] == "markdown"
                )
                assert reply == "Hello from the fake Claude"
            daemon.terminate()
            assert await daemon.wait() == 0


async def test_without_credentials_the_turn_ends_with_the_clis_words(tmp_path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(None, str(home))) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("nobody")
            uri, chat = await create(client, tmp_path, provider="claude")
            await dispatch(client, chat, start_turn("hello?"), 1)
            notes = await until(client, is_action("chat/error", chat), timeout=90)
            assert "Not logged in" in action_of(notes[-1])["part"]["error"]["message"]
        daemon.terminate()
        assert await daemon.wait() == 0
