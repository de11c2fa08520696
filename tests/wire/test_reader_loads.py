"""The capture reader's fast JSON path reads every line as ``json.loads``
does - the same value, of the same types, or the same refusal - so the
checker's findings do not depend on which decoder read a line."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ahpd.wire.reader import loads

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


def same(a: object, b: object) -> bool:
    """Equal values of equal types, NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)  # type: ignore[index]
    return a == b


def outcome(decode, raw: bytes) -> object:
    try:
        return ("value", decode(raw))
    except ValueError:
        return ("refused", None)


@settings(max_examples=400, deadline=None)
@given(VALUES, st.booleans())
def test_a_json_text_reads_as_json_loads_reads_it(value, ascii_only) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    assert same(outcome(loads, raw), outcome(json.loads, raw))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40))
def test_any_bytes_read_or_refused_as_json_loads_does(raw) -> None:
    assert same(outcome(loads, raw), outcome(json.loads, raw))


def test_the_edge_cases_orjson_reads_otherwise() -> None:
    for raw in (
        b"NaN",
        b"[Infinity]",
        b"1e400",
        b'"\\ud83d"',
        b"18446744073709551616",
        b"-9223372036854775809",
        b"123456789012345678901234567890",
        b'\xef\xbb\xbf{"a": 1}',
        '{"a": 1}'.encode("utf-16"),
        b'"\xed\xa0\xbd"',
        b"[1, 2",
        b"",
    ):
        assert same(outcome(loads, raw), outcome(json.loads, raw)), raw
