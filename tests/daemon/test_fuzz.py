"""Random and malformed frames never crash the host or disturb another client.

Hypothesis writes the frames: text that is not JSON, JSON that is not
JSON-RPC, and JSON-RPC that names real methods with params shaped a little
or a lot wrong. They go over a real WebSocket on 127.0.0.1 while a second,
well-behaved client watches the root channel.
"""

from __future__ import annotations

import json

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ahpd.host.assembly import Host
from ahpd.protocol import model
from tests.host.live import serve

from .helpers import rpc

METHODS = sorted(set(model.COMMANDS) | set(model.CLIENT_NOTIFICATIONS) | {"action", "nope", ""})
ACTION_TYPES = sorted(model.ACTIONS)

json_values = st.recursive(
    # Floats include NaN and the infinities, texts lone surrogates: json.dumps
    # writes them, and the host must refuse them without anyone else noticing.
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(["\ud83d", "a\udc00b", "\ud83d\ude00"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
params = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"channel": st.sampled_from(["ahp-root://", "x", ""])},
        optional={
            "protocolVersions": st.lists(st.text(max_size=6) | st.sampled_from(["1.0.0", "0.9.0"]), max_size=3),
            "clientId": json_values,
            "clientSeq": json_values,
            "lastSeenServerSeq": json_values,
            "subscriptions": json_values,
            "initialSubscriptions": st.lists(st.text(max_size=12), max_size=3),
            "action": st.fixed_dictionaries(
                {"type": st.sampled_from(ACTION_TYPES)},
                optional={
                    "config": json_values,
                    "turnId": json_values,
                    "activeSessions": json_values,
                },
            )
            | json_values,
        },
    ),
)
rpc_frames = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "2.0", "1.0", 2])},
    optional={
        "id": st.integers() | st.text(max_size=4) | st.none() | st.floats(allow_nan=False),
        "method": st.sampled_from(METHODS) | json_values,
        "params": params,
        "result": json_values,
        "error": json_values,
    },
).map(json.dumps)
frames = st.one_of(
    rpc_frames,
    json_values.map(json.dumps),
    st.text(max_size=40),
    st.sampled_from(["", "{", "[]", "[1,2]", "null", '{"jsonrpc":"2.0"}', "\x00", "1e999999"]),
    st.integers(1, 2000).map(lambda depth: "[" * depth + "]" * depth),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=st.lists(frames, min_size=1, max_size=25))
async def test_garbage_never_crashes_the_host_nor_reaches_another_client(batch: list[str]) -> None:
    host = Host()
    async with trio.open_nursery() as nursery:
        listening = await serve(nursery, host)
        url = f"ws://127.0.0.1:{listening.port}/"
        async with rpc(url) as watcher, rpc(url) as fuzzer:
            await watcher.initialize("watcher")
            for text in batch:
                await fuzzer.ws.send_message(text)
            # The fuzzer's connection is still served, in order, after all of it.
            reply = await fuzzer.call("ping")
            assert reply.get("result", "error") is None or "error" in reply
            # The watcher was told nothing except what it is subscribed to.
            before = host.bus.server_seq
            host.bus.emit("ahp-root://", {"type": "root/activeSessionsChanged", "activeSessions": 10**6})
            assert (await watcher.call("ping"))["result"] is None
            for note in watcher.notes:
                assert note["method"] == "action", note
                assert note["params"]["channel"] == "ahp-root://"
                assert "rejectionReason" not in note["params"], note
            assert watcher.notes[-1]["params"]["serverSeq"] == before + 1
        nursery.cancel_scope.cancel()
