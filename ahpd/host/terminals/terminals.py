"""Terminals: a pseudoterminal per ``ahp-terminal:`` channel.

``createTerminal`` starts a shell (the connection's ``defaultShell``, else
``$SHELL``, else ``/bin/sh``) through the terminals port (``ahpd.ports.pty``)
in a directory this host serves (its home, or a session's folder), under the
URI the client chose, and opens a ``TerminalState`` channel there; the root's
``terminals`` list follows every terminal that opens, exits, is renamed,
changes hands or is disposed (``root/terminalsChanged``, the whole list).

This module is the host's terminals (``Host.terminals``): which there are,
where one may start, who holds each, and the port a backend is handed to run
its agent's commands in them. One terminal's own reading and writing is
``ahpd.host.terminals.terminal``; what clients ask of terminals is
``ahpd.host.terminals.terminal_commands``; a ``!command`` turn is
``ahpd.host.terminals.command_turns``.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import signal
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import trio

from ahpd.host.kernel.bus import ROOT
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.host.terminals.terminal import Terminal, running

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")

DEFAULT_COLS, DEFAULT_ROWS = 80, 24


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
            out.append(
                {
                    "resource": terminal.uri,
                    "title": state["title"],
                    "claim": state["claim"],
                    "lifecycle": state["lifecycle"],
                }
            )
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
            raise RpcError(
                INVALID_PARAMS,
                f"cwd {cwd} is outside the folders this host serves (its home and the sessions' folders)",
                {"path": "$.cwd"},
            )
        return real

    def check_uri(self, uri: str) -> None:
        if uri in self.host.bus.channels:
            raise RpcError(
                INVALID_PARAMS,
                f"{uri} is already in use: dispose it first or choose another URI",
                {"path": "$.channel"},
            )
        scheme = urlsplit(uri).scheme
        if not scheme or scheme in (
            "ahp-root",
            "ahp-session",
            "ahp-chat",
            "ahp-changeset",
            "ahp-resource-watch",
            "ahp-automations",
            "ahp-automation",
            "ahp-otlp",
            "file",
        ):
            raise RpcError(
                INVALID_PARAMS,
                f"{uri} is not a URI a terminal can take (try ahp-terminal:/<id>)",
                {"path": "$.channel"},
            )

    def cap_problem(self, claim: dict[str, Any]) -> str | None:
        """Why one more terminal claimed ``claim`` may not start: the host
        runs ``terminalsRunning`` already, or the client that would hold it
        ``terminalsPerClient``. Exited terminals (kept for their scrollback)
        do not count: a running one costs a process and a pty."""
        live = [t for t in self.terminals.values() if running(t.state())]
        most = int(self.host.config("terminalsRunning"))
        if len(live) >= most:
            return (
                f"this host already runs {len(live)} terminals, its most (root config terminalsRunning): "
                "dispose one first"
            )
        if claim.get("kind") == "client":
            most = int(self.host.config("terminalsPerClient"))
            held = sum(
                1
                for t in live
                if t.state()["claim"].get("kind") == "client"
                and t.state()["claim"].get("clientId") == claim["clientId"]
            )
            if held >= most:
                return (
                    f"client {claim['clientId']} already holds {held} running terminals, its most (root config "
                    "terminalsPerClient): dispose one first"
                )
        return None

    def open(
        self,
        uri: str,
        argv: Sequence[str],
        *,
        claim: dict[str, Any],
        title: str,
        folder: Path,
        cols: int = DEFAULT_COLS,
        rows: int = DEFAULT_ROWS,
        env: Mapping[str, str] | None = None,
        integrated: bool = False,
    ) -> Terminal:
        """Start ``argv`` under ``uri``; an ``OSError`` says why it could not
        (a cap of the root config's among the reasons)."""
        assert self._nursery is not None, "the terminals' nursery is not running"
        problem = self.cap_problem(claim)
        if problem:
            raise OSError(errno.EAGAIN, problem)
        environ = {**os.environ, "TERM": "xterm-256color", **(env or {})}
        pty = self.port.spawn(argv, cwd=folder, env=environ, cols=cols, rows=rows)
        state: dict[str, Any] = {
            "title": title,
            "cwd": folder.as_uri(),
            "cols": cols,
            "rows": rows,
            "content": [],
            "lifecycle": {"status": "running"},
            "claim": claim,
            "isPty": True,
        }
        self.host.bus.open(uri, "terminal", state)
        terminal = self.terminals[uri] = Terminal(self.host, uri, pty, integrated, self.publish)
        self._nursery.start_soon(terminal.run, name=f"terminal {uri}")
        log.info("terminal %s: pid %d runs %s in %s", uri, pty.pid, argv[0], folder)
        self.publish()
        return terminal

    def open_shell(
        self, uri: str, *, shell: str, claim: dict[str, Any], title: str | None, folder: Path, cols: int, rows: int
    ) -> Terminal:
        argv, env, integrated = self.port.shell_command(shell, os.environ)
        return self.open(
            uri,
            argv,
            claim=claim,
            title=title or Path(shell).name,
            folder=folder,
            cols=cols,
            rows=rows,
            env=env,
            integrated=integrated,
        )

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

    def __init__(
        self, terminals: Terminals, session_uri: str, chat_uri: str, turn_id: Callable[[], str | None]
    ) -> None:
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


# -- what the sessions ask (ahpd.host.table) ---------------------------------------------


def agent_extras(chat: Chat, accepts: Collection[str]) -> dict[str, Any]:
    """``terminals`` for a backend that runs its commands in the host's."""
    terminals = chat.host.terminals
    if "terminals" not in accepts or terminals is None:
        return {}
    return {
        "terminals": AgentTerminals(
            terminals, chat.session.uri, chat.uri, lambda: chat.turn.turn_id if chat.turn is not None else None
        )
    }


def turn_action(chat: Chat, action: dict[str, Any]) -> None:
    """A command the agent ran has a terminal: follow it."""
    if chat.host.terminals is not None:
        chat.host.terminals.follow_tool_call(action)


def session_disposed(session: Session) -> None:
    """The terminals a session claimed go with it."""
    if session.host.terminals is not None:
        session.host.terminals.dispose_claimed_by(session.uri)
