"""The agent's ``terminal/*`` requests: commands under a pseudoterminal.

Given the host's terminals (``host=``, an object with ``open(argv, cwd=,
env=, title=)`` whose handles have ``uri``, ``output()``, ``wait()`` and
``kill()``: the backend knows no more of the host than that), each command
runs in an AHP terminal the session claims, so that a client can watch it
and type into it while it runs; its ACP ``terminalId`` is that terminal's
URI, which the tool call's content then names. Without one (a backend used
on its own), the command runs in a private pty as follows.

Each terminal is one process group started in a new session on the slave
side of a fresh pty (so tools that check for a terminal behave as they would
for a person), in a folder inside the conversation's working directory. Its
output is read from the master side by a trio task into a buffer that keeps
only the last ``outputByteLimit`` bytes, cut at a UTF-8 character boundary.
The pty's output translation (``\\n`` -> ``\\r\\n``) is turned off, so the
output reads like a pipe's.

End of output on a pty master shows as an I/O error (EIO) once the last
holder of the slave is gone, not as EOF; trio reports it as
``BrokenResourceError``. A command that leaves a background child holding
the slave never ends its output, so the exit is reported after at most a
short wait for the output to drain.

``kill`` and ``release`` signal the whole group with SIGKILL; closing the
set (the conversation's end) kills every terminal and reaps it. Bodies run
as trio tasks in the conversation's nursery.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import logging
import os
import shlex
import signal
import struct
import termios
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio
from acp.exceptions import RequestError

from ahpd.backends.acp.files import confine
from ahpd.backends.acp.process import signal_group

log = logging.getLogger("ahpd.backends.acp.backend")

DEFAULT_OUTPUT_LIMIT = 1024 * 1024
MAX_OUTPUT_LIMIT = 16 * 1024 * 1024
_DRAIN_WAIT = 1.0  # seconds to wait for the pty's last output after the exit
_ROWS, _COLS = 50, 200


def _prepare_slave(fd: int) -> None:
    attrs = termios.tcgetattr(fd)
    attrs[1] &= ~termios.ONLCR  # oflag: keep "\n" as is
    attrs[3] &= ~(termios.ECHO | termios.ICANON)  # lflag: nothing is typed anyway
    termios.tcsetattr(fd, termios.TCSANOW, attrs)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", _ROWS, _COLS, 0, 0))


class _Terminal:
    def __init__(self, terminal_id: str, proc: trio.Process, limit: int) -> None:
        self.id = terminal_id
        self.proc = proc
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
        self.exit_status: dict[str, Any] | None = None
        self.exited = trio.Event()
        self.drained = trio.Event()
        self.reader_scope = trio.CancelScope()

    def append(self, data: bytes) -> None:
        self.output += data
        excess = len(self.output) - self.limit
        if excess > 0:
            while excess < len(self.output) and (self.output[excess] & 0xC0) == 0x80:
                excess += 1  # never start inside a UTF-8 character
            del self.output[:excess]
            self.truncated = True

    async def read(self, stream: trio.lowlevel.FdStream) -> None:
        try:
            with self.reader_scope:
                while True:
                    try:
                        data = await stream.receive_some(65536)
                    except trio.BrokenResourceError as exc:
                        cause = exc.__cause__
                        if not (isinstance(cause, OSError) and cause.errno == errno.EIO):
                            log.debug("terminal %s: reading failed: %r", self.id, cause)
                        return
                    except trio.ClosedResourceError:
                        return
                    if not data:
                        return
                    self.append(data)
        finally:
            self.drained.set()
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def watch(self) -> None:
        """Reap the process, then publish its exit status."""
        await self.proc.wait()
        with trio.move_on_after(_DRAIN_WAIT):
            await self.drained.wait()
        rc = self.proc.returncode
        if rc is not None and rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = str(-rc)
            self.exit_status = {"exitCode": None, "signal": name}
        else:
            self.exit_status = {"exitCode": rc, "signal": None}
        self.exited.set()

    def kill(self) -> None:
        if self.exit_status is None:
            signal_group(self.proc, signal.SIGKILL)

    def snapshot(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "output": self.output.decode("utf-8", errors="replace"),
            "truncated": self.truncated,
        }
        if self.exit_status is not None:
            result["exitStatus"] = _exit_wire(self.exit_status)
        return result


def _exit_wire(status: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if v is not None}


class _HostTerminal:
    """A command in one of the host's terminals, as ACP asks about it."""

    def __init__(self, handle: Any, limit: int) -> None:
        self.handle = handle
        self.limit = limit
        self.exit_status: dict[str, Any] | None = None
        self.exited = trio.Event()

    async def watch(self) -> None:
        code, signal_name = await self.handle.wait()
        self.exit_status = {"exitCode": code, "signal": signal_name}
        self.exited.set()

    def kill(self) -> None:
        if self.exit_status is None:
            self.handle.kill()

    def snapshot(self) -> dict[str, Any]:
        data = self.handle.output().replace("\r\n", "\n").encode("utf-8", "replace")
        excess = len(data) - self.limit
        if excess > 0:
            while excess < len(data) and (data[excess] & 0xC0) == 0x80:
                excess += 1
            data = data[excess:]
        result: dict[str, Any] = {"output": data.decode("utf-8", "replace"), "truncated": excess > 0}
        if self.exit_status is not None:
            result["exitStatus"] = _exit_wire(self.exit_status)
        return result


class Terminals:
    """The terminals of one conversation (trio-flavoured methods)."""

    def __init__(self, nursery: trio.Nursery, roots: Sequence[Path], env: Mapping[str, str], host: Any = None) -> None:
        self._host = host
        self._nursery = nursery
        self._roots = list(roots)  # the working directory, then the folders granted beside it
        self._env = dict(env)
        self._terminals: dict[str, _Terminal | _HostTerminal] = {}
        self._unreaped: list[_Terminal] = []
        self._hosted: list[_HostTerminal] = []  # released ones too
        self._ids = itertools.count(1)
        self._closed = False

    def _get(self, terminal_id: str) -> _Terminal | _HostTerminal:
        try:
            return self._terminals[terminal_id]
        except KeyError:
            raise RequestError(-32602, f"no such terminal: {terminal_id}", {"terminalId": terminal_id}) from None

    async def create(
        self,
        command: str,
        args: Sequence[str] | None = None,
        env: Sequence[Any] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
    ) -> str:
        if self._closed:
            raise RequestError(-32603, "the conversation is ending", None)
        folder = confine(self._roots, cwd) if cwd else self._roots[0]
        if not folder.is_dir():
            raise RequestError(-32602, f"not a directory: {cwd}", {"cwd": cwd})
        argv = [command, *args] if args else ["/bin/sh", "-c", command]
        environ = {**self._env, "TERM": "dumb"}
        for var in env or ():
            environ[var.name] = var.value
        limit = DEFAULT_OUTPUT_LIMIT if output_byte_limit is None else output_byte_limit
        limit = max(0, min(limit, MAX_OUTPUT_LIMIT))
        if self._host is not None:
            return self._create_hosted(argv, folder, environ, limit)
        master, slave = os.openpty()
        try:
            _prepare_slave(slave)
            proc = await trio.lowlevel.open_process(
                argv,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=str(folder),
                env=environ,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(master)
            raise RequestError(-32603, f"cannot run {command!r}: {exc.strerror or exc}", {"command": command}) from None
        finally:
            os.close(slave)
        terminal_id = f"term-{next(self._ids)}"
        terminal = _Terminal(terminal_id, proc, limit)
        self._terminals[terminal_id] = terminal
        self._unreaped = [t for t in self._unreaped if t.proc.returncode is None]
        self._unreaped.append(terminal)
        self._nursery.start_soon(terminal.read, trio.lowlevel.FdStream(master))  # owns master
        self._nursery.start_soon(terminal.watch)
        log.debug("terminal %s: pid %d runs %r in %s", terminal_id, proc.pid, argv, folder)
        return terminal_id

    def _create_hosted(self, argv: list[str], folder: Path, environ: dict[str, str], limit: int) -> str:
        try:
            title = argv[2] if len(argv) == 3 and argv[1] == "-c" else shlex.join(argv)  # sh -c "what ran"
            handle = self._host.open(argv, cwd=folder, env=environ, title=title)
        except OSError as exc:
            raise RequestError(-32603, f"cannot run {argv[0]!r}: {exc.strerror or exc}", {"command": argv[0]}) from None
        terminal = _HostTerminal(handle, limit)
        self._terminals[handle.uri] = terminal
        self._hosted.append(terminal)
        self._nursery.start_soon(terminal.watch)
        log.debug("terminal %s runs %r in %s", handle.uri, argv, folder)
        return handle.uri

    def output(self, terminal_id: str) -> dict[str, Any]:
        return self._get(terminal_id).snapshot()

    async def wait_for_exit(self, terminal_id: str) -> dict[str, Any]:
        terminal = self._get(terminal_id)
        await terminal.exited.wait()
        assert terminal.exit_status is not None
        return _exit_wire(terminal.exit_status)

    def kill(self, terminal_id: str) -> None:
        self._get(terminal_id).kill()

    def release(self, terminal_id: str) -> None:
        terminal = self._terminals.pop(terminal_id, None)
        if terminal is None:
            raise RequestError(-32602, f"no such terminal: {terminal_id}", {"terminalId": terminal_id})
        terminal.kill()
        if isinstance(terminal, _Terminal):
            terminal.reader_scope.cancel()

    async def close(self) -> None:
        """Kill every terminal and reap it. Call shielded."""
        self._closed = True
        for hosted in self._hosted:
            hosted.kill()  # the host reaps its own
        terminals = self._unreaped
        self._terminals.clear()
        for terminal in terminals:
            terminal.kill()
            terminal.reader_scope.cancel()
        with trio.move_on_after(5):
            for terminal in terminals:
                await terminal.proc.wait()
