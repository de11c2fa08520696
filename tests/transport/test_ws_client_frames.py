"""What a client's frames do to a real server on 127.0.0.1: frames a
well-behaved client library would never send (unmasked, reserved bits,
unknown opcodes, bad UTF-8, a message cut between fragments, a ping in the
middle of one), written byte by byte to a raw TCP socket; everything the
server answers is parsed by wsproto's client state machine, so a malformed
answer fails too."""

from __future__ import annotations

import itertools
import logging

import pytest
import trio
from wsproto.events import CloseConnection, Pong, TextMessage

from ahpd.transport import base, wsconnection

from .conftest import LIMIT, EchoHandler, WsprotoClient, frame, serving, text, wait_until, ws_client


def close_payload(code: int, reason: str) -> bytes:
    return code.to_bytes(2, "big") + reason.encode()


async def still_serves(url: str) -> None:
    async with ws_client(url) as other:
        await other.send_message("still here")
        assert await other.get_message() == "still here"


async def test_a_message_in_many_fragments_over_many_writes_with_pings_between() -> None:
    handler = EchoHandler()
    parts = [f"part {i} é🙂|" for i in range(40)]
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            for i, part in enumerate(parts):
                data = frame(0x1 if i == 0 else 0x0, part.encode(), fin=i == len(parts) - 1)
                for j in range(0, len(data), 5):  # a few bytes per write
                    await client.send_raw(data[j : j + 5])
                if i % 10 == 5:  # a ping while the message is incomplete is answered at once
                    await client.send_raw(frame(0x9, b"ping %d" % i))
                    assert await client.next_event() == Pong(payload=b"ping %d" % i)
            echoed = await client.next_event()
            assert isinstance(echoed, TextMessage) and echoed.data == "".join(parts)
            await client.aclose()
    assert handler.received == ["".join(parts)]


async def test_many_messages_read_at_once_are_handled_in_order(monkeypatch) -> None:
    reads: list[int] = []
    real = base.Connection.receive
    handler = EchoHandler()
    texts = [f'{{"n":{i},"é":"{"x" * (i % 50)}"}}' for i in range(300)]

    async def counting(self: base.Connection) -> str | None:
        reads.append(1)  # a trip through the general path: a read of the socket (or the end)
        return await real(self)

    monkeypatch.setattr(base.Connection, "receive", counting)
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            await client.send_raw(b"".join(text(t) for t in texts))  # one write
            got = [await client.next_event() for _ in texts]
            assert [e.data for e in got] == texts  # type: ignore[union-attr]
            await client.aclose()
    assert handler.received == texts
    assert len(reads) < len(texts) // 10, len(reads)  # most messages came from a chunk already read


async def test_a_chunk_of_many_messages_does_not_hold_the_event_loop(monkeypatch) -> None:
    """Messages handed out from a chunk already read cost no checkpoint, so
    after ``BURST`` of them the reading task lets the others run."""
    monkeypatch.setattr(wsconnection, "BURST", 32)
    handler = EchoHandler()
    texts = [str(i) for i in range(2000)]  # ~9 bytes a frame: one read holds thousands
    seen: list[int] = []  # how many messages the handler had each time another task ran
    with trio.fail_after(LIMIT):
        async with serving(handler) as server, trio.open_nursery() as nursery:

            async def watch() -> None:
                while True:
                    seen.append(len(handler.received))
                    await trio.lowlevel.checkpoint()

            nursery.start_soon(watch)
            client = await WsprotoClient.connect(server.listening.port)
            await client.send_raw(b"".join(text(t) for t in texts))
            got = [await client.next_event() for _ in texts]
            assert [e.data for e in got] == texts  # type: ignore[union-attr]
            await client.aclose()
            nursery.cancel_scope.cancel()
    steps = [b - a for a, b in itertools.pairwise(seen)]
    assert max(steps) <= 2 * 32, max(steps)  # trio runs a batch of runnable tasks in any order


@pytest.mark.parametrize(("code", "reason"), [(1000, ""), (4001, "bye ✓"), (None, "")])
async def test_the_peers_close_is_answered_with_its_code_and_ends_the_connection(code, reason) -> None:
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            await client.send_raw(text("hello"))
            assert await client.next_event() == TextMessage(data="hello")
            await client.send_raw(frame(0x8, b"" if code is None else close_payload(code, reason)))
            answer = await client.next_event()
            assert isinstance(answer, CloseConnection)
            assert (answer.code, answer.reason) == ((1005, "") if code is None else (code, reason))
            assert await client.next_event() is None  # then the server closes the TCP connection
            await client.aclose()
            await wait_until(lambda: handler.finished, "the handler ends")
    assert (conn.close_code, conn.close_reason) == ((1005, "") if code is None else (code, reason))


@pytest.mark.parametrize(
    "data",
    [
        frame(0x1, b"caf\xc3"),
        frame(0x1, "d\u00e9j\u00e0".encode(), fin=False) + frame(0x0, b"\xed\xa0\x80"),  # a surrogate
    ],
    ids=["cut-short", "surrogate-in-a-fragment"],
)
async def test_text_that_is_not_utf8_is_closed_with_1007(data: bytes, caplog) -> None:
    caplog.set_level(logging.INFO, logger="ahpd.transport")
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            await client.send_raw(data)
            close = await client.next_event()
            assert isinstance(close, CloseConnection), close
            assert close.code == 1007 and "not UTF-8" in (close.reason or "")
            await client.send_raw(frame(0x8, close_payload(1007, "")))
            assert await client.next_event() is None
            await client.aclose()
            await still_serves(server.url)
    assert conn.close_code == 1007
    assert handler.received == ["still here"]
    assert any("not UTF-8" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (text("hi", mask=False), "an unmasked frame from the client"),
        (text("hi", rsv=0b100), "reserved bit"),
        (frame(0x5, b"x"), "unknown opcode 0x5"),
        (frame(0xC, b"x"), "unknown opcode 0xc"),
        (frame(0x9, b"p" * 126), "a control frame of 126 bytes"),
        (frame(0x9, b"p", fin=False), "a fragmented control frame"),
        (frame(0x0, b"orphan"), "a continuation frame with no message to continue"),
        (text("a", fin=False) + text("b"), "a new message before the last one was finished"),
    ],
    ids=[
        "unmasked",
        "rsv1",
        "opcode-5",
        "opcode-c",
        "long-ping",
        "fragmented-ping",
        "orphan-continuation",
        "interleaved",
    ],
)
async def test_a_protocol_error_is_closed_with_1002_naming_it(data: bytes, reason: str) -> None:
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            await client.send_raw(text("first") + data + text("never read"))
            assert await client.next_event() == TextMessage(data="first")
            close = await client.next_event()
            assert isinstance(close, CloseConnection), close
            assert close.code == 1002 and reason in (close.reason or "")
            # its bytes can no longer be parsed: the server does not wait for an answer
            assert await client.next_event() is None
            await client.aclose()
            await still_serves(server.url)
    assert conn.close_code == 1002
    assert handler.received == ["first", "still here"]


async def test_a_peer_vanishing_mid_frame_ends_its_connection_and_not_the_others() -> None:
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            whole = text("y" * 1000)
            await client.send_raw(whole[:300])
            await client.aclose()
            await wait_until(lambda: conn.closed and handler.finished, "the connection ends")
            await still_serves(server.url)
    assert conn.close_code == 1006
    assert handler.received == ["still here"]


async def test_our_close_waits_for_the_peers_answer_dropping_what_comes_before_it() -> None:
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            conn.close(4000, "that is all")
            close = await client.next_event()
            assert isinstance(close, CloseConnection) and (close.code, close.reason) == (4000, "that is all")
            # the server still reads: data and a ping are dropped (no pong after a close frame) ...
            await client.send_raw(text("late") + frame(0x9, b"ping") + frame(0x2, b"x" * 5000))
            # ... until the answer, after which it closes the TCP connection
            await client.send_raw(frame(0x8, close_payload(4000, "")))
            assert await client.next_event() is None
            await client.aclose()
    assert handler.received == []


async def test_our_close_is_bounded_when_the_peer_never_answers(monkeypatch, caplog) -> None:
    caplog.set_level(logging.INFO, logger="ahpd.transport")
    monkeypatch.setattr(base, "CLOSE_TIMEOUT", 0.5)
    handler = EchoHandler()
    with trio.fail_after(LIMIT):
        async with serving(handler) as server:
            client = await WsprotoClient.connect(server.listening.port)
            conn = await handler.next_connection()
            conn.close(1000)
            close = await client.next_event()
            assert isinstance(close, CloseConnection) and close.code == 1000
            assert await client.next_event() is None  # it reads on, never answers: dropped at the deadline
            await client.aclose()
    assert any("did not close within" in r.getMessage() for r in caplog.records)
