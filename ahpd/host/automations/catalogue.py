"""The automations catalogue: what the host keeps, and what a client sees of it.

Definitions, their runs, the scheduler's cursors and claims and the request
ids of manual runs are loaded from the ``AutomationStore`` (a port: SQLite
in the data directory) and kept in step with it, every write made off the
event loop. Each automation is one entry of the catalogue channel
``ahp-automations://``, said on both of its spellings.

The runs (``ahpd.host.automations.runs``), the scheduler
(``ahpd.host.automations.scheduler``) and the requests that change a
definition (``ahpd.host.automations.automations``) all work on this one
record, under its one lock; it is cut out on its own so that each of them
depends on it and it on none of them. The small rules a definition's
fields follow (its schedule triggers, its ``afterRuns`` condition) live here
too, since the entry shows them.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ahpd.host.automations import schedule
from ahpd.ports.automation_store import AutomationStore, Claim

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host

CATALOG = "ahp-automations://"
#: The reference host's spelling for two weeks; taken as the catalogue.
CATALOG_ALIAS = "ahp-automations://catalog"
RUN_PREFIX = "ahp-automation-run:/"

#: Runs shown per page of ``AutomationEntry.runs``.
PAGE = 20
OPERATIONS = ["update", "remove", "run"]

#: How a blocking call (the store, checking a schedule) is run off the event loop.
Offload = Callable[[Callable[[], Any]], Awaitable[Any]]


def cursor_of(shown: int) -> str:
    """The ``runsNextCursor`` of an entry showing ``shown`` runs."""
    return base64.urlsafe_b64encode(f"ahpd-runs:{shown}".encode()).decode()


def summary(run: dict[str, Any]) -> dict[str, Any]:
    out = {
        "resource": run["resource"],
        "automation": run["automation"],
        "origin": run["origin"],
        "lifecycle": run["lifecycle"],
        "sessionCount": len(run["sessions"]),
    }
    if run.get("primarySession"):
        out["primarySession"] = run["primarySession"]
    return out


def schedules(definition: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in definition.get("triggers") or [] if t.get("kind") == "schedule"]


def after_runs(definition: dict[str, Any]) -> int | None:
    return next((c["max"] for c in definition.get("disableConditions") or [] if c.get("kind") == "afterRuns"), None)


def changed_triggers(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Triggers whose claims and cursor no longer hold: removed, changed,
    or all of them when the automation was switched off."""
    old = {t["id"]: t for t in schedules(before)}
    if not after["enabled"]:
        return list(old)
    new = {t["id"]: t for t in schedules(after)}
    return [i for i, t in old.items() if new.get(i) != t]


#: The daemon's environment variable that lets schedules count seconds, for
#: tests only. Not a root config key: no client may switch it on.
TEST_SECONDS_ENV = "AHPD_TEST_SCHEDULE_SECONDS"


class Catalogue:
    """The automations and their runs as the store keeps them, and their entries."""

    def __init__(self, host: Host, store: AutomationStore, offload: Offload, *, seconds: bool = False) -> None:
        self.host = host
        self.store = store
        #: Whether schedules take a sixth field, seconds (``TEST_SECONDS_ENV``; tests only).
        self.seconds = seconds
        #: How a blocking call (the store, checking a schedule) is run: in a
        #: thread, off the event loop. A test on trio's autojump clock runs
        #: them inline, so that its clock never jumps over a write.
        self.offload = offload
        stored = store.load()
        #: resource -> {"definition", "createdAt", "modifiedAt", "runCount"?}
        self.records: dict[str, dict[str, Any]] = {r["resource"]: r for r in stored.automations}
        #: automation -> its runs' states, newest first
        self.runs: dict[str, list[dict[str, Any]]] = {a: stored.runs.get(a, []) for a in self.records}
        self.requests = {(a, req): run for (a, run), req in stored.requests.items()}
        self.cursors = {k: schedule.parse_stamp(v) for k, v in stored.cursors.items()}
        self.claims: dict[tuple[str, str], Claim] = {}
        for claim in stored.claims:
            if not claim.started:
                self.claims[(claim.automation, claim.trigger_id)] = claim
        self.shown: dict[str, int] = {}
        #: resource -> why the scheduler could not keep it (its schedule never
        #: fires, a store write failed): that automation's failure alone,
        #: shown on its entry until a tick for it succeeds.
        self.problems: dict[str, str] = {}
        #: Automations whose schedule never fires: not looked at again until their definition changes.
        self.stuck: set[str] = set()
        #: Mutations take this one lock, so patches apply in the order the
        #: host took them and compose.
        self.lock = trio.Lock()

    def open_channels(self) -> None:
        """The catalogue (both spellings) and every run's channel, as loaded."""
        state = {"entries": [self.entry(r) for r in self.records]}
        for uri in (CATALOG, CATALOG_ALIAS):
            self.host.bus.open(uri, "automation", state)
        for runs in self.runs.values():
            for run in runs:
                self.host.bus.open(run["resource"], "automationRun", run)

    # -- the entry a client sees ----------------------------------------------------

    def entry(self, resource: str) -> dict[str, Any]:
        record = self.records[resource]
        runs = self.runs.get(resource, [])
        shown = self.shown.get(resource, PAGE)
        entry: dict[str, Any] = {
            "resource": resource,
            "definition": record["definition"],
            "runs": [summary(r) for r in runs[:shown]],
            "operations": list(OPERATIONS),
            "createdAt": record["createdAt"],
            "modifiedAt": record["modifiedAt"],
        }
        if len(runs) > shown:
            entry["runsNextCursor"] = cursor_of(shown)
        upcoming = self.next_run(resource)
        if upcoming is not None:
            entry["nextRunAt"] = schedule.stamp(upcoming)
        if after_runs(record["definition"]) is not None:
            entry["runCount"] = record.get("runCount", 0)
        meta: dict[str, Any] = {}
        if record.get("owner"):  # whose work it is; absent on a host with no users directory
            meta["ahpd.owner"] = record["owner"]
        if resource in self.problems:  # the protocol's entry has no error field; a client can show this
            meta["ahpd.error"] = {"errorType": "ScheduleFailed", "message": self.problems[resource]}
        if meta:
            entry["_meta"] = meta
        return entry

    def next_run(self, resource: str) -> dt.datetime | None:
        definition = self.records[resource]["definition"]
        if not definition["enabled"] or resource in self.stuck:
            return None
        times = []
        for trigger in schedules(definition):
            claim = self.claims.get((resource, trigger["id"]))
            if claim is not None:
                times.append(schedule.parse_stamp(claim.scheduled_for))
        return min(times, default=None)

    def publish(self, resource: str) -> None:
        """Say the entry as it now is, if that is news, on both spellings."""
        entry = self.entry(resource)
        current = next((e for e in self.host.bus.channels[CATALOG].state["entries"] if e["resource"] == resource), None)
        if current == entry:
            return
        for uri in (CATALOG, CATALOG_ALIAS):
            self.host.bus.emit(uri, {"type": "automation/set", "automation": entry})

    def run_state(self, resource: str) -> dict[str, Any] | None:
        """A run's state as its channel holds it; None once it is gone."""
        channel = self.host.bus.channels.get(resource)
        return channel.state if channel is not None else None

    # -- what is kept, written off the event loop -----------------------------------

    async def write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` off the event loop."""
        return await self.offload(lambda: fn(*args, **kwargs))

    async def save_record(self, resource: str, record: dict[str, Any]) -> None:
        await self.write(self.store.put_automation, resource, record)
        self.records[resource] = record
        self.runs.setdefault(resource, [])

    async def forget_triggers(self, resource: str, before: dict[str, Any], after: dict[str, Any]) -> None:
        """The cursors and claims of the triggers ``after`` no longer holds as ``before`` had them."""
        for trigger_id in changed_triggers(before, after):
            await self.write(self.store.forget_trigger, resource, trigger_id)
            self.cursors.pop((resource, trigger_id), None)
            self.claims.pop((resource, trigger_id), None)

    def drop(self, resource: str) -> None:
        """An automation removed from the store is forgotten here: its runs'
        channels close (a run still going keeps its session, an ordinary one)."""
        del self.records[resource]
        for run in self.runs.pop(resource, []):
            self.host.bus.close(run["resource"])
        for key in [k for k in self.claims if k[0] == resource]:
            del self.claims[key]
        for key in [k for k in self.cursors if k[0] == resource]:
            del self.cursors[key]
        for key in [k for k in self.requests if k[0] == resource]:
            del self.requests[key]
        self.shown.pop(resource, None)
        self.problems.pop(resource, None)
        self.stuck.discard(resource)
