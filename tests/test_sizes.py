"""Sizes a person can hold: no hand-written module of ahpd over 600 lines,
no package holding more than 16 modules directly (its ``__init__`` aside).
The generated modules (``tools/gen_protocol.py`` writes them and says so in
their first line) are exempt."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ahpd"
MAX_LINES = 600
MAX_MODULES = 16


def _generated(path: Path) -> bool:
    with path.open(encoding="utf-8") as f:
        return "generated" in f.readline().lower()


def test_no_hand_written_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in sorted(PACKAGE.rglob("*.py"))
        if not _generated(p) and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_package_holds_more_than_16_modules() -> None:
    crowded = {
        str(d.relative_to(PACKAGE.parent)): n
        for d in [PACKAGE, *sorted(p for p in PACKAGE.rglob("*") if p.is_dir())]
        if (n := sum(1 for m in d.glob("*.py") if m.name != "__init__.py")) > MAX_MODULES
    }
    assert not crowded, f"packages with more than {MAX_MODULES} modules: {crowded}"
