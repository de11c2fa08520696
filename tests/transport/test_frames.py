"""Our own data-frame writer against an independent client: wsproto's client
state machine over a real socket on 127.0.0.1 parses every byte the server
writes (a frame that is malformed, interleaved or cut makes it fail).

Covered: payload lengths at the 7/16/64-bit boundaries and non-ASCII text;
many frames written in one batch arrive whole and in order; a fanned-out
frame's bytes are built once for all its subscribers; a ping gets its pong
while data flows; the close handshake in both directions, after the data.
"""

from __future__ import annotations

import pytest
import trio
from wsproto.events import (
    CloseConnection,
    Message,
    Ping,
    Pong,
    TextMessage,
)

from ahpd.host.kernel.frame import SharedFrame
from ahpd.transport import frames as frames_module
from ahpd.transport.frames import BatchBytes, text_frame
from ahpd.transport.websocket import WebSocketConnection
from tests.waits import until_step

from .conftest import LIMIT, EchoHandler, WsprotoClient, serving


def text_of_bytes(n: int, unit: str) -> str:
    """A text of exactly ``n`` UTF-8 bytes made of ``unit`` (padded with ASCII)."""
    width = len(unit.encode())
    return unit * (n // width) + "a" * (n % width)


def test_header_lengths_at_the_7_16_and_64_bit_boundaries() -> None:
    assert text_frame(b"") == b"\x81\x00"
    assert text_frame(b"x" * 125)[:2] == b"\x81\x7d"
    assert text_frame(b"x" * 126)[:4] == b"\x81\x7e\x00\x7e"
    assert text_frame(b"x" * 65535)[:4] == b"\x81\x7e\xff\xff"
    assert text_frame(b"x" * 65536)[:10] == b"\x81\x7f" + (65536).to_bytes(8, "big")
    assert text_frame(b"x" * 65536)[10:] == b"x" * 65536


def test_a_shared_frame_is_encoded_once_per_encoding() -> None:
    calls: list[bytes] = []

    def encode(utf8: bytes) -> bytes:
        calls.append(utf8)
        return b"<" + utf8 + b">"

    frame = SharedFrame("héllo")
    assert frame == "héllo" and frame.size == 6
    assert frame.encoded(encode) == "<héllo>".encode()
    assert frame.encoded(encode) is frame.encoded(encode)
    assert calls == ["héllo".encode()]
    assert frame.encoded(text_frame) == b"\x81\x06" + "héllo".encode()


def test_a_batch_of_the_same_frames_is_joined_once() -> None:
    batches = BatchBytes()
    a, b = SharedFrame("one"), SharedFrame("twö")
    first = batches.of([a, b])
    assert first == text_frame(b"one") + text_frame("twö".encode())
    assert batches.of([a, b]) is first  # the next connection's equal batch: no new bytes
    assert batches.of(["one", "twö"]) is first  # equal texts are equal bytes, shared or not
    assert batches.of([b]) == text_frame("twö".encode())  # a different batch is built anew
    assert batches.of([a, b]) == first


@pytest.mark.parametrize("unit", ["x", "é", "漢", "🙂"])
async def test_payloads_at_every_length_boundary_reach_an_independent_client(unit: str) -> None:
    sizes = [0, 1, 125, 126, 127, 65535, 65536, 65537, 200_000]
    texts = [text_of_bytes(n, unit) for n in sizes]
    assert [len(t.encode()) for t in texts] == sizes
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            for i, text in enumerate(texts):  # plain and shared frames alike
                assert conn.send(SharedFrame(text) if i % 2 else text)
            got = [await client.next_event() for _ in texts]
            assert [e.data for e in got] == texts  # type: ignore[attr-defined]
            # and the other way round, through the server's own reader (wsread), still
            await client.send(Message(data=texts[-1]))
            echoed = await client.next_event()
            assert isinstance(echoed, TextMessage) and echoed.data == texts[-1]
            await client.aclose()


async def test_many_frames_go_out_in_one_write_and_arrive_whole_and_in_order(monkeypatch) -> None:
    batches: list[int] = []
    real = WebSocketConnection._write_frames

    async def counting(self: WebSocketConnection, frames) -> None:
        batches.append(len(frames))
        await real(self, frames)

    monkeypatch.setattr(WebSocketConnection, "_write_frames", counting)
    handler = EchoHandler()
    texts = [f'{{"n":{i},"text":"{"é" * (i % 300)}"}}' for i in range(2000)]
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            for text in texts:  # no checkpoint in between: all queued before the writer runs
                assert conn.send(text)
            got = [await client.next_event() for _ in texts]
            assert [e.data for e in got] == texts  # type: ignore[attr-defined]
            await client.aclose()
    # far fewer writes than frames: each batch went out in one send_all
    assert sum(batches) == len(texts)
    assert len(batches) < len(texts) // 10, batches


async def test_a_fanned_out_frame_is_built_once_for_all_its_clients(monkeypatch) -> None:
    built: list[int] = []

    def counting_text_frame(payload: bytes) -> bytes:
        built.append(len(payload))
        return text_frame(payload)

    monkeypatch.setattr(frames_module, "text_frame", counting_text_frame)
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            clients, conns = [], []
            for _ in range(5):
                clients.append(await WsprotoClient.connect(server.listening.port))
                conns.append(await handler.next_connection())
            frames = [SharedFrame(f"action {i} ü") for i in range(50)]
            for frame in frames:
                for conn in conns:
                    assert conn.send(frame, frame.size)
            for client in clients:
                assert [(await client.next_event()).data for _ in frames] == frames  # type: ignore[attr-defined]
                await client.aclose()
    assert len(built) == len(frames)  # once per frame, not once per frame per client


async def test_a_ping_gets_its_pong_while_data_flows() -> None:
    handler = EchoHandler()
    chunk = "d" * 4000
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            sent = 0
            pongs: list[bytes] = []
            received: list[str] = []
            for round_ in range(20):
                for _ in range(50):  # keep the writer busy with batches while the pong goes out
                    sent += 1
                    conn.send(f"{sent:06d}{chunk}")
                await client.send(Ping(payload=b"ping %d" % round_))
                while len(pongs) <= round_:
                    event = await client.next_event()
                    if isinstance(event, Pong):
                        pongs.append(bytes(event.payload))
                    else:
                        assert isinstance(event, TextMessage)
                        received.append(event.data)
            while len(received) < sent:
                event = await client.next_event()
                assert isinstance(event, TextMessage)
                received.append(event.data)
            await client.aclose()
    assert pongs == [b"ping %d" % i for i in range(20)]
    assert received == [f"{i:06d}{chunk}" for i in range(1, sent + 1)]


async def test_a_client_close_is_answered_and_ends_the_connection() -> None:
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            for i in range(100):
                conn.send(f"before {i}")
            await client.send(CloseConnection(code=1000, reason="done"))
            events = []
            while not isinstance(event := await client.next_event(), CloseConnection):
                events.append(event)
            # whatever data came before the answer is whole; the answer echoes 1000
            assert all(isinstance(e, TextMessage) and e.data.startswith("before ") for e in events)
            assert event.code == 1000
            assert await client.stream.receive_some(65536) == b""  # then the server hangs up
            await client.aclose()
            await until_step(lambda: conn.closed)
            assert not conn.send("after")


async def test_a_server_close_comes_after_every_queued_frame() -> None:
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            texts = [f"last words {i} ✓" for i in range(500)]
            for text in texts:
                conn.send(SharedFrame(text))
            conn.close(4000, "that is all")
            got = [await client.next_event() for _ in texts]
            assert [e.data for e in got] == texts  # type: ignore[attr-defined]
            event = await client.next_event()
            assert isinstance(event, CloseConnection)
            assert (event.code, event.reason) == (4000, "that is all")
            await client.send(event.response())
            await client.aclose()


@pytest.mark.parametrize("text", ["a" * (3 * frames_module.PIECE + 7), "\u00e9\u2603" * (frames_module.PIECE + 3), ""])
def test_a_large_frame_in_pieces_is_the_frame_whole(text: str) -> None:
    pieces = list(frames_module.text_frame_pieces(text))
    assert b"".join(pieces) == text_frame(text.encode())
    assert all(len(p) <= 4 * frames_module.PIECE for p in pieces)


async def test_a_large_frame_reaches_an_independent_client_whole_after_the_small_ones() -> None:
    """A frame past ``PIECE`` characters is written a piece at a time, after
    the small frames queued before it, and arrives as one message."""
    big = "x\u00e9" * (frames_module.PIECE + 11)
    texts = ["one", "two", big, "after"]
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            for text in texts:
                assert conn.send(text)
            got = []
            while len(got) < len(texts):
                event = await client.next_event()
                assert isinstance(event, TextMessage)
                got.append(event.data)
            assert got == texts
            await client.aclose()
