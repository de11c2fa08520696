"""The page's reducers against the host's, transition by transition.

Every reduction the reducer tests (``tests/state``) make on the channels the
console reduces (root, session, chat, terminal, changeset) is recorded
(state, action, the Python reducers' result) by running those tests with a
small plugin; then the page's own reducers (``reducers.js``), loaded in the
browser, reduce each recorded state and action, and each result must equal
the Python one. The recorded cases are the reducers' own edge cases: tool
calls in every status, input requests, pending messages, modifiedAt,
customizations, changeset errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import ROOT, Daemon
from .test_console import _open

PLUGIN = """
import copy, json, os, sys

RECORDS = []
FAMILIES = ("root", "session", "chat", "terminal", "changeset")


def pytest_collection_finish(session):
    helpers = sys.modules["state_helpers"]
    original = helpers.reduce

    def recording(channel, state, action):
        out = original(channel, state, action)
        if channel in FAMILIES:
            RECORDS.append([copy.deepcopy(state), copy.deepcopy(action), copy.deepcopy(out)])
        return out

    helpers.reduce = recording


def pytest_sessionfinish(session):
    with open(os.environ["AHPD_REDUCE_RECORD"], "w") as f:
        json.dump(RECORDS, f)
"""


def _recorded(tmp_path: Path) -> list[list[Any]]:
    (tmp_path / "record_reduce.py").write_text(PLUGIN)
    out = tmp_path / "records.json"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "AHPD_REDUCE_RECORD": str(out)}
    files = [f"tests/state/test_state_{name}.py" for name in ("chat", "session", "other_channels")]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "record_reduce", "-p", "no:cacheprovider", "-n", "0", "-q", *files],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_pages_reducers_agree_with_the_hosts(browser: Any, daemon: Daemon, tmp_path: Path) -> None:
    records = _recorded(tmp_path)
    types = {action["type"] for _, action, _ in records}
    print(f"{len(records)} reductions of {len(types)} action types")
    assert len(records) > 150 and len(types) > 50, (len(records), sorted(types))
    daemon.start("--port", "0", "--web-port", "0")
    page = _open(browser, daemon.web_url.split("?")[0])
    results = page.evaluate(
        """async (records) => {
             const { reduce } = await import("/reducers.js");
             return records.map(([state, action]) => {
               try { return reduce(state, action); } catch (err) { return { thrown: String(err) }; }
             });
           }""",
        records,
    )
    differ = [
        (action["type"], state, action, expected, got)
        for (state, action, expected), got in zip(records, results, strict=True)
        if got != expected
    ]
    assert not differ, "\n".join(f"{t}: {a}\n  python {e}\n  page   {g}" for t, _, a, e, g in differ[:5])
    page.context.close()
