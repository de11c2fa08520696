"""What one client cannot make the host do without bound (issue 25, attack 9).

A test-only switch is the daemon's (an environment variable), never a root
config key a client sets; automation runs and agent processes are capped by
root config keys with defaults a person on a laptop would choose, and what
goes past a cap is refused with the reason. Real daemons, the demo agent made
to stream slowly (``--slow-delay``) so that a turn stays in flight.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from .helpers import (
    Rpc,
    action_of,
    create,
    daemon_in_process,
    dispatch,
    is_action,
    rpc,
    snapshot_until,
    start_turn,
    until,
)

ROOT = "ahp-root://"
CAT = "ahp-automations://"


def slow_agent(tmp_path: Path) -> str:
    """``--agent`` for a demo agent whose ``slow`` replies take an hour between chunks."""
    command = [sys.executable, "-m", "ahpd.demo_agent", "--home", str(tmp_path / "slow-home"), "--slow-delay", "3600"]
    return "slow=" + shlex.join(command)


def slow_agents(daemon: Any) -> list[int]:
    """The daemon's slow demo agents still running (the boot probe's is gone once a session was made)."""
    found = []
    for pid in daemon.children():
        try:
            if b"--slow-delay" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except FileNotFoundError:
            pass
    return found


async def answered(client: Rpc, seq: int) -> dict[str, Any]:
    notes = await until(
        client, lambda n: n.get("method") == "action" and (n["params"].get("origin") or {}).get("clientSeq") == seq
    )
    return notes[-1]["params"]


async def turn_end(client: Rpc, chat: str) -> dict[str, Any]:
    notes = await until(
        client,
        lambda n: (
            (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error") and n["params"]["channel"] == chat
        ),
    )
    return action_of(notes[-1]) or {}


async def test_a_client_cannot_switch_on_the_test_only_seconds(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c", subscriptions=[ROOT, CAT])
            await dispatch(client, ROOT, {"type": "root/configChanged", "config": {"automationTestSeconds": True}}, 1)
            reason = (await answered(client, 1)).get("rejectionReason", "")
            assert "automationTestSeconds" in reason, reason
            every_five_seconds = {
                "id": "t",
                "kind": "schedule",
                "schedule": {"expression": "* * * * * */5", "timeZone": "UTC"},
            }
            definition = {
                "title": "busy",
                "message": {"text": "hello", "origin": {"kind": "automation"}},
                "session": {"provider": "demo", "workingDirectories": [work.as_uri()]},
                "enabled": True,
                "triggers": [every_five_seconds],
            }
            await dispatch(
                client,
                CAT,
                {"type": "automation/createRequested", "resource": "ahp-automation:/busy", "definition": definition},
                2,
            )
            reason = (await answered(client, 2)).get("rejectionReason", "")
            assert "6 fields" in reason, reason
        daemon.terminate()
        await daemon.wait()


async def test_automation_runs_beyond_the_limit_fail_saying_so(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = {"AHPD_TEST_SCHEDULE_SECONDS": "1"}
    async with daemon_in_process(
        tmp_path / "d", "--sessions", "memory", "--agent", slow_agent(tmp_path), env=env
    ) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c", subscriptions=[ROOT, CAT])
            await dispatch(client, ROOT, {"type": "root/configChanged", "config": {"automationRunLimit": 1}}, 1)
            assert "rejectionReason" not in await answered(client, 1)
            definition = {
                "title": "busy",
                "message": {"text": "slow work", "origin": {"kind": "automation"}},
                "session": {"provider": "slow", "workingDirectories": [work.as_uri()]},
                "enabled": True,
                "triggers": [
                    {"id": "t", "kind": "schedule", "schedule": {"expression": "* * * * * */5", "timeZone": "UTC"}}
                ],
            }
            await dispatch(
                client,
                CAT,
                {"type": "automation/createRequested", "resource": "ahp-automation:/busy", "definition": definition},
                2,
            )
            answer = await answered(client, 2)
            assert "rejectionReason" not in answer, answer["rejectionReason"]
            # The first run's turn streams for an hour; the next occurrence's run is past the limit.
            state = await snapshot_until(client, CAT, lambda s: bool(s["entries"][0]["runs"]))
            first = state["entries"][0]["runs"][-1]
            await snapshot_until(client, first["resource"], lambda s: s["lifecycle"]["status"] == "running")
            state = await snapshot_until(client, CAT, lambda s: len(s["entries"][0]["runs"]) >= 2)
            newest = state["entries"][0]["runs"][0]
            run = await snapshot_until(client, newest["resource"], lambda s: s["lifecycle"]["status"] != "pending")
            assert run["lifecycle"]["status"] == "failed", run
            assert run["lifecycle"]["error"]["errorType"] == "RunLimitReached"
            assert "automationRunLimit" in run["lifecycle"]["error"]["message"]
            assert run["sessions"] == []  # no session, no agent
        daemon.terminate()
        await daemon.wait()


async def test_agent_processes_are_capped_the_idle_one_stops_first(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--agent", slow_agent(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c")
            await dispatch(client, ROOT, {"type": "root/configChanged", "config": {"agentProcessLimit": 1}}, 1)
            assert "rejectionReason" not in await answered(client, 1)
            _, first = await create(client, work, provider="slow")
            _, second = await create(client, work, provider="slow")

            await dispatch(client, first, start_turn("/echo one"), 2)
            assert (await turn_end(client, first))["type"] == "chat/turnComplete"
            [one] = slow_agents(daemon)
            # The first chat's agent has no turn: it is stopped so the second's can start.
            await dispatch(client, second, start_turn("slow two"), 3)
            await until(client, is_action("chat/responsePart", second))
            assert one not in slow_agents(daemon) and len(slow_agents(daemon)) == 1

            # Every agent busy: the next turn that needs one ends saying why.
            await dispatch(client, first, start_turn("/echo three"), 4)
            ended = await turn_end(client, first)
            assert ended["type"] == "chat/error", ended
            assert ended["part"]["error"]["errorType"] == "AgentLimitReached"
            assert "agentProcessLimit" in ended["part"]["error"]["message"]
            assert len(slow_agents(daemon)) == 1
        daemon.terminate()
        await daemon.wait()
