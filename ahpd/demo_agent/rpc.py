"""JSON-RPC 2.0 over stdio, one JSON message per line: the demo agent's wire.

Why not the ``agent-client-protocol`` library (``import acp``), which the
daemon's ACP backend uses: importing it builds several hundred pydantic
models, about 0.45 s of CPU on an idle machine and nine tenths of what the
demo agent cost to start (benchmarks/startup_bench.py, loaded machine: 690 ms
of CPU to answer ``initialize`` with the library, 80 ms without). The demo
agent is the default agent and the agent of most of the test suite's
sessions, each one a process, so that was paid by every first demo session
and by about a third of the suite's CPU (tests/daemon/test_sessions.py and
test_disposal.py: 149 s of CPU before, 104 s after). The
agent speaks ACP with plain dicts instead (:mod:`ahpd.demo_agent.shapes`), in
exactly the form the library writes, and the daemon still reads every
message through the library's models.

What this module keeps of the library's behaviour, on purpose:

* Framing: a message is ``json.dumps(message, separators=(",", ":"))`` and a
  newline (ASCII, non-ASCII escaped); blank lines and lines that are not JSON
  are skipped; a line has no length cap.
* Each incoming request or notification runs in a task of its own, so a
  ``session/cancel`` is read while the ``session/prompt`` it cancels is still
  running. A response to one of our requests is handed over at once, in the
  reading task.
* A response is written as soon as its handler returns, without yielding
  first: work a handler started (``DemoAgent._soon``) cannot overtake it.
* Errors: a :class:`RequestError` is answered as is; any other exception as
  ``-32603 Internal error`` with ``{"details": str(exc)}`` (or the exception's
  text, if that is JSON), and is logged.
* Requests we sent get ids 0, 1, 2...; when standard input closes, those
  still waiting fail with ``ConnectionError("Connection closed")``, later
  sends too, and the handlers still running are cancelled and awaited.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import sys
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO, Protocol

log = logging.getLogger(__name__)

#: The reader's buffer limit; longer lines are still read, in pieces.
READ_LIMIT = 50 * 1024 * 1024

Handler = Callable[[str, Any], Awaitable[Any]]


class RequestError(Exception):
    """A JSON-RPC error answer: code, message, data (ACP's codes and messages)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data

    @classmethod
    def method_not_found(cls, method: str) -> RequestError:
        return cls(-32601, "Method not found", {"method": method})

    @classmethod
    def invalid_params(cls, data: dict[str, Any] | None = None) -> RequestError:
        return cls(-32602, "Invalid params", data)

    @classmethod
    def internal_error(cls, data: dict[str, Any] | None = None) -> RequestError:
        return cls(-32603, "Internal error", data)

    def to_error_obj(self) -> dict[str, Any]:
        return {"code": self.code, "message": str(self), "data": self.data}


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")


class Stdio(Protocol):
    """Lines in, bytes out."""

    async def read_line(self) -> bytes:
        """The next line, with its newline; ``b""`` at the end."""
        ...

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


class Connection:
    """Both directions of one JSON-RPC peer: our handlers, and our requests to it."""

    def __init__(self, stdio: Stdio, on_request: Handler, on_notification: Handler) -> None:
        self._stdio = stdio
        self._on_request = on_request
        self._on_notification = on_notification
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- our side ---------------------------------------------------------------------------

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request and wait for its result; its error raises :class:`RequestError`."""
        self._raise_if_closed()
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            return await future
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        self._raise_if_closed()
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _send(self, message: dict[str, Any]) -> None:
        self._stdio.write(encode(message))
        await self._stdio.drain()

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise ConnectionError("Connection closed")

    # -- the peer's side --------------------------------------------------------------------

    async def serve(self) -> None:
        """Read until standard input closes; then stop what is still running."""
        try:
            while line := await self._stdio.read_line():
                if line.strip():
                    self._receive(line)
        finally:
            self._closed = True
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("Connection closed"))
            self._pending.clear()
            running = list(self._handlers)
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    def _receive(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            log.warning("ignoring a line that is not JSON")
            return
        if not isinstance(message, dict):
            log.warning("ignoring a JSON line that is not an object")
            return
        method = message.get("method")
        if method is not None:
            work = self._answer(message) if "id" in message else self._notified(method, message.get("params"))
            task = asyncio.get_running_loop().create_task(work)
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        elif "id" in message:
            self._resolve(message)

    def _resolve(self, message: dict[str, Any]) -> None:
        future = self._pending.pop(message["id"], None) if isinstance(message["id"], int) else None
        if future is None or future.done():
            return
        if "result" in message:
            future.set_result(message["result"])
        elif "error" in message:
            error = message["error"] if isinstance(message["error"], dict) else {}
            future.set_exception(
                RequestError(error.get("code", -32603), error.get("message", "Error"), error.get("data"))
            )
        else:
            future.set_result(None)

    async def _answer(self, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        method = message["method"]
        try:
            reply["result"] = await self._on_request(method, message.get("params"))
        except RequestError as exc:
            reply["error"] = exc.to_error_obj()
        except Exception as exc:  # noqa: BLE001 - one request's failure is its error answer, not the agent's end
            log.exception("unhandled error while handling request method=%s", method)
            reply["error"] = RequestError.internal_error(_details(exc)).to_error_obj()
        try:
            await self._send(reply)
        except OSError as exc:
            log.debug("cannot answer %s: %s", method, exc)

    async def _notified(self, method: Any, params: Any) -> None:
        try:
            await self._on_notification(method, params)
        except RequestError as exc:  # unknown, or bad params: nobody to answer
            log.warning("notification %s refused: %s %s", method, exc, exc.data)
        except Exception:  # noqa: BLE001 - a notification has nobody to answer: its failure is only logged
            log.exception("unhandled error while handling notification method=%s", method)


def _details(exc: Exception) -> Any:
    try:
        return json.loads(str(exc))
    except ValueError:
        return {"details": str(exc)}


# -- standard input and output ----------------------------------------------------------------


async def open_stdio() -> Stdio:
    """Standard input and output as a :class:`Stdio`; pipes without threads, files with one."""
    if _is_file(0) or _is_file(1):
        return FileStdio(sys.stdin.buffer, sys.stdout.buffer)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    writing = _WriteProtocol()
    transport, _ = await loop.connect_write_pipe(lambda: writing, sys.stdout)
    return PipeStdio(reader, transport, writing)


def _is_file(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


class _WriteProtocol(asyncio.BaseProtocol):
    """Flow control for standard output: ``drain`` waits while the pipe is full."""

    def __init__(self) -> None:
        self._resumed: asyncio.Future[None] | None = None
        self.lost: BaseException | None = None

    def pause_writing(self) -> None:
        if self._resumed is None:
            self._resumed = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)
        self._resumed = None

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = exc or BrokenPipeError("standard output closed")
        self.resume_writing()

    async def drain(self) -> None:
        if self.lost is not None:
            raise ConnectionError(str(self.lost))
        if self._resumed is not None:
            await self._resumed


class PipeStdio:
    """Standard input and output as asyncio pipes."""

    def __init__(self, reader: asyncio.StreamReader, transport: asyncio.WriteTransport, writing: _WriteProtocol):
        self._reader = reader
        self._transport = transport
        self._writing = writing

    async def read_line(self) -> bytes:
        parts: list[bytes] = []
        while True:
            try:
                parts.append(await self._reader.readuntil(b"\n"))
                return b"".join(parts)
            except asyncio.LimitOverrunError as exc:  # a line longer than the buffer: keep reading
                parts.append(await self._reader.readexactly(exc.consumed))
            except asyncio.IncompleteReadError as exc:
                parts.append(exc.partial)
                return b"".join(parts)

    def write(self, data: bytes) -> None:
        if self._writing.lost is not None or self._transport.is_closing():
            raise ConnectionError("standard output closed")
        self._transport.write(data)

    async def drain(self) -> None:
        await self._writing.drain()


class FileStdio:
    """Standard input or output redirected to a regular file.

    asyncio's pipe transports refuse regular files (``ahpd-demo-agent <
    requests.jsonl > replies.jsonl``): lines are read in a worker thread and
    written synchronously, which a file allows.
    """

    def __init__(self, source: BinaryIO, sink: BinaryIO) -> None:
        self._source = source
        self._sink = sink

    async def read_line(self) -> bytes:
        return await asyncio.to_thread(self._source.readline)

    def write(self, data: bytes) -> None:
        self._sink.write(data)
        self._sink.flush()

    async def drain(self) -> None:
        return None
