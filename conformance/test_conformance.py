"""Drive a real daemon through every command and action served so far,
capture the wire with ``ahpd run --wire``, and check the capture.

The capture is then normalised (timestamps, generated ids, paths) and
compared with ``conformance/fixtures/wire.jsonl``, so a change in behaviour
shows as a diff in review. ``AHPD_UPDATE_FIXTURES=1`` writes it anew.
"""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

from ahpd.backends.registry import build_backends
from ahpd.wire import Checker, read_frames
from ahpd.wire.cli import wire_check
from tests.daemon.helpers import running_daemon

from .drive import drive
from .normalize import normalize

FIXTURE = Path(__file__).parent / "fixtures" / "wire.jsonl"


async def test_the_wire_of_every_command_and_action(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "main.py").write_text("print('hi')\n")
    capture = tmp_path / "wire.jsonl"
    data = tmp_path / "d"
    async with running_daemon(
        data,
        "--sessions",
        "memory",
        "--wire",
        str(capture),
        "--config",
        str(slow_demo_config(tmp_path, data)),
        env=demo_only(tmp_path),
    ) as daemon:
        seen = await drive(daemon.url, work)
        daemon.terminate()
        assert await daemon.wait() == 0
    assert stat.S_IMODE(capture.stat().st_mode) == 0o600
    assert len(seen["refusals"]) == 1 and seen["bob refusals"] == []
    assert seen["reconnect"] == "replay"
    assert seen["turn-3 endings"] == ["chat/turnCancelled"]  # cancelled mid-turn, never completed

    out = io.StringIO()
    assert wire_check([str(capture)], out=out) == 0, out.getvalue()
    checker = Checker()
    for frame in read_frames([str(capture)]):
        checker.feed(frame)
    assert checker.finish() == []
    # Every channel a client still watched was compared with a fresh snapshot.
    assert checker.compared >= 5

    text = normalize(capture.read_text(), tmp_path)
    if os.environ.get("AHPD_UPDATE_FIXTURES") or not FIXTURE.exists():
        FIXTURE.parent.mkdir(exist_ok=True)
        FIXTURE.write_text(text)
    expected = FIXTURE.read_text()
    if text != expected:
        diff = _first_difference(expected, text)
        raise AssertionError(f"the wire changed ({diff}); review it, then run with AHPD_UPDATE_FIXTURES=1")


def demo_only(tmp_path: Path) -> dict[str, str]:
    """An environment in which the daemon offers the demo agent alone.

    Which agents a daemon offers depends on what is installed (Claude Code
    comes with an extra), and one that probes its agent at boot says so on the
    wire whenever the probe answers. The fixture is about the protocol, so the
    optional backends are hidden: their SDK fails to import.
    """
    hide = tmp_path / "hide"
    (hide / "claude_agent_sdk").mkdir(parents=True)
    (hide / "claude_agent_sdk" / "__init__.py").write_text('raise ImportError("hidden for the conformance run")\n')
    # The boot probe's commands are shown under HOME: one inside tmp_path is normalised.
    home = tmp_path / "home"
    home.mkdir()
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(hide), os.environ.get("PYTHONPATH")])), "HOME": str(home)}


def slow_demo_config(tmp_path: Path, data: Path) -> Path:
    """A config file offering the built-in demo agent as it is, but for the
    pause before each chunk of a ``slow`` reply: an hour. The scenario cancels
    a slow turn once the agent has said it will reply slowly, so the cancel
    lands while the turn is surely running (whatever the machine's load) and
    the capture holds the same frames every run."""
    demo = build_backends({}, [], data)["demo"]
    args = [*demo.args, "--slow-delay", "3600"]
    path = tmp_path / "config.toml"
    path.write_text(
        "[agents.demo]\n"
        f"command = {json.dumps(demo.command)}\n"
        f"args = {json.dumps(args)}\n"
        f"displayName = {json.dumps(demo.display_name)}\n"
        f"description = {json.dumps(demo.description)}\n"
    )
    return path


def test_the_committed_capture_is_clean() -> None:
    out = io.StringIO()
    assert wire_check([str(FIXTURE)], out=out) == 0, out.getvalue()


def _first_difference(expected: str, actual: str) -> str:
    old, new = expected.splitlines(), actual.splitlines()
    for number, (a, b) in enumerate(zip(old, new, strict=False), 1):
        if a != b:
            return f"line {number}: was {json.loads(a).get('method')} now {json.loads(b).get('method')}: {b[:300]}"
    return f"{len(old)} lines before, {len(new)} now"
