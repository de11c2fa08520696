"""Automation runs: from ``pending`` to ``completed``, ``failed`` or ``cancelled``.

A run is an ordinary session created the way ``createSession`` creates one
(announcing a client called Automation, the way a client announces itself),
whose first turn is the definition's message; a session that cannot be made
is ``session/creationFailed`` and a failed run. Each run is an
``ahp-automation-run:/<id>`` channel, changed only by emitting actions, and
written down before it is said; a fault in a run fails that run, never the
host. A run recorded but not started when the daemon stopped is started
again, unless its trigger skips missed occurrences; one that was running is
failed, never run again.

Running a run is cut out of the service because it is the one part that
reaches into sessions and turns; the scheduler and a manual ``runAutomation``
both end here.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ahpd.host.automations.catalogue import RUN_PREFIX, Catalogue, schedules
from ahpd.host.kernel.bus import ROOT, utc_now
from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.kernel.jsonrpc import RpcError
from ahpd.host.kernel.supervise import spawn
from ahpd.host.sessions.chats import turn_rules
from ahpd.host.sessions.chats.turns import start_turn
from ahpd.host.sessions.common import path_of, session_uri

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat

log = logging.getLogger("ahpd.automations")

NOT_FOUND = -32001
#: Terminal run summaries kept per automation (advertised).
RUN_HISTORY_LIMIT = 100
TERMINAL = frozenset({"completed", "failed", "cancelled"})


class CreationFailed(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error = {"errorType": error_type, "message": message}


class Runner:
    """The runs of the catalogue's automations, started in one nursery."""

    def __init__(self, host: Host, catalogue: Catalogue) -> None:
        self.host = host
        self.catalogue = catalogue
        #: run resource -> what a running run needs to be stopped
        self.active: dict[str, dict[str, Any]] = {}
        #: Runs past the ``automationRunLimit`` check and not yet ended.
        self.admitted: set[str] = set()
        self._run_lock = trio.Lock()
        self.nursery: trio.Nursery | None = None
        self._resume: list[dict[str, Any]] = []
        self._settle_stored_runs()

    def start_in(self, nursery: trio.Nursery) -> None:
        """Runs start in ``nursery`` from now on, those waiting first."""
        self.nursery = nursery
        resume, self._resume = self._resume, []
        for run in resume:
            self.start(run)

    def new_run(self, automation: str, origin: dict[str, Any], resource: str | None = None) -> dict[str, Any]:
        run: dict[str, Any] = {
            "resource": resource or f"{RUN_PREFIX}{uuid.uuid4()}",
            "automation": automation,
            "origin": origin,
            "lifecycle": {"status": "pending", "createdAt": utc_now()},
            "sessions": [],
        }
        owner = self.catalogue.records.get(automation, {}).get("owner")
        if owner:  # a run's owner is the automation's, not whoever pressed Run
            run["_meta"] = {"ahpd.owner": owner}
        return run

    def add_run(self, run: dict[str, Any]) -> None:
        self.catalogue.runs.setdefault(run["automation"], []).insert(0, run)
        self.host.bus.open(run["resource"], "automationRun", run)

    async def run_manually(self, automation: str, request_id: str) -> str:
        catalogue = self.catalogue
        async with catalogue.lock:
            if automation not in catalogue.records:
                raise RpcError(NOT_FOUND, f"no automation {automation} on this host", {"automation": automation})
            existing = catalogue.requests.get((automation, request_id))
            if existing is not None:
                return existing
            run = self.new_run(automation, {"kind": "manual"})
            await catalogue.write(catalogue.store.put_run, run, request_id)
            catalogue.requests[(automation, request_id)] = run["resource"]
            self.add_run(run)
            catalogue.publish(automation)
        self.start(run)
        return run["resource"]

    def start(self, run: dict[str, Any]) -> None:
        if self.nursery is None:
            self._resume.append(run)
            return
        self.active[run["resource"]] = {"cancel": False}
        spawn(self.nursery, f"automation run {run['resource']}", self._execute, run["resource"])

    def _state(self, uri: str) -> dict[str, Any]:
        """The state of a run whose channel is known to be open."""
        return self.host.bus.channels[uri].state

    async def update_run(self, uri: str, change: Any) -> None:
        """Apply ``change`` to the run's current state, write it down, then say
        what changed on its channel and in its entry. One at a time, so no
        change is computed from a state another has moved past."""
        catalogue = self.catalogue
        async with self._run_lock:
            old = catalogue.run_state(uri)
            if old is None:
                return
            new = change(old)
            if new == old:
                return
            await catalogue.write(catalogue.store.put_run, new)
            if catalogue.run_state(uri) is None or new["automation"] not in catalogue.records:
                return  # removed meanwhile
            for session in new["sessions"]:
                if session not in old["sessions"]:
                    self.host.bus.emit(uri, {"type": "automationRun/sessionSet", "session": session})
            for session in old["sessions"]:
                if session not in new["sessions"]:
                    self.host.bus.emit(uri, {"type": "automationRun/sessionRemoved", "session": session})
            if new.get("primarySession") != self._state(uri).get("primarySession"):
                action: dict[str, Any] = {"type": "automationRun/primarySessionChanged"}
                if new.get("primarySession"):
                    action["primarySession"] = new["primarySession"]
                self.host.bus.emit(uri, action)
            if new["lifecycle"] != old["lifecycle"]:
                self.host.bus.emit(uri, {"type": "automationRun/lifecycleChanged", "lifecycle": new["lifecycle"]})
            runs = catalogue.runs.get(new["automation"], [])
            for i, run in enumerate(runs):
                if run["resource"] == uri:
                    runs[i] = self._state(uri)
            if new["lifecycle"]["status"] in TERMINAL:
                await self._prune(new["automation"])
            catalogue.publish(new["automation"])

    async def _prune(self, automation: str) -> None:
        catalogue = self.catalogue
        runs = catalogue.runs.get(automation, [])
        terminal = [r for r in runs if r["lifecycle"]["status"] in TERMINAL]
        gone = [r["resource"] for r in terminal[RUN_HISTORY_LIMIT:]]
        if not gone:
            return
        await catalogue.write(catalogue.store.remove_runs, gone)
        catalogue.runs[automation] = [r for r in runs if r["resource"] not in gone]
        for key in [k for k, run in catalogue.requests.items() if run in gone]:
            del catalogue.requests[key]
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

        await self.update_run(resource, end)

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
            self.admitted.discard(resource)

    async def _execute_inner(self, resource: str) -> None:
        run = self.catalogue.run_state(resource)
        if run is None:
            return
        record = self.catalogue.records.get(run["automation"])
        if record is None:
            return
        control = self.active.setdefault(resource, {"cancel": False})
        if control["cancel"]:
            await self._finish(resource, "cancelled")
            return
        definition = record["definition"]
        limit = int(self.host.config("automationRunLimit"))
        if len(self.admitted) >= limit:
            log.warning("automation run %s not started: %d runs are under way", resource, len(self.admitted))
            message = (
                f"{len(self.admitted)} automation runs are under way, this host's limit "
                f"(root config automationRunLimit {limit}); this run was not started"
            )
            await self._finish(resource, "failed", error={"errorType": "RunLimitReached", "message": message})
            return
        self.admitted.add(resource)
        try:
            chat = await self._open_session(str(uuid.uuid4()), run, definition)
        except CreationFailed as failed:
            await self._finish(resource, "failed", error=failed.error)
            return
        if control["cancel"]:
            await self._finish(resource, "cancelled")
            return
        turn_id = self.host.sessions.new_turn_id()
        started = utc_now()
        await self.update_run(
            resource,
            lambda r: (
                r
                if r["lifecycle"]["status"] in TERMINAL  # cancelled meanwhile
                else {
                    **r,
                    "lifecycle": {"status": "running", "createdAt": r["lifecycle"]["createdAt"], "startedAt": started},
                }
            ),
        )
        if control["cancel"]:
            await self._finish(resource, "cancelled")
            return
        message = definition["message"]
        self.host.bus.emit(
            chat.uri, {"type": "chat/turnStarted", "turnId": turn_id, "startedAt": started, "message": message}
        )
        start_turn(chat, turn_id, message)
        control.update(chat=chat, turn_id=turn_id)
        turn = chat.turn
        assert turn is not None  # start_turn made it
        await turn.done.wait()
        channel = self.host.bus.channels.get(chat.uri)
        if channel is None:  # its session was disposed under it
            await self._finish(resource, "cancelled")
            return
        ended = next((t for t in reversed(channel.state.get("turns", [])) if t["id"] == turn_id), None)
        outcome = (ended or {}).get("state", "error")
        if ended is not None and outcome == "complete":
            await self._finish(resource, "completed", usage=ended.get("usage"))
        elif outcome == "cancelled":
            await self._finish(resource, "cancelled")
        else:
            error = next(
                (p["error"] for p in (ended or {}).get("responseParts", []) if p.get("kind") == "error"),
                {"errorType": "TurnFailed", "message": "the run's turn ended with an error"},
            )
            await self._finish(resource, "failed", error=error)

    async def _open_session(self, sid: str, run: dict[str, Any], definition: dict[str, Any]) -> Chat:
        """An ordinary session, made as createSession makes one, but with no
        request to fail: what goes wrong is ``session/creationFailed``. It is
        named ``<provider>:/<sid>``, as the host lists every session."""
        sessions = self.host.sessions
        if sessions is None:
            raise CreationFailed("ProviderNotFound", "this host runs no agents")
        template = definition.get("session") or {}
        provider = template.get("provider") or sessions.default_provider or ""
        uri = session_uri(provider, sid)
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
            "uri": uri,
            "provider": provider,
            "cwd": str(cwd),
            "createdAt": utc_now(),
            "title": definition.get("title", ""),
            "origin": {"kind": "automation", "automation": run["automation"], "run": run["resource"]},
        }
        if template.get("config"):
            record["config"] = template["config"]
        session = await sessions.open(record, lifecycle="creating")
        # Linked to the run as soon as it is a channel, before its first message.
        await self.update_run(
            run["resource"], lambda r: {**r, "sessions": [*r["sessions"], uri], "primarySession": uri}
        )
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
        self.host.bus.notify(
            self.host.bus.channels[ROOT].subscribers,
            "root/sessionAdded",
            {
                "channel": ROOT,
                "summary": session.summary(),
            },
        )
        session.announce()
        if problem is not None:
            raise problem
        return chat

    def cancel_requested(self, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
        run = self.catalogue.run_state(channel)
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
            self._cancel_turn(peer, chat, turn_id)
        # The run ends now, whatever its agent is doing: one still starting,
        # or slow to stop its turn, may take a minute, and the person who
        # cancelled waits for none of it. What the run was doing stops at
        # its next step (a session half made is finished as any other).
        if self.nursery is not None:
            spawn(self.nursery, f"cancelling automation run {channel}", self._finish, channel, "cancelled")
        return Apply(action)

    def _cancel_turn(self, peer: Peer, chat: Chat, turn_id: str) -> None:
        """Stop the run's turn the way a client's ``chat/turnCancelled`` does
        (``peer``, who cancelled the run, is who cancels it)."""
        turn = chat.turn
        duration = turn.duration() if turn is not None and turn.turn_id == turn_id else 0
        cancel = {"type": "chat/turnCancelled", "turnId": turn_id, "duration": duration}
        decision = turn_rules.turn_cancelled(self.host, peer, chat.uri, cancel)
        if isinstance(decision, Apply) and self.host.bus.emit(chat.uri, cancel) is not None and decision.after:
            decision.after()

    def session_gone(self, session_uri: str) -> None:
        """A disposed session is unlinked from its run."""

        def unlink(run: dict[str, Any]) -> dict[str, Any]:
            new = {**run, "sessions": [s for s in run["sessions"] if s != session_uri]}
            if new.get("primarySession") == session_uri:
                new.pop("primarySession")
            return new

        for runs in self.catalogue.runs.values():
            for run in runs:
                if session_uri in run["sessions"] and self.nursery is not None:
                    spawn(
                        self.nursery,
                        f"unlinking {session_uri} from {run['resource']}",
                        self.update_run,
                        run["resource"],
                        unlink,
                    )

    # -- runs the daemon left behind ---------------------------------------------

    def _settle_stored_runs(self) -> None:
        """A run that was running when the daemon stopped failed; one recorded
        but never started is started now, unless its trigger skips misfires."""
        catalogue = self.catalogue
        for automation, runs in catalogue.runs.items():
            definition = catalogue.records[automation]["definition"]
            policies = {t["id"]: t.get("misfirePolicy") or "runOnce" for t in schedules(definition)}
            for i, run in enumerate(runs):
                status = run["lifecycle"]["status"]
                if status == "running":
                    runs[i] = self._stopped(run, "the daemon stopped while the run was running")
                elif status == "pending":
                    origin = run["origin"]
                    if origin["kind"] == "trigger" and policies.get(origin["triggerId"], "runOnce") == "skip":
                        runs[i] = self._stopped(
                            run, "the daemon stopped before the run started, and its trigger skips missed occurrences"
                        )
                    else:
                        self._resume.append(run)
                if runs[i] is not run:
                    catalogue.store.put_run(runs[i])

    @staticmethod
    def _stopped(run: dict[str, Any], why: str) -> dict[str, Any]:
        lifecycle = {
            "status": "failed",
            "createdAt": run["lifecycle"]["createdAt"],
            "completedAt": utc_now(),
            "error": {"errorType": "DaemonStopped", "message": why},
        }
        if run["lifecycle"].get("startedAt"):
            lifecycle["startedAt"] = run["lifecycle"]["startedAt"]
        return {**run, "lifecycle": lifecycle}
