"""Reading back a kept file: only a regular one, and only text a client can be sent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ahpd.ports import regular


def test_a_regular_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b'{"a": 1}')
    assert regular.read_regular(path) == b'{"a": 1}'


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda p: p.mkdir(), "a folder"),
        (lambda p: os.mkfifo(p), "a FIFO"),  # opened at once, never waiting for a writer
        (lambda p: p.symlink_to(p.parent / "target"), "a symlink"),
    ],
)
def test_what_is_not_a_regular_file_is_refused_by_kind(tmp_path: Path, make, kind: str) -> None:
    (tmp_path / "target").write_text("{}")
    path = tmp_path / "kept.json"
    make(path)
    with pytest.raises(regular.NotRegular, match=kind):
        regular.read_regular(path)


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        regular.read_regular(tmp_path / "absent")


def test_json_from_disk_refuses_nan_and_makes_lone_surrogates_text() -> None:
    for constant in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(ValueError, match=constant):
            regular.loads(f'{{"x": {constant}}}')
    value = regular.loads('{"t\\udc00": ["a\\ud800b", {"k": "\\ud83d\\ude00"}]}')
    assert value == {"t\ufffd": ["a\ufffdb", {"k": "\U0001f600"}]}  # a pair is a character, kept
    plain = {"a": ["b", {"c": "d"}]}
    assert regular.text_safe(plain) is plain
