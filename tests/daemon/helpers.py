"""A real daemon and a client of it over a real WebSocket on 127.0.0.1.

Two ways to have the daemon:

* :func:`running_daemon`: ``ahpd run`` as a user starts it, a process of its
  own. For what only a process has: its ready line and exit status, signals,
  SIGKILL, its own open-file limit, its stderr, a second daemon refused.
* :func:`daemon_in_process`: the same ``ahpd.daemon.run`` (the same host,
  stores, agents, transport, wire capture, runtime record and control socket)
  in the test's own trio run. Agents are still real subprocesses, the socket
  a real one; what it saves is a Python start-up and its imports per test,
  and what it adds is the host itself (``daemon.host``), for a test to wait
  on the event it needs rather than on the clock.

Both take the same arguments as ``ahpd run`` and give a daemon with ``url``,
``data_dir``, ``terminate()`` and ``wait()``.
"""

from __future__ import annotations

import contextvars
import gc
import json
import logging
import math
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import trio
from trio_websocket import WebSocketConnection, open_websocket_url

from tests.schema import fits
from tests.waits import Listener, eventually, tasks_ended, until_tasks_exit  # noqa: F401 - for the daemon tests

READY = "ahpd ready: "
WEB = "ahpd web console: "
ROOT = "ahp-root://"


class Daemon:
    """An ``ahpd run`` process (see :func:`running_daemon`)."""

    def __init__(self, process: trio.Process, url: str, data_dir: Path, web_url: str = "") -> None:
        self.process = process
        self.url = url
        self.data_dir = data_dir
        #: The web console's URL (with its token), unless ``--no-web``.
        self.web_url = web_url

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    async def wait(self) -> int:
        """Its exit status, once it has exited (however long stopping its agents takes)."""
        return await self.process.wait()

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    @property
    def pid(self) -> int:
        return self.process.pid

    def children(self) -> list[int]:
        """The processes it has started and not yet reaped (agents, probes, shells)."""
        return children_of(self.process.pid)


async def _read_line(stream: trio.abc.ReceiveStream) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        data += chunk
    return data.decode()


@asynccontextmanager
async def running_daemon(
    data_dir: Path, *args: str, env: dict[str, str] | None = None, **popen: Any
) -> AsyncIterator[Daemon]:
    """``popen``: more for ``open_process`` (``stderr=``, ``preexec_fn=``)."""
    command = [sys.executable, "-m", "ahpd", "run", "--port", "0", "--data-dir", str(data_dir), *args]
    env = _claude_home(data_dir, env or {})
    process = await trio.lowlevel.open_process(
        command,
        stdout=subprocess.PIPE,
        env={**os.environ, **env},
        **{"stderr": None, **popen},
    )
    try:
        line = await _read_line(process.stdout)
        assert line.startswith(READY), f"no ready line, got {line!r}"
        web = "" if "--no-web" in args else await _read_line(process.stdout)  # printed right after
        assert not web or web.startswith(WEB), f"no web console line, got {web!r}"
        yield Daemon(process, line[len(READY) :].strip(), data_dir, web[len(WEB) :].strip())
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def _is_catalogue_helper(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:  # gone meanwhile: no agent either
        return True
    return any(a.startswith(b"ahpd.backends.") and a.endswith(b".catalogue") for a in argv)


def children_of(pid: int) -> list[int]:
    """The child processes of ``pid`` (a zombie not yet reaped counts)."""
    pids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except FileNotFoundError:  # a thread that ended while we looked
            pass
    return pids


def _claude_home(data_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """``env``, with Claude Code's config folder beside ``data_dir`` unless it names a HOME or one.

    Claude Code's transcripts are the catalogue's past sessions: a test that
    did not give the daemon a home of its own must not list (or write into)
    the ones of whoever runs the suite, nor another test's."""
    env = dict(env)
    if "HOME" not in env and "CLAUDE_CONFIG_DIR" not in env:
        env["CLAUDE_CONFIG_DIR"] = str(data_dir.parent / f"{data_dir.name}-claude")
    return env


class InProcessDaemon:
    """``ahpd.daemon.run`` in the test's trio run (see :func:`daemon_in_process`)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.url = ""
        #: The web console's URL (with its token), unless ``--no-web``.
        self.web_url = ""
        #: The daemon's Host, once ``make_host`` has built it.
        self.host: Any = None
        #: What ``run`` returned (0), once it has.
        self.returncode: int | None = None
        self._ready = trio.Event()
        self._asked_to_stop = trio.Event()
        self._stopped = trio.Event()
        self._children_before = set(children_of(os.getpid()))

    def terminate(self) -> None:
        """What SIGTERM does to the process: ``run`` cancels what it serves and returns."""
        self._asked_to_stop.set()

    async def wait(self) -> int:
        await self._stopped.wait()
        assert self.returncode is not None
        return self.returncode

    @property
    def alive(self) -> bool:
        return not self._stopped.is_set()

    @property
    def pid(self) -> int:
        """The process it runs in: this one."""
        return os.getpid()

    def children(self) -> list[int]:
        """The processes it has started and not yet reaped (agents, probes, shells): this
        process's children that were not already there when it started."""
        return [pid for pid in children_of(os.getpid()) if pid not in self._children_before]

    def agents(self) -> list[int]:
        """Its children but the catalogue helpers (``python -m ahpd.backends.<x>.catalogue``,
        which answer a boot probe or a listing and end on their own): the agents and shells."""
        return [pid for pid in self.children() if not _is_catalogue_helper(pid)]


#: The in-process daemon whose ``run`` is under way in this task and its children.
_SERVING: contextvars.ContextVar[InProcessDaemon | None] = contextvars.ContextVar("_SERVING", default=None)


def _divert_daemon_hooks() -> None:
    """Two of ``ahpd.daemon``'s functions, for an in-process daemon only.

    ``_until_signalled`` waits for ``terminate()`` instead of a signal (a
    signal would reach the whole test process), and ``make_host`` hands the
    host to the test and points its ``stop`` (the ``shutdown`` request) at
    ``terminate()`` instead of a SIGTERM to this process. A process started
    with ``ahpd run`` is another interpreter and never sees these."""
    from ahpd import daemon

    if getattr(daemon, "_diverted_for_tests", False):
        return
    until_signalled, make_host = daemon._until_signalled, daemon.make_host

    async def until_told(
        cancel_scope: trio.CancelScope, caught: list[int] | None = None, early: Sequence[int] = ()
    ) -> None:
        served = _SERVING.get()
        if served is None:
            return await until_signalled(cancel_scope, caught, early)
        await served._asked_to_stop.wait()
        cancel_scope.cancel()

    def make_and_hand_over(*args: Any, **kwargs: Any) -> Any:
        host = make_host(*args, **kwargs)
        served = _SERVING.get()
        if served is not None:
            served.host = host
        return host

    daemon._until_signalled = until_told
    daemon.make_host = make_and_hand_over
    daemon._diverted_for_tests = True


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``env`` over it, as a daemon process would have been started with it."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _ReadyLine:
    """``run``'s standard output: its one line, ``ahpd ready: URL``."""

    def __init__(self, served: InProcessDaemon) -> None:
        self.served = served

    def write(self, text: str) -> int:
        if text.startswith(WEB):
            self.served.web_url = text[len(WEB) :].strip()
        if text.startswith(READY):
            self.served.url = text[len(READY) :].strip()
            self.served._ready.set()
        return len(text)

    def flush(self) -> None:
        pass


@asynccontextmanager
async def daemon_in_process(
    data_dir: Path, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[InProcessDaemon]:
    """``ahpd run --port 0 --data-dir DATA_DIR ARGS`` in this trio run, with
    ``env`` over the environment while it runs (its agents, shells and CLIs
    are started with it, as they would be by a process started with it).

    The command line is read by ahpd's own parser and prepared the way
    ``ahpd run`` prepares it (data directory, config file, agents, token);
    the data directory is not locked, since the lock belongs to a process.
    Leaving the block without ``terminate()`` stops it the same way."""
    from ahpd import cli, daemon
    from ahpd.ops.paths import default_config_path

    _divert_daemon_hooks()
    served = InProcessDaemon(data_dir)
    with environment(_claude_home(data_dir, env or {})):
        argv = cli.build_parser().parse_args(["run", "--port", "0", "--data-dir", str(data_dir), *args])
        argv.config_given = argv.config is not None
        argv.config = argv.config or default_config_path()
        prepared_dir, backends = cli._prepare(argv, hold=False)
        token = cli._token_choice(argv, prepared_dir)
        ours = logging.getLogger("ahpd")
        level = ours.level
        ours.setLevel(argv.log_level.upper())  # what `ahpd run --log-level` sets: its log file has its lines

        async def serve() -> None:
            _SERVING.set(served)
            try:
                served.returncode = await daemon.run(
                    data_dir=prepared_dir,
                    host_name=argv.host,
                    port=argv.port,
                    token=token,
                    sessions=argv.sessions,
                    backends=backends,
                    max_frame=argv.max_frame_bytes,
                    wire=argv.wire,
                    ready_out=_ReadyLine(served),
                    limits=cli._limits(argv),
                    worktrees_root=argv.worktrees_root,
                    web_port=cli.web_port(argv),
                )
            finally:
                served._stopped.set()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve)
                await served._ready.wait()
                served.host.stop = served.terminate  # `shutdown`, as a SIGTERM would be to a process
                try:
                    yield served
                finally:
                    served.terminate()
        finally:
            ours.setLevel(level)
            gc.unfreeze()  # run() froze what lived at start-up, as a process that then ends may


class Rpc:
    """A minimal AHP client over a real WebSocket."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self.next_id = 0
        self.notes: list[dict[str, Any]] = []

    async def call(
        self, method: str, params: dict[str, Any] | None = None, timeout: float = math.inf
    ) -> dict[str, Any]:
        """The reply to ``method``; notifications read on the way are kept in ``notes``.

        It waits for the reply however long a loaded machine takes; a hang is
        caught by the test's own guard (the root ``conftest.py``), or by a
        ``timeout`` a caller gives when the wait itself is the question."""
        self.next_id += 1
        ident = self.next_id
        request = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}}
        await self.ws.send_message(json.dumps(request))
        with trio.fail_after(timeout):
            while True:
                frame = json.loads(await self.ws.get_message())
                if frame.get("id") == ident and "method" not in frame:
                    return frame
                self.notes.append(frame)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.ws.send_message(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    async def read_more(self) -> None:
        """Wait for the next frame off the wire and keep it in ``notes`` (for
        a reader of ``notes`` whose condition the frames so far do not meet)."""
        self.notes.append(json.loads(await self.ws.get_message()))

    async def next_note(self, timeout: float = math.inf) -> dict[str, Any]:
        if self.notes:
            return self.notes.pop(0)
        with trio.fail_after(timeout):
            return json.loads(await self.ws.get_message())

    async def initialize(self, client_id: str = "test", subscriptions=("ahp-root://",)) -> dict[str, Any]:
        reply = await self.call(
            "initialize",
            {
                "channel": "ahp-root://",
                "protocolVersions": ["1.0.0"],
                "clientId": client_id,
                "initialSubscriptions": list(subscriptions),
            },
        )
        assert "result" in reply, reply
        return reply["result"]


@asynccontextmanager
async def rpc(url: str) -> AsyncIterator[Rpc]:
    async with open_websocket_url(url, max_message_size=64 * 2**20) as ws:
        yield Rpc(ws)


async def snapshot_until(client: Rpc, channel: str, check) -> dict[str, Any]:
    """``channel``'s state once ``check(state)`` holds: a fresh snapshot,
    taken again after each action on the channel (subscribing to it, if the
    client was not already)."""
    while True:
        reply = await client.call("subscribe", {"channel": channel})
        assert "result" in reply, reply
        state = reply["result"]["snapshot"]["state"]
        if check(state):
            return state
        await until(client, lambda n: (n.get("params") or {}).get("channel") == channel and n.get("method") == "action")


async def listed_until(client: Rpc, check) -> list[dict[str, Any]]:
    """``listSessions``' rows once ``check(rows)`` holds, asked again after each
    notification on the root channel (a row added, removed or changed)."""
    while True:
        rows = (await client.call("listSessions", {"channel": ROOT}))["result"]["items"]
        if check(rows):
            return rows
        await until(client, lambda n: (n.get("params") or {}).get("channel") == ROOT)


def wire_clean(capture: Path) -> None:
    """A daemon's ``--wire`` capture reads clean under ``ahpd wire-check``: every
    frame fits the schema, every action reduces, the protocol's invariants hold."""
    import io

    from ahpd.wire.cli import wire_check

    out = io.StringIO()
    assert wire_check([str(capture)], out=out) == 0, out.getvalue()


async def until(client: Rpc, predicate, timeout: float = math.inf) -> list[dict]:
    """Notes up to and including the first one ``predicate`` accepts, each
    action checked against the schema. It waits as long as that takes (an
    agent starting on a loaded machine may be silent for a while); a hang
    is the test's guard's to catch. ``timeout``, when given, governs the
    whole wait, not each note's own."""
    seen = []
    with trio.fail_after(timeout):
        while True:
            note = await client.next_note(timeout=timeout)
            if note.get("method") == "action":
                fits("/notifications/action", note["params"])
            seen.append(note)
            if predicate(note):
                return seen


def action_of(note: dict) -> dict | None:
    """The action a notification carries, or None for anything else."""
    return note["params"]["action"] if note.get("method") == "action" else None


def is_action(kind: str, channel: str | None = None):
    """A predicate for ``until``: an action of type ``kind`` (on ``channel``)."""

    def check(note: dict) -> bool:
        action = action_of(note)
        return bool(action) and action["type"] == kind and (channel is None or note["params"]["channel"] == channel)

    return check


async def create(client: Rpc, tmp_path, channel: str | None = None, **extra: Any) -> tuple[str, str]:
    """A session in ``tmp_path`` (more ``createSession`` params in ``extra``),
    subscribed to with its default chat; returns both URIs. Made as
    ``ahp-session:/<uuid>`` unless ``channel`` names it: the host lists and
    keeps it as ``<provider>:/<uuid>`` (``listed_as``) and answers this
    client under the name it made it by."""
    uri = channel or f"ahp-session:/{uuid.uuid4()}"
    reply = await client.call(
        "createSession",
        {
            "channel": uri,
            "workingDirectories": [tmp_path.as_uri()],
            **extra,
        },
        timeout=60,
    )
    assert reply.get("result", "missing") is None, reply
    sub = await client.call("subscribe", {"channel": uri})
    state = sub["result"]["snapshot"]["state"]
    fits("/$defs/SessionState", state)
    chat = state["defaultChat"]
    chat_sub = await client.call("subscribe", {"channel": chat})
    fits("/$defs/ChatState", chat_sub["result"]["snapshot"]["state"])
    return uri, chat


def listed_as(uri: str, provider: str = "demo") -> str:
    """The name the host lists and keeps a session made as ``uri`` under
    (``ahp-session:/<id>`` made with ``provider``): ``<provider>:/<id>``."""
    return f"{provider}:/{uri.rsplit('/', 1)[-1]}"


def start_turn(text: str, turn_id: str | None = None) -> dict:
    """A ``chat/turnStarted`` action for a user's message ``text``."""
    return {
        "type": "chat/turnStarted",
        "turnId": turn_id or f"t-{uuid.uuid4().hex[:8]}",
        "startedAt": "2026-12-02T00:00:00Z",
        "message": {"text": text, "origin": {"kind": "user"}},
    }


async def dispatch(client: Rpc, channel: str, action: dict, seq: int) -> None:
    await client.notify("dispatchAction", {"channel": channel, "clientSeq": seq, "action": action})
