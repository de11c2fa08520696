"""Slash commands and skills reach a session as container customizations,
and ``/`` completions answer from them: with the demo agent's ``help`` and
``echo``, and with Claude Code's commands (its boot probe, then the skills a
turn's ``init`` message names), offline against the fake Messages API."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import (
    Listener,
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


async def _slash(client: Rpc, chat: str, text: str) -> list[dict]:
    result = (
        await client.call("completions", {"channel": chat, "kind": "userMessage", "text": text, "offset": len(text)})
    )["result"]
    fits("/commands/completions/result", result)
    return result["items"]


async def test_the_demo_agents_commands_are_a_container_and_the_slash_menu(tmp_path: Path) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("cmd-user")
            uri, chat = await create(client, tmp_path)
            state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            fits("/$defs/SessionState", state)
            [container] = state["customizations"]
            assert container["type"] == "directory" and container["contents"] == "prompt"
            assert container["uri"] == tmp_path.as_uri()
            children = {c["name"]: c for c in container["children"]}
            assert set(children) == {"help", "echo"}
            assert all(c["type"] == "prompt" for c in children.values())
            assert children["echo"]["_meta"] == {"ahpd.argumentHint": "text to echo back"}

            items = await _slash(client, chat, "/")
            metas = {i["attachment"]["_meta"]["command"]: i["attachment"]["_meta"] for i in items}
            assert set(metas) == {"help", "echo"}
            assert metas["echo"]["argumentHint"] == "text to echo back" and metas["echo"]["description"]
            assert "isSkill" not in metas["help"]
            assert [i["insertText"] for i in await _slash(client, chat, "/ec")] == ["/echo "]
        daemon.terminate()
        assert await daemon.wait() == 0


@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_claude_commands_and_skills(tmp_path: Path) -> None:
    pytest.importorskip("claude_agent_sdk")
    from tests.backends.claude_fixtures import fake_api

    from .test_claude_sessions import _env

    home = tmp_path / "home"
    (home / ".claude" / "skills" / "my-skill").mkdir(parents=True)
    (home / ".claude" / "skills" / "my-skill" / "SKILL.md").write_text(
        "---\nname: my-skill\ndescription: A test skill\nargument-hint: <thing>\n---\nDo the thing.\n"
    )
    (home / ".claude" / "commands").mkdir()
    (home / ".claude" / "commands" / "my-cmd.md").write_text(
        "---\ndescription: A custom command\nargument-hint: <arg>\n---\nRun it with $ARGUMENTS\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    with fake_api.FakeAnthropic().running() as api:
        api.add(fake_api.text("Hello."))
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("claude-cmds")
                uri, chat = await create(client, work, provider="claude")
                state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                prompts = {c["contents"]: c for c in state["customizations"] if c["type"] == "directory"}["prompt"]
                assert prompts["uri"] == (work / ".claude" / "commands").as_uri()
                names = {c["name"]: c for c in prompts["children"]}
                assert {"compact", "my-cmd"} <= set(names)
                assert names["my-cmd"]["uri"] == (work / ".claude" / "commands" / "my-cmd.md").as_uri()
                assert names["my-cmd"]["_meta"] == {"ahpd.argumentHint": "<arg>"}

                # A turn's init message says which commands are skills.
                await dispatch(client, chat, start_turn("hello"), 1)
                notes = await until(client, is_action("chat/turnComplete", chat), timeout=90)
                changed = [action_of(n) for n in notes if is_action("session/customizationsChanged", uri)(n)]
                assert changed, "the skills were not published"
                state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                fits("/$defs/SessionState", state)
                by_kind = {c["contents"]: c for c in state["customizations"] if c["type"] == "directory"}
                assert by_kind["skill"]["uri"] == (work / ".claude" / "skills").as_uri()
                skills = {c["name"]: c for c in by_kind["skill"]["children"]}
                assert skills["my-skill"]["type"] == "skill"
                assert skills["my-skill"]["uri"] == (work / ".claude" / "skills" / "my-skill" / "SKILL.md").as_uri()
                assert "my-skill" not in {c["name"] for c in by_kind["prompt"]["children"]}

                items = await _slash(client, chat, "/my-")
                metas = {i["attachment"]["_meta"]["command"]: i["attachment"]["_meta"] for i in items}
                assert metas["my-skill"]["isSkill"] is True and metas["my-skill"]["argumentHint"] == "<thing>"
                assert "isSkill" not in metas["my-cmd"] and metas["my-cmd"]["argumentHint"] == "<arg>"
            daemon.terminate()
            assert await daemon.wait() == 0


async def test_the_harness_commands_are_the_agents_customizations(tmp_path, monkeypatch) -> None:
    """After the boot probe, ``root/agentsChanged`` carries Claude Code's
    commands as its AgentInfo customizations, before any session exists."""
    pytest.importorskip("claude_agent_sdk")
    import trio

    from ahpd.backends.claude.backend import ClaudeBackend
    from ahpd.host.assembly import Host
    from tests.backends.claude_fixtures import fake_api

    import json

    home = tmp_path / "home"
    home.mkdir()
    # A user-scope MCP server that can never start: it is listed with its state.
    (home / ".claude.json").write_text(json.dumps({"mcpServers": {"broken": {"type": "stdio", "command": "false"}}}))
    host = Host(backends={"claude": ClaudeBackend()})
    with fake_api.FakeAnthropic().running() as api:
        for name, value in fake_api.cli_env(api.url, str(home)).items():
            monkeypatch.setenv(name, value)
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            root = Listener()
            host.bus.subscribe("ahp-root://", root)
            host.sessions.probe_soon()  # as the first client's initialize does
            await root.until(lambda: host.bus.channels["ahp-root://"].state["agents"][0].get("customizations"))
            nursery.cancel_scope.cancel()
    [agent] = host.bus.channels["ahp-root://"].state["agents"]
    fits("/$defs/AgentInfo", agent)
    names = [c["name"] for container in agent["customizations"] for c in container.get("children", [])]
    assert "compact" in names
    agents = [
        c
        for container in agent["customizations"]
        if container.get("contents") == "agent"
        for c in container["children"]
    ]
    assert "Explore" in [a["name"] for a in agents]  # the CLI's subagents
    servers = [c for c in agent["customizations"] if c["type"] == "mcpServer"]
    assert [s["name"] for s in servers] == ["broken"]  # and not our own in-process "ahp"
    assert servers[0]["state"]["kind"] in ("starting", "error")
