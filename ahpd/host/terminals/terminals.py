"""Terminals: a pseudoterminal per ``ahp-terminal:`` channel.

``createTerminal`` starts a shell (the connection's ``defaultShell``, else
``$SHELL``, else ``/bin/sh``) through the terminals port (``ahpd.ports.pty``)
in a directory this host serves (its home, or a session's folder), under the
URI the client chose, and opens a ``TerminalState`` channel there; the root's
``terminals`` list follows every terminal that opens, exits, is renamed,
changes hands or is disposed (``root/terminalsChanged``, the whole list).

Each terminal runs in a nursery of its own, which is its failure boundary: a
fault ends that terminal (its process group killed, ``terminal/exited``
said), is logged, and reaches nothing else. Its tasks:

* the reader: pty bytes -> shell marks cut out (``ahpd.ports.shell_marks``)
  -> text coalesced into ``terminal/data`` chunks of at most ``CHUNK`` bytes or
  ``COALESCE`` seconds, so ``yes`` is a few actions per screenful rather
  than one per read. Before each read it waits while a watcher has more than
  ``BEHIND`` bytes queued: a terminal nobody keeps up with is not read, and
  its program blocks on a full pty as it would under a slow terminal;
* the writer: ``terminal/input`` bytes to the pty, in order;
* the reaper: ``terminal/exited`` with the exit code once the output has
  drained (or ``DRAIN`` seconds after the shell went, when a background
  child still holds the pty open).

The channel's content is the scrollback, capped by the root config key
``terminalScrollback``: the host trims its own copy from the front (the
spec lets both sides trim independently), so a late subscriber's snapshot
shows the last of what happened.

The marks give ``terminal/cwdChanged`` (OSC 7), one
``terminal/commandDetectionAvailable`` (the first OSC 133 mark),
``terminal/commandExecuted`` (C, with the command line read back off the
echo since B) and ``terminal/commandFinished`` (D, with the shell's exit code
and the time since C).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import signal
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import trio

from ahpd.host.kernel.bus import ROOT
from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.host.kernel.supervise import supervised
from ahpd.ports import shell_marks
from ahpd.protocol import codec, model
from ahpd.host.sessions.chats.turns import TurnRunner
from ahpd.host.sessions.chats.turns import take_up_queued

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")

NOT_FOUND = -32008
#: A chunk of output is sent once it holds this many bytes...
CHUNK = 64 * 1024
#: ...or this many seconds after its first byte.
COALESCE = 0.004
#: A watcher with more than this queued and unwritten pauses the reading.
BEHIND = 4 * 2**20
#: Seconds the output gets to drain after the shell exited.
DRAIN = 1.0
#: Seconds a killed terminal's process gets to be reaped.
REAP = 5.0
MAX_COLS, MAX_ROWS = 1000, 500
DEFAULT_COLS, DEFAULT_ROWS = 80, 24


def _size_problem(cols: Any, rows: Any) -> str | None:
    for name, value, top in (("cols", cols, MAX_COLS), ("rows", rows, MAX_ROWS)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            return f"{name} must be a whole number, not {value!r}"
        if not 1 <= value <= top:
            return f"{name} must be from 1 to {top}, not {value}"
    return None


def _file_uri(path: str) -> str:
    return Path(path).as_uri()


def _running(state: dict[str, Any]) -> bool:
    return state["lifecycle"]["status"] == "running"


class Terminal:
    def __init__(self, manager: Terminals, uri: str, pty: Any, integrated: bool) -> None:
        self.manager = manager
        self.uri = uri
        self.pty = pty
        self.integrated = integrated
        self.scope = trio.CancelScope()
        self._input_send, self._input_receive = trio.open_memory_channel[bytes](math.inf)
        self._marks = shell_marks.MarkReader()
        self._pending: list[str] = []
        self._pending_bytes = 0
        self._wake = trio.Event()
        self._drained = trio.Event()
        self._size = 0
        self._detected = False
        self._typing: list[str] | None = None  # the echo since the prompt ended (B)
        self._command: tuple[str, float] | None = None  # (commandId, monotonic start)
        self._ids = itertools.count(1)
        #: Set once ``terminal/exited`` is said; what ran and how it ended.
        self.exited = trio.Event()
        self.exit_code: int | None = None

    @property
    def host(self) -> Host:
        return self.manager.host

    def state(self) -> dict[str, Any]:
        return self.host.bus.channels[self.uri].state

    def emit(self, action: dict[str, Any], origin: dict[str, Any] | None = None) -> None:
        self.host.bus.emit(self.uri, action, origin)

    # -- the tasks ---------------------------------------------------------------

    async def run(self) -> None:
        with supervised(f"terminal {self.uri}", self._failed):
            try:
                with self.scope:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._read)
                        nursery.start_soon(self._flusher)
                        nursery.start_soon(self._write)
                        await self._reap()
                        nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    await self._end()

    def _failed(self, exc: Exception) -> None:
        self.scope.cancel()

    async def _read(self) -> None:
        try:
            while True:
                await self._keep_pace()
                data = await self.pty.receive()
                if not data:
                    return
                for event in self._marks.feed(data):
                    if isinstance(event, shell_marks.Text):
                        self._text(event.text)
                    else:
                        self.flush()
                        self._mark(event)
        finally:
            self.flush()
            self._drained.set()

    async def _keep_pace(self) -> None:
        """Wait while somebody watching has fallen ``BEHIND``."""
        channel = self.host.bus.channels.get(self.uri)
        while channel is not None and any(
                getattr(getattr(s, "conn", None), "queued_bytes", 0) > BEHIND for s in channel.subscribers):
            await trio.sleep(COALESCE)

    def _text(self, text: str) -> None:
        if self._typing is not None:
            self._typing.append(text)
        self._pending.append(text)
        self._pending_bytes += len(text)
        if self._pending_bytes >= CHUNK:
            self.flush()
        else:
            self._wake.set()

    async def _flusher(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await trio.sleep(COALESCE)
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        data = "".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        self.emit({"type": "terminal/data", "data": data})
        self._size += len(data)
        cap = int(self.host.config("terminalScrollback"))
        if self._size > cap:
            self._trim(cap)

    def _trim(self, cap: int) -> None:
        """Keep about the last three quarters of ``cap`` (so that trimming is
        not done on every chunk): whole parts from the front, then the front
        of the first part left. The tail part is never dropped."""
        channel = self.host.bus.channels[self.uri]
        content = list(channel.state["content"])
        sizes = [len(_text_of(p)) for p in content]
        self._size = sum(sizes)
        if self._size <= cap:
            return
        excess = self._size - cap * 3 // 4
        while len(content) > 1 and sizes[0] <= excess:
            excess -= sizes.pop(0)
            content.pop(0)
        if excess > 0:
            first = content[0]
            key = "output" if first.get("type") == "command" else "value"
            content[0] = {**first, key: first[key][excess:]}
        channel.state = {**channel.state, "content": content}
        self._size = sum(len(_text_of(p)) for p in content)

    def _mark(self, mark: shell_marks.Mark) -> None:
        if mark.kind == "cwd":
            self.emit({"type": "terminal/cwdChanged", "cwd": _file_uri(mark.value)})
            return
        if not self._detected:
            self._detected = True
            self.emit({"type": "terminal/commandDetectionAvailable"})
        if mark.kind == "A":
            self._typing = None
        elif mark.kind == "B":
            self._typing = []
        elif mark.kind == "C":
            line = shell_marks.command_line("".join(self._typing or ()))
            self._typing = None
            if line:
                command_id = f"{next(self._ids)}"
                self._command = (command_id, time.monotonic())
                self.emit({"type": "terminal/commandExecuted", "commandId": command_id,
                           "commandLine": line, "timestamp": round(time.time() * 1000)})
        elif mark.kind == "D" and self._command is not None:
            command_id, started = self._command
            self._command = None
            finished: dict[str, Any] = {"type": "terminal/commandFinished", "commandId": command_id,
                                        "durationMs": round((time.monotonic() - started) * 1000)}
            if mark.value.lstrip("-").isdigit():
                finished["exitCode"] = int(mark.value)
            self.emit(finished)

    async def _write(self) -> None:
        async for data in self._input_receive:
            await self.pty.send(data)

    async def _reap(self) -> None:
        await self.pty.wait()
        with trio.move_on_after(DRAIN):
            await self._drained.wait()

    async def _end(self) -> None:
        """Kill what is left of the group, reap it, and say it exited."""
        self.pty.signal_group(signal.SIGKILL)
        with trio.move_on_after(REAP):
            await self.pty.wait()
        self.flush()
        await self.pty.aclose()
        self.exit_code = self.pty.exit_code
        if self.uri in self.host.bus.channels and _running(self.state()):
            exited: dict[str, Any] = {"type": "terminal/exited"}
            if self.pty.exit_code is not None:
                exited["exitCode"] = self.pty.exit_code
            self.emit(exited)
            self.manager.publish()
            cwd = urlsplit(self.state().get("cwd") or "")
            if cwd.scheme == "file":  # what ran may have changed the tree a changeset shows
                for touched in self.host.hooks.files_touched:
                    touched(self.host, Path(unquote(cwd.path)))
        self.exited.set()

    # -- what clients and sessions ask -----------------------------------------

    def input(self, data: str) -> None:
        self._input_send.send_nowait(data.encode("utf-8", "surrogateescape"))

    def kill(self) -> None:
        self.pty.signal_group(signal.SIGKILL)

    def text(self) -> str:
        return "".join(_text_of(p) for p in self.state()["content"])


def _text_of(part: dict[str, Any]) -> str:
    return part["output"] if part.get("type") == "command" else part.get("value", "")


class Terminals:
    """The host's terminals, over a terminals port (``ahpd.ports.pty``)."""

    def __init__(self, host: Host, port: Any) -> None:
        self.host = host
        self.port = port
        self.terminals: dict[str, Terminal] = {}
        self._nursery: trio.Nursery | None = None
        self._bang_ids = itertools.count(1)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    # -- the catalogue ---------------------------------------------------------

    def infos(self) -> list[dict[str, Any]]:
        out = []
        for terminal in self.terminals.values():
            state = terminal.state()
            out.append({"resource": terminal.uri, "title": state["title"], "claim": state["claim"],
                        "lifecycle": state["lifecycle"]})
        return out

    def publish(self) -> None:
        self.host.bus.emit(ROOT, {"type": "root/terminalsChanged", "terminals": self.infos()})

    # -- opening and closing ---------------------------------------------------

    def served(self) -> list[Path]:
        """The folders a terminal may start in: this host's home, and every
        open session's folder."""
        roots = [Path.home()]
        if self.host.sessions is not None:
            roots += [s.cwd for s in self.host.sessions.sessions.values()]
        return roots

    def folder(self, cwd: str | None) -> Path:
        if cwd is None:
            return Path.home()
        url = urlsplit(cwd)
        if url.scheme != "file":
            raise RpcError(INVALID_PARAMS, f"cwd must be a file: URI, not {cwd!r}", {"path": "$.cwd"})
        path = Path(unquote(url.path))
        if not path.is_dir():
            raise RpcError(INVALID_PARAMS, f"cwd {cwd} is not a directory that exists", {"path": "$.cwd"})
        real = path.resolve()
        if not any(real == root.resolve() or real.is_relative_to(root.resolve()) for root in self.served()):
            raise RpcError(INVALID_PARAMS, f"cwd {cwd} is outside the folders this host serves "
                           "(its home and the sessions' folders)", {"path": "$.cwd"})
        return real

    def check_uri(self, uri: str) -> None:
        if uri in self.host.bus.channels:
            raise RpcError(INVALID_PARAMS, f"{uri} is already in use: dispose it first or choose another URI",
                           {"path": "$.channel"})
        scheme = urlsplit(uri).scheme
        if not scheme or scheme in ("ahp-root", "ahp-session", "ahp-chat", "ahp-changeset", "ahp-resource-watch",
                                    "ahp-automations", "ahp-automation", "ahp-otlp", "file"):
            raise RpcError(INVALID_PARAMS, f"{uri} is not a URI a terminal can take (try ahp-terminal:/<id>)",
                           {"path": "$.channel"})

    def open(self, uri: str, argv: Sequence[str], *, claim: dict[str, Any], title: str, folder: Path,
             cols: int = DEFAULT_COLS, rows: int = DEFAULT_ROWS, env: Mapping[str, str] | None = None,
             integrated: bool = False) -> Terminal:
        """Start ``argv`` under ``uri``; an ``OSError`` says why it could not."""
        assert self._nursery is not None, "the terminals' nursery is not running"
        environ = {**os.environ, "TERM": "xterm-256color", **(env or {})}
        pty = self.port.spawn(argv, cwd=folder, env=environ, cols=cols, rows=rows)
        state: dict[str, Any] = {
            "title": title, "cwd": folder.as_uri(), "cols": cols, "rows": rows, "content": [],
            "lifecycle": {"status": "running"}, "claim": claim, "isPty": True,
        }
        self.host.bus.open(uri, "terminal", state)
        terminal = self.terminals[uri] = Terminal(self, uri, pty, integrated)
        self._nursery.start_soon(terminal.run, name=f"terminal {uri}")
        log.info("terminal %s: pid %d runs %s in %s", uri, pty.pid, argv[0], folder)
        self.publish()
        return terminal

    def open_shell(self, uri: str, *, shell: str, claim: dict[str, Any], title: str | None, folder: Path,
                   cols: int, rows: int) -> Terminal:
        argv, env, integrated = self.port.shell_command(shell, os.environ)
        return self.open(uri, argv, claim=claim, title=title or Path(shell).name, folder=folder,
                         cols=cols, rows=rows, env=env, integrated=integrated)

    def dispose(self, uri: str) -> None:
        terminal = self.terminals.pop(uri, None)
        if terminal is None:
            return
        terminal.kill()
        terminal.scope.cancel()
        self.host.bus.close(uri)
        self.publish()
        log.info("terminal %s disposed", uri)

    def dispose_claimed_by(self, session_uri: str) -> None:
        """A session goes: so do the terminals it claimed."""
        for uri, terminal in list(self.terminals.items()):
            claim = terminal.state()["claim"]
            if claim.get("kind") == "session" and claim.get("session") == session_uri:
                self.dispose(uri)

    def new_uri(self, hint: str) -> str:
        while True:
            uri = f"ahp-terminal:/{hint}-{next(self._bang_ids)}"
            if uri not in self.host.bus.channels:
                return uri

    def follow_tool_call(self, action: dict[str, Any]) -> None:
        """An agent's tool call names one of the session's terminals: while
        it runs the claim names the call, and once it completed, only the
        session (the terminal goes to the background)."""
        if action["type"] == "chat/toolCallContentChanged":
            content, call_id = action["content"], action["toolCallId"]
        elif action["type"] == "chat/toolCallComplete":
            content, call_id = action["result"].get("content") or [], None
        else:
            return
        for part in content:
            if part.get("type") == "terminal":
                self.claim_call(part["resource"], action["turnId"], call_id)

    def claim_call(self, uri: str, turn_id: str, call_id: str | None) -> None:
        """A tool call names a terminal its session holds: the claim says so
        while it runs (``call_id``), and is narrowed back to the session after."""
        terminal = self.terminals.get(uri)
        if terminal is None:
            return
        claim = terminal.state()["claim"]
        if claim.get("kind") != "session":
            return
        narrowed = {k: v for k, v in claim.items() if k not in ("turnId", "toolCallId")}
        if call_id is not None:
            narrowed.update(turnId=turn_id, toolCallId=call_id)
        if narrowed != claim:
            terminal.emit({"type": "terminal/claimed", "claim": narrowed})
            self.publish()


# -- the agent's terminals (a port handed to a backend) --------------------------------


class AgentTerminals:
    """What a backend is given to run its agent's commands in AHP terminals
    claimed by the session for the turn that runs them (see
    ``ahpd.backends.acp.terminals``)."""

    def __init__(self, terminals: Terminals, session_uri: str, chat_uri: str,
                 turn_id: Callable[[], str | None]) -> None:
        self._terminals = terminals
        self._session = session_uri
        self._chat = chat_uri
        self._turn_id = turn_id

    def open(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], title: str) -> AgentTerminal:
        claim: dict[str, Any] = {"kind": "session", "session": self._session, "chat": self._chat}
        turn_id = self._turn_id()
        if turn_id:
            claim["turnId"] = turn_id
        uri = self._terminals.new_uri("agent")
        terminal = self._terminals.open(uri, argv, claim=claim, title=title, folder=cwd, env=env)
        return AgentTerminal(self._terminals, terminal)


class AgentTerminal:
    def __init__(self, terminals: Terminals, terminal: Terminal) -> None:
        self._terminals = terminals
        self._terminal = terminal
        self.uri = terminal.uri
        self._text = ""

    def output(self) -> str:
        if self.uri in self._terminals.host.bus.channels:
            self._text = self._terminal.text()
        return self._text

    async def wait(self) -> tuple[int | None, str | None]:
        """The exit code, or the name of the signal that ended it."""
        await self._terminal.exited.wait()
        self.output()
        signum = self._terminal.pty.exit_signal
        return self._terminal.exit_code, (signal.Signals(signum).name if signum else None)

    def kill(self) -> None:
        self._terminal.kill()


# -- commands ---------------------------------------------------------------------------


def _manager(host: Host) -> Terminals:
    if host.terminals is None:
        raise RpcError(INVALID_PARAMS, "this host was given no terminals port: it runs no terminals")
    return host.terminals


def _claim_problem(host: Host, peer: Peer, claim: dict[str, Any]) -> str | None:
    if claim["kind"] == "client":
        if claim["clientId"] != peer.client_id:
            return f"a client claims a terminal for itself ({peer.client_id}), not for {claim['clientId']}"
        return None
    sessions = host.sessions.sessions if host.sessions is not None else {}
    session = sessions.get(claim["session"])
    if session is None:
        return f"no session {claim['session']} on this host"
    if claim["chat"] not in session.chats:
        return f"no chat {claim['chat']} in {claim['session']}"
    return None


async def create_terminal(host: Host, peer: Peer, params: model.CreateTerminalParams) -> None:
    terminals = _manager(host)
    terminals.check_uri(params.channel)
    claim = codec.encode(params.claim)
    problem = _claim_problem(host, peer, claim)
    if problem:
        raise RpcError(INVALID_PARAMS, problem, {"path": "$.claim"})
    cols = DEFAULT_COLS if params.cols is None else params.cols
    rows = DEFAULT_ROWS if params.rows is None else params.rows
    problem = _size_problem(cols, rows)
    if problem:
        raise RpcError(INVALID_PARAMS, problem, {"path": "$.cols" if "cols" in problem else "$.rows"})
    folder = terminals.folder(params.cwd)
    shell = peer.config.get("defaultShell") or os.environ.get("SHELL") or "/bin/sh"
    try:
        terminals.open_shell(params.channel, shell=shell, claim=claim, title=params.name, folder=folder,
                             cols=int(cols), rows=int(rows))
    except OSError as exc:
        raise RpcError(INVALID_PARAMS, f"cannot start {shell}: {exc.strerror or exc}", {"shell": shell}) from None


def dispose_terminal(host: Host, peer: Peer, params: model.DisposeTerminalParams) -> None:
    terminals = _manager(host)
    terminal = terminals.terminals.get(params.channel)
    if terminal is None:
        raise RpcError(NOT_FOUND, f"no terminal {params.channel} on this host", {"channel": params.channel})
    problem = _not_yours(peer, terminal)
    if problem:
        raise RpcError(INVALID_PARAMS, problem, {"channel": params.channel})
    terminals.dispose(params.channel)


COMMANDS = {"createTerminal": create_terminal, "disposeTerminal": dispose_terminal}


# -- what clients dispatch on a terminal ---------------------------------------------------


def _not_yours(peer: Peer, terminal: Terminal) -> str | None:
    """A terminal another client holds is that client's shell; one a session
    holds is there to be watched and typed into."""
    claim = terminal.state()["claim"]
    if claim.get("kind") == "client" and claim.get("clientId") != peer.client_id:
        return f"{terminal.uri} is held by client {claim['clientId']}"
    return None


def _terminal(host: Host, peer: Peer, channel: str) -> Terminal | Refuse:
    terminal = host.terminals.terminals.get(channel) if host.terminals is not None else None
    if terminal is None:
        return Refuse(f"{channel} is not a terminal this host runs")
    problem = _not_yours(peer, terminal)
    return Refuse(problem) if problem else terminal


def terminal_input(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    terminal = _terminal(host, peer, channel)
    if isinstance(terminal, Refuse):
        return terminal
    if not _running(terminal.state()):
        return Refuse(f"{channel} has exited: there is nothing to type into")
    terminal.input(action["data"])
    return Apply(action)


def terminal_resized(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    terminal = _terminal(host, peer, channel)
    if isinstance(terminal, Refuse):
        return terminal
    problem = _size_problem(action["cols"], action["rows"])
    if problem:
        return Refuse(problem)
    if _running(terminal.state()):
        terminal.pty.resize(int(action["cols"]), int(action["rows"]))
    return Apply(action)


def terminal_claimed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    terminal = _terminal(host, peer, channel)
    if isinstance(terminal, Refuse):
        return terminal
    current = terminal.state()["claim"]
    if current.get("kind") == "session":
        # A client may send a session's terminal to the background (the
        # session keeps it) or take it over; it may not hand it elsewhere.
        wanted = action["claim"]
        background = wanted.get("kind") == "session" and wanted.get("session") == current["session"] \
            and wanted.get("chat") == current.get("chat") and not wanted.get("toolCallId")
        mine = wanted.get("kind") == "client" and wanted.get("clientId") == peer.client_id
        if not (background or mine):
            return Refuse(f"{channel} is held by session {current['session']}: a client may send it to the "
                          "background or take it for itself, nothing else")
    problem = _claim_problem(host, peer, action["claim"]) if action["claim"]["kind"] == "session" else None
    if problem:
        return Refuse(problem)
    return Apply(action, after=host.terminals.publish)


def terminal_title_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    terminal = _terminal(host, peer, channel)
    if isinstance(terminal, Refuse):
        return terminal
    return Apply(action, after=host.terminals.publish)


def terminal_cleared(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    terminal = _terminal(host, peer, channel)
    if isinstance(terminal, Refuse):
        return terminal
    terminal.flush()
    return Apply(action)


CLIENT_ACTIONS = {
    "terminal/input": terminal_input,
    "terminal/resized": terminal_resized,
    "terminal/claimed": terminal_claimed,
    "terminal/titleChanged": terminal_title_changed,
    "terminal/cleared": terminal_cleared,
}


# -- ! commands ----------------------------------------------------------------------------

#: What a !command's turn shows of its output, at most (the terminal keeps the rest).
PREVIEW = 16 * 1024


def command_turn(host: Host, peer: Peer, chat: Any, action: dict[str, Any]) -> Refuse | Apply:
    """A turn whose message starts with ``!``: the rest runs in a terminal
    the session claims, and never reaches the agent. Its backend is told
    what ran (``ran``), so that the agent hears of it with the next prompt;
    a backend that cannot be told is refused rather than asked the command
    as a question."""
    command = action["message"].get("text", "")[1:].strip()
    backend = host.sessions.backends[chat.session.provider]
    if not hasattr(backend, "ran"):
        return Refuse(f"the {chat.session.provider} agent cannot be told what a !command ran, so this host "
                      "does not run one in its sessions; send the message without the !")
    if not command:
        return Refuse("a ! message names a command to run after the !")
    shell = peer.config.get("defaultShell") or os.environ.get("SHELL") or "/bin/sh"

    def start() -> None:
        turn = chat.turn = TurnRunner(chat, action["turnId"], previous=chat.turn)
        chat.session.nursery.start_soon(_run_command, turn, command, shell, backend,
                                        name=f"!command turn {turn.turn_id} of {chat.uri}")

    return Apply(action, after=start)


async def _run_command(turn: Any, command: str, shell: str, backend: Any) -> None:
    chat = turn.chat
    with supervised(f"!command turn {turn.turn_id} of {chat.uri}", turn.failed):
        try:
            with turn.scope:
                await _command(turn, command, shell, backend)
        finally:
            turn.done.set()
            if chat.turn is turn and turn.ended:
                chat.turn = None
    with supervised(f"after !command turn {turn.turn_id} of {chat.uri}"):
        chat.session.save()
        take_up_queued(chat)


async def _command(turn: Any, command: str, shell: str, backend: Any) -> None:
    chat, terminals = turn.chat, turn.chat.host.terminals
    call_id = f"{turn.turn_id}.command"
    turn.emit({"type": "chat/toolCallStart", "turnId": turn.turn_id, "toolCallId": call_id,
               "toolName": "terminal", "displayName": command, "_meta": {"toolKind": "terminal"}})
    turn.emit({"type": "chat/toolCallReady", "turnId": turn.turn_id, "toolCallId": call_id,
               "invocationMessage": command, "toolInput": command, "confirmed": "not-needed"})
    claim = {"kind": "session", "session": chat.session.uri, "chat": chat.uri,
             "turnId": turn.turn_id, "toolCallId": call_id}
    uri = terminals.new_uri("command")
    try:
        terminal = terminals.open(uri, [shell, "-c", command], claim=claim, title=command, folder=chat.session.cwd)
    except OSError as exc:
        turn.emit({"type": "chat/toolCallComplete", "turnId": turn.turn_id, "toolCallId": call_id, "result": {
            "success": False, "pastTenseMessage": f"Could not run {command}",
            "error": {"message": f"cannot start {shell}: {exc.strerror or exc}"}}})
        turn.end({"type": "chat/turnComplete", "turnId": turn.turn_id, "duration": turn.duration()})
        return
    reference = {"type": "terminal", "resource": uri, "title": command, "isPty": True}
    turn.emit({"type": "chat/toolCallContentChanged", "turnId": turn.turn_id, "toolCallId": call_id,
               "content": [reference]})
    async with trio.open_nursery() as nursery:
        async def stop_on_cancel() -> None:
            await turn.until_stopped()
            terminal.kill()

        nursery.start_soon(stop_on_cancel)
        await terminal.exited.wait()
        nursery.cancel_scope.cancel()
    output = terminal.text() if uri in chat.host.bus.channels else ""
    code = terminal.exit_code
    preview = output[-PREVIEW:]
    result: dict[str, Any] = {"preview": preview, "truncated": len(preview) < len(output)}
    if code is not None:
        result["exitCode"] = code
    terminals.claim_call(uri, turn.turn_id, None)
    if turn.ended:
        return  # cancelled: the ending is said
    turn.emit({"type": "chat/toolCallComplete", "turnId": turn.turn_id, "toolCallId": call_id, "result": {
        "success": code == 0, "pastTenseMessage": f"Ran {command}", "content": [{**reference, "result": result}],
        **({} if code == 0 else {"error": {"message": f"{command} exited with {_ended(terminal)}"}})}})
    shown = preview.replace("\r\n", "\n").rstrip("\n")
    text = f"```\n{shown}\n```\n\n`{command}` exited with {_ended(terminal)}." if shown else \
        f"`{command}` printed nothing and exited with {_ended(terminal)}."
    said = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    for action in turn.translator.feed(said):
        turn.emit(action)
    note = backend.ran(command, output, code)
    if note:
        chat.preamble = f"{chat.preamble}\n\n{note}" if chat.preamble else note
    turn.end({"type": "chat/turnComplete", "turnId": turn.turn_id, "duration": turn.duration()})


def _ended(terminal: Terminal) -> str:
    signum = terminal.pty.exit_signal
    if signum:
        return f"signal {signal.Signals(signum).name}"
    return f"exit code {terminal.exit_code}"


# -- what the sessions and the kernel ask (ahpd.host.table) ---------------------------------


def capabilities_of(host: Any) -> dict[str, Any]:
    """A turn starting with ``!`` runs in a terminal, where the host has terminals."""
    return {"terminalCommandPrefix": "!"} if host.terminals is not None else {}


def agent_extras(chat: Chat, accepts: Collection[str]) -> dict[str, Any]:
    """``terminals`` for a backend that runs its commands in the host's."""
    terminals = chat.host.terminals
    if "terminals" not in accepts or terminals is None:
        return {}
    return {"terminals": AgentTerminals(terminals, chat.session.uri, chat.uri,
                                        lambda: chat.turn.turn_id if chat.turn is not None else None)}


def turn_action(chat: Chat, action: dict[str, Any]) -> None:
    """A command the agent ran has a terminal: follow it."""
    if chat.host.terminals is not None:
        chat.host.terminals.follow_tool_call(action)


def take_command_turn(host: Any, peer: Peer, chat: Chat, action: dict[str, Any]) -> Refuse | Apply | None:
    """A ``!command`` runs in a terminal, not sent to the agent."""
    if host.terminals is None or not action["message"].get("text", "").startswith("!"):
        return None
    return command_turn(host, peer, chat, action)


def session_disposed(session: Session) -> None:
    """The terminals a session claimed go with it."""
    if session.host.terminals is not None:
        session.host.terminals.dispose_claimed_by(session.uri)
