"""``wsread.Incoming``, the parser of a client's frames, without a socket:
frames built here byte by byte (RFC 6455 section 5.2), fed whole or cut at
every byte, and what comes out. The same rules over a real socket are in
test_ws_client_frames.py."""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ahpd.transport import wsread
from ahpd.transport.wsread import NO_STATUS, Binary, Close, Fail, Incoming, Ping, Pong, close_payload, unmask

from .conftest import KEY, frame, text


def events(data: bytes, *, max_size: int = 2**20, cuts: list[int] | None = None) -> list[object]:
    """Everything ``data`` yields, fed whole or in the pieces ``cuts`` makes."""
    incoming = Incoming(max_size)
    bounds = [0, *(cuts or []), len(data)]
    got: list[object] = []
    for start, end in itertools.pairwise(bounds):
        incoming.feed(data[start:end])
        while (event := incoming.next()) is not None:
            got.append(event)
            if type(event) is Fail and incoming.broken:
                return got
    return got


STREAM = b"".join(
    [
        text("plain"),
        text("é" * 70),  # 140 bytes: a 16-bit length
        text("x" * 70_000),  # a 64-bit length, unmasked with the tables
        frame(0x1, "frag".encode(), fin=False),
        frame(0x9, b"between"),  # a ping between fragments
        frame(0x0, "ment".encode(), fin=False),
        frame(0x0, "🙂".encode()[:2], fin=False),  # a character cut between fragments
        frame(0x0, "🙂".encode()[2:]),
        frame(0x2, b"\x00\x01\x02"),
        frame(0xA, b"pong"),
        text(""),
        frame(0x8, close_payload(4001, "bye ✓")),
    ]
)
EXPECTED = [
    "plain",
    "é" * 70,
    "x" * 70_000,
    Ping(b"between"),
    "fragment🙂",
    Binary(3),
    Pong(b"pong"),
    "",
    Close(4001, "bye ✓"),
]


def test_a_stream_of_every_kind_of_frame() -> None:
    assert events(STREAM) == EXPECTED


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=40, unique=True))
def test_any_cut_of_the_stream_gives_the_same_events(cuts: list[int]) -> None:
    assert events(STREAM, cuts=sorted(cuts)) == EXPECTED


def test_fed_a_byte_at_a_time() -> None:
    small = STREAM.replace(text("x" * 70_000), b"")
    assert events(small, cuts=list(range(1, len(small)))) == [e for e in EXPECTED if e != "x" * 70_000]


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 125, 4095, 4096, 4097, 65536, 2**20 + 3])
def test_unmask_is_xor_with_the_key_repeated(n: int) -> None:
    data = os.urandom(n)
    expected = bytes(b ^ KEY[i % 4] for i, b in enumerate(data))
    assert unmask(data, KEY) == expected
    assert unmask(expected, KEY) == data


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (text("hi", mask=False), "an unmasked frame from the client"),
        (text("hi", rsv=0b100), "a frame with a reserved bit set"),
        (text("hi", rsv=0b001), "a frame with a reserved bit set"),
        (frame(0x3, b"x"), "unknown opcode 0x3"),
        (frame(0xB, b"x"), "unknown opcode 0xb"),
        (frame(0x9, b"p" * 126), "a control frame of 126 bytes (at most 125)"),
        (frame(0x9, b"p", fin=False), "a fragmented control frame"),
        (frame(0x8, b"", fin=False), "a fragmented control frame"),
        (frame(0x0, b"orphan"), "a continuation frame with no message to continue"),
        (text("a", fin=False) + text("b"), "a new message before the last one was finished"),
        (text("short", width=16), "a length in 16 bits that fits in 7"),
        (text("short", width=64), "a length in 64 bits that fits in 16"),
        (b"\x81\xff" + (1 << 63).to_bytes(8, "big") + KEY, "a 64-bit length with its top bit set"),
        (frame(0x8, b"\x03"), "a close frame with a 1-byte payload"),
        (frame(0x8, (1005).to_bytes(2, "big")), "code 1005"),
        (frame(0x8, (1006).to_bytes(2, "big")), "code 1006"),
        (frame(0x8, (999).to_bytes(2, "big")), "code 999"),
        (frame(0x8, (2000).to_bytes(2, "big")), "code 2000"),
        (frame(0x8, (5000).to_bytes(2, "big")), "code 5000"),
    ],
)
def test_a_protocol_error_fails_with_1002_and_the_stream_is_read_no_further(data: bytes, reason: str) -> None:
    incoming = Incoming(2**20)
    incoming.feed(text("before") + data + text("after"))
    assert incoming.next() == "before"
    failed = incoming.next()
    assert type(failed) is Fail and failed.code == wsread.PROTOCOL_ERROR and reason in failed.reason
    assert incoming.broken
    incoming.feed(text("more"))
    assert incoming.next() == failed  # for good


@pytest.mark.parametrize("code", [1000, 1001, 1003, 1007, 1011, 1013, 3000, 4999])
def test_close_codes_a_peer_may_send(code: int) -> None:
    assert events(frame(0x8, close_payload(code, ""))) == [Close(code, "")]


def test_a_close_frame_without_a_payload_stands_for_1005() -> None:
    assert events(frame(0x8)) == [Close(NO_STATUS, "")]


@pytest.mark.parametrize(
    "data",
    [
        frame(0x1, b"\xc3\x28"),  # not a UTF-8 sequence
        frame(0x1, b"\xed\xa0\x80"),  # a surrogate
        frame(0x1, "é".encode()[:1]),  # cut short
        frame(0x1, b"ok", fin=False) + frame(0x0, b"\xff"),  # fragmented
        frame(0x8, (1000).to_bytes(2, "big") + b"\xff"),  # a close frame's reason
    ],
)
def test_text_that_is_not_utf8_fails_with_1007_and_the_stream_goes_on(data: bytes) -> None:
    incoming = Incoming(2**20)
    incoming.feed(data + text("dropped") + frame(0x9, b"p") + frame(0x8, close_payload(1000, "")))
    failed = incoming.next()
    assert type(failed) is Fail and failed.code == wsread.INVALID_DATA and "not UTF-8" in failed.reason
    assert not incoming.broken
    # what follows is still parsed, its data dropped: the peer's close frame is found
    assert [incoming.next(), incoming.next(), incoming.next()] == [Ping(b"p"), Close(1000, ""), None]


def test_a_message_over_the_limit_fails_with_1009_at_its_header_and_its_payload_is_never_held() -> None:
    incoming = Incoming(1000)
    big = text("y" * 50_000)
    incoming.feed(text("x" * 1000) + big[:20])  # exactly the limit is fine; then only the big one's header
    assert incoming.next() == "x" * 1000
    failed = incoming.next()
    assert failed == Fail(wsread.MESSAGE_TOO_BIG, "frame of 50000 bytes exceeds the 1000-byte limit")
    for i in range(20, len(big), 4096):  # the rest is skipped as it comes
        incoming.feed(big[i : i + 4096])
        assert incoming.next() is None
        assert incoming.buffered == 0
    incoming.feed(frame(0x8, close_payload(1000, "ok")))
    assert incoming.next() == Close(1000, "ok")


def test_the_limit_is_on_a_message_s_bytes_across_its_fragments() -> None:
    data = text("é" * 300, fin=False) + frame(0x0, "é".encode() * 300)  # 600 characters, 1,200 bytes
    assert events(data, max_size=1199) == [Fail(1009, "frame of 1200 bytes exceeds the 1199-byte limit")]
    assert events(data, max_size=1200) == ["é" * 600]


def test_after_discard_data_is_dropped_and_the_close_frame_found() -> None:
    incoming = Incoming(100)
    incoming.feed(text("kept"))
    assert incoming.next() == "kept"
    incoming.discard()
    incoming.feed(
        text("a" * 5000) + frame(0x2, b"b" * 70_000) + text("c", fin=False) + frame(0x8, close_payload(1001, ""))
    )
    assert incoming.next() == Close(1001, "")


def test_a_close_reason_is_cut_at_a_character_to_fit_a_control_frame() -> None:
    payload = close_payload(1000, "✓" * 100)
    assert len(payload) <= 125
    assert payload[2:].decode() == "✓" * 41


def test_a_large_frame_is_unmasked_as_it_comes_and_never_held_whole() -> None:
    big = "é🙂x" * 40_000  # 280,000 bytes, characters cut at every piece's edge
    data = text("before") + text(big[:5000], fin=False) + frame(0x0, big[5000:].encode()) + text("after")
    incoming = Incoming(2**20)
    got: list[object] = []
    for i in range(0, len(data), 4093):
        incoming.feed(data[i : i + 4093])
        while (event := incoming.next()) is not None:
            got.append(event)
        assert incoming.buffered < wsread._STREAM  # the large frame never waits whole (a small one may)
    assert got == ["before", big, "after"]


def test_discard_in_the_middle_of_a_large_frame_skips_its_rest() -> None:
    incoming = Incoming(2**20)
    data = frame(0x1, b"z" * 200_000) + frame(0x8, close_payload(1000, "done"))
    incoming.feed(data[:100_000])
    assert incoming.next() is None
    incoming.discard()
    incoming.feed(data[100_000:])
    assert incoming.next() == Close(1000, "done")
