"""The generated yes-or-no functions of ``ahpd.protocol.fits`` are never more
lenient than the codec, and say no to the two ways an object's keys can be
wrong - a required key missing, an undeclared key added - which they test
with ``frozenset.issuperset`` and a ``KeyError`` on reading the required
key rather than by comparing key views (a third of ``wire-check``'s
validation time)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ahpd.protocol import DecodeError, _base, codec, fits

from .strategies import for_class, model_classes

CLASSES = model_classes()


def test_every_class_has_its_function() -> None:
    assert set(CLASSES) <= set(fits.BY_CLASS)


def _codec_accepts(cls: type, wire: object) -> bool:
    try:
        codec.check(cls, wire)
    except DecodeError:
        return False
    return True


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_keys_missing_or_undeclared_are_refused(cls: type, data: st.DataObject) -> None:
    quick = fits.BY_CLASS[cls]
    wire = json.loads(json.dumps(codec.encode(data.draw(for_class(cls)))))
    if quick(wire):
        assert _codec_accepts(cls, wire)
    assert quick({**wire, "undeclaredKey": 1}) is False
    for field in _base.fields(cls):
        if field.default is _base.NOTHING:
            lacking = {k: v for k, v in wire.items() if k != field.name}
            assert quick(lacking) is False, field.name
    assert quick([wire]) is False
