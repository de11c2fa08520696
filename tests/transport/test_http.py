"""The HTTP door, as pure rules over a parsed request head (no sockets)."""

from __future__ import annotations

import h11
import pytest

from ahpd.transport import _http

UPGRADE = [
    ("Host", "127.0.0.1"),
    ("Connection", "keep-alive, Upgrade"),
    ("Upgrade", "websocket"),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
]


def request(target: str = "/", headers: list[tuple[str, str]] | None = None,
            method: str = "GET") -> h11.Request:
    return h11.Request(method=method, target=target,
                       headers=headers if headers is not None else [("Host", "127.0.0.1")])


def status(refusal: _http.Refusal | None) -> int | None:
    return None if refusal is None else refusal.status


@pytest.mark.parametrize(
    ("target", "extra", "token", "expected"),
    [
        ("/", [], None, None),
        ("/", [], "s3cret", 401),
        ("/?tkn=s3cret", [], "s3cret", None),
        ("/?token=s3cret", [], "s3cret", None),
        ("/path?x=1&tkn=s3cret", [], "s3cret", None),
        ("/", [("Authorization", "Bearer s3cret")], "s3cret", None),
        ("/", [("Authorization", "bearer s3cret")], "s3cret", None),
        ("/?tkn=wrong", [], "s3cret", 401),
        ("/?tkn=", [], "s3cret", 401),
        ("/?tkn=s3cret2", [], "s3cret", 401),
        ("/", [("Authorization", "Basic s3cret")], "s3cret", 401),
        ("/", [("Authorization", "Bearer wrong")], "s3cret", 401),
        ("/?other=s3cret", [], "s3cret", 401),
    ],
)
def test_upgrade_admitted_only_with_the_token(target, extra, token, expected):
    assert status(_http.decide(request(target, UPGRADE + extra), token)) == expected


@pytest.mark.parametrize(
    ("target", "token", "expected"),
    [
        ("/", None, 426),
        ("/", "s3cret", 401),
        ("/?tkn=wrong", "s3cret", 401),
        ("/?tkn=s3cret", "s3cret", 426),
        ("/?token=s3cret", "s3cret", 426),
    ],
)
def test_plain_request_hears_401_or_426(target, token, expected):
    assert status(_http.decide(request(target), token)) == expected


def test_malformed_upgrades_are_answered_here():
    def without(name: str) -> list[tuple[str, str]]:
        return [(k, v) for k, v in UPGRADE if k != name]

    assert status(_http.decide(request(headers=UPGRADE, method="POST"), None)) == 405
    assert status(_http.decide(request(headers=without("Connection") + [("Connection", "close")]),
                               None)) == 400
    assert status(_http.decide(request(headers=without("Sec-WebSocket-Key")), None)) == 400
    mixed = without("Upgrade") + [("Upgrade", "h2c, websocket")]
    assert status(_http.decide(request(headers=mixed), None)) == 400
    old = without("Sec-WebSocket-Version") + [("Sec-WebSocket-Version", "8")]
    assert status(_http.decide(request(headers=old), None)) == 426


def test_token_is_compared_in_constant_time(monkeypatch):
    calls = []
    real = _http.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(_http.hmac, "compare_digest", spy)
    assert _http.token_ok(request("/?tkn=s3cret"), "s3cret")
    assert calls == [(b"s3cret", b"s3cret")]


@pytest.mark.parametrize("code", [401, 426, 400])
def test_every_answer_allows_any_origin_and_closes(code):
    raw = _http.response(_http.Refusal(code, "no"))
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0].startswith(f"HTTP/1.1 {code} ".encode())
    assert b"Access-Control-Allow-Origin: *" in lines
    assert f"Content-Length: {len(body)}".encode() in lines
    assert body == b"no\n"
