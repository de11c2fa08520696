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


def request(target: str = "/", headers: list[tuple[str, str]] | None = None, method: str = "GET") -> h11.Request:
    return h11.Request(
        method=method, target=target, headers=headers if headers is not None else [("Host", "127.0.0.1")]
    )


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
    assert status(_http.decide(request(headers=without("Connection") + [("Connection", "close")]), None)) == 400
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


def _with(headers: list[tuple[str, str]], **replace: str) -> list[tuple[str, str]]:
    names = {k.replace("_", "-").lower(): v for k, v in replace.items()}
    kept = [(k, v) for k, v in headers if k.lower() not in names]
    return kept + [(k, v) for k, v in names.items() if v is not None]


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        (None, None),  # programs send no Origin
        ("http://localhost", None),
        ("http://localhost:3000", None),
        ("https://127.0.0.1:8443", None),
        ("http://127.1.2.3", None),
        ("http://[::1]:5173", None),
        ("https://evil.example", 403),
        ("http://localhost.evil.example", 403),
        ("http://127.0.0.1.nip.io", 403),
        ("null", 403),  # a sandboxed frame or a file:// page
        ("file://", 403),
        ("vscode-webview://abc", 403),
        ("http://localhost:notaport", 403),
    ],
)
def test_tokenless_upgrade_from_a_foreign_origin_is_refused(origin, expected):
    headers = UPGRADE + ([("Origin", origin)] if origin is not None else [])
    assert status(_http.decide(request(headers=headers), None)) == expected
    # with a token, the token is the guard: Origin is not looked at
    assert status(_http.decide(request("/?tkn=s3cret", headers=headers), "s3cret")) is None


@pytest.mark.parametrize(
    ("host", "listen", "token", "expected"),
    [
        ("127.0.0.1:8765", "127.0.0.1", None, None),
        ("localhost:8765", "127.0.0.1", None, None),
        ("LOCALHOST.", "127.0.0.1", None, None),
        ("app.localhost:8765", "127.0.0.1", None, None),
        ("[::1]:8765", "::1", None, None),
        ("127.0.0.2", "127.0.0.1", None, None),
        # DNS rebinding: a page's own name, resolved to 127.0.0.1
        ("evil.example:8765", "127.0.0.1", None, 403),
        ("evil.example:8765", "127.0.0.1", "s3cret", 403),
        ("192.168.1.5:8765", "127.0.0.1", "s3cret", 403),
        # --host asked for an address that is not loopback
        ("192.168.1.5:8765", "192.168.1.5", None, None),
        ("192.168.1.6:8765", "192.168.1.5", None, 403),
        ("box.lan:8765", "192.168.1.5", None, 403),
        ("box.lan:8765", "192.168.1.5", "s3cret", None),
        ("box.lan:8765", "box.lan", None, None),
        ("10.0.0.7:8765", "0.0.0.0", None, None),
        ("[fe80::1]:8765", "::", None, None),
        ("box.lan:8765", "0.0.0.0", None, 403),
        ("box.lan:8765", "0.0.0.0", "s3cret", None),
    ],
)
def test_the_host_header_must_name_this_daemon(host, listen, token, expected):
    target = "/?tkn=s3cret" if token else "/"
    headers = _with(UPGRADE, Host=host)
    assert status(_http.decide(request(target, headers), token, listen)) == expected


def test_a_request_without_host_is_malformed():
    no_host = h11.Request(
        method="GET", target="/", http_version="1.0", headers=[(k, v) for k, v in UPGRADE if k != "Host"]
    )
    assert status(_http.decide(no_host, None)) == 400


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("dGhlIHNhbXBsZSBub25jZQ==", None),
        ("AAAAAAAAAAAAAAAAAAAAAA==", None),
        ("dGhlIHNhbXBsZQ==", 400),  # 10 bytes
        ("dGhlIHNhbXBsZSBub25jZSEh", 400),  # 18 bytes
        ("not base64 at all!!!!!!!", 400),
        ("dGhlIHNhbXBsZSBub25jZQ", 400),  # padding missing
        ("", 400),
    ],
)
def test_sec_websocket_key_must_be_16_bytes_in_base64(key, expected):
    assert status(_http.decide(request(headers=_with(UPGRADE, Sec_WebSocket_Key=key)), None)) == expected
