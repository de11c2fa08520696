"""Every test run (``tests/`` and ``conformance/`` alike) happens away from HOME,
in parallel, and with one guard against a hang.

HOME: this runs when pytest starts, in the controller and in each xdist
worker, before any test module is imported: the real HOME is photographed,
then the process (and so every child it starts) gets a temporary HOME with
the Claude CLI's non-essential traffic off. At the end a write under the real
HOME fails the run: the controller, which runs last, compares too, and counts
a Claude project folder named after any worker's temporary HOME or any
pytest temporary folder as the suite's. See ``tests/home_guard.py``.

Parallel: ``pyproject.toml`` asks for ``-n auto``; how many workers that is
is decided here (``pytest_xdist_auto_num_workers``).

Bytecode: where ``PYTHONDONTWRITEBYTECODE`` is set, every process a test
starts (``ahpd run``, agents, probes, the CLI: hundreds of them) would compile
ahpd's sources anew, 40% of each start's CPU. The run keeps their bytecode in
a cache folder of its own under the temporary directory instead
(``PYTHONPYCACHEPREFIX``), so the tree is still not written to.

Hangs: an async test that runs longer than ``HANG_GUARD`` fails where it
waits. The tests' own waits have no clock of their own: each waits for the
event it needs, however long a loaded machine takes to bring it.
"""

from __future__ import annotations

import functools
import getpass
import inspect
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import trio

from tests import home_guard

_home = Path(tempfile.mkdtemp(prefix=home_guard.TEMP_HOME_PREFIX))


def _guarding(real_home: Path) -> home_guard.HomeGuard:
    """A guard of ``real_home`` (photographed now), which knows this run's own folders:
    every process's temporary HOME and pytest's temporary folders, the workers' among them."""
    guard = home_guard.SESSION = home_guard.HomeGuard(real_home)
    guard.roots += [
        _home,
        Path(tempfile.gettempdir()) / home_guard.TEMP_HOME_PREFIX,
        Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}",
    ]
    return guard


def _cached_bytecode(environ: MutableMapping[str, str]) -> None:
    if environ.pop("PYTHONDONTWRITEBYTECODE", None) and not environ.get("PYTHONPYCACHEPREFIX"):
        environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), f"ahpd-test-pycache-{getpass.getuser()}")


_cached_bytecode(os.environ)
_guard = _guarding(Path.home())
home_guard.isolate(os.environ, _home)
_WRITES = pytest.StashKey[list[str]]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """An xdist worker starts with HOME already this process's temporary one:
    it is told which HOME is the real one, to guard that."""
    node.workerinput["ahpd_real_home"] = str(_guard.real_home)


def pytest_configure(config: pytest.Config) -> None:
    global _guard
    real = getattr(config, "workerinput", {}).get("ahpd_real_home")
    if real is not None:
        _guard = _guarding(Path(real))


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


#: How long an async test may run before it counts as hung (seconds of the
#: trio clock). The tests' own waits wait for the event they need, however
#: long a loaded machine takes to bring it; this is the one guard against a
#: wait for something that never comes, so that it fails with the place it
#: hung rather than holding a worker until CI's limit.
HANG_GUARD = 600


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    test = getattr(item, "obj", None)
    if (
        item.get_closest_marker("trio") is not None
        and inspect.iscoroutinefunction(test)
        and not hasattr(test, "hypothesis")
    ):
        item.obj = _guarded(test)  # type: ignore[attr-defined] - pytest-trio runs what is here
    yield


def _guarded(test: Callable[..., Awaitable[object]]) -> Callable[..., Awaitable[object]]:
    @functools.wraps(test)
    async def guarded(**kwargs: object) -> object:
        if any(isinstance(value, trio.abc.Clock) for value in kwargs.values()):
            return await test(**kwargs)  # a mock clock jumps: its test's time is not the machine's
        with trio.fail_after(HANG_GUARD):
            return await test(**kwargs)

    return guarded


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto``: one more than the processors. Much of a test's
    time is spent waiting for a subprocess (an agent, a CLI, git) to start
    and answer, and a worker waiting leaves its processor to another."""
    return (os.cpu_count() or 1) + 1
