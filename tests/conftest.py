"""Shared test settings: the published AHP schemas sit beside the repository."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT.parent / "shared" / "ahp-spec" / "schema"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("AHPD_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow run: set AHPD_SLOW=1 to include it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
