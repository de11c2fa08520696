"""Every model class survives wire JSON and back, and fits the strict schema."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ahpd.protocol import codec
from ahpd.protocol.strict_schema import validator

from .strategies import for_class, model_classes

CLASSES = model_classes()


def test_the_model_is_the_whole_schema() -> None:
    # 414 classes today; a sudden drop means the generator lost definitions.
    assert len(CLASSES) > 400


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_round_trip(cls: type, data: st.DataObject) -> None:
    obj = data.draw(for_class(cls))
    wire = json.loads(json.dumps(codec.encode(obj)))
    assert codec.decode(cls, wire) == obj
    errors = [e.message for e in validator(f"/$defs/{cls.__name__}").iter_errors(wire)]
    assert errors == []
