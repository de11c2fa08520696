"""The terminals port: a program in a pseudoterminal of its own.

``ptyprocess`` forks the child onto the slave side of a fresh pty as the
leader of a new session (so it is its own process group, and a ``^C`` typed
into the pty reaches whatever runs in the foreground through the line
discipline, exactly as for a person). The master side is read and written
through trio (``trio.lowlevel.FdStream``, which takes ownership of the fd it is
given: it gets a ``dup`` and ptyprocess keeps its own), so a quiet terminal
costs a task, never a thread; its output is read in a few shared threads
(``Pty.receive`` says why).

End of output on a pty master shows as an I/O error (EIO) once the last holder
of the slave is gone, not as EOF: trio reports it as ``BrokenResourceError``,
and ``Pty.receive`` answers ``b""`` for it. The child is reaped through a
pidfd, so waiting for it is a task too.

Signals: the child starts with every signal unblocked and at its default
action, whatever the daemon had. Only an ignored disposition and the blocked
mask survive ``exec``, and the daemon has both to hand on: Python ignores
SIGPIPE (so ``yes | head`` said "Broken pipe" instead of ending quietly),
and a daemon started from a script with ``&`` ignores SIGINT, which bash
passes on to what it runs (so a typed ``^C`` stopped nothing).

Shell integration: ``shell_command`` starts bash with ``--rcfile`` and zsh
with ``ZDOTDIR`` pointed at the small scripts shipped next to this module
(``ahpd/ports/shell``). Each first loads the user's own rc file, untouched,
and then adds the marks ``ahpd.host.terminals.shell_marks`` reads back: OSC 7 (the
working directory) and OSC 133 A/B/C/D (prompt, command line, output, exit).
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

import ptyprocess
import trio

from . import threads

SHELL_DIR = Path(__file__).with_name("shell")


def _default_signals() -> None:
    """In the child, before ``exec``: every signal unblocked and at its default action."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for signum in signal.valid_signals():
        if signum not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)


class Pty:
    """One child process in its own pty and process group."""

    def __init__(self, process: ptyprocess.PtyProcess) -> None:
        self._process = process
        self.pid: int = process.pid
        self._stream = trio.lowlevel.FdStream(os.dup(process.fd))
        self._pidfd = os.pidfd_open(self.pid)
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.reaped = False
        self._send_lock = trio.StrictFIFOLock()
        self._eof = False
        self._read_lock = trio.Lock()

    @classmethod
    def spawn(
        cls, argv: Sequence[str], *, cwd: str | os.PathLike[str], env: Mapping[str, str], cols: int, rows: int
    ) -> Pty:
        """Start ``argv``; an ``OSError`` says why it could not be."""
        try:
            process = ptyprocess.PtyProcess.spawn(
                list(argv), cwd=str(cwd), env=dict(env), dimensions=(rows, cols), preexec_fn=_default_signals
            )
        except FileNotFoundError as exc:
            raise OSError(errno.ENOENT, f"no such program: {argv[0]}") from exc
        return cls(process)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """The next output, or ``b""`` once nothing holds the slave side any more.

        Waiting for output is the event loop's (no thread while a terminal is
        quiet); reading it is a thread's: a pty master hands out at most
        4 KiB per ``read``, and Linux makes each ``read`` wait for the
        kernel worker that moves the slave's output across (0.4-1.7 ms
        measured on this VM, O_NONBLOCK or not), which on the loop would
        stall every other client for as long. The thread reads until the pty
        has nothing more at once or ``max_bytes`` are in, so a flood costs
        one hand-over per 64 KiB."""
        while True:
            if self._eof:
                await trio.lowlevel.checkpoint()
                return b""
            fd = self._stream.fileno()
            try:
                await trio.lowlevel.wait_readable(fd)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return b""
            async with self._read_lock:  # aclose waits for it: the fd is not closed under a read
                if self._eof:
                    return b""
                data = await threads.run("pty", self._read_all, fd, max_bytes)
            if data or self._eof:
                return data

    def _read_all(self, fd: int, max_bytes: int) -> bytes:
        """In a thread: what the pty has now, up to ``max_bytes`` (non-blocking reads)."""
        chunks: list[bytes] = []
        size = 0
        while size < max_bytes:
            try:
                data = os.read(fd, max_bytes - size)
            except BlockingIOError:
                break
            except OSError:  # EIO: nothing holds the slave side any more (EBADF: closed)
                self._eof = True
                break
            if not data:
                self._eof = True
                break
            chunks.append(data)
            size += len(data)
        return b"".join(chunks)

    async def send(self, data: bytes) -> None:
        """Write keystrokes; a pty nobody reads any more swallows them."""
        async with self._send_lock:
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    def resize(self, cols: int, rows: int) -> None:
        """TIOCSWINSZ on the master: the kernel sends the foreground group SIGWINCH."""
        self._process.setwinsize(rows, cols)

    def signal_group(self, signum: int = signal.SIGKILL) -> None:
        """Signal everything the terminal started, not just the shell: its
        process group, and every process of its session, because an
        interactive shell puts each background job in a group of its own,
        and a shell's children outlive a shell killed alone."""
        if self.reaped:
            return
        for pid in session_members(self.pid):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            pass

    async def wait(self) -> int | None:
        """Reap the leader; its exit code, or None when a signal ended it."""
        while not self.reaped:
            await trio.lowlevel.wait_readable(self._pidfd)
            pid, status = os.waitpid(self.pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG: it never waits
            if pid == 0:
                continue
            self.reaped = True
            if os.WIFSIGNALED(status):
                self.exit_signal = os.WTERMSIG(status)
            else:
                self.exit_code = os.waitstatus_to_exitcode(status)
        return self.exit_code

    async def aclose(self) -> None:
        """Close the master side (which hangs up the terminal) and the pidfd.
        The caller kills and reaps first. A read in its thread is let finish
        first (it never blocks), so its fd number is never reused under it."""
        with trio.CancelScope(shield=True):
            async with self._read_lock:
                self._eof = True
                await self._stream.aclose()
        try:
            self._process.fileobj.close()
        except OSError:
            pass
        self._process.closed = True
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1

    @property
    def foreground_group(self) -> int | None:
        """The process group the terminal's line discipline serves now."""
        try:
            return os.tcgetpgrp(self._process.fd)
        except OSError:
            return None


def session_members(sid: int) -> list[int]:
    """The processes of session ``sid`` (Linux's /proc; the leader first)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if int(fields[3]) == sid:
            found.append(int(entry))
    return sorted(found, key=lambda pid: pid != sid)


def shell_command(shell: str, environ: Mapping[str, str]) -> tuple[list[str], dict[str, str], bool]:
    """How to start ``shell`` with shell integration: its argv, its
    environment, and whether integration is loaded at all (only bash and
    zsh have scripts; any other shell runs as it is)."""
    name = Path(shell).name
    env = dict(environ)
    if name == "bash":
        return [shell, "--rcfile", str(SHELL_DIR / "bash.sh"), "-i"], env, True
    if name == "zsh":
        env["AHPD_USER_ZDOTDIR"] = environ.get("ZDOTDIR") or environ.get("HOME") or ""
        env["ZDOTDIR"] = str(SHELL_DIR / "zsh")
        return [shell, "-i"], env, True
    return [shell], env, False


class PtyPort:
    """The port as the host is given it."""

    spawn = staticmethod(Pty.spawn)
    shell_command = staticmethod(shell_command)
