"""Plugins in a Claude session, through the real bundled CLI offline against
the fake Messages API: Claude Code's own plugins (one installed from a local
marketplace in a temporary HOME) listed as ``plugin`` customizations and
switched through the CLI's ``enabledPlugins``, read back for every client;
and a plugin a client hands over, copied and loaded by the CLI, which is
started again, resumed, when the set changes between turns."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .helpers import (
    Rpc,
    action_of,
    create,
    daemon_in_process,
    dispatch,
    fits,
    is_action,
    rpc,
    snapshot_until,
    start_turn,
    until,
    wire_clean,
)
from .test_claude_mcp import TINY_SERVER
from .test_customizations import answered

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

OWN = "claude.plugin:tidy-kit@local"


def _plugin(root: Path, name: str, command: str) -> Path:
    """A plugin directory as Claude Code takes one: a manifest, a command, a skill."""
    (root / ".claude-plugin").mkdir(parents=True)
    (root / ".claude-plugin" / "plugin.json").write_text(json.dumps({"name": name, "version": "1.2.0"}))
    (root / "commands").mkdir()
    (root / "commands" / f"{command}.md").write_text(f"---\ndescription: The {command} command\n---\nDo {command}.\n")
    (root / "skills" / "wave").mkdir(parents=True)
    (root / "skills" / "wave" / "SKILL.md").write_text("---\nname: wave\ndescription: Waves\n---\nWave.\n")
    return root


def _home(tmp_path: Path) -> Path:
    """A temporary HOME whose user settings install ``tidy-kit`` from a local marketplace."""
    home = tmp_path / "home"
    market = tmp_path / "market"
    _plugin(market / "tidy-kit", "tidy-kit", "tidy")
    (market / ".claude-plugin").mkdir()
    (market / ".claude-plugin" / "marketplace.json").write_text(
        json.dumps(
            {"name": "local", "owner": {"name": "Tester"}, "plugins": [{"name": "tidy-kit", "source": "./tidy-kit"}]}
        )
    )
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "extraKnownMarketplaces": {"local": {"source": {"source": "directory", "path": str(market)}}},
                "enabledPlugins": {"tidy-kit@local": True},
            }
        )
    )
    return home


async def _state(client: Rpc, uri: str) -> dict:
    state = (await client.call("subscribe", {"channel": uri}, timeout=60))["result"]["snapshot"]["state"]
    fits("/$defs/SessionState", state)
    return state


def _commands(state: dict) -> set[str]:
    """The slash commands and skills the session lists (from what the CLI reports)."""
    return {
        c["name"]
        for top in state.get("customizations") or []
        if top["type"] == "directory"
        for c in top.get("children") or []
    }


async def _eventually(client: Rpc, uri: str, check) -> dict:
    """The session once ``check(state)`` holds, judged again at each action on its channel."""
    state = await snapshot_until(client, uri, check)
    fits("/$defs/SessionState", state)
    return state


async def _turn(client: Rpc, chat: str, text: str) -> None:
    await dispatch(client, chat, start_turn(text), 100)
    notes = await until(
        client, lambda n: is_action("chat/turnComplete", chat)(n) or is_action("chat/error", chat)(n), timeout=120
    )
    assert action_of(notes[-1])["type"] == "chat/turnComplete", action_of(notes[-1])


def _row_updated(uri: str, pid: str, enabled: bool):
    def check(note: dict) -> bool:
        action = action_of(note)
        return (
            bool(action)
            and note["params"]["channel"] == uri
            and action["type"] == "session/customizationUpdated"
            and action["customization"]["id"] == pid
            and action["customization"].get("enablement", [{}])[0].get("enabled") is enabled
        )

    return check


async def test_claude_plugins_listed_switched_and_handed_over(tmp_path: Path) -> None:
    pytest.importorskip("claude_agent_sdk")
    from tests.backends.claude_fixtures import fake_api

    from .test_claude_sessions import _env

    home = _home(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    handed = _plugin(tmp_path / "handed", "hello-kit", "hi")
    capture = tmp_path / "wire.jsonl"
    data = tmp_path / "d"
    with fake_api.FakeAnthropic().running() as api:
        api.add(*(fake_api.text(f"Reply {n}") for n in range(4)))
        async with daemon_in_process(
            data, "--sessions", "memory", "--wire", str(capture), env=_env(api.url, str(home))
        ) as daemon:
            async with rpc(daemon.url) as alice, rpc(daemon.url) as bob:
                await alice.initialize("alice")
                await bob.initialize("bob")
                uri, chat = await create(alice, work, provider="claude")
                await bob.call("subscribe", {"channel": uri})

                # Claude Code's own plugin, from the boot probe: a top-level
                # plugin with its children read from its folder.
                state = await _state(alice, uri)
                row = next(c for c in state["customizations"] if c["id"] == OWN)
                assert row["type"] == "plugin" and row["version"] == "1.2.0" and not row.get("clientId")
                assert {(c["name"], c["type"]) for c in row["children"]} == {("tidy", "prompt"), ("wave", "skill")}
                assert Path(row["uri"].removeprefix("file://")).name == "tidy-kit"

                await _turn(alice, chat, "first")
                await _eventually(alice, uri, lambda s: "tidy-kit:tidy" in _commands(s))

                # Off: through the CLI's enabledPlugins, read back for everyone;
                # the plugin's commands leave with it.
                off = [{"kind": "session", "enabled": False}]
                await dispatch(alice, uri, {"type": "session/customizationToggled", "id": OWN, "enablement": off}, 1)
                for who in (alice, bob):
                    notes = await until(who, _row_updated(uri, OWN, False), timeout=120)
                    [toggled] = [n for n in notes if is_action("session/customizationToggled", uri)(n)]
                    assert "rejectionReason" not in toggled["params"]
                    assert action_of(notes[-1])["customization"]["load"] == {"kind": "loaded"}  # the CLI took it
                state = await _eventually(bob, uri, lambda s: "tidy-kit:tidy" not in _commands(s))
                kept = next(c for c in state["customizations"] if c["id"] == OWN)  # kept by id while off
                assert kept["enablement"] == off

                # On again.
                on = [{"kind": "session", "enabled": True}]
                await dispatch(bob, uri, {"type": "session/customizationToggled", "id": OWN, "enablement": on}, 1)
                for who in (alice, bob):
                    await until(who, _row_updated(uri, OWN, True), timeout=120)
                await _eventually(alice, uri, lambda s: "tidy-kit:tidy" in _commands(s))

                # A plugin's skill: the CLI has no runtime switch; refused, the list goes out again.
                wave = next(c for c in kept["children"] if c["name"] == "wave")
                await dispatch(
                    alice, uri, {"type": "session/customizationToggled", "id": wave["id"], "enablement": off}, 2
                )
                notes = await until(alice, is_action("session/customizationsChanged", uri))
                [refusal] = [n for n in notes if answered(2, uri)(n)]
                assert "no runtime switch for a skill" in refusal["params"]["rejectionReason"]

                # A plugin bob hands over: copied, and from the next turn the
                # CLI (started again, resumed) loads the copy.
                client = {
                    "clientId": "bob",
                    "displayName": "Bob",
                    "tools": [],
                    "customizations": [
                        {"type": "plugin", "id": "p-hello", "uri": handed.as_uri(), "name": "Hello", "nonce": "1"}
                    ],
                }
                await dispatch(bob, uri, {"type": "session/activeClientSet", "activeClient": client}, 2)
                await _eventually(
                    alice,
                    uri,
                    lambda s: any(
                        c["id"] == "p-hello" and c.get("load", {}).get("kind") == "loaded" for c in s["customizations"]
                    ),
                )
                await _turn(alice, chat, "second")
                state = await _eventually(alice, uri, lambda s: "hello-kit:hi" in _commands(s))
                assert not any(c["id"].startswith("claude.plugin:hello-kit") for c in state["customizations"])
                assert any("first" in p for p in fake_api.prompts(api.requests[-1]))  # the same conversation, resumed

                # Switched off by a client: no longer handed to the CLI.
                await dispatch(
                    bob, uri, {"type": "session/customizationToggled", "id": "p-hello", "enablement": off}, 3
                )
                [*_, note] = await until(bob, answered(3, uri))
                assert "rejectionReason" not in note["params"]
                await _turn(alice, chat, "third")
                state = await _eventually(alice, uri, lambda s: "hello-kit:hi" not in _commands(s))
                assert "tidy-kit:tidy" in _commands(state)
            daemon.terminate()
            assert await daemon.wait() == 0
    wire_clean(capture)


async def test_a_plugin_kept_off_for_a_folder_reaches_new_sessions_and_a_restart(tmp_path: Path) -> None:
    """The host keeps a decision for the folder a session works in: a new
    session there carries it (and its CLI starts with the plugin off), one
    elsewhere does not, and it survives the daemon starting again."""
    pytest.importorskip("claude_agent_sdk")
    from tests.backends.claude_fixtures import fake_api

    from .test_claude_sessions import _env

    home = _home(tmp_path)
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    data = tmp_path / "d"
    capture = tmp_path / "wire.jsonl"
    folder_off = [{"kind": "workspace", "uri": work.as_uri(), "enabled": False}]
    session_off = [{"kind": "session", "enabled": False}]

    def row(state: dict) -> dict:
        return next(c for c in state["customizations"] if c["id"] == OWN)

    with fake_api.FakeAnthropic().running() as api:
        api.add(fake_api.text("Reply"))
        async with daemon_in_process(
            data, "--sessions", "file", "--wire", str(capture), env=_env(api.url, str(home))
        ) as daemon:
            async with rpc(daemon.url) as alice:
                await alice.initialize("alice")
                first, _chat = await create(alice, work, provider="claude")
                await dispatch(
                    alice, first, {"type": "session/customizationToggled", "id": OWN, "enablement": folder_off}, 1
                )
                notes = await until(alice, _row_updated(first, OWN, False), timeout=120)
                assert not [n for n in notes if answered(1, first)(n) and "rejectionReason" in n["params"]]

                second, chat = await create(alice, work, provider="claude")
                assert row(await _state(alice, second))["enablement"] == folder_off  # decided nothing itself
                await _turn(alice, chat, "hello")
                state = await _eventually(alice, second, lambda s: "tidy-kit:tidy" not in _commands(s))
                assert row(state)["enablement"] == folder_off  # the CLI started with it off; still listed

                third, _chat = await create(alice, elsewhere, provider="claude")
                assert "enablement" not in row(await _state(alice, third))
                # A switch for that one session alone is kept with the session.
                await dispatch(
                    alice, third, {"type": "session/customizationToggled", "id": OWN, "enablement": session_off}, 2
                )
                await until(alice, _row_updated(third, OWN, False), timeout=120)
            daemon.terminate()
            assert await daemon.wait() == 0
        wire_clean(capture)
        assert json.loads((data / "customizations.json").read_text())["workspace"] == {work.as_uri(): {OWN: False}}

        async with daemon_in_process(data, "--sessions", "file", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as alice:
                await alice.initialize("alice")
                fourth, _chat = await create(alice, work, provider="claude")
                assert row(await _state(alice, fourth))["enablement"] == folder_off
                assert row(await _state(alice, third))["enablement"] == session_off  # kept across the restart
                # Taken back: every scope left out.
                await dispatch(alice, fourth, {"type": "session/customizationToggled", "id": OWN, "enablement": []}, 1)
                await until(
                    alice,
                    lambda n: (
                        is_action("session/customizationUpdated", fourth)(n)
                        and action_of(n)["customization"]["id"] == OWN
                    ),
                    timeout=120,
                )
                assert "enablement" not in row(await _state(alice, fourth))
            daemon.terminate()
            assert await daemon.wait() == 0
        assert json.loads((data / "customizations.json").read_text()) == {"global": {}, "workspace": {}}


async def test_a_plugin_handed_over_before_the_first_turn_reaches_a_cli_that_said_nothing(tmp_path: Path) -> None:
    """A CLI started before any turn (here: to stop an MCP server) has no
    transcript to resume; a change of the clients' plugins starts it anew,
    and the first turn runs with the plugin loaded."""
    pytest.importorskip("claude_agent_sdk")
    from tests.backends.claude_fixtures import fake_api

    from .test_claude_sessions import _env

    home = tmp_path / "home"
    home.mkdir()
    script = tmp_path / "tiny_mcp.py"
    script.write_text(TINY_SERVER)
    (home / ".claude.json").write_text(
        json.dumps({"mcpServers": {"tiny": {"type": "stdio", "command": sys.executable, "args": [str(script)]}}})
    )
    work = tmp_path / "work"
    work.mkdir()
    handed = _plugin(tmp_path / "handed", "hello-kit", "hi")
    with fake_api.FakeAnthropic().running() as api:
        api.add(fake_api.text("Reply"))
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as alice:
                await alice.initialize("alice")
                uri, chat = await create(alice, work, provider="claude")
                await dispatch(alice, uri, {"type": "session/mcpServerStopRequested", "id": "claude.mcp:tiny"}, 1)
                await until(
                    alice,
                    lambda n: (
                        is_action("session/customizationUpdated", uri)(n)
                        and action_of(n)["customization"]["state"]["kind"] == "stopped"
                    ),
                    timeout=120,
                )  # a CLI runs, and has said nothing yet
                client = {
                    "clientId": "alice",
                    "displayName": "Alice",
                    "tools": [],
                    "customizations": [
                        {"type": "plugin", "id": "p-hello", "uri": handed.as_uri(), "name": "Hello", "nonce": "1"}
                    ],
                }
                await dispatch(alice, uri, {"type": "session/activeClientSet", "activeClient": client}, 2)
                await _eventually(
                    alice,
                    uri,
                    lambda s: any(
                        c["id"] == "p-hello" and c.get("load", {}).get("kind") == "loaded" for c in s["customizations"]
                    ),
                )
                await _turn(alice, chat, "first")
                await _eventually(alice, uri, lambda s: "hello-kit:hi" in _commands(s))
            daemon.terminate()
            assert await daemon.wait() == 0
