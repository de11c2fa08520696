"""The automations scheduler: when a schedule trigger fires, exactly once.

It runs in the host's nursery. For each enabled schedule trigger it keeps a
cursor (the last occurrence handled) and *claims* the next occurrence in
the store before waiting for it; when it is due, one transaction marks the
claim started and records the run, so an occurrence has at most one run
whatever restarts happen in between. Occurrences that fell due while the
daemon was down are misfires, handled by the trigger's ``misfirePolicy``:
``skip`` discards them, ``runOnce`` (the default) makes one catch-up run for
the latest. The disable conditions (``afterRuns``, ``afterDate``) switch an
automation off here, when they are met.

Time is the scheduler's clock: ``WallClock``, or in tests a ``TrioClock``
read off trio's (autojump) clock. The scheduler is cut out of the service
because it is the one part that keeps time; it changes the catalogue
(``ahpd.host.automations.catalogue``) and starts runs
(``ahpd.host.automations.runs``) like anyone else.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import uuid
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ahpd.host.automations import schedule
from ahpd.host.automations.catalogue import RUN_PREFIX, Catalogue, after_runs, schedules
from ahpd.host.automations.runs import Runner
from ahpd.host.kernel.bus import utc_now
from ahpd.host.kernel.supervise import supervised

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host

log = logging.getLogger("ahpd.automations")

#: The longest the scheduler sleeps before looking at the wall clock again
#: (a suspended machine's monotonic clock stands still).
LOOK_AGAIN = 30.0


class Clock(Protocol):
    def now(self) -> dt.datetime: ...


class WallClock:
    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)


class TrioClock:
    """Wall time read off trio's clock from a fixed anchor: with a MockClock
    (autojump), schedules run through days without sleeping."""

    def __init__(self, anchor: dt.datetime) -> None:
        self.anchor = anchor

    def now(self) -> dt.datetime:
        return self.anchor + dt.timedelta(seconds=trio.current_time())


def after_date(definition: dict[str, Any]) -> dt.datetime | None:
    for condition in definition.get("disableConditions") or []:
        if condition.get("kind") == "afterDate":
            try:
                return schedule.parse_stamp(condition["date"])
            except ValueError:
                return None
    return None


class Scheduler:
    def __init__(self, host: Host, catalogue: Catalogue, runner: Runner, clock: Clock) -> None:
        self.host = host
        self.catalogue = catalogue
        self.runner = runner
        self.clock = clock
        self._wake = trio.Event()

    def wake(self) -> None:
        """A definition changed: look again now."""
        self._wake.set()

    async def run(self) -> None:
        startup = True
        while True:
            now = self.clock.now()
            wake_at: dt.datetime | None = now + dt.timedelta(seconds=LOOK_AGAIN)  # if the tick fails
            with supervised("the automations scheduler's tick"):
                async with self.catalogue.lock:
                    wake_at = await self.tick(now, startup=startup)
            startup = False
            self._wake = trio.Event()
            delay = math.inf if wake_at is None else max(0.0, (wake_at - self.clock.now()).total_seconds())
            cap = LOOK_AGAIN if isinstance(self.clock, WallClock) else math.inf
            with trio.move_on_after(min(delay, cap)):
                await self._wake.wait()

    async def tick(self, now: dt.datetime, *, startup: bool = False) -> dt.datetime | None:
        """Handle what is due at ``now``; when to look again."""
        catalogue = self.catalogue
        wake: list[dt.datetime] = []
        tolerance = dt.timedelta(seconds=10 if catalogue.seconds else 60)
        for resource in list(catalogue.records):
            if resource not in catalogue.records or resource in catalogue.stuck:
                continue
            try:
                await self._tick_one(resource, now, wake, startup=startup, tolerance=tolerance)
                catalogue.problems.pop(resource, None)
            except schedule.NeverFires as exc:  # until its definition changes
                log.error("%s: %s; it is not run, the other automations are", resource, exc)
                catalogue.problems[resource] = f"{exc}; this automation is not run until its schedule changes"
                catalogue.stuck.add(resource)
            except Exception as exc:  # noqa: BLE001 - this automation's failure, never the loop's
                log.exception("%s: its schedule failed; tried again shortly, the other automations go on", resource)
                catalogue.problems[resource] = f"its schedule could not be kept (tried again shortly): {exc}"
                wake.append(now + dt.timedelta(seconds=LOOK_AGAIN))
            if resource in catalogue.records:
                catalogue.publish(resource)
        return min(wake, default=None)

    async def _tick_one(
        self, resource: str, now: dt.datetime, wake: list[dt.datetime], *, startup: bool, tolerance: dt.timedelta
    ) -> None:
        """One automation's part of a tick; ``wake`` gains when it needs looking at again."""
        catalogue = self.catalogue
        record = catalogue.records[resource]
        date = after_date(record["definition"])
        if record["definition"]["enabled"] and date is not None:
            if date <= now:
                await self._disable(resource, "afterDate")
                return
            wake.append(date)
        if not record["definition"]["enabled"]:
            return
        for trigger in schedules(record["definition"]):
            key = (resource, trigger["id"])
            expression, zone_name = trigger["schedule"]["expression"], trigger["schedule"]["timeZone"]
            cursor = catalogue.cursors.get(key)
            if cursor is None:
                cursor = catalogue.cursors[key] = now
                await catalogue.write(catalogue.store.set_cursor, resource, trigger["id"], schedule.stamp(now))
            count, latest = schedule.missed(expression, zone_name, cursor, now)
            if latest is not None:
                on_time = not startup and count == 1 and now - latest <= tolerance
                if on_time or (trigger.get("misfirePolicy") or "runOnce") == "runOnce":
                    await self._fire(resource, trigger, latest, catch_up=not on_time)
                else:
                    log.info(
                        "%s: trigger %s skips %s missed occurrence(s) up to %s",
                        resource,
                        trigger["id"],
                        count,
                        schedule.stamp(latest),
                    )
                    await catalogue.write(catalogue.store.skip, resource, trigger["id"], schedule.stamp(latest))
                    catalogue.cursors[key] = latest
                    catalogue.claims.pop(key, None)
                if resource not in catalogue.records or not catalogue.records[resource]["definition"]["enabled"]:
                    break  # disabled by this run (afterRuns)
            upcoming = schedule.next_after(expression, zone_name, catalogue.cursors[key])
            claim = catalogue.claims.get(key)
            if claim is None or claim.scheduled_for != schedule.stamp(upcoming):
                claim = await catalogue.write(
                    catalogue.store.claim,
                    resource,
                    trigger["id"],
                    schedule.stamp(upcoming),
                    f"{RUN_PREFIX}{uuid.uuid4()}",
                )
                catalogue.claims[key] = claim
            wake.append(upcoming)

    async def _fire(self, resource: str, trigger: dict[str, Any], when: dt.datetime, *, catch_up: bool) -> None:
        catalogue, runner = self.catalogue, self.runner
        key = (resource, trigger["id"])
        claim = catalogue.claims.get(key)
        run_uri = claim.run if claim is not None and claim.scheduled_for == schedule.stamp(when) else None
        origin: dict[str, Any] = {"kind": "trigger", "triggerId": trigger["id"], "scheduledFor": schedule.stamp(when)}
        if catch_up:
            origin["catchUp"] = True
        run = runner.new_run(resource, origin, run_uri)
        fired = await catalogue.write(catalogue.store.fire, resource, trigger["id"], schedule.stamp(when), run)
        catalogue.cursors[key] = when
        catalogue.claims.pop(key, None)
        if not fired:
            log.info("%s: occurrence %s of %s had its run already", resource, schedule.stamp(when), trigger["id"])
            return
        runner.add_run(run)
        record = catalogue.records[resource]
        conditions = after_runs(record["definition"])
        if conditions is not None:
            record = {**record, "runCount": record.get("runCount", 0) + 1}
            await catalogue.save_record(resource, record)
            if record["runCount"] >= conditions:
                await self._disable(resource, "afterRuns")
        runner.start(run)

    async def _disable(self, resource: str, why: str) -> None:
        catalogue = self.catalogue
        record = catalogue.records[resource]
        log.info("%s: switched off (%s met)", resource, why)
        definition = {**record["definition"], "enabled": False}
        await catalogue.forget_triggers(resource, record["definition"], definition)
        await catalogue.save_record(resource, {**record, "definition": definition, "modifiedAt": utc_now()})
        catalogue.publish(resource)
