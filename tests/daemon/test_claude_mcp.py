"""A Claude session's MCP servers, switched by clients and carried through
to the real bundled CLI (``mcp_toggle``, ``mcp_reconnect``, read back with
``mcp_status``), offline against the fake Messages API, with a tiny stdio MCP
server the test writes into a temporary HOME. Two WebSocket clients watch;
what the CLI cannot do is refused and the list goes out again."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .helpers import action_of, create, daemon_in_process, dispatch, fits, is_action, rpc, until, wire_clean
from .test_customizations import answered

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

TINY_SERVER = r"""
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method, answer = message.get("method"), None
    if method == "initialize":
        answer = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "tiny", "version": "1.0"}}
    elif method == "tools/list":
        answer = {"tools": [{"name": "hello", "description": "Says hello", "inputSchema": {"type": "object"}}]}
    elif method == "ping":
        answer = {}
    reply = {"jsonrpc": "2.0", "id": message["id"]}
    if answer is None:
        reply["error"] = {"code": -32601, "message": "no such method"}
    else:
        reply["result"] = answer
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
"""


def _server(uri: str, notes: list[dict], server_id: str) -> dict | None:
    """The server's row as the notes leave it (None when they never said it)."""
    row = None
    for note in notes:
        action = action_of(note)
        if not action or note["params"]["channel"] != uri:
            continue
        if action["type"] == "session/customizationUpdated" and action["customization"]["id"] == server_id:
            row = action["customization"]
        elif action["type"] == "session/mcpServerStateChanged" and action["id"] == server_id and row is not None:
            row = {**row, "state": action["state"]}
    return row


def _updated(uri: str, server_id: str, enabled: bool, kind: str):
    """A row for ``server_id`` whose workspace switch is ``enabled`` and state is ``kind``."""

    def check(note: dict) -> bool:
        action = action_of(note)
        if not action or note["params"]["channel"] != uri:
            return False
        if action["type"] == "session/customizationUpdated" and action["customization"]["id"] == server_id:
            row = action["customization"]
            return row["enablement"][0]["enabled"] is enabled and row["state"]["kind"] == kind
        return False

    return check


async def test_claude_mcp_servers_switched_through_the_cli(tmp_path: Path) -> None:
    pytest.importorskip("claude_agent_sdk")
    from tests.backends.claude_fixtures import fake_api

    from .test_claude_sessions import _env

    home = tmp_path / "home"
    home.mkdir()
    script = tmp_path / "tiny_mcp.py"
    script.write_text(TINY_SERVER)
    (home / ".claude.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "tiny": {"type": "stdio", "command": sys.executable, "args": [str(script)]},
                    "broken": {"type": "stdio", "command": "false"},
                }
            }
        )
    )
    work = tmp_path / "work"
    work.mkdir()
    tiny, broken = "claude.mcp:tiny", "claude.mcp:broken"
    capture = tmp_path / "wire.jsonl"
    with fake_api.FakeAnthropic().running() as api:
        async with daemon_in_process(
            tmp_path / "d", "--sessions", "memory", "--wire", str(capture), env=_env(api.url, str(home))
        ) as daemon:
            async with rpc(daemon.url) as alice, rpc(daemon.url) as bob:
                await alice.initialize("alice")
                await bob.initialize("bob")
                uri, _chat = await create(alice, work, provider="claude")
                for who in (alice, bob):
                    state = (await who.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                    fits("/$defs/SessionState", state)
                servers = {c["id"]: c for c in state["customizations"] if c["type"] == "mcpServer"}
                assert set(servers) == {tiny, broken}  # from the boot probe, before any CLI of its own
                assert servers[tiny]["enablement"] == [{"kind": "workspace", "uri": work.as_uri(), "enabled": True}]

                # Off: through the CLI's own switch, then read back for everyone.
                await dispatch(
                    alice,
                    uri,
                    {
                        "type": "session/customizationToggled",
                        "id": tiny,
                        "enablement": [{"kind": "session", "enabled": False}],
                    },
                    1,
                )
                for who in (alice, bob):
                    notes = await until(who, _updated(uri, tiny, False, "stopped"), timeout=120)
                    toggled = [n for n in notes if is_action("session/customizationToggled", uri)(n)]
                    assert toggled and "rejectionReason" not in toggled[0]["params"]
                state = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                fits("/$defs/SessionState", state)
                row = next(c for c in state["customizations"] if c["id"] == tiny)
                assert row["state"] == {"kind": "stopped"} and row["enablement"][0]["enabled"] is False

                # Start requested: switched on again, and ready.
                await dispatch(bob, uri, {"type": "session/mcpServerStartRequested", "id": tiny}, 1)
                for who in (alice, bob):
                    notes = await until(who, _updated(uri, tiny, True, "ready"), timeout=120)
                    started = [n for n in notes if is_action("session/mcpServerStartRequested", uri)(n)]
                    assert started and "rejectionReason" not in started[0]["params"]

                # Stop requested: straight through to the CLI's toggle.
                await dispatch(alice, uri, {"type": "session/mcpServerStopRequested", "id": tiny}, 2)
                for who in (alice, bob):
                    await until(who, _updated(uri, tiny, False, "stopped"), timeout=120)

                # A server that cannot start: asked to start, it is retried and
                # says why it failed, in the protocol's words.
                await dispatch(alice, uri, {"type": "session/mcpServerStartRequested", "id": broken}, 3)
                for who in (alice, bob):
                    notes = await until(
                        who,
                        lambda n: (
                            is_action("session/mcpServerStateChanged", uri)(n)
                            and action_of(n)["id"] == broken
                            and action_of(n)["state"]["kind"] == "error"
                        ),
                        timeout=120,
                    )
                    assert action_of(notes[-1])["state"]["error"]["message"]

                # A prompt: the CLI has no runtime switch; refused, the list goes out again.
                prompts = next(c for c in state["customizations"] if c.get("contents") == "prompt")
                compact = next(c for c in prompts["children"] if c["name"] == "compact")
                await dispatch(
                    bob,
                    uri,
                    {
                        "type": "session/customizationToggled",
                        "id": compact["id"],
                        "enablement": [{"kind": "session", "enabled": False}],
                    },
                    2,
                )
                notes = await until(bob, is_action("session/customizationsChanged", uri))
                [refusal] = [n for n in notes if answered(2, uri)(n)]
                assert "no runtime switch for a prompt" in refusal["params"]["rejectionReason"]
                resent = action_of(notes[-1])["customizations"]
                assert next(c for c in resent if c["id"] == prompts["id"])["children"] == prompts["children"]
                await until(alice, is_action("session/customizationsChanged", uri))

                # Backgrounding: the CLI never blocks on a starting server, so nothing changes.
                await dispatch(alice, uri, {"type": "session/mcpServerBackgroundRequested", "id": tiny}, 4)
                [note] = [n for n in await until(alice, answered(4, uri)) if answered(4, uri)(n)]
                assert "rejectionReason" not in note["params"]
            daemon.terminate()
            assert await daemon.wait() == 0
    wire_clean(capture)


async def test_a_server_asking_for_a_sign_in_is_auth_required_in_the_protocols_words(tmp_path: Path) -> None:
    """A call of a configured MCP server names the server as its
    contributor. A server that starts asking for a sign-in is
    ``authRequired`` with the resource to sign in to, for every subscriber;
    started again once it stops asking (the CLI retries it), it is ready."""
    pytest.importorskip("claude_agent_sdk")
    import trio

    from tests.backends.claude_fixtures import fake_api

    from .locked_mcp import LockedMcp
    from .test_claude_sessions import _env
    from .helpers import start_turn

    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    locked = "claude.mcp:locked"
    capture = tmp_path / "wire.jsonl"

    def server_state(kind: str):
        def check(note: dict) -> bool:
            action = action_of(note)
            return (
                bool(action)
                and action["type"] == "session/mcpServerStateChanged"
                and action["id"] == locked
                and action["state"]["kind"] == kind
            )

        return check

    with fake_api.FakeAnthropic().running() as api, LockedMcp().running() as server:
        (home / ".claude.json").write_text(json.dumps({"mcpServers": {"locked": {"type": "http", "url": server.url}}}))
        api.add(fake_api.tool_use("toolu_mcp", "mcp__locked__hello", {}))
        api.add(fake_api.text("Could not say hello."))
        async with daemon_in_process(
            tmp_path / "d", "--sessions", "memory", "--wire", str(capture), env=_env(api.url, str(home))
        ) as daemon:
            async with rpc(daemon.url) as alice, rpc(daemon.url) as bob:
                await alice.initialize("alice")
                await bob.initialize("bob")
                uri, chat = await create(alice, work, provider="claude")
                await bob.call("subscribe", {"channel": uri})
                await alice.call("subscribe", {"channel": chat})
                await dispatch(alice, chat, start_turn("say hello through the server"), 1)
                notes = await until(
                    alice,
                    lambda n: (
                        is_action("session/inputNeededSet", uri)(n)
                        and action_of(n)["request"]["kind"] == "toolConfirmation"
                    ),
                    timeout=120,
                )
                request = action_of(notes[-1])["request"]
                assert request["toolCall"]["contributor"] == {"kind": "mcp", "customizationId": locked}
                await dispatch(
                    alice,
                    chat,
                    {
                        "type": "chat/toolCallConfirmed",
                        "turnId": request["turnId"],
                        "toolCallId": "toolu_mcp",
                        "approved": True,
                        "confirmed": "user-action",
                    },
                    2,
                )
                assert await trio.to_thread.run_sync(server.called.wait, 120), "the call never reached the server"

                # The server asks for a sign-in mid-call: the CLI fails the call
                # on the spot (it has no per-call moment to hold it at).
                server.locked = True
                server.release.set()
                notes = await until(alice, is_action("chat/turnComplete", chat), timeout=120)
                [done] = [action_of(n) for n in notes if is_action("chat/toolCallComplete", chat)(n)]
                assert done["result"]["success"] is False

                # Asked to start it again while it still asks: authRequired,
                # with the resource a client signs in to.
                await dispatch(alice, uri, {"type": "session/mcpServerStartRequested", "id": locked}, 3)
                for who in (alice, bob):
                    # (The call's watcher may have said it already: what counts is after the request.)
                    await until(who, is_action("session/mcpServerStartRequested", uri), timeout=120)
                    notes = await until(who, server_state("authRequired"), timeout=120)
                    state = action_of(notes[-1])["state"]
                    assert state["resource"]["resource"] == server.url and state["reason"] == "required"
                snapshot = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                fits("/$defs/SessionState", snapshot)
                row = next(c for c in snapshot["customizations"] if c["id"] == locked)
                assert row["state"]["kind"] == "authRequired"
                assert not snapshot.get("inputNeeded")  # no call is left waiting on it

                # Signed in (here: the server stops asking) and started again: ready.
                server.locked = False
                await dispatch(bob, uri, {"type": "session/mcpServerStartRequested", "id": locked}, 1)
                for who in (alice, bob):
                    await until(who, is_action("session/mcpServerStartRequested", uri), timeout=120)
                    await until(who, server_state("ready"), timeout=120)
            daemon.terminate()
            assert await daemon.wait() == 0
    wire_clean(capture)
