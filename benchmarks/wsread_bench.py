"""Parsing a client's WebSocket frames: ``wsread.Incoming`` against wsproto.

    .venv/bin/python benchmarks/wsread_bench.py [--messages N] [--size BYTES]

The CPU per message of turning received bytes into text messages, the part
of reading a client that does not touch a socket: N masked text frames of
about BYTES each (the shape of a ``dispatchAction`` of
``chat/draftChanged``), fed in 64 KiB chunks, to

* **Incoming**: ours (``ahpd/transport/wsread.py``);
* **wsproto**: ``wsproto.connection.Connection`` as a server, its events
  read and a message's pieces joined as trio-websocket did (its reader task
  and memory channel, which cost more again, are not counted here).

Also one 4 MiB message in 64 KiB chunks (the large-write path). Interleaved
rounds, the best of each; process CPU time (``time.process_time``).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, Message, TextMessage

from ahpd.transport.wsread import Incoming

CHUNK = 64 * 1024


def client_frames(texts: list[str]) -> bytes:
    client = Connection(ConnectionType.CLIENT)
    return b"".join(client.send(Message(data=text)) for text in texts)


def chunks(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def with_incoming(pieces: list[bytes], count: int) -> int:
    incoming = Incoming(16 * 2**20)
    got = 0
    for piece in pieces:
        incoming.feed(piece)
        while (event := incoming.next()) is not None:
            assert type(event) is str
            got += 1
    assert got == count
    return got


def with_wsproto(pieces: list[bytes], count: int) -> int:
    server = Connection(ConnectionType.SERVER)
    parts: list[str] = []
    got = 0
    for piece in pieces:
        server.receive_data(piece)
        for event in server.events():
            assert isinstance(event, (TextMessage, BytesMessage))
            parts.append(event.data)  # type: ignore[arg-type]
            if event.message_finished:
                "".join(parts)
                parts = []
                got += 1
    assert got == count
    return got


def best(run: Callable[[list[bytes], int], int], pieces: list[bytes], count: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.process_time()
        run(pieces, count)
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pad = "x" * max(0, args.size - 120)
    texts = [
        '{"jsonrpc":"2.0","method":"dispatchAction","params":{"clientSeq":%d,"action":'
        '{"type":"chat/draftChanged","chat":"ahp-chat:/1","text":"%s %d"}}}' % (i, pad, i)
        for i in range(args.messages)
    ]
    small = chunks(client_frames(texts))
    big_text = os.urandom(3 * 2**20).hex()[: 4 * 2**20]
    big = chunks(client_frames([big_text]))
    rows = {"Incoming": with_incoming, "wsproto": with_wsproto}
    results: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.rounds):  # interleaved
        for name, run in rows.items():
            results[name].append(best(run, small, len(texts), 1) / len(texts) * 1e6)
    for name in rows:
        print(f"{name:9} {min(results[name]):6.2f} us per {args.size}-byte message (best of {args.rounds})")
    print(f"ratio wsproto / Incoming: {min(results['wsproto']) / min(results['Incoming']):.1f}x")
    for name, run in rows.items():
        print(f"{name:9} {best(run, big, 1, args.rounds) * 1e3:6.2f} ms for one 4 MiB message")


if __name__ == "__main__":
    main()
