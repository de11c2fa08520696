"""Claude Code's boot probe waits for the first client: a daemon nobody
talks to starts no agent CLI, and the probe's answer still reaches the client
that triggered it as ``root/agentsChanged``."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from .helpers import daemon_in_process, rpc


@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_the_probe_starts_at_the_first_initialize_not_at_boot(tmp_path: Path) -> None:
    pytest.importorskip("claude_agent_sdk")
    from tests.backends.claude_fixtures import fake_api

    from .test_claude_sessions import _env

    home = tmp_path / "home"
    home.mkdir()
    with fake_api.FakeAnthropic().running() as api:
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                assert "result" in await client.call("ping")  # a connection, but no hello yet
                assert daemon.children() == []
                result = await client.initialize("first")
                [claude] = [a for a in result["snapshots"][0]["state"]["agents"] if a["provider"] == "claude"]
                assert claude["models"] == []  # nothing probed before this client came
                with trio.fail_after(90):
                    while True:
                        note = await client.next_note(timeout=90)
                        action = note.get("params", {}).get("action", {})
                        if action.get("type") == "root/agentsChanged":
                            break
                [claude] = [a for a in action["agents"] if a["provider"] == "claude"]
                assert claude["models"], "the probe's models did not reach the client"
            daemon.terminate()
            assert await daemon.wait() == 0
