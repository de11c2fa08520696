"""Customizations a client switches, and plugins a client hands over,
through a real daemon, two real WebSocket clients and the demo agent (ACP):
what the agent cannot do is refused out loud and the list goes out again;
a client's plugin is copied into the daemon's own directory and reported
``loading`` then ``loaded`` (or ``error``) to every subscriber."""

from __future__ import annotations

from pathlib import Path


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
    until,
    wire_clean,
)


def answered(seq: int, channel: str):
    """The sender's answer to its own dispatch ``seq``."""

    def check(note: dict) -> bool:
        params = note.get("params") or {}
        return (
            note.get("method") == "action"
            and params.get("channel") == channel
            and (params.get("origin") or {}).get("clientSeq") == seq
        )

    return check


async def _pair(url_a: Rpc, url_b: Rpc, work: Path) -> tuple[str, str]:
    await url_a.initialize("alice")
    await url_b.initialize("bob")
    uri, chat = await create(url_a, work)
    for client in (url_a, url_b):
        state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
        fits("/$defs/SessionState", state)
    return uri, chat


async def test_a_toggle_the_agent_cannot_do_is_refused_and_the_list_resent(tmp_path: Path) -> None:
    capture = tmp_path / "wire.jsonl"
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as alice, rpc(daemon.url) as bob:
            uri, _chat = await _pair(alice, bob, tmp_path)
            state = (await alice.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            [container] = state["customizations"]
            echo = next(c for c in container["children"] if c["name"] == "echo")

            # A prompt: the agent has no runtime switch for it.
            await dispatch(
                alice,
                uri,
                {
                    "type": "session/customizationToggled",
                    "id": echo["id"],
                    "enablement": [{"kind": "session", "enabled": False}],
                },
                1,
            )
            notes = await until(alice, is_action("session/customizationsChanged", uri))
            [refusal] = [n for n in notes if answered(1, uri)(n)]
            assert "no runtime switch for a prompt" in refusal["params"]["rejectionReason"]
            resent = action_of(notes[-1])["customizations"]
            assert resent == state["customizations"]  # the control goes back to where it was
            bob_notes = await until(bob, is_action("session/customizationsChanged", uri))
            assert action_of(bob_notes[-1])["customizations"] == state["customizations"]
            assert not any(answered(1, uri)(n) for n in bob_notes)  # the refusal is the sender's alone

            # An id nobody published; an MCP request for a prompt.
            await dispatch(
                alice,
                uri,
                {
                    "type": "session/customizationToggled",
                    "id": "nope",
                    "enablement": [{"kind": "session", "enabled": False}],
                },
                2,
            )
            note = (await until(alice, answered(2, uri)))[-1]
            assert "no customization 'nope'" in note["params"]["rejectionReason"]
            await dispatch(alice, uri, {"type": "session/mcpServerStartRequested", "id": echo["id"]}, 3)
            note = (await until(alice, answered(3, uri)))[-1]
            assert "no MCP server" in note["params"]["rejectionReason"]
            await dispatch(alice, uri, {"type": "session/mcpServerStopRequested", "id": "nope"}, 4)
            note = (await until(alice, answered(4, uri)))[-1]
            assert "no MCP server" in note["params"]["rejectionReason"]

            # Backgrounding: no backend here ever blocks, so nothing changes -
            # the sender is answered with no refusal, and nobody else hears it.
            await dispatch(alice, uri, {"type": "session/mcpServerBackgroundRequested", "id": "nope"}, 5)
            note = (await until(alice, answered(5, uri)))[-1]
            assert "rejectionReason" not in note["params"]
            await dispatch(bob, uri, {"type": "session/mcpServerBackgroundRequested", "id": "x"}, 1)
            note = (await until(bob, answered(1, uri)))[-1]
            # Whatever the host sent alice for bob's action came before its answer to a ping.
            await alice.call("ping", {"channel": "ahp-root://"})
            assert not [n for n in alice.notes if is_action("session/mcpServerBackgroundRequested")(n)]
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(capture)


def _plugin(root: Path) -> Path:
    (root / "skills" / "tidy").mkdir(parents=True)
    (root / "skills" / "tidy" / "SKILL.md").write_text("---\nname: tidy\ndescription: Tidies up\n---\nTidy.\n")
    (root / "commands").mkdir()
    (root / "commands" / "greet.md").write_text("---\ndescription: Says hello\n---\nHello $ARGUMENTS\n")
    (root / "agents").mkdir()
    (root / "agents" / "helper.md").write_text("A helper.\n")
    return root


async def test_a_clients_plugins_are_copied_and_reported(tmp_path: Path) -> None:
    source = _plugin(tmp_path / "plug")
    data = tmp_path / "d"
    capture = tmp_path / "wire.jsonl"
    async with daemon_in_process(data, "--sessions", "memory", "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as alice, rpc(daemon.url) as bob:
            uri, _chat = await _pair(alice, bob, tmp_path)
            plugins = [
                {"type": "plugin", "id": "p-files", "uri": source.as_uri(), "name": "Files", "nonce": "n1"},
                {"type": "plugin", "id": "p-virtual", "uri": "virtual://alice/skills", "name": "Virtual"},
            ]
            client = {"clientId": "alice", "displayName": "Alice", "tools": [], "customizations": plugins}
            await dispatch(alice, uri, {"type": "session/activeClientSet", "activeClient": client}, 1)

            def settled(note: dict) -> bool:
                action = action_of(note)
                return (
                    bool(action)
                    and action["type"] == "session/customizationUpdated"
                    and action["customization"]["id"] == "p-virtual"
                    and action["customization"]["load"]["kind"] != "loading"
                )

            for who in (alice, bob):
                notes = await until(who, settled)
                updates = [
                    action_of(n)["customization"] for n in notes if is_action("session/customizationUpdated", uri)(n)
                ]
                files = [u for u in updates if u["id"] == "p-files"]
                assert [u["load"]["kind"] for u in files] == ["loading", "loaded"]
                assert files[-1]["clientId"] == "alice"
                kids = {c["name"]: c for c in files[-1]["children"]}
                assert {k: c["type"] for k, c in kids.items()} == {
                    "tidy": "skill",
                    "greet": "prompt",
                    "helper": "agent",
                }
                assert kids["tidy"]["description"] == "Tidies up"
                virtual = [u for u in updates if u["id"] == "p-virtual"]
                assert [u["load"]["kind"] for u in virtual] == ["loading", "error"]
                assert "not a file: URI" in virtual[-1]["load"]["message"]

            # The copy is the host's own, under its data directory.
            copied = Path(kids["tidy"]["uri"].removeprefix("file://"))
            assert copied.is_file() and data / "plugins" in copied.parents  # noqa: ASYNC240 - a test's look at a local path
            assert source not in copied.parents

            state = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            fits("/$defs/SessionState", state)
            ids = [c["id"] for c in state["customizations"]]
            assert ids[-2:] == ["p-files", "p-virtual"]  # laid after the backend's own

            # Toggling a client's plugin is this host's to answer: applied for everyone.
            toggle = {
                "type": "session/customizationToggled",
                "id": "p-files",
                "enablement": [{"kind": "session", "enabled": False}],
            }
            await dispatch(bob, uri, toggle, 1)
            for who in (alice, bob):
                [*_, note] = await until(who, is_action("session/customizationToggled", uri))
                assert "rejectionReason" not in note["params"]

            # Announcing again (new tools; the same nonce, the same unversioned
            # plugin) copies nothing; dropping one removes it.
            client["tools"] = [{"name": "openFile", "description": "Opens a file", "inputSchema": {"type": "object"}}]
            await dispatch(alice, uri, {"type": "session/activeClientSet", "activeClient": client}, 2)
            for who in (alice, bob):
                await until(who, is_action("session/activeClientSet", uri))
            client["customizations"] = plugins[:1]
            await dispatch(alice, uri, {"type": "session/activeClientSet", "activeClient": client}, 3)
            for who in (alice, bob):
                notes = await until(who, is_action("session/customizationRemoved", uri))
                assert action_of(notes[-1])["id"] == "p-virtual"
                assert not [n for n in notes if is_action("session/customizationUpdated", uri)(n)]

            # The client leaving takes its plugins with it.
            await alice.notify("unsubscribe", {"channel": uri})
            notes = await until(bob, is_action("session/customizationRemoved", uri))
            assert action_of(notes[-1])["id"] == "p-files"
            state = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert all(not c.get("clientId") for c in state["customizations"])
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(capture)


async def test_a_plugin_an_automation_template_names_reaches_its_runs_session(tmp_path: Path) -> None:
    """A run announces the Automation client carrying its template's plugins,
    which is how one reaches a session nobody is connected to."""
    from .test_automations import CAT, answered, definition, finished
    from .test_automations import dispatch as dispatch_catalogue

    source = _plugin(tmp_path / "plug")
    work = tmp_path / "work"
    work.mkdir()
    data = tmp_path / "d"
    async with daemon_in_process(data, "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("one", subscriptions=["ahp-root://", CAT])
            chore = definition("hello", work)
            chore["session"]["customizations"] = [
                {"type": "plugin", "id": "p-chore", "uri": source.as_uri(), "name": "Chore kit", "nonce": "1"}
            ]
            await dispatch_catalogue(
                client,
                {"type": "automation/createRequested", "resource": "ahp-automation:/chore", "definition": chore},
                1,
            )
            assert "rejectionReason" not in await answered(client, 1)
            reply = await client.call(
                "runAutomation", {"channel": CAT, "automation": "ahp-automation:/chore", "requestId": "r1"}
            )
            state = await snapshot_until(client, reply["result"]["resource"], finished)
            (session,) = state["sessions"]

            def chore_plugin(state: dict) -> dict | None:
                return next((c for c in state.get("customizations") or [] if c["id"] == "p-chore"), None)

            snapshot = await snapshot_until(
                client,
                session,
                lambda state: chore_plugin(state) is not None and chore_plugin(state)["load"]["kind"] != "loading",
            )
            plugin = chore_plugin(snapshot)
            fits("/$defs/SessionState", snapshot)
            assert plugin["clientId"] == "automation" and plugin["load"] == {"kind": "loaded"}
            assert {c["name"] for c in plugin["children"]} == {"tidy", "greet", "helper"}
            assert data / "plugins" in Path(plugin["children"][0]["uri"].removeprefix("file://")).parents
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_a_folder_decision_on_a_clients_plugin_reaches_the_sessions_in_that_folder(tmp_path: Path) -> None:
    """The host keeps the decision a client made for the folder a session
    works in: another session there holding the same plugin hears it, a new
    one there is handed it with the plugin, and one elsewhere is not."""
    source = _plugin(tmp_path / "plug")
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    folder_off = [{"kind": "workspace", "uri": work.as_uri(), "enabled": False}]
    client = {
        "clientId": "alice",
        "displayName": "Alice",
        "tools": [],
        "customizations": [{"type": "plugin", "id": "p-files", "uri": source.as_uri(), "name": "Files", "nonce": "n1"}],
    }

    async def announced(who: Rpc, folder: Path) -> tuple[str, dict]:
        uri, _chat = await create(who, folder)
        await dispatch(who, uri, {"type": "session/activeClientSet", "activeClient": client}, 1)
        notes = await until(
            who,
            lambda n: (
                is_action("session/customizationUpdated", uri)(n)
                and action_of(n)["customization"]["load"]["kind"] == "loaded"
            ),
        )
        return uri, action_of(notes[-1])["customization"]

    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as alice:
            await alice.initialize("alice")
            first, row = await announced(alice, work)
            assert "enablement" not in row
            second, _row = await announced(alice, work)
            third, _row = await announced(alice, elsewhere)

            await dispatch(
                alice, first, {"type": "session/customizationToggled", "id": "p-files", "enablement": folder_off}, 2
            )
            notes = await until(alice, lambda n: is_action("session/customizationUpdated", second)(n))
            assert action_of(notes[-1])["customization"]["enablement"] == folder_off
            [toggled] = [n for n in notes if answered(2, first)(n)]
            assert "rejectionReason" not in toggled["params"]
            assert not [n for n in notes if is_action("session/customizationUpdated", third)(n)]
            for uri in (second, third):
                state = (await alice.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                fits("/$defs/SessionState", state)
                held = next(c for c in state["customizations"] if c["id"] == "p-files")
                assert held.get("enablement") == (folder_off if uri == second else None)

            fourth, row = await announced(alice, work)  # decided nothing itself
            assert row["enablement"] == folder_off
        daemon.terminate()
        assert await daemon.wait() == 0
