"""A session: one channel (``SessionState``) named by the URI its client
chose, with one or more chats.

Each session runs in a nursery of its own inside the host's, and each
chat's agent in a nursery inside its session's, so disposing a chat, a
session or the whole host ends exactly the agents it owns. The session's
nursery is also their last failure boundary: a fault that escapes one of
them is the session's error, never the host's.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ahpd.backends.port import Backend
from ahpd.host.kernel.supervise import spawn, supervised

# Aliased: ``annotations`` is also the name ``from __future__ import annotations`` binds.
from ahpd.host.sessions import annotations as session_annotations
from ahpd.host.sessions.catalogue import command_customizations
from ahpd.host.sessions.common import ACTIVITY_BITS, ERROR, IDLE, INPUT_NEEDED, IS_ARCHIVED, IS_READ

#: Seconds between two saves of a session whose turn is in flight (its reply streaming).
IN_FLIGHT_SAVE = 0.5

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.manager import SessionManager

log = logging.getLogger("ahpd.host")


class Session:
    def __init__(self, manager: SessionManager, record: dict[str, Any]) -> None:
        self.manager = manager
        self.uri: str = record["uri"]
        self.provider: str = record["provider"]
        self.cwd = Path(record["cwd"])
        self.created_at: str = record["createdAt"]
        self.chats: dict[str, Chat] = {}
        #: Turns older than a chat's loaded window, by chat URI, oldest first;
        #: fetchTurns pages them in.
        self.older_turns: dict[str, list[dict[str, Any]]] = {}
        #: The nursery :meth:`run` keeps open (see :attr:`nursery`).
        self._nursery: trio.Nursery | None = None
        self.scope: trio.CancelScope | None = None
        #: False while createSession is still announcing the session: what
        #: the agent says meanwhile is held, so that it always follows the
        #: announcement instead of racing it.
        self.announced = True
        self._held_commands: list[dict[str, Any]] | None = None
        self.disposed = False
        #: Why the session is in error (its nursery failed, or it cannot be
        #: saved); its summary carries the Error bit while this is set.
        self.failure: str | None = None
        #: The tree ``isolation: worktree`` made for it (``ahpd.host.sessions.worktrees``:
        #: its repo, branch, base and path), read back from its record by
        #: ``ahpd.host.changesets``, which keeps it; None: no tree of its own.
        self.worktree: dict[str, Any] | None = None
        #: Whether a save of a turn in flight is already due (see :meth:`save_soon`).
        self._save_due = False

    def announce(self) -> None:
        self.announced = True
        if self._held_commands is not None:
            commands, self._held_commands = self._held_commands, None
            self.publish_commands(commands)

    @property
    def nursery(self) -> trio.Nursery:
        """Where the session's chats run their agents and turns. It is open
        before anything can reach the session (``SessionManager.open``
        starts :meth:`run` first), so only a session that was never started
        has none."""
        if self._nursery is None:
            raise RuntimeError(f"session {self.uri} is not running")
        return self._nursery

    @property
    def backend(self) -> Backend:
        return self.manager.backends[self.provider]

    @property
    def host(self) -> Host:
        return self.manager.host

    def state(self) -> dict[str, Any]:
        return self.host.bus.channels[self.uri].state

    async def run(self, task_status: trio.TaskStatus[None]) -> None:
        """The session's own nursery: its chats' agents and turns live here.

        It is also their last failure boundary: a fault that escapes one of
        them ends the nursery (and every agent in it), is reported as the
        session's error, and a fresh nursery takes over, so the next turn
        starts its agent again; the host never sees the fault."""
        started = False
        with trio.CancelScope() as scope:
            self.scope = scope
            while True:
                with supervised(f"session {self.uri}", self._failed):
                    async with trio.open_nursery() as nursery:
                        self._nursery = nursery
                        if not started:
                            started = True
                            task_status.started()
                        await trio.sleep_forever()

    def _failed(self, exc: Exception) -> None:
        for chat in self.chats.values():
            turn = chat.turn
            while turn is not None:
                turn.failed(exc)
                turn = turn.previous
        self.set_failure(f"the session failed: {type(exc).__name__}: {exc}")

    def set_failure(self, why: str | None) -> None:
        """Say (or, with None, lift) the session's error state on its summary."""
        if why == self.failure or self.disposed or self.uri not in self.host.bus.channels:
            self.failure = why
            return
        before = self.status()
        self.failure = why
        if self.status() != before:
            self.manager.notify_summary(self, {"status": self.status()})

    def customizations_of(self, commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        dirs = getattr(self.manager.backends.get(self.provider), "customization_dirs", None)
        return self.manager.hooks.customizations(self, command_customizations(self.provider, commands, self.cwd, dirs))

    def publish_commands(self, commands: list[dict[str, Any]]) -> None:
        """The agent's commands as the session's customizations; said only
        when that changes what the session holds."""
        if not self.announced:
            self._held_commands = commands
            return
        customizations = self.customizations_of(commands)
        if customizations != (self.state().get("customizations") or []):
            self.host.bus.emit(self.uri, {"type": "session/customizationsChanged", "customizations": customizations})

    def summary(self) -> dict[str, Any]:
        """The catalogue row, built from the state a client would open."""
        state = self.state()
        row: dict[str, Any] = {
            "resource": self.uri,
            "provider": self.provider,
            "title": state["title"],
            "status": self.status(),
            "createdAt": self.created_at,
            "modifiedAt": max(
                (self.host.bus.channels[c].state["modifiedAt"] for c in self.chats), default=self.created_at
            ),
            "workingDirectories": list(state.get("workingDirectories") or []),
            "chats": [{"resource": c["resource"], "title": c["title"], "status": c["status"]} for c in state["chats"]],
        }
        if state.get("defaultChat"):
            row["defaultChat"] = state["defaultChat"]
        if state.get("activity"):
            row["activity"] = state["activity"]
        if state.get("_meta"):
            row["_meta"] = dict(state["_meta"])  # _meta.git and the rest, as on the session
        marks = self.host.bus.channels.get(session_annotations.channel_of(self.uri))
        if marks is not None:
            row["annotations"] = session_annotations.summary(self.uri, marks.state)
        if state.get("origin"):
            row["origin"] = state["origin"]
        return row

    def status(self) -> int:
        """The session's status as its chats make it: the default chat's
        activity, promoted to InputNeeded or Error when any chat is; the read
        and archived bits are the session's own."""
        state = self.state()
        chats = [self.host.bus.channels[uri].state for uri in self.chats if uri in self.host.bus.channels]
        default = self.host.bus.channels.get(state.get("defaultChat") or "")
        lead = default.state if default is not None else (chats[0] if chats else {"status": IDLE})
        bits = lead.get("status", IDLE) & ACTIVITY_BITS
        if any(c.get("status", 0) & INPUT_NEEDED == INPUT_NEEDED for c in chats):
            bits = (bits & ~IDLE) | INPUT_NEEDED
        if self.failure is not None or any(c.get("status", 0) & ERROR for c in chats):
            bits |= ERROR
        return bits | (state["status"] & (IS_READ | IS_ARCHIVED))

    def record(self) -> dict[str, Any]:
        state = self.state()
        return {
            "uri": self.uri,
            "provider": self.provider,
            "cwd": str(self.cwd),
            "createdAt": self.created_at,
            "title": state["title"],
            "status": state["status"] & (IS_READ | IS_ARCHIVED),
            "config": state.get("config"),
            "workingDirectories": state.get("workingDirectories"),
            "_meta": state.get("_meta"),
            "annotations": self.host.bus.channels[session_annotations.channel_of(self.uri)].state["annotations"],
            "origin": state.get("origin"),
            "defaultChat": state.get("defaultChat"),
            "chats": [
                {
                    "uri": chat.uri,
                    "backendId": chat.backend_id,
                    **({"cwd": str(chat.folder)} if chat.folder is not None else {}),
                    **{k: v for hook in self.manager.hooks.chat_record for k, v in hook(chat).items()},
                    "state": _resting(self.host.bus.channels[chat.uri].state, self.older_turns.get(chat.uri, [])),
                }
                for chat in self.chats.values()
            ],
            **{k: v for hook in self.manager.hooks.session_record for k, v in hook(self).items()},
        }

    def save_soon(self) -> None:
        """Write the session down within ``IN_FLIGHT_SAVE`` seconds: what a
        turn in flight has said so far reaches the disk in batches as it
        streams, never one write per token, and a crash keeps all but the
        last moments of it."""
        if self._save_due or self._nursery is None:
            return
        self._save_due = True
        spawn(self._nursery, f"saving {self.uri}", self._save_later)

    async def _save_later(self) -> None:
        try:
            await trio.sleep(IN_FLIGHT_SAVE)  # a batching interval, not a wait for an event
        finally:
            self._save_due = False
        self.save()

    def save(self) -> None:
        """Write the session down. A disposed session has nothing to write;
        a write that fails is the session's error (its summary says so until
        a write works again), never its caller's."""
        if self.disposed or self.uri not in self.host.bus.channels:
            return
        try:
            self.manager.store.save(self.record())
        except Exception as exc:  # noqa: BLE001 - a failed write is the session's error, not its caller's
            log.exception("session %s could not be saved", self.uri)
            self.set_failure(f"the session could not be saved: {type(exc).__name__}: {exc}")
        else:
            self.older_turns.clear()  # the store has them now
            if self.failure is not None and self.failure.startswith("the session could not be saved"):
                self.set_failure(None)


def _resting(chat_state: dict[str, Any], older: list[dict[str, Any]]) -> dict[str, Any]:
    """A chat as it is kept: nobody being asked. Its turns are those it
    holds, after its cursor's count of older ones the store already keeps;
    those held here only (``older``) come first, whole. A turn in flight is
    kept as it would read if the host stopped now (:func:`interrupted`); its
    real ending replaces it at the next save."""
    drop = ("activeTurn", "activity", "turnsNextCursor") if older else ("activeTurn", "activity")
    state = {k: v for k, v in chat_state.items() if k not in drop}
    state["turns"] = older + list(chat_state.get("turns", []))
    if isinstance(chat_state.get("activeTurn"), dict):
        state["turns"].append(interrupted(chat_state["activeTurn"]))
    state["status"] = (chat_state.get("status", IDLE) & (IS_READ | IS_ARCHIVED)) | IDLE
    return state


def interrupted(active: dict[str, Any]) -> dict[str, Any]:
    """A turn in flight, ended the way a crash would end it: in error, with
    its prompt and what was said so far, and the reason."""
    error = {
        "errorType": "HostStopped",
        "message": "the host stopped while this turn ran; what was said so far is kept",
    }
    turn = {k: v for k, v in active.items() if k in ("id", "startedAt", "message", "usage")}
    turn["responseParts"] = [*(active.get("responseParts") or []), {"kind": "error", "error": error}]
    turn["state"] = "error"
    return turn
