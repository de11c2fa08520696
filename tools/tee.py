"""A WebSocket proxy that records an AHP session between any client and any host.

    python tools/tee.py --upstream ws://127.0.0.1:8765/?tkn=TOKEN --wire session.jsonl [--listen 127.0.0.1:8766]

Point the client (VS Code, ahpc, a test) at the listening address instead of
the host. Every frame is passed on unchanged and written to the capture in
the same shape ``ahpd run --wire`` writes (VS Code's agent host log shape,
credentials redacted, mode 0600), so a session with another host can be
checked with ``ahpd wire-check`` too. Each client connection gets one upstream
connection; the token goes upstream as the client gave it (its query string,
its Authorization header) unless ``--upstream`` names one itself.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest, open_websocket_url, serve_websocket

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ahpd.wire.capture import CaptureFile, client_id_of  # noqa: E402

log = logging.getLogger("tee")
MAX_MESSAGE = 256 * 2**20


def upstream_url(upstream: str, request_target: str) -> str:
    """The upstream URL, carrying the client's query when the upstream names none."""
    parts = urlsplit(upstream)
    if parts.query:
        return upstream
    query = urlsplit(request_target).query
    return urlunsplit(parts._replace(query=query)) if query else upstream


async def proxy(request: WebSocketRequest, upstream: str, capture: CaptureFile) -> None:
    headers = [(k, v) for k, v in request.headers if k.lower() == b"authorization"]
    client = await request.accept()
    conn_id = capture.next_connection_id()
    known: dict[str, str | None] = {"client": None}
    url = upstream_url(upstream, request.path)
    try:
        async with open_websocket_url(url, extra_headers=headers, max_message_size=MAX_MESSAGE) as host:
            log.info("connection %s: %s", conn_id, urlsplit(url)._replace(query="").geturl())

            async def pump(source: WebSocketConnection, sink: WebSocketConnection, direction: str) -> None:
                try:
                    while True:
                        text = await source.get_message()
                        if isinstance(text, bytes):
                            text = text.decode("utf-8", "replace")
                        if direction == "c2s":
                            known["client"] = client_id_of(text) or known["client"]
                        capture.write(text, direction, conn_id, known["client"])
                        await sink.send_message(text)
                except ConnectionClosed:
                    pass
                finally:
                    nursery.cancel_scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(pump, client, host, "c2s")
                nursery.start_soon(pump, host, client, "s2c")
    except (OSError, ConnectionClosed) as exc:
        log.warning("connection %s: upstream %s: %s", conn_id, urlsplit(url)._replace(query="").geturl(), exc)
    finally:
        await client.aclose()
        log.info("connection %s closed", conn_id)


async def main(args: argparse.Namespace, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    host, _, port = args.listen.rpartition(":")
    with CaptureFile(args.wire, transport="websocket") as capture:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                lambda task_status: serve_websocket(
                    lambda request: proxy(request, args.upstream, capture),
                    host or "127.0.0.1",
                    int(port),
                    None,
                    max_message_size=MAX_MESSAGE,
                    task_status=task_status,
                )
            )
            listening = server.port
            print(f"tee ready: ws://{host or '127.0.0.1'}:{listening}/ -> {urlsplit(args.upstream).netloc}", flush=True)
            task_status.started(listening)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the host's ws:// URL")
    parser.add_argument("--wire", required=True, type=Path, help="the capture file to append to")
    parser.add_argument(
        "--listen",
        default="127.0.0.1:8766",
        help="HOST:PORT to accept clients on (port 0 picks a free one; default %(default)s)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        trio.run(main, parse())
    except KeyboardInterrupt:
        pass
