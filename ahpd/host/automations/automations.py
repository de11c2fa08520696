"""Automations: the catalogue channel, its runs, and the scheduler.

The host is the one writable authority (guide/automations.md). Definitions,
runs and the scheduler's claims live in an ``AutomationStore`` (a port: SQLite
in the data directory); the catalogue ``ahp-automations://`` and each
``ahp-automation-run:/<id>`` are ordinary bus channels, changed only by
emitting actions, so replay and snapshots work for them as for any other.

The catalogue is also open under ``ahp-automations://catalog``, the spelling
Insiders builds of the reference client still use: every catalogue action is
said on both, so a client is answered under whichever name it used.

This module is the service the host holds (``Host.automations``) and the
protocol's entry points. Requests (``automation/createRequested``,
``automation/updateRequested``) are checked, written to the store, and only
then answered with ``automation/set`` holding what the host keeps; a refusal
names its reason and touches nothing stored. Mutations take one lock, so
patches apply in the order the host took them and compose. What is kept and
shown is ``ahpd.host.automations.catalogue``; running a run (an ordinary
session whose first turn is the definition's message) is
``ahpd.host.automations.runs``; firing schedules is
``ahpd.host.automations.scheduler``.

Not said: whose work an automation is (``_meta['ahpd.owner']``), because this
host is given no users directory and has nobody to name; event triggers,
because it offers none. Plugins on a template are refused only by a host
with no directory to copy them into (``Host.plugins_root``); elsewhere they
ride on the Automation client and are copied as a client's are.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from ahpd.host.automations import runs, schedule
from ahpd.host.automations.catalogue import (
    CATALOG,
    CATALOG_ALIAS,
    PAGE,
    Catalogue,
    Offload,
    after_runs,
    cursor_of,
)
from ahpd.host.automations.runs import NOT_FOUND, Runner
from ahpd.host.automations.scheduler import Clock, Scheduler, WallClock
from ahpd.host.kernel.auth import who
from ahpd.host.kernel.bus import utc_now
from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError
from ahpd.ports.automation_store import AutomationStore
from ahpd.ports import threads

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer

log = logging.getLogger("ahpd.automations")

#: The shortest interval a schedule may fire at (advertised).
MIN_INTERVAL_MINUTES = 5


class Automations:
    def __init__(
        self,
        host: Host,
        store: AutomationStore,
        clock: Clock | None = None,
        offload: Offload | None = None,
        *,
        seconds: bool = False,
    ) -> None:
        """``seconds``: schedules take a sixth field, seconds (the daemon's
        ``TEST_SECONDS_ENV``, for tests; never a client's to set)."""
        self.host = host
        self.store = store
        self.catalogue = Catalogue(host, store, offload or functools.partial(threads.run, "store"), seconds=seconds)
        self.runner = Runner(host, self.catalogue)  # settles the runs the daemon left behind
        self.scheduler = Scheduler(host, self.catalogue, self.runner, clock or WallClock())
        self.catalogue.open_channels()

    def capabilities(self) -> dict[str, Any]:
        return {
            "create": {},
            "schedules": {"minIntervalMinutes": MIN_INTERVAL_MINUTES},
            "runCancellation": {},
            "runHistoryLimit": runs.RUN_HISTORY_LIMIT,
        }

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self.runner.start_in(nursery)
            nursery.start_soon(self.scheduler.run)
            task_status.started()
            await trio.sleep_forever()

    def close(self) -> None:
        self.store.close()

    # -- definitions: create, update, remove ----------------------------------------

    def problem(self, definition: dict[str, Any]) -> str | None:
        """Why the host cannot keep ``definition``, or None."""
        origin = (definition.get("message") or {}).get("origin", {}).get("kind")
        if origin != "automation":
            return f"the message's origin must be automation, not {origin!r}"
        ids: set[str] = set()
        seconds = self.catalogue.seconds
        minimum = MIN_INTERVAL_MINUTES * (1 if seconds else 60)
        for trigger in definition.get("triggers") or []:
            if trigger["id"] in ids:
                return f"trigger id {trigger['id']!r} is named twice; each trigger's id is unique"
            ids.add(trigger["id"])
            if trigger["kind"] == "event":
                return (
                    f"trigger {trigger['id']!r}: this host offers no event triggers "
                    "(listAutomationTriggerDefinitions lists none)"
                )
            found = schedule.problem(
                trigger["schedule"]["expression"],
                trigger["schedule"]["timeZone"],
                seconds=seconds,
                min_interval=minimum,
            )
            if found:
                return f"trigger {trigger['id']!r}: {found}"
        found = conditions_problem(definition.get("disableConditions"))
        if found:
            return found
        return self._template_problem(definition.get("session") or {})

    def _template_problem(self, template: dict[str, Any]) -> str | None:
        sessions = self.host.sessions
        provider = template.get("provider")
        if provider is not None:
            offered = list(sessions.backends) if sessions is not None else []
            if provider not in offered:
                return f"the template names provider {provider!r}; this host has {', '.join(offered) or 'none'}"
        for i, uri in enumerate(template.get("workingDirectories") or []):
            if not uri.startswith("file:"):
                return f"session.workingDirectories[{i}] {uri!r} is not a file: URI"
        plugins = template.get("customizations")
        if plugins:
            seen: set[str] = set()
            for i, plugin in enumerate(plugins):
                if not plugin.get("id"):
                    return f"session.customizations[{i}] names no id"
                if plugin["id"] in seen:
                    return f"session.customizations[{i}] names id {plugin['id']!r}, which another names too"
                seen.add(plugin["id"])
                if not plugin.get("uri"):
                    return f"session.customizations[{i}] names no uri"
            if getattr(self.host, "plugins_root", None) is None:
                return (
                    "this host has no directory to copy client plugins into, so a template's "
                    "session.customizations must be empty"
                )
        return None

    async def create(self, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
        resource, definition = action["resource"], action["definition"]
        if not resource.startswith("ahp-automation:/") or len(resource) <= len("ahp-automation:/"):
            return Refuse(f"{resource!r} is not an ahp-automation:/<id> resource")
        found = await self.catalogue.write(self.problem, definition)
        if found:
            return Refuse(found)
        catalogue = self.catalogue
        async with catalogue.lock:
            if resource in catalogue.records:
                return Refuse(f"{resource} already exists; update it instead")
            now = utc_now()
            record: dict[str, Any] = {
                "resource": resource,
                "definition": definition,
                "createdAt": now,
                "modifiedAt": now,
            }
            if (owner := who(self.host, peer)) is not None:
                record["owner"] = owner
            if after_runs(definition) is not None:
                record["runCount"] = 0
            try:
                await catalogue.save_record(resource, record)
            except Exception as exc:  # noqa: BLE001 - refused, nothing kept
                log.exception("%s could not be stored", resource)
                return Refuse(f"the automation could not be stored: {exc}")
            catalogue.publish(resource)
        self.scheduler.wake()
        return Apply(action)

    async def update(self, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
        resource, changes = action["resource"], dict(action["changes"])
        catalogue = self.catalogue
        async with catalogue.lock:
            record = catalogue.records.get(resource)
            if record is None:
                return Refuse(f"no automation {resource} on this host")
            before = record["definition"]
            definition = {**before, **changes}
            if "disableConditions" in changes and not changes["disableConditions"]:
                definition.pop("disableConditions", None)
            found = await self.catalogue.write(self.problem, definition)
            if found:
                return Refuse(found)
            new = {**record, "definition": definition, "modifiedAt": utc_now()}
            fresh = (definition["enabled"] and not before["enabled"]) or (
                after_runs(definition) is not None and after_runs(before) is None
            )
            if after_runs(definition) is None:
                new.pop("runCount", None)
            elif fresh or "runCount" not in new:
                new["runCount"] = 0
            try:
                await catalogue.forget_triggers(resource, before, definition)
                await catalogue.save_record(resource, new)
                catalogue.problems.pop(resource, None)  # a new definition: the scheduler tries it afresh
                catalogue.stuck.discard(resource)
            except Exception as exc:  # noqa: BLE001 - refused; what was kept stays
                log.exception("%s could not be stored", resource)
                return Refuse(f"the automation could not be stored: {exc}")
            catalogue.publish(resource)
        self.scheduler.wake()
        return Apply(action)

    async def remove(self, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
        resource = action["resource"]
        catalogue = self.catalogue
        async with catalogue.lock:
            if resource not in catalogue.records:
                return Apply(action)  # an unknown resource: a no-op
            entry = next(e for e in self.host.bus.channels[CATALOG].state["entries"] if e["resource"] == resource)
            if "remove" not in entry["operations"]:
                return Refuse(f"remove is not among the operations of {resource}")
            try:
                await catalogue.write(catalogue.store.remove_automation, resource)
            except Exception as exc:  # noqa: BLE001 - refused; the automation stays
                log.exception("%s could not be removed", resource)
                return Refuse(f"the automation could not be removed: {exc}")
            catalogue.drop(resource)
        other = CATALOG_ALIAS if channel == CATALOG else CATALOG

        def echo() -> None:
            self.host.bus.emit(other, action)

        return Apply(action, after=echo)

    # -- runs -------------------------------------------------------------------------

    async def run_manually(self, automation: str, request_id: str) -> str:
        return await self.runner.run_manually(automation, request_id)

    def cancel_requested(self, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
        return self.runner.cancel_requested(peer, channel, action)

    def session_gone(self, session_uri: str) -> None:
        self.runner.session_gone(session_uri)

    async def fetch_runs(self, automation: str, cursor: str | None) -> None:
        catalogue = self.catalogue
        async with catalogue.lock:
            if automation not in catalogue.records:
                raise RpcError(NOT_FOUND, f"no automation {automation} on this host", {"automation": automation})
            shown = catalogue.shown.get(automation, PAGE)
            if cursor is not None and cursor != cursor_of(shown):
                raise RpcError(
                    INVALID_PARAMS, "cursor was not issued by this host for this automation", {"path": "$.cursor"}
                )
            if len(catalogue.runs.get(automation, [])) > shown:
                catalogue.shown[automation] = shown + PAGE
                catalogue.publish(automation)


def conditions_problem(conditions: list[dict[str, Any]] | None) -> str | None:
    kinds: set[Any] = set()
    for condition in conditions or []:
        kind = condition.get("kind")
        if kind in kinds:
            return f"disableConditions names {kind} twice"
        kinds.add(kind)
        if kind == "afterRuns":
            value = condition.get("max")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
                return f"afterRuns max must be a whole number of one or more, not {value!r}"
        elif kind == "afterDate":
            try:
                when = schedule.parse_stamp(condition.get("date", ""))
            except (ValueError, TypeError):
                return f"afterDate date {condition.get('date')!r} is not a timestamp"
            if when.tzinfo is None:
                return f"afterDate date {condition.get('date')!r} names no time zone offset"
        else:
            return f"{kind!r} is not a disable condition (afterRuns or afterDate)"
    return None


# -- the protocol's entry points ------------------------------------------------


def _service(host: Host) -> Automations:
    service = getattr(host, "automations", None)
    if service is None:
        raise RpcError(METHOD_NOT_FOUND, "this host keeps no automations (it was given no store)")
    return service


async def run_automation(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    return {"resource": await _service(host).run_manually(params.automation, params.requestId)}


async def fetch_automation_runs(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    await _service(host).fetch_runs(params.automation, params.cursor)
    return {}


def list_trigger_definitions(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    """Event triggers only; this host offers none (a schedule is the protocol's, never listed)."""
    return {"items": []}


def _rule(method: str) -> Callable[[Host, Peer, str, dict[str, Any]], Any]:
    def rule(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Any:
        service = getattr(host, "automations", None)
        if service is None:
            return Refuse("this host keeps no automations")
        return getattr(service, method)(peer, channel, action)

    rule.__name__ = method
    return rule


COMMANDS = {
    "runAutomation": run_automation,
    "fetchAutomationRuns": fetch_automation_runs,
    "listAutomationTriggerDefinitions": list_trigger_definitions,
}

CLIENT_ACTIONS = {
    "automation/createRequested": _rule("create"),
    "automation/updateRequested": _rule("update"),
    "automation/removed": _rule("remove"),
    "automationRun/cancelRequested": _rule("cancel_requested"),
}


# -- what the sessions and the kernel ask (ahpd.host.table) ---------------------------------


def capabilities_of(host: Any) -> dict[str, Any]:
    """Advertised only by a host given a store."""
    return {"automations": host.automations.capabilities()} if host.automations is not None else {}


def session_disposed(session: Any) -> None:
    """A run whose session goes is over."""
    if session.host.automations is not None:
        session.host.automations.session_gone(session.uri)
