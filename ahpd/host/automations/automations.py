"""Automations: the catalogue channel, its runs, and the scheduler.

The host is the one writable authority (guide/automations.md). Definitions,
runs and the scheduler's claims live in an ``AutomationStore`` (a port: SQLite
in the data directory); the catalogue ``ahp-automations://`` and each
``ahp-automation-run:/<id>`` are ordinary bus channels, changed only by
emitting actions, so replay and snapshots work for them as for any other.

The catalogue is also open under ``ahp-automations://catalog``, the spelling
Insiders builds of the reference client still use: every catalogue action is
said on both, so a client is answered under whichever name it used.

Requests (``automation/createRequested``, ``automation/updateRequested``) are
checked, written to the store, and only then answered with
``automation/set`` holding what the host keeps; a refusal names its reason
and touches nothing stored. Mutations take one lock, so patches apply in the
order the host took them and compose.

The scheduler runs in the host's nursery. For each enabled schedule trigger
it keeps a cursor (the last occurrence handled) and *claims* the next
occurrence in the store before waiting for it; when it is due, one
transaction marks the claim started and records the run, so an occurrence
has at most one run whatever restarts happen in between. Occurrences that
fell due while the daemon was down are misfires, handled by the trigger's
``misfirePolicy``: ``skip`` discards them, ``runOnce`` (the default) makes
one catch-up run for the latest. A run recorded but not started when the
daemon stopped is such a misfire too; one that was running is failed, never
run again.

A run is an ordinary session created the way ``createSession`` creates one
(announcing a client called Automation, the way a client announces itself),
whose first turn is the definition's message; a session that cannot be made
is ``session/creationFailed`` and a failed run. Time is the service's clock:
``WallClock``, or in tests a ``TrioClock`` read off trio's (autojump) clock.

Not said: whose work an automation is (``_meta['ahpd.owner']``), because this
host is given no users directory and has nobody to name; event triggers,
because it offers none. Plugins on a template are refused only by a host
with no directory to copy them into (``Host.plugins_root``); elsewhere they
ride on the Automation client and are copied as a client's are.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import math
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ahpd.host.automations import schedule
from ahpd.host.kernel.auth import who
from ahpd.host.kernel.bus import ROOT, utc_now
from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError
from ahpd.host.kernel.supervise import spawn, supervised
from ahpd.ports.automation_store import AutomationStore, Claim
from ahpd.host.sessions.chats import turn_rules
from ahpd.host.sessions.chats.turns import start_turn
from ahpd.host.sessions.common import path_of

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat

log = logging.getLogger("ahpd.automations")

CATALOG = "ahp-automations://"
#: The reference host's spelling for two weeks; taken as the catalogue.
CATALOG_ALIAS = "ahp-automations://catalog"
RUN_PREFIX = "ahp-automation-run:/"
NOT_FOUND = -32001

#: Runs shown per page of ``AutomationEntry.runs``.
PAGE = 20
#: Terminal run summaries kept per automation (advertised).
RUN_HISTORY_LIMIT = 100
#: The shortest interval a schedule may fire at (advertised).
MIN_INTERVAL_MINUTES = 5
#: The longest the scheduler sleeps before looking at the wall clock again
#: (a suspended machine's monotonic clock stands still).
LOOK_AGAIN = 30.0
OPERATIONS = ["update", "remove", "run"]
TERMINAL = frozenset({"completed", "failed", "cancelled"})


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


class CreationFailed(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error = {"errorType": error_type, "message": message}


def _cursor(shown: int) -> str:
    return base64.urlsafe_b64encode(f"ahpd-runs:{shown}".encode()).decode()


def summary(run: dict[str, Any]) -> dict[str, Any]:
    out = {"resource": run["resource"], "automation": run["automation"], "origin": run["origin"],
           "lifecycle": run["lifecycle"], "sessionCount": len(run["sessions"])}
    if run.get("primarySession"):
        out["primarySession"] = run["primarySession"]
    return out


class Automations:
    def __init__(self, host: Host, store: AutomationStore, clock: Any = None, offload: Any = None) -> None:
        self.host = host
        self.store = store
        self.clock = clock or WallClock()
        #: How a blocking call (the store, checking a schedule) is run: in a
        #: thread, off the event loop. A test on trio's autojump clock runs
        #: them inline, so that its clock never jumps over a write.
        self.offload = offload or trio.to_thread.run_sync
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
        #: run resource -> what a running run needs to be stopped
        self.active: dict[str, dict[str, Any]] = {}
        self.lock = trio.Lock()
        self._run_lock = trio.Lock()
        self.nursery: trio.Nursery | None = None
        self._wake = trio.Event()
        self._resume: list[dict[str, Any]] = []
        self._settle_stored_runs()
        state = {"entries": [self._entry(r) for r in self.records]}
        for uri in (CATALOG, CATALOG_ALIAS):
            host.bus.open(uri, "automation", state)
        for runs in self.runs.values():
            for run in runs:
                host.bus.open(run["resource"], "automationRun", run)

    # -- capabilities ------------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        return {
            "create": {},
            "schedules": {"minIntervalMinutes": MIN_INTERVAL_MINUTES},
            "runCancellation": {},
            "runHistoryLimit": RUN_HISTORY_LIMIT,
        }

    def _seconds(self) -> bool:
        return bool(self.host.config("automationTestSeconds"))

    # -- the entry a client sees ----------------------------------------------------

    def _entry(self, resource: str) -> dict[str, Any]:
        record = self.records[resource]
        runs = self.runs.get(resource, [])
        shown = self.shown.get(resource, PAGE)
        entry: dict[str, Any] = {
            "resource": resource, "definition": record["definition"],
            "runs": [summary(r) for r in runs[:shown]], "operations": list(OPERATIONS),
            "createdAt": record["createdAt"], "modifiedAt": record["modifiedAt"],
        }
        if len(runs) > shown:
            entry["runsNextCursor"] = _cursor(shown)
        upcoming = self._next_run(resource)
        if upcoming is not None:
            entry["nextRunAt"] = schedule.stamp(upcoming)
        if _after_runs(record["definition"]) is not None:
            entry["runCount"] = record.get("runCount", 0)
        if record.get("owner"):  # whose work it is; absent on a host with no users directory
            entry["_meta"] = {"ahpd.owner": record["owner"]}
        return entry

    def _next_run(self, resource: str) -> dt.datetime | None:
        definition = self.records[resource]["definition"]
        if not definition["enabled"]:
            return None
        times = []
        for trigger in _schedules(definition):
            claim = self.claims.get((resource, trigger["id"]))
            if claim is not None:
                times.append(schedule.parse_stamp(claim.scheduled_for))
        return min(times, default=None)

    def publish(self, resource: str) -> None:
        """Say the entry as it now is, if that is news, on both spellings."""
        entry = self._entry(resource)
        current = next((e for e in self.host.bus.channels[CATALOG].state["entries"]
                        if e["resource"] == resource), None)
        if current == entry:
            return
        for uri in (CATALOG, CATALOG_ALIAS):
            self.host.bus.emit(uri, {"type": "automation/set", "automation": entry})

    # -- what is kept, written off the event loop -----------------------------------

    async def _write(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` off the event loop."""
        return await self.offload(lambda: fn(*args, **kwargs))

    async def _save_record(self, resource: str, record: dict[str, Any]) -> None:
        await self._write(self.store.put_automation, resource, record)
        self.records[resource] = record
        self.runs.setdefault(resource, [])

    # -- definitions: create, update, remove ----------------------------------------

    def problem(self, definition: dict[str, Any]) -> str | None:
        """Why the host cannot keep ``definition``, or None."""
        origin = (definition.get("message") or {}).get("origin", {}).get("kind")
        if origin != "automation":
            return f"the message's origin must be automation, not {origin!r}"
        ids: set[str] = set()
        seconds = self._seconds()
        minimum = MIN_INTERVAL_MINUTES * (1 if seconds else 60)
        for trigger in definition.get("triggers") or []:
            if trigger["id"] in ids:
                return f"trigger id {trigger['id']!r} is named twice; each trigger's id is unique"
            ids.add(trigger["id"])
            if trigger["kind"] == "event":
                return (f"trigger {trigger['id']!r}: this host offers no event triggers "
                        "(listAutomationTriggerDefinitions lists none)")
            found = schedule.problem(trigger["schedule"]["expression"], trigger["schedule"]["timeZone"],
                                     seconds=seconds, min_interval=minimum)
            if found:
                return f"trigger {trigger['id']!r}: {found}"
        found = _conditions_problem(definition.get("disableConditions"))
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
                return ("this host has no directory to copy client plugins into, so a template's "
                        "session.customizations must be empty")
        return None

    async def create(self, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
        resource, definition = action["resource"], action["definition"]
        if not resource.startswith("ahp-automation:/") or len(resource) <= len("ahp-automation:/"):
            return Refuse(f"{resource!r} is not an ahp-automation:/<id> resource")
        found = await self._write(self.problem, definition)
        if found:
            return Refuse(found)
        async with self.lock:
            if resource in self.records:
                return Refuse(f"{resource} already exists; update it instead")
            now = utc_now()
            record: dict[str, Any] = {"resource": resource, "definition": definition,
                                      "createdAt": now, "modifiedAt": now}
            if (owner := who(self.host, peer)) is not None:
                record["owner"] = owner
            if _after_runs(definition) is not None:
                record["runCount"] = 0
            try:
                await self._save_record(resource, record)
            except Exception as exc:  # noqa: BLE001 - refused, nothing kept
                log.exception("%s could not be stored", resource)
                return Refuse(f"the automation could not be stored: {exc}")
            self.publish(resource)
        self._wake.set()
        return Apply(action)

    async def update(self, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
        resource, changes = action["resource"], dict(action["changes"])
        async with self.lock:
            record = self.records.get(resource)
            if record is None:
                return Refuse(f"no automation {resource} on this host")
            before = record["definition"]
            definition = {**before, **changes}
            if "disableConditions" in changes and not changes["disableConditions"]:
                definition.pop("disableConditions", None)
            found = await self._write(self.problem, definition)
            if found:
                return Refuse(found)
            new = {**record, "definition": definition, "modifiedAt": utc_now()}
            fresh = (definition["enabled"] and not before["enabled"]) or (
                _after_runs(definition) is not None and _after_runs(before) is None)
            if _after_runs(definition) is None:
                new.pop("runCount", None)
            elif fresh or "runCount" not in new:
                new["runCount"] = 0
            try:
                for trigger_id in self._changed_triggers(before, definition):
                    await self._write(self.store.forget_trigger, resource, trigger_id)
                    self.cursors.pop((resource, trigger_id), None)
                    self.claims.pop((resource, trigger_id), None)
                await self._save_record(resource, new)
            except Exception as exc:  # noqa: BLE001
                log.exception("%s could not be stored", resource)
                return Refuse(f"the automation could not be stored: {exc}")
            self.publish(resource)
        self._wake.set()
        return Apply(action)

    @staticmethod
    def _changed_triggers(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
        """Triggers whose claims and cursor no longer hold: removed, changed,
        or all of them when the automation was switched off."""
        old = {t["id"]: t for t in _schedules(before)}
        if not after["enabled"]:
            return list(old)
        new = {t["id"]: t for t in _schedules(after)}
        return [i for i, t in old.items() if new.get(i) != t]

    async def remove(self, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
        resource = action["resource"]
        async with self.lock:
            if resource not in self.records:
                return Apply(action)  # an unknown resource: a no-op
            entry = next(e for e in self.host.bus.channels[CATALOG].state["entries"] if e["resource"] == resource)
            if "remove" not in entry["operations"]:
                return Refuse(f"remove is not among the operations of {resource}")
            try:
                await self._write(self.store.remove_automation, resource)
            except Exception as exc:  # noqa: BLE001
                log.exception("%s could not be removed", resource)
                return Refuse(f"the automation could not be removed: {exc}")
            del self.records[resource]
            for run in self.runs.pop(resource, []):
                # A run still going keeps its session (an ordinary one); its channel goes.
                self.host.bus.close(run["resource"])
            for key in [k for k in self.claims if k[0] == resource]:
                del self.claims[key]
            for key in [k for k in self.cursors if k[0] == resource]:
                del self.cursors[key]
            for key in [k for k in self.requests if k[0] == resource]:
                del self.requests[key]
            self.shown.pop(resource, None)
        other = CATALOG_ALIAS if channel == CATALOG else CATALOG
        return Apply(action, after=lambda: self.host.bus.emit(other, action))

    # -- runs -------------------------------------------------------------------------

    def _new_run(self, automation: str, origin: dict[str, Any], resource: str | None = None) -> dict[str, Any]:
        run: dict[str, Any] = {
            "resource": resource or f"{RUN_PREFIX}{uuid.uuid4()}", "automation": automation, "origin": origin,
            "lifecycle": {"status": "pending", "createdAt": utc_now()}, "sessions": [],
        }
        owner = self.records.get(automation, {}).get("owner")
        if owner:  # a run's owner is the automation's, not whoever pressed Run
            run["_meta"] = {"ahpd.owner": owner}
        return run

    def _add_run(self, run: dict[str, Any]) -> None:
        self.runs.setdefault(run["automation"], []).insert(0, run)
        self.host.bus.open(run["resource"], "automationRun", run)

    async def run_manually(self, automation: str, request_id: str) -> str:
        async with self.lock:
            if automation not in self.records:
                raise RpcError(NOT_FOUND, f"no automation {automation} on this host", {"automation": automation})
            existing = self.requests.get((automation, request_id))
            if existing is not None:
                return existing
            run = self._new_run(automation, {"kind": "manual"})
            await self._write(self.store.put_run, run, request_id)
            self.requests[(automation, request_id)] = run["resource"]
            self._add_run(run)
            self.publish(automation)
        self._start(run)
        return run["resource"]

    def _start(self, run: dict[str, Any]) -> None:
        if self.nursery is None:
            self._resume.append(run)
            return
        self.active[run["resource"]] = {"cancel": False}
        spawn(self.nursery, f"automation run {run['resource']}", self._execute, run["resource"])

    def _run_state(self, resource: str) -> dict[str, Any] | None:
        channel = self.host.bus.channels.get(resource)
        return channel.state if channel is not None else None

    async def _update_run(self, uri: str, change: Any) -> None:
        """Apply ``change`` to the run's current state, write it down, then say
        what changed on its channel and in its entry. One at a time, so no
        change is computed from a state another has moved past."""
        async with self._run_lock:
            old = self._run_state(uri)
            if old is None:
                return
            new = change(old)
            if new == old:
                return
            await self._write(self.store.put_run, new)
            if self._run_state(uri) is None or new["automation"] not in self.records:
                return  # removed meanwhile
            for session in new["sessions"]:
                if session not in old["sessions"]:
                    self.host.bus.emit(uri, {"type": "automationRun/sessionSet", "session": session})
            for session in old["sessions"]:
                if session not in new["sessions"]:
                    self.host.bus.emit(uri, {"type": "automationRun/sessionRemoved", "session": session})
            if new.get("primarySession") != self._run_state(uri).get("primarySession"):
                action: dict[str, Any] = {"type": "automationRun/primarySessionChanged"}
                if new.get("primarySession"):
                    action["primarySession"] = new["primarySession"]
                self.host.bus.emit(uri, action)
            if new["lifecycle"] != old["lifecycle"]:
                self.host.bus.emit(uri, {"type": "automationRun/lifecycleChanged", "lifecycle": new["lifecycle"]})
            runs = self.runs.get(new["automation"], [])
            for i, run in enumerate(runs):
                if run["resource"] == uri:
                    runs[i] = self._run_state(uri)
            if new["lifecycle"]["status"] in TERMINAL:
                await self._prune(new["automation"])
            self.publish(new["automation"])

    async def _prune(self, automation: str) -> None:
        runs = self.runs.get(automation, [])
        terminal = [r for r in runs if r["lifecycle"]["status"] in TERMINAL]
        gone = [r["resource"] for r in terminal[RUN_HISTORY_LIMIT:]]
        if not gone:
            return
        await self._write(self.store.remove_runs, gone)
        self.runs[automation] = [r for r in runs if r["resource"] not in gone]
        for key in [k for k, run in self.requests.items() if run in gone]:
            del self.requests[key]
        for uri in gone:
            self.host.bus.close(uri)

    async def _finish(self, resource: str, status: str, **fields: Any) -> None:
        def end(run: dict[str, Any]) -> dict[str, Any]:
            if run["lifecycle"]["status"] in TERMINAL:
                return run
            lifecycle = {"status": status, "createdAt": run["lifecycle"]["createdAt"]}
            if run["lifecycle"].get("startedAt"):
                lifecycle["startedAt"] = run["lifecycle"]["startedAt"]
            lifecycle["completedAt"] = utc_now()
            lifecycle.update({k: v for k, v in fields.items() if v is not None})
            return {**run, "lifecycle": lifecycle}

        await self._update_run(resource, end)

    async def _execute(self, resource: str) -> None:
        """One run: its session, its first turn, its ending. A fault ends the
        run as failed, never the host."""
        try:
            await self._execute_inner(resource)
        except trio.Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - the run's boundary
            log.exception("automation run %s failed", resource)
            with trio.CancelScope(shield=True):
                await self._finish(resource, "failed", error={"errorType": type(exc).__name__, "message": str(exc)})
        finally:
            self.active.pop(resource, None)

    async def _execute_inner(self, resource: str) -> None:
        run = self._run_state(resource)
        if run is None:
            return
        record = self.records.get(run["automation"])
        if record is None:
            return
        control = self.active.setdefault(resource, {"cancel": False})
        if control["cancel"]:
            await self._finish(resource, "cancelled")
            return
        definition = record["definition"]
        try:
            chat = await self._open_session(f"ahp-session:/{uuid.uuid4()}", run, definition)
        except CreationFailed as failed:
            await self._finish(resource, "failed", error=failed.error)
            return
        if control["cancel"]:
            await self._finish(resource, "cancelled")
            return
        turn_id = self.host.sessions.new_turn_id()
        started = utc_now()
        await self._update_run(resource, lambda r: {**r, "lifecycle": {
            "status": "running", "createdAt": r["lifecycle"]["createdAt"], "startedAt": started}})
        if control["cancel"]:
            await self._finish(resource, "cancelled")
            return
        message = definition["message"]
        self.host.bus.emit(chat.uri, {"type": "chat/turnStarted", "turnId": turn_id, "startedAt": started,
                                      "message": message})
        start_turn(chat, turn_id, message)
        control.update(chat=chat, turn_id=turn_id)
        turn = chat.turn
        await turn.done.wait()
        channel = self.host.bus.channels.get(chat.uri)
        if channel is None:  # its session was disposed under it
            await self._finish(resource, "cancelled")
            return
        ended = next((t for t in reversed(channel.state.get("turns", [])) if t["id"] == turn_id), None)
        outcome = (ended or {}).get("state", "error")
        if outcome == "complete":
            await self._finish(resource, "completed", usage=ended.get("usage"))
        elif outcome == "cancelled":
            await self._finish(resource, "cancelled")
        else:
            error = next((p["error"] for p in (ended or {}).get("responseParts", []) if p.get("kind") == "error"),
                         {"errorType": "TurnFailed", "message": "the run's turn ended with an error"})
            await self._finish(resource, "failed", error=error)

    async def _open_session(self, uri: str, run: dict[str, Any], definition: dict[str, Any]) -> Chat:
        """An ordinary session, made as createSession makes one, but with no
        request to fail: what goes wrong is ``session/creationFailed``."""
        sessions = self.host.sessions
        if sessions is None:
            raise CreationFailed("ProviderNotFound", "this host runs no agents")
        template = definition.get("session") or {}
        provider = template.get("provider") or sessions.default_provider or ""
        problem = None
        cwd = Path.home()
        if provider not in sessions.backends:
            problem = CreationFailed("ProviderNotFound", f"no agent provider {provider!r} on this host")
        directories = template.get("workingDirectories") or []
        if directories and problem is None:
            try:
                cwd = path_of(directories[0])
            except ValueError as exc:
                problem = CreationFailed("InvalidWorkingDirectory", str(exc))
            else:
                if not cwd.is_dir():
                    problem = CreationFailed("InvalidWorkingDirectory", f"working directory {cwd} does not exist")
                    cwd = Path.home()
        record: dict[str, Any] = {
            "uri": uri, "provider": provider, "cwd": str(cwd), "createdAt": utc_now(),
            "title": definition.get("title", ""),
            "origin": {"kind": "automation", "automation": run["automation"], "run": run["resource"]},
        }
        if template.get("config"):
            record["config"] = template["config"]
        session = await sessions.open(record, lifecycle="creating")
        # Linked to the run as soon as it is a channel, before its first message.
        await self._update_run(run["resource"], lambda r: {**r, "sessions": [*r["sessions"], uri],
                                                           "primarySession": uri})
        # The plugins the template names ride on the Automation client, as a
        # client's would: copied into this host's directory and reported.
        automation = {"clientId": "automation", "displayName": "Automation", "tools": []}
        if template.get("customizations"):
            automation["customizations"] = list(template["customizations"])
        self.host.bus.emit(uri, {"type": "session/activeClientSet", "activeClient": automation})
        chat = next(iter(session.chats.values()))
        if problem is None:
            try:
                await chat.ensure_agent()
            except Exception as exc:  # noqa: BLE001 - the session failed, not the host
                problem = CreationFailed("AgentDidNotStart", f"the {provider} agent did not start: {exc}")
        if problem is not None:
            log.warning("automation run %s: session %s not created: %s", run["resource"], uri, problem)
            self.host.bus.emit(uri, {"type": "session/creationFailed", "error": problem.error})
        else:
            self.host.bus.emit(uri, {"type": "session/ready"})
            session.save()
        sessions.announce_count()
        self.host.bus.notify(self.host.bus.channels[ROOT].subscribers, "root/sessionAdded", {
            "channel": ROOT, "summary": session.summary(),
        })
        session.announce()
        if problem is not None:
            raise problem
        return chat

    def cancel_requested(self, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
        run = self._run_state(channel)
        if run is None:
            return Refuse(f"no automation run {channel} on this host")
        status = run["lifecycle"]["status"]
        if status in TERMINAL:
            return Refuse(f"the run is {status}; a finished run cannot be cancelled")
        control = self.active.get(channel)
        if control is None:
            return Refuse("the run is not being run by this host")
        control["cancel"] = True
        chat, turn_id = control.get("chat"), control.get("turn_id")
        if chat is not None and turn_id is not None:
            self._cancel_turn(chat, turn_id)
        return Apply(action)

    def _cancel_turn(self, chat: Chat, turn_id: str) -> None:
        """Stop the run's turn the way a client's ``chat/turnCancelled`` does."""
        turn = chat.turn
        duration = turn.duration() if turn is not None and turn.turn_id == turn_id else 0
        cancel = {"type": "chat/turnCancelled", "turnId": turn_id, "duration": duration}
        decision = turn_rules.turn_cancelled(self.host, None, chat.uri, cancel)  # type: ignore[arg-type]
        if isinstance(decision, Apply) and self.host.bus.emit(chat.uri, cancel) is not None and decision.after:
            decision.after()

    def session_gone(self, session_uri: str) -> None:
        """A disposed session is unlinked from its run."""
        def unlink(run: dict[str, Any]) -> dict[str, Any]:
            new = {**run, "sessions": [s for s in run["sessions"] if s != session_uri]}
            if new.get("primarySession") == session_uri:
                new.pop("primarySession")
            return new

        for runs in self.runs.values():
            for run in runs:
                if session_uri in run["sessions"] and self.nursery is not None:
                    spawn(self.nursery, f"unlinking {session_uri} from {run['resource']}",
                          self._update_run, run["resource"], unlink)

    async def fetch_runs(self, automation: str, cursor: str | None) -> None:
        async with self.lock:
            if automation not in self.records:
                raise RpcError(NOT_FOUND, f"no automation {automation} on this host", {"automation": automation})
            shown = self.shown.get(automation, PAGE)
            if cursor is not None and cursor != _cursor(shown):
                raise RpcError(INVALID_PARAMS, "cursor was not issued by this host for this automation",
                               {"path": "$.cursor"})
            if len(self.runs.get(automation, [])) > shown:
                self.shown[automation] = shown + PAGE
                self.publish(automation)

    # -- runs the daemon left behind ---------------------------------------------

    def _settle_stored_runs(self) -> None:
        """A run that was running when the daemon stopped failed; one recorded
        but never started is started now, unless its trigger skips misfires."""
        for automation, runs in self.runs.items():
            definition = self.records[automation]["definition"]
            policies = {t["id"]: t.get("misfirePolicy") or "runOnce" for t in _schedules(definition)}
            for i, run in enumerate(runs):
                status = run["lifecycle"]["status"]
                if status == "running":
                    runs[i] = self._stopped(run, "the daemon stopped while the run was running")
                elif status == "pending":
                    origin = run["origin"]
                    if origin["kind"] == "trigger" and policies.get(origin["triggerId"], "runOnce") == "skip":
                        runs[i] = self._stopped(run, "the daemon stopped before the run started, "
                                                     "and its trigger skips missed occurrences")
                    else:
                        self._resume.append(run)
                if runs[i] is not run:
                    self.store.put_run(runs[i])

    @staticmethod
    def _stopped(run: dict[str, Any], why: str) -> dict[str, Any]:
        lifecycle = {"status": "failed", "createdAt": run["lifecycle"]["createdAt"], "completedAt": utc_now(),
                     "error": {"errorType": "DaemonStopped", "message": why}}
        if run["lifecycle"].get("startedAt"):
            lifecycle["startedAt"] = run["lifecycle"]["startedAt"]
        return {**run, "lifecycle": lifecycle}

    # -- the scheduler -----------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            resume, self._resume = self._resume, []
            for run in resume:
                self._start(run)
            nursery.start_soon(self._schedule)
            task_status.started()
            await trio.sleep_forever()

    def close(self) -> None:
        self.store.close()

    async def _schedule(self) -> None:
        startup = True
        while True:
            now = self.clock.now()
            wake_at: dt.datetime | None = now + dt.timedelta(seconds=LOOK_AGAIN)  # if the tick fails
            with supervised("the automations scheduler's tick"):
                async with self.lock:
                    wake_at = await self.tick(now, startup=startup)
            startup = False
            self._wake = trio.Event()
            delay = math.inf if wake_at is None else max(0.0, (wake_at - self.clock.now()).total_seconds())
            cap = LOOK_AGAIN if isinstance(self.clock, WallClock) else math.inf
            with trio.move_on_after(min(delay, cap)):
                await self._wake.wait()

    async def tick(self, now: dt.datetime, *, startup: bool = False) -> dt.datetime | None:
        """Handle what is due at ``now``; when to look again."""
        wake: list[dt.datetime] = []
        tolerance = dt.timedelta(seconds=10 if self._seconds() else 60)
        for resource in list(self.records):
            record = self.records.get(resource)
            if record is None:
                continue
            date = _after_date(record["definition"])
            if record["definition"]["enabled"] and date is not None:
                if date <= now:
                    await self._disable(resource, "afterDate")
                    continue
                wake.append(date)
            if not record["definition"]["enabled"]:
                continue
            for trigger in _schedules(record["definition"]):
                key = (resource, trigger["id"])
                expression, zone_name = trigger["schedule"]["expression"], trigger["schedule"]["timeZone"]
                cursor = self.cursors.get(key)
                if cursor is None:
                    cursor = self.cursors[key] = now
                    await self._write(self.store.set_cursor, resource, trigger["id"], schedule.stamp(now))
                count, latest = schedule.missed(expression, zone_name, cursor, now)
                if latest is not None:
                    on_time = not startup and count == 1 and now - latest <= tolerance
                    if on_time or (trigger.get("misfirePolicy") or "runOnce") == "runOnce":
                        await self._fire(resource, trigger, latest, catch_up=not on_time)
                    else:
                        log.info("%s: trigger %s skips %s missed occurrence(s) up to %s",
                                 resource, trigger["id"], count, schedule.stamp(latest))
                        await self._write(self.store.skip, resource, trigger["id"], schedule.stamp(latest))
                        self.cursors[key] = latest
                        self.claims.pop(key, None)
                    if resource not in self.records or not self.records[resource]["definition"]["enabled"]:
                        break  # disabled by this run (afterRuns)
                upcoming = schedule.next_after(expression, zone_name, self.cursors[key])
                claim = self.claims.get(key)
                if claim is None or claim.scheduled_for != schedule.stamp(upcoming):
                    claim = await self._write(self.store.claim, resource, trigger["id"], schedule.stamp(upcoming),
                                              f"{RUN_PREFIX}{uuid.uuid4()}")
                    self.claims[key] = claim
                wake.append(upcoming)
            if resource in self.records:
                self.publish(resource)
        return min(wake, default=None)

    async def _fire(self, resource: str, trigger: dict[str, Any], when: dt.datetime, *, catch_up: bool) -> None:
        key = (resource, trigger["id"])
        claim = self.claims.get(key)
        run_uri = claim.run if claim is not None and claim.scheduled_for == schedule.stamp(when) else None
        origin: dict[str, Any] = {"kind": "trigger", "triggerId": trigger["id"], "scheduledFor": schedule.stamp(when)}
        if catch_up:
            origin["catchUp"] = True
        run = self._new_run(resource, origin, run_uri)
        fired = await self._write(self.store.fire, resource, trigger["id"], schedule.stamp(when), run)
        self.cursors[key] = when
        self.claims.pop(key, None)
        if not fired:
            log.info("%s: occurrence %s of %s had its run already", resource, schedule.stamp(when), trigger["id"])
            return
        self._add_run(run)
        record = self.records[resource]
        conditions = _after_runs(record["definition"])
        if conditions is not None:
            record = {**record, "runCount": record.get("runCount", 0) + 1}
            await self._save_record(resource, record)
            if record["runCount"] >= conditions:
                await self._disable(resource, "afterRuns")
        self._start(run)

    async def _disable(self, resource: str, why: str) -> None:
        record = self.records[resource]
        log.info("%s: switched off (%s met)", resource, why)
        definition = {**record["definition"], "enabled": False}
        for trigger_id in self._changed_triggers(record["definition"], definition):
            await self._write(self.store.forget_trigger, resource, trigger_id)
            self.cursors.pop((resource, trigger_id), None)
            self.claims.pop((resource, trigger_id), None)
        await self._save_record(resource, {**record, "definition": definition, "modifiedAt": utc_now()})
        self.publish(resource)


def _schedules(definition: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in definition.get("triggers") or [] if t.get("kind") == "schedule"]


def _after_runs(definition: dict[str, Any]) -> int | None:
    return next((c["max"] for c in definition.get("disableConditions") or [] if c.get("kind") == "afterRuns"), None)


def _after_date(definition: dict[str, Any]) -> dt.datetime | None:
    for condition in definition.get("disableConditions") or []:
        if condition.get("kind") == "afterDate":
            try:
                return schedule.parse_stamp(condition["date"])
            except ValueError:
                return None
    return None


def _conditions_problem(conditions: list[dict[str, Any]] | None) -> str | None:
    kinds: set[str] = set()
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


def _rule(method: str):
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
