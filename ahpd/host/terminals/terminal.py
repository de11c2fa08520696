"""One terminal: a pseudoterminal's output read into its channel, its input written.

Each terminal runs in a nursery of its own, which is its failure boundary: a
fault ends that terminal (its process group killed, ``terminal/exited``
said), is logged, and reaches nothing else. Its tasks:

* the reader: pty bytes -> shell marks cut out (``ahpd.host.terminals.shell_marks``)
  -> text coalesced into ``terminal/data`` chunks of at most ``CHUNK`` bytes or
  ``COALESCE`` seconds (larger and longer while it floods), so ``yes`` is
  tens of actions a second rather than one per 4 KiB read. After output was
  sent it waits while every watcher has more than ``BEHIND`` bytes queued: a
  terminal nobody keeps up with is not read, and its program blocks on a
  full pty as it would under a slow terminal; one watcher that stops
  reading holds up neither the program nor the others (its connection's
  queue limit cuts it);
* the writer: ``terminal/input`` bytes to the pty, in order; at most the
  root config's ``terminalInputBytes`` wait for a program that does not read
  (more is refused), and what still waits is dropped when the terminal ends;
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

This is the terminal's own machinery, byte by byte; which terminals there
are, and who may start one, is ``ahpd.host.terminals.terminals``.
"""

from __future__ import annotations

import itertools
import logging
import math
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import trio

from ahpd.host.kernel.supervise import supervised
from ahpd.host.terminals import shell_marks

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host

log = logging.getLogger("ahpd.host")

#: A chunk of output is sent once it holds this many bytes...
CHUNK = 64 * 1024
#: ...or this many seconds after its first byte.
COALESCE = 0.004
#: While a terminal floods (its last chunk held at least ``FLOOD`` bytes), a
#: chunk is sent at ``FLOOD_CHUNK`` bytes or ``FLOOD_COALESCE`` seconds: each
#: ``terminal/data`` costs the host a reduce that copies the scrollback's
#: tail, a JSON encoding and a write per watcher, so a flood is a few large
#: actions a second rather than hundreds of small ones, and its watchers see
#: it a screen refresh later at most. A quiet terminal's echo stays at
#: ``COALESCE``. 128 KiB of the worst text (control bytes, six characters
#: each in JSON) is still a frame under the 1 MiB clients commonly accept.
FLOOD = 16 * 1024
FLOOD_CHUNK = 128 * 1024
FLOOD_COALESCE = 0.025
#: While every watcher has more than this queued and unwritten, the reading pauses.
BEHIND = 4 * 2**20
#: Seconds the output gets to drain after the shell exited.
DRAIN = 1.0
#: Seconds a killed terminal's process gets to be reaped.
REAP = 5.0


def _file_uri(path: str) -> str:
    return Path(path).as_uri()


def running(state: dict[str, Any]) -> bool:
    """Whether a terminal's state says it still runs."""
    return state["lifecycle"]["status"] == "running"


class Terminal:
    def __init__(self, host: Host, uri: str, pty: Any, integrated: bool, publish: Callable[[], None]) -> None:
        self.host = host
        self.uri = uri
        self.pty = pty
        self.integrated = integrated
        #: Says the root's terminal list again (this one exited).
        self._publish = publish
        self.scope = trio.CancelScope()
        # Unbounded as a channel, bounded by ``input``: the bytes taken and
        # not yet written to the pty are counted, and input past the root
        # config's ``terminalInputBytes`` is refused.
        self._input_send, self._input_receive = trio.open_memory_channel[bytes](math.inf)
        #: Bytes of input taken and not yet written to the pty.
        self.input_pending = 0
        self._marks = shell_marks.MarkReader()
        self._pending: list[str] = []
        self._pending_bytes = 0
        self._flooding = False
        self._chunk = CHUNK
        self._flushed = False  # since the pace was last checked
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
        """Wait while everybody watching has fallen ``BEHIND``: the program
        goes at the pace of its fastest watcher, as it would in the slowest
        terminal showing it alone. A watcher that another outpaces is not
        waited for: its queue grows until its connection's own limit
        (``clientQueueBytes``) cuts it (1008, saying how far behind it was),
        and it catches up by reconnecting. A terminal a session holds waits
        for nobody: its agent reads the host's own copy, which never lags,
        and its command must not hang on a socket somebody stopped reading."""
        if not self._flushed:
            return  # queues grow only when output is sent
        self._flushed = False
        while self._everyone_behind():  # noqa: ASYNC110 - polled: a queue says nothing as it drains
            await trio.sleep(COALESCE)

    def _everyone_behind(self) -> bool:
        channel = self.host.bus.channels.get(self.uri)
        if channel is None or not channel.subscribers or channel.state["claim"].get("kind") == "session":
            return False
        return all(getattr(getattr(s, "conn", None), "queued_bytes", 0) > BEHIND for s in channel.subscribers)

    def _text(self, text: str) -> None:
        if self._typing is not None:
            self._typing.append(text)
        self._pending.append(text)
        self._pending_bytes += len(text)
        if self._pending_bytes >= self._chunk:
            self.flush()
        else:
            self._wake.set()

    async def _flusher(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await trio.sleep(FLOOD_COALESCE if self._flooding else COALESCE)
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        data = "".join(self._pending)
        self._pending.clear()
        self._flooding = self._pending_bytes >= FLOOD
        self._chunk = FLOOD_CHUNK if self._flooding else CHUNK
        self._pending_bytes = 0
        self._flushed = True
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
                self.emit(
                    {
                        "type": "terminal/commandExecuted",
                        "commandId": command_id,
                        "commandLine": line,
                        "timestamp": round(time.time() * 1000),
                    }
                )
        elif mark.kind == "D" and self._command is not None:
            command_id, started = self._command
            self._command = None
            finished: dict[str, Any] = {
                "type": "terminal/commandFinished",
                "commandId": command_id,
                "durationMs": round((time.monotonic() - started) * 1000),
            }
            if mark.value.lstrip("-").isdigit():
                finished["exitCode"] = int(mark.value)
            self.emit(finished)

    async def _write(self) -> None:
        async for data in self._input_receive:
            await self.pty.send(data)
            self.input_pending -= len(data)

    def _drop_input(self) -> None:
        """What was typed and never read goes with the terminal, now."""
        self._input_send.close()
        while True:
            try:
                self._input_receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        self.input_pending = 0

    async def _reap(self) -> None:
        await self.pty.wait()
        with trio.move_on_after(DRAIN):
            await self._drained.wait()

    async def _end(self) -> None:
        """Kill what is left of the group, reap it, and say it exited."""
        self.pty.signal_group(signal.SIGKILL)
        self._drop_input()
        with trio.move_on_after(REAP):
            await self.pty.wait()
        self.flush()
        await self.pty.aclose()
        self.exit_code = self.pty.exit_code
        if self.uri in self.host.bus.channels and running(self.state()):
            exited: dict[str, Any] = {"type": "terminal/exited"}
            if self.pty.exit_code is not None:
                exited["exitCode"] = self.pty.exit_code
            self.emit(exited)
            self._publish()
            cwd = urlsplit(self.state().get("cwd") or "")
            if cwd.scheme == "file":  # what ran may have changed the tree a changeset shows
                for touched in self.host.hooks.files_touched:
                    touched(self.host, Path(unquote(cwd.path)))
        self.exited.set()

    # -- what clients and sessions ask -----------------------------------------

    def input(self, data: str) -> str | None:
        """Queue ``data`` for the program; why not, when its program has left
        more than ``terminalInputBytes`` unread (nothing is taken then)."""
        raw = data.encode("utf-8", "surrogateescape")
        limit = int(self.host.config("terminalInputBytes"))
        if self.input_pending + len(raw) > limit:
            return (
                f"{self.uri}: its program has not read {self.input_pending} bytes typed before, and this "
                f"input of {len(raw)} bytes would take it past {limit} (root config terminalInputBytes); "
                "nothing of it was typed"
            )
        try:
            self._input_send.send_nowait(raw)
        except trio.ClosedResourceError:
            return f"{self.uri} has ended: there is nothing to type into"
        self.input_pending += len(raw)
        return None

    def kill(self) -> None:
        self.pty.signal_group(signal.SIGKILL)

    def text(self) -> str:
        return "".join(_text_of(p) for p in self.state()["content"])


def _text_of(part: dict[str, Any]) -> str:
    return part["output"] if part.get("type") == "command" else part.get("value", "")
