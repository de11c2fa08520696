"""The automations catalogue and its scheduler, on trio's mock clock.

A real Host with a real SQLite store in ``tmp_path``; time is a ``TrioClock``
anchored at a fixed wall time and driven by a MockClock that jumps whenever
the host has nothing to do; the store's calls run inline rather than in a
thread, so time never moves while one is under way. A host with no
agents makes every run fail at its session - which is a failed run, never a
vanished one - so these tests are about claims, misfires and the catalogue;
the daemon tests run real sessions.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from ahpd.host.automations import runs
from ahpd.host.automations.automations import Automations
from ahpd.host.automations.scheduler import TrioClock
from ahpd.host.assembly import Host
from ahpd.ports.automation_store import AutomationStore

from ..harness import Client

ANCHOR = dt.datetime(2026, 1, 1, 0, 0, 30, tzinfo=dt.UTC)
CAT = "ahp-automations://"


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def inline(fn: Any) -> Any:
    """Run a store call on the event loop: the mock clock never jumps over it."""
    await trio.lowlevel.checkpoint()
    return fn()


def definition(**extra: Any) -> dict[str, Any]:
    return {
        "title": "nightly review",
        "message": {"text": "review", "origin": {"kind": "automation"}},
        "session": {},
        "enabled": True,
        "triggers": [],
        **extra,
    }


def every(expression: str, trigger_id: str = "t1", **extra: Any) -> dict[str, Any]:
    return {"id": trigger_id, "kind": "schedule", "schedule": {"expression": expression, "timeZone": "UTC"}, **extra}


class Running:
    def __init__(self, host: Host, nursery: trio.Nursery) -> None:
        self.host = host
        self.nursery = nursery

    @property
    def service(self) -> Automations:
        return self.host.automations

    def entry(self, resource: str = "ahp-automation:/a") -> dict[str, Any]:
        return next(e for e in self.host.bus.channels[CAT].state["entries"] if e["resource"] == resource)

    async def client(self, name: str = "c") -> Client:
        client = Client(self.host, name)
        self.nursery.start_soon(self.host.serve_connection, client.conn)
        reply = await client.call(
            "initialize", {"protocolVersions": ["1.0.0"], "clientId": name, "initialSubscriptions": [CAT]}
        )
        assert "result" in reply, reply
        return client


async def start(nursery: trio.Nursery, path: Path | None, offset: dt.timedelta = dt.timedelta()) -> Running:
    host = Host()
    host.automations = Automations(
        host,
        AutomationStore(path),
        clock=TrioClock(ANCHOR + offset - dt.timedelta(seconds=trio.current_time())),
        offload=inline,
    )
    await nursery.start(host.run)
    return Running(host, nursery)


async def dispatch(client: Client, action: dict[str, Any], channel: str = CAT) -> dict[str, Any]:
    """Dispatch and return the envelope that answers it (refused or not)."""
    seq = next(client.seq)
    client.notify("dispatchAction", {"channel": channel, "clientSeq": seq, "action": action})
    while True:
        frame = await client.frame()
        params = frame.get("params", {})
        if frame.get("method") == "action" and (params.get("origin") or {}).get("clientSeq") == seq:
            return params


async def create(client: Client, resource: str = "ahp-automation:/a", **extra: Any) -> dict[str, Any]:
    answer = await dispatch(
        client, {"type": "automation/createRequested", "resource": resource, "definition": definition(**extra)}
    )
    assert "rejectionReason" not in answer, answer
    return answer


def scheduled(entry: dict[str, Any]) -> list[str]:
    return sorted(r["origin"]["scheduledFor"] for r in entry["runs"] if r["origin"]["kind"] == "trigger")


async def test_a_schedule_fires_each_occurrence_once_and_keeps_next_run_at(tmp_path, clock) -> None:
    async with trio.open_nursery() as nursery:
        running = await start(nursery, tmp_path / "a.sqlite3")
        client = await running.client()
        await create(client, triggers=[every("*/5 * * * *")])
        await trio.sleep(1)  # the scheduler claims the next occurrence
        assert running.entry()["nextRunAt"] == "2026-01-01T00:05:00.000Z"
        await trio.sleep(16 * 60)
        entry = running.entry()
        assert scheduled(entry) == ["2026-01-01T00:05:00.000Z", "2026-01-01T00:10:00.000Z", "2026-01-01T00:15:00.000Z"]
        assert not any(r["origin"].get("catchUp") for r in entry["runs"])
        assert entry["nextRunAt"] == "2026-01-01T00:20:00.000Z"
        # No agents here: each run failed at its session, and says so.
        assert {r["lifecycle"]["status"] for r in entry["runs"]} == {"failed"}
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("policy, runs", [("runOnce", 1), ("skip", 0), (None, 1)])
async def test_occurrences_missed_while_down_follow_the_misfire_policy(tmp_path, clock, policy, runs) -> None:
    path = tmp_path / "a.sqlite3"
    extra = {"misfirePolicy": policy} if policy else {}
    async with trio.open_nursery() as nursery:
        running = await start(nursery, path)
        client = await running.client()
        await create(client, triggers=[every("*/5 * * * *", **extra)])
        await trio.sleep(1)  # the next occurrence (00:05) is claimed
        claims = AutomationStore(path).load().claims
        assert [(c.scheduled_for, c.started) for c in claims] == [("2026-01-01T00:05:00.000Z", False)]
        nursery.cancel_scope.cancel()  # the daemon stops between the claim and its run
    async with trio.open_nursery() as nursery:
        running = await start(nursery, path, offset=dt.timedelta(hours=1))  # 01:00:30: twelve missed
        await trio.sleep(1)
        entry = running.entry()
        catch_up = [r for r in entry["runs"] if r["origin"].get("catchUp")]
        assert len(catch_up) == runs
        if runs:
            assert catch_up[0]["origin"]["scheduledFor"] == "2026-01-01T01:00:00.000Z"
        assert entry["nextRunAt"] == "2026-01-01T01:05:00.000Z"
        await trio.sleep(5 * 60)
        assert scheduled(running.entry())[-1] == "2026-01-01T01:05:00.000Z"
        nursery.cancel_scope.cancel()


async def test_a_claimed_occurrence_due_after_a_restart_runs_once_under_its_claim(tmp_path, clock) -> None:
    path = tmp_path / "a.sqlite3"
    async with trio.open_nursery() as nursery:
        running = await start(nursery, path)
        client = await running.client()
        await create(client, triggers=[every("*/5 * * * *")])
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    (claim,) = AutomationStore(path).load().claims
    # Restarted before the occurrence is due, then again after it ran: once.
    async with trio.open_nursery() as nursery:
        running = await start(nursery, path, offset=dt.timedelta(minutes=2))
        await trio.sleep(3 * 60)
        runs = [r for r in running.entry()["runs"] if r["origin"].get("scheduledFor") == claim.scheduled_for]
        assert [r["resource"] for r in runs] == [claim.run]
        assert not runs[0]["origin"].get("catchUp")
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        running = await start(nursery, path, offset=dt.timedelta(minutes=5, seconds=1))
        await trio.sleep(1)
        runs = [r for r in running.entry()["runs"] if r["origin"].get("scheduledFor") == claim.scheduled_for]
        assert len(runs) == 1
        nursery.cancel_scope.cancel()


async def test_a_run_left_running_fails_and_one_left_pending_starts(tmp_path, clock) -> None:
    path = tmp_path / "a.sqlite3"
    store = AutomationStore(path)
    store.put_automation(
        "ahp-automation:/a",
        {
            "resource": "ahp-automation:/a",
            "definition": definition(),
            "createdAt": "2026-01-01T00:00:00.000Z",
            "modifiedAt": "2026-01-01T00:00:00.000Z",
        },
    )
    base = {"automation": "ahp-automation:/a", "origin": {"kind": "manual"}, "sessions": []}
    store.put_run(
        {
            **base,
            "resource": "ahp-automation-run:/was-running",
            "lifecycle": {
                "status": "running",
                "createdAt": "2026-01-01T00:00:00.000Z",
                "startedAt": "2026-01-01T00:00:01.000Z",
            },
        }
    )
    store.put_run(
        {
            **base,
            "resource": "ahp-automation-run:/was-pending",
            "lifecycle": {"status": "pending", "createdAt": "2026-01-01T00:00:02.000Z"},
        },
        "req-1",
    )
    store.close()
    async with trio.open_nursery() as nursery:
        running = await start(nursery, path)
        await trio.sleep(1)
        host = running.host
        was_running = host.bus.channels["ahp-automation-run:/was-running"].state["lifecycle"]
        assert was_running["status"] == "failed" and was_running["error"]["errorType"] == "DaemonStopped"
        was_pending = host.bus.channels["ahp-automation-run:/was-pending"].state
        # Started again: it got as far as its session (there are no agents here).
        assert was_pending["lifecycle"]["status"] == "failed"
        assert was_pending["lifecycle"]["error"]["errorType"] == "ProviderNotFound"
        client = await running.client()
        again = await client.call(
            "runAutomation", {"channel": CAT, "automation": "ahp-automation:/a", "requestId": "req-1"}
        )
        assert again["result"] == {"resource": "ahp-automation-run:/was-pending"}
        nursery.cancel_scope.cancel()


async def test_after_runs_switches_the_automation_off_and_counts_scheduled_runs_only(tmp_path, clock) -> None:
    async with trio.open_nursery() as nursery:
        running = await start(nursery, tmp_path / "a.sqlite3")
        client = await running.client()
        await create(client, triggers=[every("*/5 * * * *")], disableConditions=[{"kind": "afterRuns", "max": 2}])
        assert running.entry()["runCount"] == 0
        manual = await client.call(
            "runAutomation", {"channel": CAT, "automation": "ahp-automation:/a", "requestId": "m"}
        )
        assert "result" in manual
        await trio.sleep(60 * 60)
        entry = running.entry()
        assert entry["runCount"] == 2
        assert entry["definition"]["enabled"] is False
        assert "nextRunAt" not in entry
        assert len(scheduled(entry)) == 2
        # Switched off, it still runs by hand (and that is not counted).
        by_hand = await client.call(
            "runAutomation", {"channel": CAT, "automation": "ahp-automation:/a", "requestId": "m2"}
        )
        assert "result" in by_hand
        await trio.sleep(1)
        assert running.entry()["runCount"] == 2
        assert [r["origin"]["kind"] for r in running.entry()["runs"]].count("manual") == 2
        # Switched back on: a fresh allowance.
        answer = await dispatch(
            client,
            {"type": "automation/updateRequested", "resource": "ahp-automation:/a", "changes": {"enabled": True}},
        )
        assert "rejectionReason" not in answer
        assert running.entry()["runCount"] == 0
        nursery.cancel_scope.cancel()


async def test_after_date_switches_it_off_when_the_clock_passes_it(tmp_path, clock) -> None:
    async with trio.open_nursery() as nursery:
        running = await start(nursery, tmp_path / "a.sqlite3")
        client = await running.client()
        await create(
            client,
            triggers=[every("0 * * * *")],
            disableConditions=[{"kind": "afterDate", "date": "2026-01-01T02:30:00Z"}],
        )
        await trio.sleep(4 * 3600)
        entry = running.entry()
        assert entry["definition"]["enabled"] is False
        assert scheduled(entry) == ["2026-01-01T01:00:00.000Z", "2026-01-01T02:00:00.000Z"]
        nursery.cancel_scope.cancel()


BAD = [
    ({"triggers": [every("*/15 * * *")]}, "exactly five"),
    ({"triggers": [every("0 9 L * *")]}, "not a valid day of month"),
    ({"triggers": [every("@daily")]}, "exactly five"),
    (
        {"triggers": [{**every("0 9 * * *"), "schedule": {"expression": "0 9 * * *", "timeZone": "Mars/Base"}}]},
        "not an IANA time zone",
    ),
    ({"triggers": [every("*/2 * * * *")]}, "minimum interval is 5 minutes"),
    ({"triggers": [every("0 9 * * *"), every("0 10 * * *")]}, "named twice"),
    ({"session": {"provider": "nobody"}}, "provider 'nobody'"),
    ({"disableConditions": [{"kind": "afterRuns", "max": 1}, {"kind": "afterRuns", "max": 2}]}, "twice"),
    ({"disableConditions": [{"kind": "afterDate", "date": "tomorrow"}]}, "not a timestamp"),
    ({"message": {"text": "x", "origin": {"kind": "user"}}}, "origin must be automation, not 'user'"),
    (
        {"session": {"customizations": [{"id": "p", "uri": "virtual://p", "name": "P", "type": "plugin"}]}},
        "no directory to copy",
    ),
    ({"triggers": [{"id": "e", "kind": "event", "type": "gh", "title": "GitHub", "events": []}]}, "no event triggers"),
]


@pytest.mark.parametrize("change, reason", BAD)
async def test_bad_definitions_are_refused_with_their_reason_and_nothing_kept_is_lost(
    tmp_path, clock, change, reason
) -> None:
    path = tmp_path / "a.sqlite3"
    async with trio.open_nursery() as nursery:
        running = await start(nursery, path)
        client = await running.client()
        await create(client, triggers=[every("0 9 * * *")])
        await trio.sleep(1)
        kept = running.entry()
        refused = await dispatch(
            client,
            {"type": "automation/createRequested", "resource": "ahp-automation:/b", "definition": definition(**change)},
        )
        assert reason in refused["rejectionReason"], refused
        refused = await dispatch(
            client, {"type": "automation/updateRequested", "resource": "ahp-automation:/a", "changes": change}
        )
        assert reason in refused["rejectionReason"], refused
        assert running.host.bus.channels[CAT].state["entries"] == [kept]
        nursery.cancel_scope.cancel()
    stored = AutomationStore(path).load().automations
    assert [a["definition"] for a in stored] == [kept["definition"]]


async def test_a_patch_leaves_absent_keys_alone_and_both_spellings_see_it(tmp_path, clock) -> None:
    async with trio.open_nursery() as nursery:
        running = await start(nursery, tmp_path / "a.sqlite3")
        one = await running.client("one")
        two = Client(running.host, "two")
        nursery.start_soon(running.host.serve_connection, two.conn)
        await two.call(
            "initialize",
            {"protocolVersions": ["1.0.0"], "clientId": "two", "initialSubscriptions": ["ahp-automations://catalog"]},
        )
        await create(one, triggers=[every("0 9 * * *")])
        await dispatch(
            two,
            {"type": "automation/updateRequested", "resource": "ahp-automation:/a", "changes": {"title": "renamed"}},
            channel="ahp-automations://catalog",
        )
        entry = running.entry()
        assert entry["definition"]["title"] == "renamed"
        assert entry["definition"]["triggers"] == [every("0 9 * * *")]
        alias = running.host.bus.channels["ahp-automations://catalog"].state
        assert alias == running.host.bus.channels[CAT].state
        run = await two.call(
            "runAutomation",
            {"channel": "ahp-automations://catalog", "automation": "ahp-automation:/a", "requestId": "r"},
        )
        assert run["result"]["resource"].startswith("ahp-automation-run:/")
        # Removal on one spelling is said on both.
        answer = await dispatch(one, {"type": "automation/removed", "resource": "ahp-automation:/a"})
        assert "rejectionReason" not in answer
        assert running.host.bus.channels["ahp-automations://catalog"].state["entries"] == []
        nursery.cancel_scope.cancel()


async def test_runs_are_paged_through_the_catalogue(tmp_path, clock) -> None:
    async with trio.open_nursery() as nursery:
        running = await start(nursery, tmp_path / "a.sqlite3")
        client = await running.client()
        await create(client)
        for i in range(25):
            await client.call(
                "runAutomation", {"channel": CAT, "automation": "ahp-automation:/a", "requestId": f"r{i}"}
            )
        await trio.sleep(1)
        entry = running.entry()
        assert len(entry["runs"]) == 20 and entry["runsNextCursor"]
        bad = await client.call(
            "fetchAutomationRuns", {"channel": CAT, "automation": "ahp-automation:/a", "cursor": "bm9wZQ=="}
        )
        assert bad["error"]["code"] == -32602
        good = await client.call(
            "fetchAutomationRuns",
            {"channel": CAT, "automation": "ahp-automation:/a", "cursor": entry["runsNextCursor"]},
        )
        assert good["result"] == {}
        entry = running.entry()
        assert len(entry["runs"]) == 25 and "runsNextCursor" not in entry
        created = [r["lifecycle"]["createdAt"] for r in entry["runs"]]
        assert created == sorted(created, reverse=True)
        missing = await client.call(
            "runAutomation", {"channel": CAT, "automation": "ahp-automation:/nope", "requestId": "x"}
        )
        assert missing["error"]["code"] == -32001
        nursery.cancel_scope.cancel()


async def test_the_host_advertises_automations_and_lists_no_event_triggers(tmp_path, clock) -> None:
    async with trio.open_nursery() as nursery:
        running = await start(nursery, None)
        client = Client(running.host, "x")
        nursery.start_soon(running.host.serve_connection, client.conn)
        reply = await client.call("initialize", {"protocolVersions": ["1.0.0"], "clientId": "x"})
        assert reply["result"]["automations"] == {
            "create": {},
            "schedules": {"minIntervalMinutes": 5},
            "runCancellation": {},
            "runHistoryLimit": 100,
        }
        listed = await client.call("listAutomationTriggerDefinitions", {"channel": "ahp-root://"})
        assert listed["result"] == {"items": []}
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        bare = Host()
        await nursery.start(bare.run)
        client = Client(bare, "y")
        nursery.start_soon(bare.serve_connection, client.conn)
        reply = await client.call("initialize", {"protocolVersions": ["1.0.0"], "clientId": "y"})
        assert "automations" not in reply["result"]
        nursery.cancel_scope.cancel()
    assert json.dumps(reply)  # JSON all the way


async def test_a_client_reconnecting_under_the_old_spelling_is_replayed_what_it_missed(tmp_path, clock) -> None:
    async with trio.open_nursery() as nursery:
        running = await start(nursery, tmp_path / "a.sqlite3")
        writer = await running.client("writer")
        seen = running.host.bus.server_seq
        await create(writer, triggers=[every("0 9 * * *")])
        await trio.sleep(1)
        back = Client(running.host, "back")
        nursery.start_soon(running.host.serve_connection, back.conn)
        reply = await back.call(
            "reconnect",
            {
                "channel": "ahp-root://",
                "clientId": "back",
                "lastSeenServerSeq": seen,
                "subscriptions": ["ahp-automations://catalog"],
            },
        )
        result = reply["result"]
        assert result["type"] == "replay" and result["missing"] == []
        replayed = [a for a in result["actions"] if a["channel"] == "ahp-automations://catalog"]
        assert replayed and replayed[-1]["action"]["automation"] == running.entry()
        nursery.cancel_scope.cancel()


async def test_a_store_that_cannot_write_refuses_the_request_and_keeps_what_it_had(tmp_path, clock) -> None:
    path = tmp_path / "a.sqlite3"
    async with trio.open_nursery() as nursery:
        running = await start(nursery, path)
        client = await running.client()
        await create(client)
        kept = running.entry()

        def full(*_: Any) -> None:
            raise OSError(28, "No space left on device")

        running.service.store.put_automation = full  # type: ignore[method-assign]
        refused = await dispatch(
            client,
            {"type": "automation/updateRequested", "resource": "ahp-automation:/a", "changes": {"title": "lost?"}},
        )
        assert "could not be stored" in refused["rejectionReason"]
        assert running.entry() == kept
        refused = await dispatch(
            client, {"type": "automation/createRequested", "resource": "ahp-automation:/b", "definition": definition()}
        )
        assert "could not be stored" in refused["rejectionReason"]
        assert [e["resource"] for e in running.host.bus.channels[CAT].state["entries"]] == ["ahp-automation:/a"]
        nursery.cancel_scope.cancel()
    assert [a["definition"]["title"] for a in AutomationStore(path).load().automations] == ["nightly review"]


async def test_run_history_keeps_the_newest_finished_runs_up_to_the_limit(tmp_path, clock, monkeypatch) -> None:
    monkeypatch.setattr(runs, "RUN_HISTORY_LIMIT", 3)
    path = tmp_path / "a.sqlite3"
    async with trio.open_nursery() as nursery:
        running = await start(nursery, path)
        client = await running.client()
        await create(client)
        made = []
        for i in range(5):
            reply = await client.call(
                "runAutomation", {"channel": CAT, "automation": "ahp-automation:/a", "requestId": f"r{i}"}
            )
            made.append(reply["result"]["resource"])
            await trio.sleep(1)  # finished (failed: no agents) before the next
        kept = [r["resource"] for r in running.entry()["runs"]]
        assert kept == made[:1:-1]  # the newest three, newest first
        assert made[0] not in running.host.bus.channels and made[4] in running.host.bus.channels
        nursery.cancel_scope.cancel()
    assert [r["resource"] for r in AutomationStore(path).load().runs["ahp-automation:/a"]] == kept


async def test_a_tick_that_fails_is_logged_and_the_scheduler_goes_on(tmp_path, clock) -> None:
    async with trio.open_nursery() as nursery:
        running = await start(nursery, tmp_path / "a.sqlite3")
        client = await running.client()
        real_claim = running.service.store.claim
        failures = []

        def flaky(*args: Any) -> Any:
            if not failures:
                failures.append(args)
                raise OSError(5, "Input/output error")
            return real_claim(*args)

        running.service.store.claim = flaky  # type: ignore[method-assign]
        await create(client, triggers=[every("*/5 * * * *")])
        await trio.sleep(11 * 60)
        assert failures
        assert scheduled(running.entry()) == ["2026-01-01T00:05:00.000Z", "2026-01-01T00:10:00.000Z"]
        nursery.cancel_scope.cancel()
