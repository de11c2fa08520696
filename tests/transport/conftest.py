"""Shared pieces for the transport tests: an echo handler that reports its
connections, a running server on 127.0.0.1, and task introspection."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio_websocket
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Event, Request, TextMessage

from ahpd.transport.base import Connection
from ahpd.transport.websocket import Listening, serve_websocket
from tests.waits import until_step

# Generous bounds: they only catch hangs, they never pace a test.
LIMIT = 15


class EchoHandler:
    """Echoes every text frame; ``"raise"`` makes it fail; ``"quit"`` makes it return."""

    def __init__(self) -> None:
        self._new_send, self._new_recv = trio.open_memory_channel[Connection](math.inf)
        self.received: list[str] = []
        self.finished: list[str] = []

    async def __call__(self, conn: Connection) -> None:
        self._new_send.send_nowait(conn)
        try:
            while (text := await conn.receive()) is not None:
                if text == "raise":
                    raise RuntimeError("handler exploded on purpose")
                if text == "quit":
                    return
                self.received.append(text)
                conn.send(text)
        finally:
            self.finished.append(conn.name)

    async def next_connection(self) -> Connection:
        """The server side of the next client that connected."""
        return await self._new_recv.receive()


class Server:
    """A running ``serve_websocket``: where it listens, and how to stop it."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.stopped = trio.Event()
        self.listening: Listening

    @property
    def url(self) -> str:
        return self.listening.url

    def stop(self) -> None:
        """Cancel the server task, as the host does at shutdown."""
        self.scope.cancel()


@asynccontextmanager
async def serving(handler: Any, **options: Any) -> AsyncIterator[Server]:
    """Run ``serve_websocket`` on a free port of 127.0.0.1 for the body's duration."""
    options.setdefault("token", None)
    server = Server()

    async def run(task_status: trio.TaskStatus[Listening] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with server.scope:
                await serve_websocket(handler, host="127.0.0.1", port=0, task_status=task_status, **options)
        finally:
            server.stopped.set()

    async with trio.open_nursery() as nursery:
        server.listening = await nursery.start(run)
        yield server
        server.stop()


@asynccontextmanager
async def ws_client(url: str, **options: Any) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    """trio-websocket's client, plus closing its socket: when the server closes
    first, its ``aclose()`` returns early and leaves the TCP socket open."""
    async with trio_websocket.open_websocket_url(url, **options) as ws:
        try:
            yield ws
        finally:
            stream = ws._stream  # no public handle; only this test helper reaches in
    await trio.aclose_forcefully(stream)


def task_names() -> list[str]:
    """Every task alive in this trio run, by name."""
    names: list[str] = []

    def walk(task: trio.lowlevel.Task) -> None:
        names.append(task.name)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return names


def transport_tasks() -> list[str]:
    """The tasks that belong to a transport (ours, a trio-websocket client's, the listener's)."""
    markers = ("ahpd.transport", "trio_websocket", "serve_listeners", "EchoHandler")
    return [name for name in task_names() if any(m in name for m in markers)]


async def wait_until(predicate: Any, what: str) -> None:
    """Until ``predicate()`` holds, judged again at each step a task of the
    test's trio run takes (a task ending, a writer catching up): ``what`` names
    it for the reader."""
    await until_step(predicate)


# -- a client's frames, spelled byte by byte (RFC 6455 section 5.2) -----------------

KEY = b"\x37\xfa\x21\x3d"


def frame(
    opcode: int, payload: bytes = b"", *, fin: bool = True, mask: bool = True, rsv: int = 0, width: int | None = None
) -> bytes:
    """A client frame; ``width`` forces the length's form (7, 16 or 64 bits)."""
    n = len(payload)
    width = width or (7 if n < 126 else 16 if n < 65536 else 64)
    head = bytes([(0x80 if fin else 0) | rsv << 4 | opcode])
    bit = 0x80 if mask else 0
    if width == 7:
        head += bytes([bit | n])
    elif width == 16:
        head += bytes([bit | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([bit | 127]) + n.to_bytes(8, "big")
    if not mask:
        return head + payload
    return head + KEY + bytes(b ^ KEY[i % 4] for i, b in enumerate(payload))


def text(s: str, **kw) -> bytes:
    return frame(0x1, s.encode(), **kw)


class WsprotoClient:
    """A client whose every received byte goes through wsproto's parser; it
    can also write bytes of its own making (``send_raw``), frames a
    well-behaved client library would never send."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.parts: list[str] = []

    @classmethod
    async def connect(cls, port: int) -> WsprotoClient:
        client = cls(await trio.open_tcp_stream("127.0.0.1", port))
        await client.stream.send_all(client.ws.send(Request(host="127.0.0.1", target="/")))
        event = await client.next_event()
        assert isinstance(event, AcceptConnection), event
        return client

    async def next_event(self) -> Event | None:
        """The next event, whole messages joined (a frame wsproto cannot
        parse raises); None once the server has closed the socket."""
        while True:
            for event in self.ws.events():
                if isinstance(event, TextMessage):
                    self.parts.append(event.data)
                    if not event.message_finished:
                        continue
                    event = TextMessage(data="".join(self.parts))
                    self.parts = []
                return event
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.ws.receive_data(data)

    async def send(self, event: Event) -> None:
        await self.stream.send_all(self.ws.send(event))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)
