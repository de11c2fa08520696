"""The agent's process and its three pipes, owned by trio.

The ``acp`` library is asyncio-only and its own stdio transport has two
flaws for a daemon: it never reads a piped stderr (a chatty agent fills the
pipe and hangs) and it has no cap on a line. So trio owns the process here:

* a **stdout** task frames lines itself, with a hard cap (``max_line_bytes``):
  a longer line is a fatal error of the agent, not unbounded memory; each
  JSON object goes to a small memory channel (backpressure on the agent);
* a **stderr** task reads continuously and logs one line per line
  (truncated), keeping the last lines for error messages;
* a **stdin** task writes whole lines from a memory channel, so a cancelled
  sender can never leave half a line on the pipe.

:class:`PipeTransport` is the library's message-level ``Transport`` over
those channels (asyncio-flavoured methods, hopping to trio with
``trio_as_aio``). The agent runs in its own process group, and
:meth:`AgentProcess.terminate` ends the whole group: SIGTERM, a grace
period, then SIGKILL, always reaping.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
import trio_asyncio

from ahpd.backends.port import BackendError

if TYPE_CHECKING:
    from ahpd.backends.acp.backend import AcpBackend

log = logging.getLogger("ahpd.backends.acp.backend")

_CHUNK = 65536
_STDERR_LINE_MAX = 2000  # characters logged per stderr line
_STDERR_BUFFER_MAX = 65536  # a longer stderr "line" is logged in pieces
_TAIL_LINES = 12


def describe_returncode(rc: int | None) -> str:
    if rc is None:
        return "is still running"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"was killed by {name}"
    return f"exited with status {rc}"


def signal_group(proc: trio.Process, sig: int) -> None:
    """Signal the process group ``proc`` leads (it was started in a new
    session), or just ``proc`` if the group is already gone."""
    try:
        os.killpg(proc.pid, sig)
        return
    except (ProcessLookupError, PermissionError):
        pass
    if proc.returncode is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


async def start_agent(backend: AcpBackend, root: Path, env: Mapping[str, str], loop: Any) -> AgentProcess:
    """``backend``'s agent started in ``root`` with ``env``, in a process
    group of its own (so its children end with it); ``loop`` is the asyncio
    loop its transport serves, or None. :class:`BackendError` when it cannot start."""
    try:
        proc = await trio.lowlevel.open_process(
            [backend.command, *backend.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(root),
            env=dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        raise BackendError(
            f"cannot start the {backend.provider} agent ({backend.command}): {exc.strerror or exc}"
        ) from None
    label = f"{backend.provider}[{proc.pid}]"
    return AgentProcess(proc, loop=loop, label=label, max_line_bytes=backend.max_line_bytes)


class AgentProcess:
    """One agent subprocess: its pumps, its transport, its death."""

    def __init__(self, proc: trio.Process, *, loop: Any, label: str, max_line_bytes: int) -> None:
        self.proc = proc
        self.label = label
        self.max_line_bytes = max_line_bytes
        self.failure: str | None = None  # our reason for ending it, if any
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self._stderr_done = trio.Event()
        self._in_send, self._in_recv = trio.open_memory_channel[dict[str, Any]](64)
        self._out_send, self._out_recv = trio.open_memory_channel[bytes](64)
        self.transport = PipeTransport(loop, self._in_recv, self._out_send)
        #: The same two channels, for a client that speaks JSON-RPC itself
        #: without the library (the boot probe, ``ahpd.backends.acp.rpc``):
        #: the agent's JSON objects as they arrive, and whole lines to write.
        self.incoming, self.outgoing = self._in_recv, self._out_send

    def start(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._pump_stdout)
        nursery.start_soon(self._pump_stderr)
        nursery.start_soon(self._pump_stdin)

    # -- death ---------------------------------------------------------------

    def fail(self, reason: str) -> None:
        """A fatal protocol error: remember why, and end the agent."""
        if self.failure is None:
            self.failure = reason
            log.warning("%s: %s", self.label, reason)
        signal_group(self.proc, signal.SIGKILL)

    async def wait_exit(self) -> None:
        await self.proc.wait()
        with trio.move_on_after(1):  # let stderr's last lines arrive
            await self._stderr_done.wait()

    def death_message(self) -> str:
        if self.failure is not None:
            return self.failure
        message = f"the agent process {describe_returncode(self.proc.returncode)}"
        if self.proc.returncode is None:
            message = "the connection to the agent was closed"
        if self.stderr_tail:
            message += "; its last words on stderr:\n" + "\n".join(self.stderr_tail)
        return message

    async def death_message_after_exit(self, timeout: float = 2.0) -> str:
        """As :meth:`death_message`, after giving the process a moment to
        finish dying (its exit status and last stderr lines)."""
        with trio.move_on_after(timeout):
            await self.wait_exit()
        return self.death_message()

    async def terminate(self, grace: float) -> None:
        """End the agent's whole process group and reap it. Call shielded."""
        if self.proc.returncode is None:
            signal_group(self.proc, signal.SIGTERM)
            with trio.move_on_after(grace):
                await self.proc.wait()
        signal_group(self.proc, signal.SIGKILL)  # also any straggling children
        await self.proc.wait()

    # -- pumps ----------------------------------------------------------------

    async def _pump_stdout(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        buf = bytearray()
        scanned = 0
        try:
            async with self._in_send:
                while True:
                    try:
                        chunk = await stream.receive_some(_CHUNK)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        chunk = b""
                    if not chunk:
                        if buf.strip():
                            await self._deliver(bytes(buf))
                        return
                    buf += chunk
                    start = 0
                    while (nl := buf.find(b"\n", max(start, scanned))) >= 0:
                        if nl - start > self.max_line_bytes:
                            break
                        await self._deliver(bytes(buf[start:nl]))
                        start = nl + 1
                    del buf[:start]
                    scanned = len(buf)  # no newline before here
                    end = buf.find(b"\n")
                    if (end if end >= 0 else len(buf)) > self.max_line_bytes:
                        self.fail(
                            f"the agent sent a line longer than the limit of {self.max_line_bytes} "
                            "bytes (max_line_bytes); its connection was closed"
                        )
                        return
        except Exception:  # noqa: BLE001 - never let a pump take the conversation down by itself: said, and failed
            log.exception("%s: reading the agent's stdout failed", self.label)
            self.fail("reading the agent's output failed")

    async def _deliver(self, line: bytes) -> None:
        line = line.strip()
        if not line:
            return
        try:
            message = json.loads(line)
        except ValueError:
            log.warning("%s: skipped a line that is not JSON: %.200r", self.label, line)
            return
        if not isinstance(message, dict):
            log.warning("%s: skipped a JSON line that is not an object: %.200r", self.label, line)
            return
        try:
            await self._in_send.send(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the connection is gone; keep draining so the agent never blocks

    async def _pump_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        buf = bytearray()
        try:
            while True:
                try:
                    chunk = await stream.receive_some(_CHUNK)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    chunk = b""
                if not chunk:
                    if buf:
                        self._log_stderr(bytes(buf))
                    return
                buf += chunk
                *lines, rest = buf.split(b"\n")
                for line in lines:
                    self._log_stderr(line)
                buf = bytearray(rest)
                if len(buf) > _STDERR_BUFFER_MAX:
                    self._log_stderr(bytes(buf))
                    buf.clear()
        except Exception:  # noqa: BLE001 - stderr is diagnostics: failing to read it ends only the reading
            log.exception("%s: reading the agent's stderr failed", self.label)
        finally:
            self._stderr_done.set()

    def _log_stderr(self, raw: bytes | bytearray) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if len(line) > _STDERR_LINE_MAX:
            line = line[:_STDERR_LINE_MAX] + "…"
        if line.strip():
            self.stderr_tail.append(line)
        log.info("%s stderr: %s", self.label, line)

    async def _pump_stdin(self) -> None:
        stream = self.proc.stdin
        assert stream is not None
        try:
            async with self._out_recv:
                async for data in self._out_recv:
                    await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("%s: the agent's stdin is closed: %s", self.label, exc)
        except Exception:  # noqa: BLE001 - a failed write ends the pump; the agent's exit says the rest
            log.exception("%s: writing to the agent failed", self.label)
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await stream.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass


class PipeTransport:
    """``acp``'s message-level transport over the pumps' channels.

    Called from asyncio (the library's ``Connection``); each call hops to trio.
    """

    def __init__(
        self,
        loop: Any,
        incoming: trio.MemoryReceiveChannel[dict[str, Any]],
        outgoing: trio.MemorySendChannel[bytes],
    ) -> None:
        self._loop = loop
        self._incoming = incoming
        self._outgoing = outgoing

    async def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        try:
            await trio_asyncio.trio_as_aio(self._outgoing.send, loop=self._loop)(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ConnectionError("the agent's stdin is closed") from exc

    async def receive(self) -> dict[str, Any] | None:
        try:
            return await trio_asyncio.trio_as_aio(self._incoming.receive, loop=self._loop)()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return None

    async def close(self) -> None:
        self._outgoing.close()  # the stdin pump finishes its queue, then closes the pipe
        self._incoming.close()  # the stdout pump keeps draining, so the agent never blocks
