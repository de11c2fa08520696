"""jsonrpc's door and its way out, without sockets: what is not JSON, named."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ahpd.host.kernel import jsonrpc
from ahpd.host.kernel.jsonrpc import Invalid, NotJson, Request


def refused(text: str) -> dict:
    message = jsonrpc.parse(text)
    assert isinstance(message, Invalid), message
    return json.loads(message.reply)


def request(params: str, ident: str = '"r"') -> str:
    return '{"jsonrpc":"2.0","id":' + ident + ',"method":"m","params":' + params + "}"


@pytest.mark.parametrize(
    ("params", "code", "reply_id", "path"),
    [
        ('{"a":[1,NaN]}', -32700, None, "$.params.a[1]"),
        ('{"a":{"b":-Infinity}}', -32700, None, "$.params.a.b"),
        ('{"a":1e309}', -32602, "r", "$.params.a"),
        ('{"a":"x\\udc00"}', -32602, "r", "$.params.a"),
        ('{"k\\ud800":1}', -32602, "r", "$.params (key 'k\\ud800')"),
        ("[" * 500 + '"\\ud83d"' + "]" * 500, -32602, "r", "$.params" + "[0]" * 500),
    ],
)
def test_what_is_not_json_is_refused_naming_where(params, code, reply_id, path) -> None:
    error = refused(request(params))
    assert (error["id"], error["error"]["code"], error["error"]["data"]["path"]) == (reply_id, code, path)


def test_an_id_that_is_not_text_is_not_answered_to() -> None:
    assert refused(request('{"a":"\\ud83d"}', ident='"\\udfff"'))["id"] is None


@pytest.mark.parametrize("text", ['{"a": NaN, "b": }', "[1e400, ", '{"a": Infinity'])
def test_a_refused_value_in_a_broken_frame_is_a_parse_error(text) -> None:
    error = refused(text)
    assert error["id"] is None and error["error"]["code"] == -32700


@pytest.mark.parametrize(
    "params",
    [
        '{"a":"\\ud83d\\ude00"}',  # a pair, escaped: one character
        '{"a":"\\\\ud83d"}',  # an escaped backslash, then the letters ud83d
        '{"a":1.5e308,"b":-0.0,"c":1e-400}',  # large, negative zero, underflow to 0: all finite
    ],
)
def test_what_is_json_goes_through(params) -> None:
    assert isinstance(jsonrpc.parse(request(params)), Request)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": [1.0, float("nan")]}, "$.a[1]"),
        ({"a": {"b": "x\ud800"}}, "$.a.b"),
        ({"a": {1, 2}}, "$.a"),
    ],
)
def test_a_value_with_no_json_form_is_not_written(value, path) -> None:
    with pytest.raises(NotJson) as caught:
        jsonrpc.dumps(value)
    assert caught.value.path == path


def test_a_value_shared_twice_is_json_and_one_containing_itself_is_not() -> None:
    shared = [1]
    assert jsonrpc.dumps({"a": shared, "b": shared}) == '{"a":[1],"b":[1]}'
    loop: list = []
    loop.append(loop)
    with pytest.raises(NotJson, match="contains itself"):
        jsonrpc.dumps({"a": loop})


def _captured() -> list[str]:
    """The conformance capture's frames as a peer sent them (without the log's own key)."""
    lines = (Path(__file__).parents[3] / "conformance" / "fixtures" / "wire.jsonl").read_text().splitlines()
    return [json.dumps({k: v for k, v in json.loads(line).items() if k != "_ahpLog"}) for line in lines]


def test_a_frame_of_what_was_read_is_the_stdlibs_text() -> None:
    rng = random.Random(7)
    numbers = [rng.uniform(-1e6, 1e6) for _ in range(500)] + [
        rng.random() * 10 ** rng.randint(-30, 30) for _ in range(2000)
    ]
    values: list[object] = [json.loads(text) for text in _captured()]
    values += [{"n": n} for n in (*numbers, 1e16, 1e-05, 0.0001, -0.0, 2**64 - 1, 2**64, -(2**63) - 1)]
    values.append({"text": "".join(chr(c) for c in range(0x800)) + "\u2028\u2029\ufeff😀"})
    for value in values:
        assert jsonrpc.notification_frame_of_read("action", value) == jsonrpc.notification_frame("action", value)
