"""Shared test settings.

The published AHP schemas are upstream's text: they sit beside a checkout in
``../shared/ahp-spec`` and are never part of the repository. Tests that
compare against them take the ``published_schemas`` fixture and skip, saying
so, where they are absent; everything else runs on what the repository holds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
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


def copy_repository(dest: Path) -> Path:
    """Copy what a clone of this checkout holds (tracked files plus new, unignored ones) to ``dest``."""
    if (ROOT / ".git").exists():
        listed = (
            subprocess.run(
                ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                cwd=ROOT,
                capture_output=True,
                check=True,
            )
            .stdout.decode()
            .split("\0")
        )
        names = [name for name in listed if name and (ROOT / name).is_file()]
    else:
        left_out = {".venv", ".git", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist"}
        names = [
            str(path.relative_to(ROOT))
            for path in ROOT.rglob("*")
            if path.is_file()
            and not left_out.intersection(path.relative_to(ROOT).parts)
            and not any(part.endswith(".egg-info") for part in path.relative_to(ROOT).parts)
        ]
    for name in names:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    return dest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("AHPD_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow run: set AHPD_SLOW=1 to include it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
