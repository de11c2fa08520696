"""Every test run (``tests/`` and ``conformance/`` alike) happens away from HOME.

This runs when pytest starts, before any test module is imported: the real
HOME is photographed, then the process (and so every child it starts) gets a
temporary HOME with the Claude CLI's non-essential traffic off. At the end a
write under the real HOME fails the run. See ``tests/home_guard.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import home_guard

_guard = home_guard.SESSION = home_guard.HomeGuard(Path.home())
_home = Path(tempfile.mkdtemp(prefix="ahpd-test-home-"))
home_guard.isolate(os.environ, _home)
_guard.roots.append(_home)
_WRITES = pytest.StashKey[list[str]]()


@pytest.fixture(autouse=True, scope="session")
def _session_temp_is_ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    _guard.roots.append(tmp_path_factory.getbasetemp())
    yield


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    writes = _guard.writes()
    if writes:
        session.config.stash[_WRITES] = writes
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    writes = terminalreporter.config.stash.get(_WRITES, [])
    if writes:
        terminalreporter.section("the suite wrote under the real HOME", red=True)
        for path in writes:
            terminalreporter.write_line(path)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_home, ignore_errors=True)
