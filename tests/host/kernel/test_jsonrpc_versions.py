"""Framing and version negotiation: plain functions, no host needed."""

from __future__ import annotations

import json

import pytest

from ahpd.host.kernel import jsonrpc
from ahpd.host.kernel.jsonrpc import RpcError
from ahpd.host.kernel.versions import SUPPORTED_VERSIONS, negotiate


def error_of(text: str) -> dict:
    message = jsonrpc.parse(text)
    assert isinstance(message, jsonrpc.Invalid)
    return json.loads(message.reply)["error"]


def test_parse_error_is_32700() -> None:
    assert error_of("{not json")["code"] == -32700


@pytest.mark.parametrize(
    "text",
    [
        '[{"jsonrpc":"2.0","id":1,"method":"ping"}]',  # a batch
        '"hello"',
        '{"jsonrpc":"1.0","id":1,"method":"ping"}',
        '{"jsonrpc":"2.0","id":1,"method":7}',
        '{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
        '{"jsonrpc":"2.0","id":1,"method":"ping","params":3}',
        '{"jsonrpc":"2.0","id":1}',
    ],
)
def test_invalid_requests_are_32600(text: str) -> None:
    assert error_of(text)["code"] == -32600


def test_classification() -> None:
    assert isinstance(jsonrpc.parse('{"jsonrpc":"2.0","id":1,"method":"ping"}'), jsonrpc.Request)
    assert isinstance(jsonrpc.parse('{"jsonrpc":"2.0","method":"unsubscribe","params":{}}'), jsonrpc.Notification)
    assert isinstance(jsonrpc.parse('{"jsonrpc":"2.0","id":1,"result":null}'), jsonrpc.Response)


@pytest.mark.parametrize(
    "offered, chosen",
    [
        (["1.0.0"], "1.0.0"),
        (["0.9.0", "1.0.0"], "1.0.0"),  # highest wins, whatever the order
        (["1.4.0"], "1.4.0"),  # an editor newer than this daemon
        (["0.10.0", "0.9.0"], "0.10.0"),  # VS Code 1.141
        (["0.9.0"], "0.9.0"),  # VS Code 1.140
        (["0.10.2", "2.0.0"], "0.10.2"),
        (["3.0.0", "1.2.3", "0.9.5"], "1.2.3"),
    ],
)
def test_negotiation(offered: list[str], chosen: str) -> None:
    assert negotiate(offered) == chosen


def test_nothing_acceptable_is_32005_with_supported_versions() -> None:
    with pytest.raises(RpcError) as err:
        negotiate(["2.0.0", "0.8.0", "0.11.0"])
    assert err.value.code == -32005
    assert err.value.data == {"supportedVersions": list(SUPPORTED_VERSIONS)}
    assert list(SUPPORTED_VERSIONS) == ["1.0.0", "0.10.0", "0.9.0"]


@pytest.mark.parametrize("bad", ["1.0", "v1.0.0", "1.0.0-beta", "01.0.0", ""])
def test_malformed_version_is_32602_naming_it(bad: str) -> None:
    with pytest.raises(RpcError) as err:
        negotiate(["1.0.0", bad])
    assert err.value.code == -32602
    assert repr(bad) in err.value.message
