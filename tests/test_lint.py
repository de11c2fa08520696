"""The habits that catch mistakes before a test does, run with the tests:
ruff's lint and format checks over the code and the tests, and mypy over
the package, each at zero findings (configured in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TREES = ["ahpd", "tests", "conformance", "benchmarks", "tools", "conftest.py"]


def _tool(name: str) -> str:
    """The tool installed beside this interpreter (the test extra's), else on PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it comes with the test extra (pip install -e '.[test]')")
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    run = _run(_tool("ruff"), "check", "--no-cache", *TREES)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_code_is_formatted() -> None:
    run = _run(_tool("ruff"), "format", "--check", "--no-cache", *TREES)
    assert run.returncode == 0, "run `ruff format` on:\n" + run.stdout + run.stderr


def test_mypy_finds_nothing() -> None:
    run = _run(_tool("mypy"), "--cache-dir=/dev/null")
    assert run.returncode == 0, run.stdout + run.stderr
