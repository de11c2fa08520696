"""``ahpd wire-check`` gives the verdicts it gave before it validated frames
with the generated ``ahpd.protocol.fits`` (and without building model
objects): on good captures and on seeded, damaged copies of them (see
``damage.py``), the same exit status and the same problems - line, rule,
JSON path, words and excerpt. ``verdicts.json`` was recorded with the
checker of commit 55a2187, which decoded every frame through cattrs.

Fourteen of the damaged captures crashed that checker and this one alike
(a TypeError: an ``id``, a ``clientSeq``, a turn's, part's or tool call's
id, or a line's direction that is a list or an object, used as a dict
key); those fourteen were recorded again once the checker reported them
instead (2026-12-05), and only they changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .damage import cases, verdict

RECORDED = json.loads((Path(__file__).with_name("verdicts.json")).read_text())
CASES = dict(cases())


def test_every_recorded_capture_is_made_again() -> None:
    assert set(CASES) == set(RECORDED)
    # Damage that the checker must catch, not only clean captures.
    assert sum(1 for v in RECORDED.values() if v.get("status") == 1) > 200


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_the_verdict_is_unchanged(name: str, tmp_path: Path) -> None:
    assert verdict(CASES[name], tmp_path) == RECORDED[name]
