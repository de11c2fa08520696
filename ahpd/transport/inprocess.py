"""A connection whose client lives in the same process: for tests and embedding.

``inprocess_pair()`` returns the host's ``Connection`` and the client's
``ClientEnd``, joined by two unbounded memory channels. The host side has the
same writer task and queue accounting as a socket, but no queue limit: an
in-process client is part of the program, so it is never closed for being
behind. Run the handler on it with ``run_inprocess`` (or put it under your
own nursery with ``base.run_connection``): until then nothing is written.
"""

from __future__ import annotations

import itertools
import math

import trio

from ahpd.transport.base import NORMAL, Connection, Handler, PeerGone, run_connection
from ahpd.host.kernel.frame import Utf8Frame

_ids = itertools.count(1)


class ClientEnd:
    """The client's end of an in-process pair."""

    def __init__(self, outbox: trio.MemorySendChannel[str], inbox: trio.MemoryReceiveChannel[str]) -> None:
        self._outbox = outbox
        self._inbox = inbox
        #: The host's close code and reason, once it has closed.
        self.close_code: int | None = None
        self.close_reason = ""

    async def send(self, text: str) -> None:
        """Deliver one frame to the host; BrokenResourceError once the host has closed."""
        self._outbox.send_nowait(text)
        await trio.lowlevel.checkpoint()

    async def receive(self) -> str | None:
        """The host's next frame; None once the host has closed and all was read."""
        try:
            return await self._inbox.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return None

    def close(self) -> None:
        """Hang up: the host's ``receive()`` returns None and it closes its side."""
        self._outbox.close()
        self._inbox.close()


class InProcessConnection(Connection):
    """The host's end of an in-process pair."""

    def __init__(
        self,
        name: str,
        to_client: trio.MemorySendChannel[str],
        from_client: trio.MemoryReceiveChannel[str],
        client: ClientEnd,
    ) -> None:
        super().__init__(name, queue_limit=None)
        self._to_client = to_client
        self._from_client = from_client
        self._client = client

    async def _read_frame(self) -> str | None:
        try:
            return await self._from_client.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            if not self.closed:
                self._peer_gone(NORMAL, "client closed")
            return None

    async def _write_frame(self, text: str) -> None:
        try:
            self._to_client.send_nowait(text.text() if isinstance(text, Utf8Frame) else text)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise PeerGone from None
        await trio.lowlevel.checkpoint()

    async def _close_transport(self, code: int, reason: str) -> None:
        self._client.close_code, self._client.close_reason = code, reason
        self._to_client.close()
        self._from_client.close()

    async def _abort_transport(self) -> None:
        await self._close_transport(self.close_code or NORMAL, self.close_reason)


def inprocess_pair(name: str = "inproc") -> tuple[InProcessConnection, ClientEnd]:
    """A connected (host ``Connection``, ``ClientEnd``) pair named ``"<name> <n>"``."""
    to_client, client_inbox = trio.open_memory_channel[str](math.inf)
    client_outbox, from_client = trio.open_memory_channel[str](math.inf)
    client = ClientEnd(client_outbox, client_inbox)
    conn = InProcessConnection(f"{name} {next(_ids)}", to_client, from_client, client)
    return conn, client


async def run_inprocess(handler: Handler, conn: Connection) -> None:
    """Run ``handler`` on the host end of a pair; returns once the connection is closed."""
    await run_connection(handler, conn)
