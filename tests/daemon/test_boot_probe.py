"""Claude Code's boot probe waits for the first client: a daemon nobody
talks to starts no agent CLI, and the probe's answer still reaches the client
that triggered it as ``root/agentsChanged``."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from .helpers import Rpc, daemon_in_process, rpc, running_daemon


async def _claude_probed(client: Rpc) -> None:
    """Until ``root/agentsChanged`` offers Claude's models: its boot probe answered
    (each backend's probe answers on its own; the demo agent's may come first)."""
    with trio.fail_after(90):
        while True:
            note = await client.next_note(timeout=90)
            action = note.get("params", {}).get("action", {})
            if action.get("type") == "root/agentsChanged":
                [claude] = [a for a in action["agents"] if a["provider"] == "claude"]
                if claude["models"]:
                    return


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
                await _claude_probed(client)
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
                await _claude_probed(client)
                assert "result" in await client.call("listSessions", {})
                with trio.fail_after(60):
                    while daemon.children():  # the probe's and the catalogue's processes have answered
                        await trio.sleep(0.05)
                maps = await trio.Path(f"/proc/{daemon.pid}/maps").read_text()
                assert "pydantic_core" not in maps and "claude_agent_sdk" not in maps
            daemon.terminate()
            assert await daemon.wait() == 0


@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_the_first_hello_starts_one_child_per_agent_for_its_probe_and_its_catalogue(tmp_path: Path) -> None:
    """Each boot probe lists what its agent keeps (it runs the agent, or loads Claude's SDK, anyway),
    and the catalogue's first reading, asked at the same hello, takes that answer: one child per
    agent, not a second one that loads the same library again. Every Python child the daemon starts
    writes its command line to a log (a ``sitecustomize`` on ``PYTHONPATH``, which they inherit)."""
    pytest.importorskip("claude_agent_sdk")
    from tests.backends.claude_fixtures import fake_api

    from .test_claude_sessions import _env

    home = tmp_path / "home"
    home.mkdir()
    spy, log = tmp_path / "spy", tmp_path / "argv.log"
    spy.mkdir()
    (spy / "sitecustomize.py").write_text(
        "import os\n"
        "argv = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        "with open(os.environ['AHPD_TEST_ARGV_LOG'], 'ab') as f:\n"
        "    f.write(b' '.join(argv[1:4]) + b'\\n')\n"
    )
    env = {**_env(None, str(home)), "PYTHONPATH": str(spy), "AHPD_TEST_ARGV_LOG": str(log)}
    with fake_api.FakeAnthropic().running() as api:
        env.update(_env(api.url, str(home)))
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("first")
                await _claude_probed(client)
                assert "result" in await client.call("listSessions", {})
                with trio.fail_after(60):
                    while daemon.children():  # every probe and catalogue child has answered
                        await trio.sleep(0.05)
            daemon.terminate()
            assert await daemon.wait() == 0
    started = log.read_text().splitlines()
    claude = [line for line in started if "ahpd.backends.claude" in line]
    assert claude == ["-m ahpd.backends.claude.catalogue probe"], started
    assert [line.split(" {")[0] for line in started if "ahpd.backends.acp" in line] == ["-m ahpd.backends.acp.probe"], (
        started
    )
