"""Shared test settings.

The published AHP schemas are upstream's text: they sit beside a checkout in
``../shared/ahp-spec`` and are never part of the repository. Tests that
compare against them take the ``published_schemas`` fixture and skip, saying
so, where they are absent; everything else runs on what the repository holds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT.parent / "shared" / "ahp-spec" / "schema"
NOT_BESIDE = f"../shared/ahp-spec not beside the repository: no published schemas in {SCHEMA_DIR}"


@pytest.fixture
def published_schemas() -> Path:
    """The published schema directory, or a skip that names where it was looked for."""
    if not (SCHEMA_DIR / "actions.schema.json").is_file():
        pytest.skip(NOT_BESIDE)
    return SCHEMA_DIR


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("AHPD_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow run: set AHPD_SLOW=1 to include it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
