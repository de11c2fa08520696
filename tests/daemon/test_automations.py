"""Automations against a real daemon, the demo agent and real WebSocket clients.

Runs create real sessions whose first turn the demo agent answers; two
clients see one catalogue and the same runs; a run is cancelled through its
turn; a session that cannot be made is ``session/creationFailed`` and a
failed run; the daemon is killed (SIGKILL) between an occurrence's claim
and its run, and the restarted daemon runs it once per the misfire policy
(a real short schedule, in seconds, behind the daemon's test-only environment variable).
The traffic of the first test is a capture ``ahpd wire-check`` reads clean.
"""

from __future__ import annotations

import datetime as dt
import shlex
import sys
from typing import Any

import pytest
import trio

from ahpd.ports.automation_store import AutomationStore

from .helpers import (
    Rpc,
    action_of,
    daemon_in_process,
    eventually,
    fits,
    rpc,
    running_daemon,
    snapshot_until,
    until,
    wire_clean,
)

CAT = "ahp-automations://"
#: The daemon's test-only switch: schedules take a sixth field, seconds.
SECONDS = {"AHPD_TEST_SCHEDULE_SECONDS": "1"}


def definition(text: str, work, **extra: Any) -> dict[str, Any]:
    return {
        "title": "demo chore",
        "message": {"text": text, "origin": {"kind": "automation"}},
        "session": {"provider": "demo", "workingDirectories": [work.as_uri()]},
        "enabled": True,
        "triggers": [],
        **extra,
    }


async def dispatch(client: Rpc, action: dict[str, Any], seq: int, channel: str = CAT) -> None:
    await client.notify("dispatchAction", {"channel": channel, "clientSeq": seq, "action": action})


async def answered(client: Rpc, seq: int) -> dict[str, Any]:
    """The envelope answering the client's dispatch ``seq``."""
    notes = await until(
        client, lambda n: n.get("method") == "action" and (n["params"].get("origin") or {}).get("clientSeq") == seq
    )
    return notes[-1]["params"]


async def run_state(client: Rpc, run: str, done) -> dict[str, Any]:
    """The run's state once ``done(state)``, judged again at each action on its channel."""
    state = await snapshot_until(client, run, done)
    fits("/$defs/AutomationRunState", state)
    return state


async def catalogue(client: Rpc, channel: str = CAT) -> list[dict[str, Any]]:
    reply = await client.call("subscribe", {"channel": channel})
    state = reply["result"]["snapshot"]["state"]
    fits("/$defs/AutomationState", state)
    return state["entries"]


def finished(state: dict[str, Any]) -> bool:
    return state["lifecycle"]["status"] in ("completed", "failed", "cancelled")


async def test_two_clients_one_catalogue_and_a_run_that_makes_a_session(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    capture = tmp_path / "wire.jsonl"
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as one, rpc(daemon.url) as two:
            hello = await one.initialize("one", subscriptions=["ahp-root://", CAT])
            assert hello["automations"]["schedules"]["minIntervalMinutes"] == 5
            await two.initialize("two", subscriptions=["ahp-root://", "ahp-automations://catalog"])
            await dispatch(
                one,
                {
                    "type": "automation/createRequested",
                    "resource": "ahp-automation:/chore",
                    "definition": definition("hello from a chore", work),
                },
                1,
            )
            answer = await answered(one, 1)
            assert "rejectionReason" not in answer
            # The other client, on the other spelling, reads the same entry.
            notes = await until(two, lambda n: (action_of(n) or {}).get("type") == "automation/set")
            assert notes[-1]["params"]["channel"] == "ahp-automations://catalog"
            assert await catalogue(one) == await catalogue(two, "ahp-automations://catalog")

            reply = await two.call(
                "runAutomation", {"channel": CAT, "automation": "ahp-automation:/chore", "requestId": "r1"}
            )
            run = reply["result"]["resource"]
            again = await one.call(
                "runAutomation", {"channel": CAT, "automation": "ahp-automation:/chore", "requestId": "r1"}
            )
            assert again["result"]["resource"] == run  # the same request is the same run
            state = await run_state(one, run, finished)
            assert state["lifecycle"]["status"] == "completed", state
            assert state["lifecycle"]["startedAt"] and state["lifecycle"]["completedAt"]
            assert state["origin"] == {"kind": "manual"}
            (session,) = state["sessions"]
            assert state["primarySession"] == session
            sub = await two.call("subscribe", {"channel": session})
            session_state = sub["result"]["snapshot"]["state"]
            assert session_state["origin"] == {"kind": "automation", "automation": "ahp-automation:/chore", "run": run}
            assert session_state["lifecycle"] == "ready"
            chat = await two.call("subscribe", {"channel": session_state["defaultChat"]})
            turns = chat["result"]["snapshot"]["state"]["turns"]
            assert turns[0]["message"] == {"text": "hello from a chore", "origin": {"kind": "automation"}}
            assert turns[0]["state"] == "complete"
            entries_one = await catalogue(one)
            assert entries_one == await catalogue(two, "ahp-automations://catalog")
            assert [r["resource"] for r in entries_one[0]["runs"]] == [run]

            # A disposed session is unlinked from its run.
            disposed = await one.call("disposeSession", {"channel": session})
            assert "error" not in disposed, disposed
            state = await run_state(one, run, lambda s: not s["sessions"])
            assert "primarySession" not in state and state["lifecycle"]["status"] == "completed"

            # Bad input: refused with the reason, and the entry is still there.
            await dispatch(
                one,
                {
                    "type": "automation/updateRequested",
                    "resource": "ahp-automation:/chore",
                    "changes": {
                        "triggers": [
                            {"id": "t", "kind": "schedule", "schedule": {"expression": "0 25 * * *", "timeZone": "UTC"}}
                        ]
                    },
                },
                2,
            )
            refused = await answered(one, 2)
            assert "out of range" in refused["rejectionReason"]
            missing = await one.call(
                "runAutomation", {"channel": CAT, "automation": "ahp-automation:/none", "requestId": "x"}
            )
            assert missing["error"]["code"] == -32001
            assert (await catalogue(one))[0]["definition"]["triggers"] == []
        daemon.terminate()
        await daemon.wait()
    wire_clean(capture)


async def test_a_run_is_cancelled_through_its_turn_and_a_failed_session_fails_the_run(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c", subscriptions=["ahp-root://", CAT])
            await dispatch(
                client,
                {
                    "type": "automation/createRequested",
                    "resource": "ahp-automation:/ask",
                    "definition": definition("ask permission first", work),
                },
                1,
            )
            assert "rejectionReason" not in await answered(client, 1)
            run = (
                await client.call(
                    "runAutomation", {"channel": CAT, "automation": "ahp-automation:/ask", "requestId": "r"}
                )
            )["result"]["resource"]
            await run_state(client, run, lambda s: s["lifecycle"]["status"] == "running")
            # The reference client's older spelling is the same catalogue (kept
            # out of the wire-check capture: the schema knows one spelling).
            again = await client.call(
                "runAutomation",
                {"channel": "ahp-automations://catalog", "automation": "ahp-automation:/ask", "requestId": "r"},
            )
            assert again["result"]["resource"] == run
            wrong = await client.call(
                "runAutomation", {"channel": "ahp-root://", "automation": "ahp-automation:/ask", "requestId": "y"}
            )
            assert wrong["error"]["code"] == -32602 and "ahp-automations://" in wrong["error"]["message"]
            await dispatch(client, {"type": "automationRun/cancelRequested"}, 2, channel=run)
            assert "rejectionReason" not in await answered(client, 2)
            state = await run_state(client, run, finished)
            assert state["lifecycle"]["status"] == "cancelled"
            await dispatch(client, {"type": "automationRun/cancelRequested"}, 3, channel=run)
            assert "cancelled" in (await answered(client, 3))["rejectionReason"]

            # A run whose session is disposed while its turn waits is cancelled.
            run = (
                await client.call(
                    "runAutomation", {"channel": CAT, "automation": "ahp-automation:/ask", "requestId": "r2"}
                )
            )["result"]["resource"]
            state = await run_state(client, run, lambda s: s["lifecycle"]["status"] == "running")
            disposed = await client.call("disposeSession", {"channel": state["primarySession"]})
            assert "error" not in disposed, disposed
            state = await run_state(client, run, finished)
            assert state["lifecycle"]["status"] == "cancelled" and state["sessions"] == []

            gone = tmp_path / "gone"
            await dispatch(
                client,
                {
                    "type": "automation/createRequested",
                    "resource": "ahp-automation:/nowhere",
                    "definition": definition("hello", gone),
                },
                4,
            )
            assert "rejectionReason" not in await answered(client, 4)
            run = (
                await client.call(
                    "runAutomation", {"channel": CAT, "automation": "ahp-automation:/nowhere", "requestId": "r"}
                )
            )["result"]["resource"]
            state = await run_state(client, run, finished)
            assert state["lifecycle"]["status"] == "failed"
            assert state["lifecycle"]["error"]["errorType"] == "InvalidWorkingDirectory"
            session = (await client.call("subscribe", {"channel": state["sessions"][0]}))["result"]["snapshot"]
            assert session["state"]["lifecycle"] == "failed"
            assert session["state"]["creationError"]["errorType"] == "InvalidWorkingDirectory"
        daemon.terminate()
        await daemon.wait()


def _stamp_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@pytest.mark.parametrize("policy", ["runOnce", "skip"])
async def test_killed_between_claim_and_run_the_occurrence_runs_once_per_policy(tmp_path, policy) -> None:
    data = tmp_path / "d"
    work = tmp_path / "work"
    work.mkdir()
    trigger = {
        "id": "tick",
        "kind": "schedule",
        "misfirePolicy": policy,
        "schedule": {"expression": "* * * * * */10", "timeZone": "UTC"},
    }
    async with running_daemon(data, "--sessions", "file", env=SECONDS) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c", subscriptions=["ahp-root://", CAT])
            await dispatch(
                client,
                {
                    "type": "automation/createRequested",
                    "resource": "ahp-automation:/tick",
                    "definition": definition("tick", work, triggers=[trigger]),
                },
                2,
            )
            assert "rejectionReason" not in await answered(client, 2)
            # The store (the daemon's file) holds the claim of the next occurrence,
            # not yet started: one at least five seconds off, so the kill lands before it.
            pending: list[Any] = []

            def claimed_ahead() -> bool:
                claims = AutomationStore(data / "automations.sqlite3").load().claims
                pending[:] = [c for c in claims if not c.started]
                ahead = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
                return bool(pending) and pending[0].scheduled_for > ahead

            await eventually(claimed_ahead)
            (claim,) = pending
            daemon.process.kill()  # SIGKILL: no shutdown, between the claim and its run
            await daemon.process.wait()
    # What the test is about happened: the claim was made and its run never began.
    [still] = [
        c for c in AutomationStore(data / "automations.sqlite3").load().claims if c.scheduled_for == claim.scheduled_for
    ]
    assert not still.started, "the run began before the kill landed"
    # Down until the claimed occurrence has passed.
    due = dt.datetime.fromisoformat(claim.scheduled_for.replace("Z", "+00:00"))
    await trio.sleep(max(0.0, (due - dt.datetime.now(dt.UTC)).total_seconds()) + 1)
    restarted_at = _stamp_now()
    async with daemon_in_process(data, "--sessions", "file", env=SECONDS) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c", subscriptions=["ahp-root://", CAT])

            # An occurrence after the claimed one ran on time: the misfire was decided before it.
            # (The first daemon may have run occurrences before the claimed one: those are not in question.)
            def after_claim(run: dict[str, Any]) -> bool:
                return run["origin"]["scheduledFor"] > claim.scheduled_for

            state = await snapshot_until(
                client,
                CAT,
                lambda state: any(
                    not r["origin"].get("catchUp") and after_claim(r)
                    for entry in state["entries"]
                    for r in entry["runs"]
                ),
            )
            fits("/$defs/AutomationState", state)
            (entry,) = state["entries"]
            catch_up = [r for r in entry["runs"] if r["origin"].get("catchUp")]
            if policy == "runOnce":
                assert len(catch_up) == 1, entry["runs"]
                assert catch_up[0]["origin"]["scheduledFor"] >= claim.scheduled_for
            else:
                assert catch_up == [], entry["runs"]
            # Nothing ran on time for an occurrence while the daemon was down.
            on_time = [r for r in entry["runs"] if not r["origin"].get("catchUp") and after_claim(r)]
            assert all(r["origin"]["scheduledFor"] > restarted_at for r in on_time), entry["runs"]
            claimed = [r for r in entry["runs"] if r["origin"]["scheduledFor"] == claim.scheduled_for]
            assert len(claimed) <= 1
        daemon.terminate()
        await daemon.wait()
    stored = AutomationStore(data / "automations.sqlite3").load()
    started = [c for c in stored.claims if c.started]
    assert len({(c.trigger_id, c.scheduled_for) for c in started}) == len(started)


# -- a schedule that never fires (issue 25, attack 3) ----------------------------------


async def test_a_schedule_that_never_fires_is_refused_by_name(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    never = {"id": "feb30", "kind": "schedule", "schedule": {"expression": "0 0 30 2 *", "timeZone": "UTC"}}
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c", subscriptions=["ahp-root://", CAT])
            await dispatch(
                client,
                {
                    "type": "automation/createRequested",
                    "resource": "ahp-automation:/never",
                    "definition": definition("never", work, triggers=[never]),
                },
                1,
            )
            reason = (await answered(client, 1)).get("rejectionReason", "")
            assert "'0 0 30 2 *'" in reason and "never fires" in reason, reason
            assert await catalogue(client) == []
        daemon.terminate()
        await daemon.wait()


async def test_a_stored_schedule_that_never_fires_fails_alone_and_the_others_run(tmp_path) -> None:
    """Written by an older host: the bad one is first in the store, so the
    scheduler meets it before the good one at every tick."""
    data = tmp_path / "d"
    data.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    store = AutomationStore(data / "automations.sqlite3")
    long_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    for name, expression in (("a-never", "0 0 30 2 *"), ("b-hourly", "0 * * * *")):
        trigger = {"id": "t", "kind": "schedule", "schedule": {"expression": expression, "timeZone": "UTC"}}
        resource = f"ahp-automation:/{name}"
        record = {
            "resource": resource,
            "definition": definition(name, work, triggers=[trigger]),
            "createdAt": long_ago,
            "modifiedAt": long_ago,
        }
        store.put_automation(resource, record)
        store.set_cursor(resource, "t", long_ago)  # the hourly one missed occurrences: one catch-up run
    store.close()
    async with daemon_in_process(data, "--sessions", "file") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c", subscriptions=["ahp-root://", CAT])
            state = await snapshot_until(
                client,
                CAT,
                # The catch-up run and the next occurrence are two actions: a loaded
                # machine may serve the snapshot between them.
                lambda state: (
                    any(e["runs"] and e.get("nextRunAt") for e in state["entries"])
                    and any((e.get("_meta") or {}).get("ahpd.error") for e in state["entries"])
                ),
            )
            fits("/$defs/AutomationState", state)
            never, hourly = state["entries"]
            assert never["resource"] == "ahp-automation:/a-never"
            assert "0 0 30 2 *" in never["_meta"]["ahpd.error"]["message"]
            assert "nextRunAt" not in never and never["runs"] == []
            assert [r["origin"].get("catchUp") for r in hourly["runs"]] == [True]
            assert "_meta" not in hourly and hourly["nextRunAt"]
            run = await run_state(client, hourly["runs"][0]["resource"], finished)
            assert run["lifecycle"]["status"] == "completed", run
        daemon.terminate()
        await daemon.wait()


async def test_a_refusal_names_the_value_as_the_client_spelled_it(tmp_path) -> None:
    """Issue 26, row 15: a wrong origin is named as its wire value, not a Python enum's repr."""
    work = tmp_path / "work"
    work.mkdir()
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c", subscriptions=["ahp-root://", CAT])
            wrong = definition("hello", work)
            wrong["message"]["origin"] = {"kind": "user"}
            await dispatch(
                client,
                {"type": "automation/createRequested", "resource": "ahp-automation:/u", "definition": wrong},
                1,
            )
            reason = (await answered(client, 1)).get("rejectionReason", "")
            assert reason.endswith("origin must be automation, not 'user'"), reason
        daemon.terminate()
        await daemon.wait()


async def test_a_cancelled_run_is_cancelled_at_once_whatever_its_agent_is_doing(tmp_path) -> None:
    """Issue 26, row 11: ``automationRun/cancelRequested`` ends the run as
    ``cancelled`` when it is answered, not when the agent gets round to it:
    here one agent never finishes starting (a command that never speaks ACP)
    and the other streams a reply an hour apart per chunk."""
    work = tmp_path / "work"
    work.mkdir()
    mute = "mute=" + shlex.join([sys.executable, "-c", "import time; time.sleep(3600)"])
    slow = "slow=" + shlex.join(
        [sys.executable, "-m", "ahpd.demo_agent", "--home", str(tmp_path / "slow-home"), "--slow-delay", "3600"]
    )
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--agent", mute, "--agent", slow) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("c", subscriptions=["ahp-root://", CAT])
            seq = 0
            for name, provider, text, stage in (
                ("starting", "mute", "hello", lambda s: s.get("primarySession")),
                ("streaming", "slow", "slow work", lambda s: s["lifecycle"]["status"] == "running"),
            ):
                seq += 1
                chore = definition(text, work)
                chore["session"]["provider"] = provider
                await dispatch(
                    client,
                    {"type": "automation/createRequested", "resource": f"ahp-automation:/{name}", "definition": chore},
                    seq,
                )
                assert "rejectionReason" not in await answered(client, seq)
                run = (
                    await client.call(
                        "runAutomation", {"channel": CAT, "automation": f"ahp-automation:/{name}", "requestId": name}
                    )
                )["result"]["resource"]
                await run_state(client, run, stage)
                seq += 1
                await dispatch(client, {"type": "automationRun/cancelRequested"}, seq, channel=run)
                assert "rejectionReason" not in await answered(client, seq)
                state = await run_state(client, run, finished)
                assert state["lifecycle"]["status"] == "cancelled", (name, state)
                assert state["lifecycle"]["completedAt"]
        daemon.terminate()
        await daemon.wait()
