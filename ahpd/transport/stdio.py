"""AHP over a pipe: one JSON-RPC message per line on stdin and stdout.

For a client that starts ``ahpd`` as a child process. There is exactly one
connection; ``serve_stdio`` returns once stdin reaches EOF and the handler has
finished (frames already queued are still written). Logs never go to stdout:
stdout is the protocol.

Framing: lines are UTF-8 and end with ``\\n`` (a trailing ``\\r`` is dropped,
blank lines are skipped). A frame we send must not contain a raw newline, so
any ``\\r``/``\\n`` in it becomes a space: in JSON they can only be whitespace
between tokens (inside strings they must be escaped), so the message is
unchanged (the same holds of the UTF-8 bytes: no multi-byte sequence contains
those two bytes). Everything the writer takes at a turn goes out in one
write, and a fanned-out frame's line is built once (``SharedFrame``). Unlike
a WebSocket, a pipe cannot be closed with a reason, so an oversized line is
skipped and answered with a JSON-RPC error (id null), and the connection
goes on; a line that is not UTF-8 gets a parse error likewise.

Both fds are ``os.dup``-ed first: ``trio.lowlevel.FdStream`` owns (and
closes) the fd it is given, and sets it non-blocking while it is open.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import trio

from ahpd.host.kernel.frame import SharedFrame, Utf8Frame
from ahpd.transport.base import Connection, Handler, PeerGone, logger, run_connection

_CHUNK = 65536


def _line(utf8: bytes) -> bytes:
    """One frame as one line: raw CR/LF (JSON whitespace only) become spaces."""
    if b"\n" in utf8 or b"\r" in utf8:
        utf8 = utf8.replace(b"\r", b" ").replace(b"\n", b" ")
    return utf8 + b"\n"


def _error(code: int, message: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})


class StdioConnection(Connection):
    """The one client on the other end of stdin/stdout."""

    def __init__(
        self,
        stdin: trio.abc.ReceiveStream,
        stdout: trio.abc.SendStream,
        *,
        max_message_size: int,
        queue_limit: Callable[[], int] | None,
        name: str = "stdio",
    ) -> None:
        super().__init__(name, queue_limit)
        self._stdin = stdin
        self._stdout = stdout
        self._max = max_message_size
        self._buffer = bytearray()
        self._skipping = 0  # >0: inside an oversized line, this many bytes so far
        self._at_eof = False

    async def _read_frame(self) -> str | None:
        while True:
            line = self._next_line()
            if line is not None:
                try:
                    text = line.decode()
                except UnicodeDecodeError as exc:
                    logger.warning("%s: skipped a line that is not UTF-8 (%s)", self.name, exc)
                    self.send(_error(-32700, "frame is not valid UTF-8"))
                    continue
                if text.strip():
                    return text
                continue
            if self._at_eof:
                return None
            try:
                data = await self._stdin.receive_some(_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self._at_eof = True
                if self._buffer or self._skipping:
                    self._buffer += b"\n"  # a last line without its newline still counts
            else:
                self._buffer += data

    def _next_line(self) -> bytes | None:
        """Cut the next complete line from the buffer, skipping oversized ones."""
        while True:
            end = self._buffer.find(b"\n")
            if self._skipping:
                if end < 0:
                    self._skipping += len(self._buffer)
                    self._buffer.clear()
                    return None
                self._oversized(self._skipping + end)
                self._skipping = 0
                del self._buffer[: end + 1]
                continue
            if end < 0:
                if len(self._buffer) > self._max:
                    self._skipping = len(self._buffer)
                    self._buffer.clear()
                return None
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > self._max:
                self._oversized(len(line))
                continue
            return line

    def _oversized(self, size: int) -> None:
        message = f"frame of {size} bytes exceeds the {self._max}-byte limit"
        logger.warning("%s: skipped a line: %s", self.name, message)
        self.send(_error(-32600, message))

    async def _write_frames(self, frames: list[str]) -> None:
        data = b"".join(
            [
                text.encoded(_line)
                if isinstance(text, SharedFrame)
                else _line(b"".join(text.pieces))
                if isinstance(text, Utf8Frame)
                else _line(text.encode())
                for text in frames
            ]
        )
        try:
            await self._stdout.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise PeerGone from exc

    async def _close_transport(self, code: int, reason: str) -> None:
        await self._stdout.aclose()
        await self._stdin.aclose()

    async def _abort_transport(self) -> None:
        await trio.aclose_forcefully(self._stdout)
        await trio.aclose_forcefully(self._stdin)


async def serve_stdio(
    handler: Handler,
    *,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    max_message_size: int = 16 * 2**20,
    queue_limit: Callable[[], int] = lambda: 16 * 2**20,
) -> None:
    """Serve ``handler`` to the one client on ``stdin_fd``/``stdout_fd``.

    Returns once stdin reaches EOF and the handler has finished.
    """
    stdin = trio.lowlevel.FdStream(os.dup(stdin_fd))
    stdout = trio.lowlevel.FdStream(os.dup(stdout_fd))
    conn = StdioConnection(stdin, stdout, max_message_size=max_message_size, queue_limit=queue_limit)
    logger.info("serving on stdin/stdout")
    await run_connection(handler, conn)
    logger.info("stdio closed (%s %s)", conn.close_code, conn.close_reason)
