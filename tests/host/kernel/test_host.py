"""The host's rules over an in-memory connection: handshake, subscriptions,
dispatch, refusals, replay and the root config."""

from __future__ import annotations

import pytest
import trio

from ahpd.host.assembly import Host
from ahpd.host.kernel.seqstore import FileSeqStore, MemorySeqStore

from ...schema import fits
from ..harness import connect

ROOT = "ahp-root://"


@pytest.fixture
async def host_and_nursery():
    host = Host()
    async with trio.open_nursery() as nursery:
        yield host, nursery
        nursery.cancel_scope.cancel()


# -- handshake ------------------------------------------------------------------


async def test_initialize_answers_root_snapshot_that_fits_the_schema(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    client = await connect(nursery, host)
    result = await client.initialize()
    assert result["protocolVersion"] == "1.0.0"
    assert result["serverInfo"]["name"] == "ahpd"
    [snapshot] = result["snapshots"]
    assert snapshot["resource"] == ROOT and snapshot["fromSeq"] == result["serverSeq"]
    fits("/commands/initialize/result", result)
    fits("/$defs/RootState", snapshot["state"])
    assert "clientQueueBytes" in snapshot["state"]["config"]["schema"]["properties"]


async def test_ping_works_before_initialize_and_nothing_else_does(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    client = await connect(nursery, host)
    assert (await client.call("ping", {"channel": ROOT}))["result"] is None
    reply = await client.call("subscribe", {"channel": ROOT})
    assert reply["error"]["code"] == -32600
    assert "initialize" in reply["error"]["message"]


async def test_unknown_and_experimental_methods_are_32601(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    client = await connect(nursery, host)
    await client.initialize()
    for method in ("frobnicate", "createTcpConnection", "channelDeliveryResume"):
        reply = await client.call(method, {"channel": ROOT})
        assert reply["error"]["code"] == -32601, method
        assert "result" not in reply


async def test_version_refusal_and_bad_entry(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    client = await connect(nursery, host)
    reply = await client.call("initialize", {"channel": ROOT, "protocolVersions": ["9.0.0"], "clientId": "c"})
    assert reply["error"]["code"] == -32005
    assert reply["error"]["data"]["supportedVersions"] == ["1.0.0", "0.10.0", "0.9.0"]
    reply = await client.call("initialize", {"channel": ROOT, "protocolVersions": ["1.x"], "clientId": "c"})
    assert reply["error"]["code"] == -32602 and "'1.x'" in reply["error"]["message"]
    # The connection is still usable after both refusals.
    assert (await client.initialize(versions=["1.4.0"]))["protocolVersion"] == "1.4.0"


async def test_literal_channel_is_enforced_except_initialize_and_ping(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    client = await connect(nursery, host)
    assert "result" in await client.call("ping", {"channel": "ahp-session:/x"})
    reply = await client.call("initialize", {"channel": "nope://", "protocolVersions": ["1.0.0"], "clientId": "c"})
    assert "result" in reply
    reply = await client.call(
        "reconnect",
        {
            "channel": "ahp-session:/x",
            "clientId": "c",
            "lastSeenServerSeq": 0,
            "subscriptions": [],
        },
    )
    assert reply["error"]["code"] == -32602
    assert "ahp-root://" in reply["error"]["message"]
    # An absent channel is accepted: it named nothing wrong.
    reply = await client.call("reconnect", {"clientId": "c", "lastSeenServerSeq": 0, "subscriptions": []})
    assert "result" in reply


async def test_bad_params_name_the_field(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    client = await connect(nursery, host)
    reply = await client.call("initialize", {"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": 5})
    assert reply["error"]["code"] == -32602
    assert reply["error"]["data"]["path"] == "$.clientId"
    reply = await client.call(
        "initialize",
        {
            "channel": ROOT,
            "protocolVersions": ["1.0.0"],
            "clientId": "c",
            "colour": "red",
        },
    )
    assert reply["error"]["data"]["path"] == "$.colour"


async def test_parse_error_keeps_the_connection_open(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    client = await connect(nursery, host)
    client.send_raw("{oops")
    assert (await client.frame())["error"]["code"] == -32700
    assert (await client.call("ping"))["result"] is None


async def test_internal_fault_is_32603_and_the_host_carries_on(host_and_nursery, monkeypatch) -> None:
    from ahpd.host import table

    def boom(host, peer, params):
        raise RuntimeError("kaboom")

    monkeypatch.setitem(table.COMMANDS, "ping", boom)
    host, nursery = host_and_nursery
    a = await connect(nursery, host, "a")
    b = await connect(nursery, host, "b")
    reply = await a.call("ping")
    assert reply["error"]["code"] == -32603 and "kaboom" in reply["error"]["message"]
    monkeypatch.undo()
    assert (await a.call("ping"))["result"] is None
    assert (await b.call("ping"))["result"] is None


# -- subscriptions -----------------------------------------------------------------


async def test_subscribe_twice_is_answered_twice_and_unknown_channel_refused(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    client = await connect(nursery, host)
    await client.initialize(subscriptions=[])
    first = await client.call("subscribe", {"channel": ROOT})
    second = await client.call("subscribe", {"channel": ROOT})
    assert first["result"]["snapshot"]["resource"] == ROOT
    assert second["result"] == first["result"]
    reply = await client.call("subscribe", {"channel": "ahp-session:/nobody"})
    assert reply["error"]["code"] == -32001


async def test_initial_subscription_to_nothing_is_not_watched(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    client = await connect(nursery, host)
    result = await client.initialize(subscriptions=[ROOT, "ahp-session:/gone", ROOT])
    assert [s["resource"] for s in result["snapshots"]] == [ROOT]


async def test_unsubscribe_is_per_connection(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    a = await connect(nursery, host, "a")
    b = await connect(nursery, host, "b")
    await a.initialize("a")
    await b.initialize("b")
    a.notify("unsubscribe", {"channel": ROOT})
    await a.call("ping")  # ordered after the unsubscribe
    host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 5})
    await a.call("ping")
    await b.call("ping")
    assert a.pending() == []
    [env] = b.pending()
    assert env["params"]["action"]["activeSessions"] == 5


# -- dispatch ----------------------------------------------------------------------


async def test_host_only_action_is_refused_to_its_sender_only(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    a = await connect(nursery, host, "a")
    b = await connect(nursery, host, "b")
    await a.initialize("a")
    await b.initialize("b")
    seq_before = host.bus.server_seq
    client_seq = a.dispatch(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 3})
    env = (await a.frame())["params"]
    assert env["rejectionReason"] and "host" in env["rejectionReason"]
    assert env["origin"] == {"clientId": "a", "clientSeq": client_seq}
    assert env["serverSeq"] == seq_before == host.bus.server_seq
    assert len(host.bus.replay) == 0
    await b.call("ping")
    assert b.pending() == []
    fits("/notifications/action", env)


async def test_config_change_reaches_everyone_with_origin(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    a = await connect(nursery, host, "a")
    b = await connect(nursery, host, "b")
    await a.initialize("a")
    await b.initialize("b")
    a.dispatch(ROOT, {"type": "root/configChanged", "config": {"autoReplyEnabled": True}})
    env_a = (await a.frame())["params"]
    env_b = (await b.frame())["params"]
    assert env_a == env_b
    assert env_a["origin"]["clientId"] == "a" and "rejectionReason" not in env_a
    assert env_a["serverSeq"] == host.bus.server_seq == 1
    assert host.config("autoReplyEnabled") is True
    fits("/notifications/action", env_a)


async def test_unchanged_action_goes_back_to_its_sender_only(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    a = await connect(nursery, host, "a")
    b = await connect(nursery, host, "b")
    await a.initialize("a")
    await b.initialize("b")
    action = {"type": "root/configChanged", "config": {"replayBytes": 32 * 2**20}}  # the default
    client_seq = a.dispatch(ROOT, action)
    env = (await a.frame())["params"]
    assert env["origin"]["clientSeq"] == client_seq and "rejectionReason" not in env
    assert env["serverSeq"] == 0 and host.bus.server_seq == 0
    assert len(host.bus.replay) == 0
    await b.call("ping")
    assert b.pending() == []


async def test_undeclared_config_key_is_refused_by_name_and_the_rest_applies(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    a = await connect(nursery, host, "a")
    await a.initialize("a")
    a.dispatch(
        ROOT, {"type": "root/configChanged", "config": {"autoReplyEnabled": True, "artifactToolsCompactPrompts": 1}}
    )
    applied = (await a.frame())["params"]
    refusal = (await a.frame())["params"]
    assert applied["action"]["config"] == {"autoReplyEnabled": True}
    assert "artifactToolsCompactPrompts" in refusal["rejectionReason"]
    assert host.config("autoReplyEnabled") is True


async def test_host_keys_have_a_floor_and_apply_to_the_next_send(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    a = await connect(nursery, host, "a")
    await a.initialize("a")
    a.dispatch(ROOT, {"type": "root/configChanged", "config": {"clientQueueBytes": 1024}})
    refusal = (await a.frame())["params"]
    assert "from 1048576 bytes (1 MiB)" in refusal["rejectionReason"]
    a.dispatch(ROOT, {"type": "root/configChanged", "config": {"clientQueueBytes": 2 * 2**20}})
    await a.frame()
    assert host.queue_limit() == 2 * 2**20


async def test_connection_keys_stay_on_the_connection(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    a = await connect(nursery, host, "a")
    b = await connect(nursery, host, "b")
    await a.initialize("a")
    await b.initialize("b")
    a.dispatch(ROOT, {"type": "root/configChanged", "config": {"defaultShell": "/bin/zsh"}})
    env = (await a.frame())["params"]
    assert "rejectionReason" not in env and env["origin"]["clientId"] == "a"
    assert host.bus.server_seq == 0
    assert "defaultShell" not in host.bus.channels[ROOT].state["config"]["values"]
    [peer_a] = [p for p in host.peers if p.client_id == "a"]
    assert peer_a.config["defaultShell"] == "/bin/zsh"
    await b.call("ping")
    assert b.pending() == []


async def test_malformed_dispatch_is_refused_naming_the_path(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    a = await connect(nursery, host, "a")
    await a.initialize("a")
    a.dispatch(ROOT, {"type": "root/configChanged", "config": {}, "sneaky": 1})
    env = (await a.frame())["params"]
    assert "$.action.sneaky" in env["rejectionReason"]
    fits("/notifications/action", env)
    a.notify("dispatchAction", {"channel": ROOT, "clientSeq": 9, "action": {"type": "root/nope"}})
    refusal = (await a.frame())["params"]  # the sender can match it by its clientSeq
    assert refusal["origin"] == {"clientId": "a", "clientSeq": 9}
    assert refusal["action"] == {"type": "root/nope"} and "$.action" in refusal["rejectionReason"]
    assert refusal["serverSeq"] == host.bus.server_seq
    a.notify("dispatchAction", {"channel": ROOT, "action": {"type": "root/nope"}})  # no clientSeq to answer on
    err = await a.frame()
    assert err["id"] is None and err["error"]["code"] == -32602
    a.dispatch("ahp-session:/none", {"type": "session/titleChanged", "title": "x"})
    assert "no channel" in (await a.frame())["params"]["rejectionReason"]


# -- replay and reconnect ---------------------------------------------------------------


async def test_reconnect_replays_only_its_channels_and_names_missing(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    a = await connect(nursery, host, "a")
    await a.initialize("a")
    host.bus.open("ahp-session:/s1", "session", {"resource": "ahp-session:/s1"})
    for n in range(3):
        host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": n + 1})
    a.close()
    b = await connect(nursery, host, "b")
    reply = await b.call(
        "reconnect",
        {
            "channel": ROOT,
            "clientId": "a",
            "lastSeenServerSeq": 1,
            "subscriptions": [ROOT, ROOT, "ahp-session:/gone"],
        },
    )
    result = reply["result"]
    assert result["type"] == "replay"
    assert [e["serverSeq"] for e in result["actions"]] == [2, 3]
    assert result["missing"] == ["ahp-session:/gone"]
    fits("/commands/reconnect/result", result)
    # And it is subscribed again.
    host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 9})
    assert (await b.frame())["params"]["serverSeq"] == 4


async def test_reconnect_beyond_the_buffer_gets_snapshots(host_and_nursery) -> None:
    host, nursery = host_and_nursery
    for n in range(1005):
        host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": n + 1})
    assert len(host.bus.replay) == 1000
    b = await connect(nursery, host, "b")
    reply = await b.call("reconnect", {"clientId": "a", "lastSeenServerSeq": 2, "subscriptions": [ROOT]})
    result = reply["result"]
    assert result["type"] == "snapshot"
    assert result["snapshots"][0]["fromSeq"] == 1005
    assert result["snapshots"][0]["state"]["activeSessions"] == 1005


def test_replay_bytes_bound_keeps_the_newest() -> None:
    from ahpd.host.kernel.bus import Entry, ReplayBuffer

    buf = ReplayBuffer(lambda: 100)
    for seq in range(1, 6):
        buf.append(Entry(seq, ROOT, {"serverSeq": seq}, 40))
    assert len(buf) == 2 and buf.weight == 80
    buf.append(Entry(6, ROOT, {"serverSeq": 6}, 500))  # bigger than the budget alone
    assert len(buf) == 1 and buf.oldest_seq == 6
    assert buf.since(5, 6, [ROOT]) == [{"serverSeq": 6}]
    assert buf.since(3, 6, [ROOT]) is None


def test_server_seq_survives_a_restart_and_a_crash(tmp_path) -> None:
    store = FileSeqStore(tmp_path / "serverSeq")
    host = Host(seq_store=store)
    for n in range(5):
        host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": n + 1})
    host.close()
    again = Host(seq_store=FileSeqStore(tmp_path / "serverSeq"))
    assert again.bus.server_seq == 5
    again.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 99})
    assert again.bus.server_seq == 6
    # A crash (no close): the next start is past anything handed out.
    crashed = Host(seq_store=FileSeqStore(tmp_path / "serverSeq"))
    assert crashed.bus.server_seq > 6


def test_notifications_carry_no_server_seq_and_are_not_buffered() -> None:
    host = Host(seq_store=MemorySeqStore())
    sent = []

    class Sub:
        def send(self, text, size=None):
            sent.append(text)
            return True

    host.bus.notify([Sub()], "root/sessionRemoved", {"channel": ROOT, "session": "x:/1"})
    assert host.bus.server_seq == 0 and len(host.bus.replay) == 0
    assert "serverSeq" not in sent[0]
