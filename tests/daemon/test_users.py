"""The users directory: users added with the CLI, signed in over the wire.

``ahpd users`` runs as a real subprocess with a temporary HOME; the daemon
is a real process; the client a real WebSocket. Who owns a session and who
sent a turn must survive a daemon restart.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid

from . import test_automations as automations
from .helpers import action_of, create, daemon_in_process, dispatch, listed_as, rpc, start_turn, until, wire_clean

USERS = "ahpd://users"
ROOT = "ahp-root://"
MIB = 2**20


def users(tmp_path, data_dir, *args: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "ahpd", "users", *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state")},
    )


def test_the_cli_adds_lists_and_removes_users(tmp_path) -> None:
    data = tmp_path / "d"
    empty = users(tmp_path, data, "list")  # before any: said on stderr, nothing for a script on stdout
    assert empty.returncode == 0 and empty.stdout == ""
    assert empty.stderr == (
        f"no users ({data / 'users.json'} does not exist: the daemon names nobody); `ahpd users add USER` adds one\n"
    )
    added = users(tmp_path, data, "add", "alice")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert token.startswith("alice:") and len(token) > 30
    stored = (data / "users.json").read_text()
    assert token not in stored and token.split(":")[1] not in stored and "$argon2id$" in stored
    assert oct((data / "users.json").stat().st_mode & 0o777) == "0o600"
    assert users(tmp_path, data, "add", "bob").returncode == 0
    listed = users(tmp_path, data, "list")
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["alice", "bob"]

    again = users(tmp_path, data, "add", "alice")
    assert again.returncode == 2 and "user alice already exists" in again.stderr
    bad = users(tmp_path, data, "add", "no spaces")
    assert bad.returncode == 2 and "is not a user id" in bad.stderr
    missing = users(tmp_path, data, "remove", "carol")
    assert missing.returncode == 2 and "no user carol" in missing.stderr
    assert users(tmp_path, data, "remove", "bob").returncode == 0
    assert users(tmp_path, data, "list").stdout.split("\t")[0] == "alice"
    assert users(tmp_path, data, "remove", "alice").returncode == 0
    empty = users(tmp_path, data, "list")
    assert empty.returncode == 0 and empty.stdout == ""
    assert empty.stderr == f"no users in {data / 'users.json'}; `ahpd users add USER` adds one\n"


async def test_a_user_signs_in_and_is_named_on_sessions_and_turns_across_a_restart(tmp_path) -> None:
    data = tmp_path / "d"
    work = tmp_path / "work"
    work.mkdir()
    token = users(tmp_path, data, "add", "alice").stdout.strip()
    root_ref = f"root:{socket.gethostname()}"
    capture = tmp_path / "wire.jsonl"
    async with daemon_in_process(data, "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as client:
            init = await client.initialize("w1")
            agents = init["snapshots"][0]["state"]["agents"]
            assert all(USERS in [r["resource"] for r in a["protectedResources"]] for a in agents)

            unknown = await client.call(
                "authenticate", {"channel": "ahp-root://", "resource": USERS, "token": "mallory:abc"}
            )
            assert unknown["error"]["code"] == -32007
            assert "no user mallory" in unknown["error"]["message"]
            wrong = await client.call(
                "authenticate", {"channel": "ahp-root://", "resource": USERS, "token": "alice:not-the-secret"}
            )
            assert wrong["error"]["code"] == -32007 and "not alice's" in wrong["error"]["message"]
            assert wrong["error"]["data"]["resources"][0]["resource"] == USERS
            shapeless = await client.call(
                "authenticate", {"channel": "ahp-root://", "resource": USERS, "token": "no-colon"}
            )
            assert shapeless["error"]["code"] == -32007

            # Not signed in: the deployment's own token is who acts.
            root_session, _ = await create(client, work)
            state = (await client.call("subscribe", {"channel": root_session}))["result"]["snapshot"]["state"]
            assert state["_meta"]["ahpd.owner"] == root_ref

            assert (await client.call("authenticate", {"channel": "ahp-root://", "resource": USERS, "token": token}))[
                "result"
            ] == {}
            uri, chat = await create(client, work)
            state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert state["_meta"]["ahpd.owner"] == "user:alice"
            client.notes.clear()
            await dispatch(client, chat, start_turn("hello"), 1)
            notes = await until(client, lambda n: (action_of(n) or {}).get("type") == "chat/turnComplete")
            started = next(action_of(n) for n in notes if (action_of(n) or {}).get("type") == "chat/turnStarted")
            assert started["_meta"]["ahpd.sender"] == "user:alice"
            assert started["message"]["_meta"]["ahpd.sender"] == "user:alice"

            # A chat begun with a message names its sender the same way.
            side = f"ahp-chat:/{uuid.uuid4()}"
            created = await client.call(
                "createChat",
                {"channel": uri, "chat": side, "initialMessage": {"text": "and you", "origin": {"kind": "user"}}},
            )
            assert created["result"] is None, created
            side_turns = (await client.call("subscribe", {"channel": side}))["result"]["snapshot"]["state"]
            message = (side_turns.get("activeTurn") or (side_turns["turns"] or [{}])[-1])["message"]
            assert message["_meta"]["ahpd.sender"] == "user:alice"

            # An automation is its creator's, and so is every run of it.
            assert await automations.catalogue(client) == []  # subscribed before dispatching to it
            await automations.dispatch(
                client,
                {
                    "type": "automation/createRequested",
                    "resource": "ahp-automation:/a",
                    "definition": automations.definition("chore", work),
                },
                2,
            )
            assert "rejectionReason" not in await automations.answered(client, 2)
            (entry,) = await automations.catalogue(client)
            assert entry["_meta"]["ahpd.owner"] == "user:alice"
            run = (
                await client.call(
                    "runAutomation", {"channel": automations.CAT, "automation": "ahp-automation:/a", "requestId": "r1"}
                )
            )["result"]["resource"]
            state = await automations.run_state(client, run, lambda s: True)
            assert state["_meta"]["ahpd.owner"] == "user:alice"
        daemon.terminate()
        assert await daemon.wait() == 0

    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("w2")
            rows = (await client.call("listSessions", {"channel": "ahp-root://"}))["result"]["items"]
            owners = {r["resource"]: (r.get("_meta") or {}).get("ahpd.owner") for r in rows}
            assert owners[listed_as(uri)] == "user:alice" and owners[listed_as(root_session)] == root_ref
            state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert state["_meta"]["ahpd.owner"] == "user:alice"
            row = next(
                r
                for r in (await client.call("listSessions", {"channel": "ahp-root://"}))["result"]["items"]
                if r["resource"] == listed_as(uri)
            )
            assert row["_meta"]["ahpd.owner"] == "user:alice"
            turns = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]["turns"]
            assert turns[0]["message"]["_meta"]["ahpd.sender"] == "user:alice"
            (entry,) = await automations.catalogue(client)
            assert entry["_meta"]["ahpd.owner"] == "user:alice"
            # Signing out is an empty token; a signed-out connection acts as root again.
            assert (await client.call("authenticate", {"channel": "ahp-root://", "resource": USERS, "token": token}))[
                "result"
            ] == {}
            assert (await client.call("authenticate", {"channel": "ahp-root://", "resource": USERS, "token": ""}))[
                "result"
            ] == {}
            later, _ = await create(client, work)
            state = (await client.call("subscribe", {"channel": later}))["result"]["snapshot"]["state"]
            assert state["_meta"]["ahpd.owner"] == root_ref
    wire_clean(capture)


async def test_a_host_without_a_directory_names_nobody(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with daemon_in_process(tmp_path / "d") as daemon:
        async with rpc(daemon.url) as client:
            init = await client.initialize("w1")
            agents = init["snapshots"][0]["state"]["agents"]
            assert not any(r["resource"] == USERS for a in agents for r in a.get("protectedResources") or [])
            refused = await client.call(
                "authenticate", {"channel": "ahp-root://", "resource": USERS, "token": "alice:x"}
            )
            assert refused["error"]["code"] == -32602 and "not a protected resource" in refused["error"]["message"]
            uri, chat = await create(client, work)
            state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert "ahpd.owner" not in (state.get("_meta") or {})
            client.notes.clear()
            await dispatch(client, chat, start_turn("hello"), 1)
            notes = await until(client, lambda n: (action_of(n) or {}).get("type") == "chat/turnComplete")
            started = next(action_of(n) for n in notes if (action_of(n) or {}).get("type") == "chat/turnStarted")
            assert "_meta" not in started and "_meta" not in started["message"]
            # Nobody to tell apart: any connection pushes the host's limits.
            await dispatch(client, ROOT, {"type": "root/configChanged", "config": {"clientQueueBytes": 2 * MIB}}, 2)
            assert "rejectionReason" not in await automations.answered(client, 2)
            assert (await root_values(client))["clientQueueBytes"] == 2 * MIB


async def root_values(client) -> dict:
    return (await client.call("subscribe", {"channel": ROOT}))["result"]["snapshot"]["state"]["config"]["values"]


async def test_the_host_s_limits_need_config_write_and_workspace_trust_needs_trust_push(tmp_path) -> None:
    """Issue 26, row 5: with a users directory, pushing clientQueueBytes,
    replayBytes and the host's other limits needs a user granted
    config:write, and workspaceTrust one granted trust:push; an anonymous
    connection and a user with no scopes are refused by name, and the rest of
    their push applies."""
    data = tmp_path / "d"
    alice = users(tmp_path, data, "add", "alice", "--scope", "config:write").stdout.strip()
    bob = users(tmp_path, data, "add", "bob").stdout.strip()
    listed = users(tmp_path, data, "list").stdout.splitlines()
    assert [line.split("\t")[::2] for line in listed] == [["alice", "config:write"], ["bob", "-"]]
    nonsense = users(tmp_path, data, "grant", "bob", "root:everything")
    assert nonsense.returncode == 2 and "'root:everything' is not a scope" in nonsense.stderr

    def push(config: dict, **extra) -> dict:
        return {"type": "root/configChanged", "config": config, **extra}

    capture = tmp_path / "wire.jsonl"
    async with daemon_in_process(data, "--sessions", "memory", "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("w1")
            seq = 0

            async def answer(action: dict, partly: bool = False) -> str | None:
                """The refusal of ``action``, or None; ``partly``: a push whose
                other keys applied (answered twice: applied, then refused)."""
                nonlocal seq
                seq += 1
                await dispatch(client, ROOT, action, seq)
                first = await automations.answered(client, seq)
                if partly:
                    assert "rejectionReason" not in first
                    return (await automations.answered(client, seq)).get("rejectionReason")
                return first.get("rejectionReason")

            # Anonymous: the limit refused by name, the rest applied.
            reason = await answer(push({"clientQueueBytes": 2 * MIB, "changeWords": {"mode": "forced"}}), partly=True)
            assert reason is not None and "clientQueueBytes needs the config:write scope" in reason, reason
            values = await root_values(client)
            assert values["clientQueueBytes"] == 16 * MIB and values["changeWords"] == {"mode": "forced"}
            reason = await answer(push({"workspaceTrust": True}))
            assert reason is not None and "workspaceTrust needs the trust:push scope" in reason, reason
            # Replacing the whole config does not move a key the connection may not push.
            reason = await answer(
                push({"agentProcessLimit": 2, "clientQueueBytes": 3 * MIB}, replace=True), partly=True
            )
            assert reason is not None and "agentProcessLimit needs the config:write scope" in reason, reason
            values = await root_values(client)
            assert values["agentProcessLimit"] == 8 and values["clientQueueBytes"] == 16 * MIB

            # A user with no scopes: refused the same way.
            signed = await client.call("authenticate", {"channel": ROOT, "resource": USERS, "token": bob})
            assert signed["result"] == {}
            reason = await answer(push({"replayBytes": 4 * MIB}))
            assert reason is not None and "replayBytes needs the config:write scope" in reason, reason
            assert (await root_values(client))["replayBytes"] == 32 * MIB

            # A user granted config:write pushes them; workspaceTrust still needs trust:push.
            signed = await client.call("authenticate", {"channel": ROOT, "resource": USERS, "token": alice})
            assert signed["result"] == {}
            assert await answer(push({"clientQueueBytes": 2 * MIB, "replayBytes": 4 * MIB})) is None
            values = await root_values(client)
            assert values["clientQueueBytes"] == 2 * MIB and values["replayBytes"] == 4 * MIB
            reason = await answer(push({"workspaceTrust": True}))
            assert reason is not None and "trust:push" in reason, reason

            # Signed out, a replace keeps what only a granted user may set.
            signed = await client.call("authenticate", {"channel": ROOT, "resource": USERS, "token": ""})
            assert signed["result"] == {}
            reason = await answer(push({}, replace=True))
            assert reason is None, reason
            assert (await root_values(client))["clientQueueBytes"] == 2 * MIB
        daemon.terminate()
        assert await daemon.wait() == 0

    # A grant counts from the next sign-in.
    granted = users(tmp_path, data, "grant", "bob", "trust:push")
    assert granted.returncode == 0 and granted.stdout.strip() == "bob\ttrust:push", granted.stderr
    async with daemon_in_process(data, "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("w2")
            signed = await client.call("authenticate", {"channel": ROOT, "resource": USERS, "token": bob})
            assert signed["result"] == {}
            await dispatch(client, ROOT, push({"workspaceTrust": True}), 1)
            assert "rejectionReason" not in await automations.answered(client, 1)
        daemon.terminate()
        assert await daemon.wait() == 0
    revoked = users(tmp_path, data, "revoke", "bob", "trust:push")
    assert revoked.returncode == 0 and revoked.stdout.strip() == "bob\t-"
    wire_clean(capture)
