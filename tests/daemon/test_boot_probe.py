"""Claude Code's boot probe waits for the first client: a daemon nobody
talks to starts no agent CLI, and the probe's answer still reaches the client
that triggered it as ``root/agentsChanged``."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from .helpers import daemon_in_process, rpc, running_daemon


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
                # Each backend's probe answers on its own (the demo agent's may come first).
                with trio.fail_after(90):
                    while True:
                        note = await client.next_note(timeout=90)
                        action = note.get("params", {}).get("action", {})
                        if action.get("type") == "root/agentsChanged":
                            [claude] = [a for a in action["agents"] if a["provider"] == "claude"]
                            if claude["models"]:
                                break
            daemon.terminate()
            assert await daemon.wait() == 0


@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_the_probe_and_the_catalogue_load_no_sdk_into_the_daemon(tmp_path: Path) -> None:
    # The Claude Agent SDK (with pydantic and the MCP library) is ~60 MB: the boot probe and the
    # transcripts' catalogue ask it from a child process, so the daemon maps none of it until a
    # Claude conversation of its own starts.
    pytest.importorskip("claude_agent_sdk")
    from tests.backends.claude_fixtures import fake_api

    from .test_claude_sessions import _env

    home = tmp_path / "home"
    home.mkdir()
    with fake_api.FakeAnthropic().running() as api:
        async with running_daemon(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("first")
                with trio.fail_after(90):
                    while True:
                        note = await client.next_note(timeout=90)
                        action = note.get("params", {}).get("action", {})
                        if action.get("type") == "root/agentsChanged":
                            [claude] = [a for a in action["agents"] if a["provider"] == "claude"]
                            if claude["models"]:
                                break
                assert "result" in await client.call("listSessions", {})
                with trio.fail_after(60):
                    while daemon.children():  # the probe's and the catalogue's processes have answered
                        await trio.sleep(0.05)
                maps = await trio.Path(f"/proc/{daemon.pid}/maps").read_text()
                assert "pydantic_core" not in maps and "claude_agent_sdk" not in maps
            daemon.terminate()
            assert await daemon.wait() == 0
