"""Root config numbers are finite and within bounds, named when they are not."""

from __future__ import annotations

import json

import pytest
import trio

from ahpd.host.kernel.rootconfig import RootConfigStore
from ahpd.host.assembly import Host
from ahpd.host.kernel.rootconfig import GIB, MIB, check_value

from ..harness import connect

ROOT = "ahp-root://"


@pytest.mark.parametrize("key", ["clientQueueBytes", "replayBytes"])
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (float("-inf"), "finite"),
        (MIB - 1, "from 1048576 bytes"),
        (GIB + 1, "to 1073741824 bytes"),
        (10**400, "1 GiB"),
        (True, "a number"),
        ("16", "a number"),
    ],
)
def test_a_host_key_out_of_bounds_is_refused_by_name(key, value, problem) -> None:
    reason = check_value(key, value)
    assert reason is not None and key in reason and problem in reason


@pytest.mark.parametrize("value", [MIB, GIB, 16 * MIB, 2.5 * MIB])
def test_a_host_key_within_bounds_is_taken(value) -> None:
    assert check_value("replayBytes", value) is None


async def test_a_push_over_the_ceiling_is_refused_and_the_limit_stays() -> None:
    host = Host()
    async with trio.open_nursery() as nursery:
        a = await connect(nursery, host, "a")
        await a.initialize("a")
        before = host.queue_limit()
        a.dispatch(ROOT, {"type": "root/configChanged", "config": {"clientQueueBytes": 2**40}})
        refusal = (await a.frame())["params"]
        assert "clientQueueBytes" in refusal["rejectionReason"] and "1 GiB" in refusal["rejectionReason"]
        assert host.queue_limit() == before and host.bus.server_seq == 0
        nursery.cancel_scope.cancel()


def test_stored_values_out_of_bounds_fall_back_to_the_defaults(tmp_path) -> None:
    path = tmp_path / "root-config.json"
    path.write_text(
        '{"replayBytes": NaN, "clientQueueBytes": 1e400, "autoReplyEnabled": true, "telemetryLevel": "loud"}'
    )
    assert RootConfigStore(path).load() == {"autoReplyEnabled": True}
    store = RootConfigStore(path)
    before = path.read_bytes()
    store.save({"replayBytes": float("nan")})  # no JSON form: logged and dropped, never written
    assert path.read_bytes() == before
    store.save({"replayBytes": 2 * MIB})
    assert json.loads(path.read_text()) == {"replayBytes": 2 * MIB}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (-1, "from 0 (never)"),
        (7 * 24 * 3600 + 1, "to 604800 seconds"),
        (float("nan"), "finite"),
        ("600", "a number"),
    ],
)
def test_an_idle_timeout_out_of_bounds_is_refused_by_name(value, problem) -> None:
    reason = check_value("agentIdleTimeout", value)
    assert reason is not None and "agentIdleTimeout" in reason and problem in reason


@pytest.mark.parametrize("value", [0, 1, 600, 7 * 24 * 3600])
def test_an_idle_timeout_within_bounds_is_taken(value) -> None:
    assert check_value("agentIdleTimeout", value) is None
