"""The automations' durable store: definitions, runs and the scheduler's claims.

SQLite from the standard library, in WAL mode, one file in the daemon's data
directory (or in memory for a host that keeps nothing). Why SQLite rather
than files: a scheduled occurrence must be tied to at most one run even when
the daemon dies half-way, and "insert the claim unless one exists, and the
run with it" is one transaction here - a crash leaves either both or
neither.

Every method blocks; a trio caller runs it in a thread (one at a time: the
connection is shared and guarded by a lock). Records are JSON documents the
host shapes; this module only keeps them and knows nothing of the protocol.
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3

from ahpd.ports.atomic import private_file

__all__ = ["AutomationStore", "Claim", "Stored"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS automations (
    resource TEXT PRIMARY KEY,
    position INTEGER NOT NULL,
    record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    resource TEXT NOT NULL UNIQUE,
    automation TEXT NOT NULL,
    request_id TEXT,
    state TEXT NOT NULL,
    UNIQUE (automation, request_id)
);
CREATE TABLE IF NOT EXISTS claims (
    automation TEXT NOT NULL,
    trigger_id TEXT NOT NULL,
    scheduled_for TEXT NOT NULL,
    run TEXT NOT NULL,
    started INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (automation, trigger_id, scheduled_for)
);
CREATE TABLE IF NOT EXISTS cursors (
    automation TEXT NOT NULL,
    trigger_id TEXT NOT NULL,
    last TEXT NOT NULL,
    PRIMARY KEY (automation, trigger_id)
);
"""


@dataclass(frozen=True)
class Claim:
    """One scheduled occurrence tied to the run that is (or will be) its only one."""

    automation: str
    trigger_id: str
    scheduled_for: str
    run: str
    started: bool


@dataclass
class Stored:
    """Everything kept, as read at start-up."""

    automations: list[dict[str, Any]]
    #: automation resource -> its runs' states, newest first
    runs: dict[str, list[dict[str, Any]]]
    #: (automation, run resource) -> request id, for manual runs
    requests: dict[tuple[str, str], str]
    claims: list[Claim]
    #: (automation, trigger id) -> the last occurrence handled (ran or skipped)
    cursors: dict[tuple[str, str], str]


class AutomationStore:
    """A file store opens its database for each transaction and closes it
    after: a descriptor held open for writing would keep the data
    directory's filesystem from being remounted read-only (which the daemon
    is meant to ride out), and SQLite folds the WAL back into the file when
    the last connection closes. In memory, one connection is the database."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # 0600 before SQLite makes it with the umask's mode; its -wal and -shm take the database's.
            private_file(path)
            for side in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                with contextlib.suppress(FileNotFoundError):
                    private_file(side, create=False)  # left 0644 by an older ahpd
            db = self._connect()
            try:
                db.execute("PRAGMA journal_mode=WAL")
            finally:
                db.close()

    def _connect(self) -> sqlite3.Connection:
        # Here, not at the top: a host that keeps its automations in memory starts with none,
        # and needs no SQLite (~1 MB of the daemon) until the first one is made.
        import sqlite3

        db = sqlite3.connect(str(self.path) if self.path else ":memory:", check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(_SCHEMA)
        return db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()

    def _tx(self) -> _Tx:
        return _Tx(self, self._lock)

    def _open(self) -> sqlite3.Connection:
        """A connection for one transaction: the one in-memory database
        (made on first use), or a new connection to the file."""
        if self.path is not None:
            return self._connect()
        if self._db is None:
            self._db = self._connect()
        return self._db

    # -- reading ----------------------------------------------------------------

    def load(self) -> Stored:
        if self.path is None and self._db is None:  # an in-memory store nothing was written to yet
            return Stored([], {}, {}, [], {})
        with self._tx() as db:
            automations = [json.loads(r[0]) for r in db.execute("SELECT record FROM automations ORDER BY position")]
            runs: dict[str, list[dict[str, Any]]] = {}
            requests: dict[tuple[str, str], str] = {}
            for automation, resource, request_id, state in db.execute(
                "SELECT automation, resource, request_id, state FROM runs ORDER BY seq DESC"
            ):
                runs.setdefault(automation, []).append(json.loads(state))
                if request_id is not None:
                    requests[(automation, resource)] = request_id
            claims = [
                Claim(a, t, s, r, bool(st))
                for a, t, s, r, st in db.execute(
                    "SELECT automation, trigger_id, scheduled_for, run, started FROM claims"
                )
            ]
            cursors = {(a, t): last for a, t, last in db.execute("SELECT automation, trigger_id, last FROM cursors")}
        return Stored(automations, runs, requests, claims, cursors)

    # -- definitions ------------------------------------------------------------

    def put_automation(self, resource: str, record: dict[str, Any]) -> None:
        text = json.dumps(record)
        with self._tx() as db:
            row = db.execute("SELECT position FROM automations WHERE resource = ?", (resource,)).fetchone()
            if row is None:
                position = db.execute("SELECT COALESCE(MAX(position), 0) + 1 FROM automations").fetchone()[0]
                db.execute("INSERT INTO automations VALUES (?, ?, ?)", (resource, position, text))
            else:
                db.execute("UPDATE automations SET record = ? WHERE resource = ?", (text, resource))

    def remove_automation(self, resource: str) -> None:
        """The definition and everything that hangs off it."""
        with self._tx() as db:
            for table in ("runs", "claims", "cursors"):
                db.execute(f"DELETE FROM {table} WHERE automation = ?", (resource,))  # noqa: S608 - fixed names
            db.execute("DELETE FROM automations WHERE resource = ?", (resource,))

    # -- runs -------------------------------------------------------------------

    def put_run(self, state: dict[str, Any], request_id: str | None = None) -> None:
        """Insert a run (with the request id of a manual one), or update its state."""
        text = json.dumps(state)
        with self._tx() as db:
            updated = db.execute("UPDATE runs SET state = ? WHERE resource = ?", (text, state["resource"])).rowcount
            if not updated:
                db.execute(
                    "INSERT INTO runs (resource, automation, request_id, state) VALUES (?, ?, ?, ?)",
                    (state["resource"], state["automation"], request_id, text),
                )

    def run_for_request(self, automation: str, request_id: str) -> str | None:
        with self._tx() as db:
            row = db.execute(
                "SELECT resource FROM runs WHERE automation = ? AND request_id = ?", (automation, request_id)
            ).fetchone()
        return row[0] if row else None

    def remove_runs(self, resources: list[str]) -> None:
        with self._tx() as db:
            db.executemany("DELETE FROM runs WHERE resource = ?", [(r,) for r in resources])

    # -- the scheduler's claims -------------------------------------------------

    def claim(self, automation: str, trigger_id: str, scheduled_for: str, run: str) -> Claim:
        """Tie the occurrence to ``run`` unless it is tied already; the claim that holds."""
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO claims (automation, trigger_id, scheduled_for, run) VALUES (?, ?, ?, ?)",
                (automation, trigger_id, scheduled_for, run),
            )
            a, t, s, r, st = db.execute(
                "SELECT automation, trigger_id, scheduled_for, run, started FROM claims "
                "WHERE automation = ? AND trigger_id = ? AND scheduled_for = ?",
                (automation, trigger_id, scheduled_for),
            ).fetchone()
        return Claim(a, t, s, r, bool(st))

    def fire(self, automation: str, trigger_id: str, scheduled_for: str, run_state: dict[str, Any]) -> bool:
        """In one transaction: the occurrence's claim is marked started (made
        if there was none), its run is recorded and the trigger's cursor
        moves to it. False, and nothing written, if the occurrence had
        started already - whoever started it, before whatever restart."""
        with self._tx() as db:
            row = db.execute(
                "SELECT started FROM claims WHERE automation = ? AND trigger_id = ? AND scheduled_for = ?",
                (automation, trigger_id, scheduled_for),
            ).fetchone()
            if row is not None and row[0]:
                return False
            if row is None:
                db.execute(
                    "INSERT INTO claims VALUES (?, ?, ?, ?, 1)",
                    (automation, trigger_id, scheduled_for, run_state["resource"]),
                )
            else:
                db.execute(
                    "UPDATE claims SET started = 1, run = ? WHERE automation = ? AND trigger_id = ? "
                    "AND scheduled_for = ?",
                    (run_state["resource"], automation, trigger_id, scheduled_for),
                )
            db.execute(
                "INSERT INTO runs (resource, automation, request_id, state) VALUES (?, ?, NULL, ?)",
                (run_state["resource"], automation, json.dumps(run_state)),
            )
            self._set_cursor(db, automation, trigger_id, scheduled_for)
            # Claims of occurrences at or before this one that never started are
            # misfires this decision settled.
            db.execute(
                "DELETE FROM claims WHERE automation = ? AND trigger_id = ? AND started = 0 AND scheduled_for <= ?",
                (automation, trigger_id, scheduled_for),
            )
        return True

    def skip(self, automation: str, trigger_id: str, through: str) -> None:
        """Occurrences up to ``through`` are discarded: the cursor moves past
        them and their unstarted claims go."""
        with self._tx() as db:
            self._set_cursor(db, automation, trigger_id, through)
            db.execute(
                "DELETE FROM claims WHERE automation = ? AND trigger_id = ? AND started = 0 AND scheduled_for <= ?",
                (automation, trigger_id, through),
            )

    def set_cursor(self, automation: str, trigger_id: str, last: str) -> None:
        with self._tx() as db:
            self._set_cursor(db, automation, trigger_id, last)

    def forget_trigger(self, automation: str, trigger_id: str) -> None:
        """A trigger removed or changed: its unstarted claims and its cursor go."""
        with self._tx() as db:
            db.execute(
                "DELETE FROM claims WHERE automation = ? AND trigger_id = ? AND started = 0", (automation, trigger_id)
            )
            db.execute("DELETE FROM cursors WHERE automation = ? AND trigger_id = ?", (automation, trigger_id))

    @staticmethod
    def _set_cursor(db: sqlite3.Connection, automation: str, trigger_id: str, last: str) -> None:
        db.execute(
            "INSERT INTO cursors VALUES (?, ?, ?) ON CONFLICT (automation, trigger_id) "
            "DO UPDATE SET last = excluded.last",
            (automation, trigger_id, last),
        )


class _Tx:
    """The lock, and one transaction committed on success, rolled back on failure."""

    def __init__(self, store: AutomationStore, lock: threading.Lock) -> None:
        self.store = store
        self.lock = lock
        self.db: sqlite3.Connection | None = None

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        try:
            self.db = self.store._open()
            self.db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._release()
            raise
        return self.db

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        try:
            assert self.db is not None
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self._release()

    def _release(self) -> None:
        try:
            if self.db is not None and self.db is not self.store._db:
                self.db.close()
        finally:
            self.db = None
            self.lock.release()
