"""``ahpd doctor`` through the real CLI: a healthy set-up passes every check
(exit 0), a broken one says what is wrong and how to fix it (exit 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import trio

from .helpers import running_daemon, wire_clean

CHECK, CROSS = "✓", "✗"


def doctor(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("XDG_")
        and k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CONFIG_DIR")
    }
    base.update(HOME=str(home), PYTHONIOENCODING="utf-8", **env)
    return subprocess.run(
        [sys.executable, "-m", "ahpd", "doctor", *argv], capture_output=True, text=True, timeout=180, env=base
    )


def by_name(stdout: str) -> dict[str, str]:
    lines = {}
    for line in stdout.splitlines()[:-1]:
        mark, rest = line.split(" ", 1)
        assert mark in (CHECK, CROSS), line
        lines[rest.split(":", 1)[0]] = line
    return lines


async def test_a_healthy_set_up_passes_every_check(tmp_path: Path) -> None:
    """And the round trip speaks the protocol as written: a capture of the daemon's wire taken
    while doctor ran is ``wire-check`` clean (its ``ping`` once lacked its ``channel``)."""
    data = tmp_path / "d"
    capture = tmp_path / "wire.jsonl"
    home = {"HOME": str(tmp_path / "home")}
    async with running_daemon(data, "--sessions", "memory", "--wire", str(capture), env=home) as daemon:
        run = await trio.to_thread.run_sync(
            lambda: doctor(tmp_path, "--data-dir", str(data), ANTHROPIC_API_KEY="sk-ant-not-a-real-key")
        )
        assert run.returncode == 0, run.stdout + run.stderr
        checks = by_name(run.stdout)
        assert all(line.startswith(CHECK) for line in checks.values()), run.stdout
        assert run.stdout.strip().endswith("all checks passed")
        assert {
            "python",
            "packages",
            "data directory",
            "token",
            "daemon",
            "config",
            "agent demo",
            "open files",
            "round trip",
        } <= set(checks)
        assert f"pid {daemon.process.pid}" in checks["daemon"]
        assert "initialize and ping answered" in checks["round trip"]
        assert "speaks ACP" in checks["agent demo"]
        if "agent claude" in checks:  # the claude extra is installed
            assert "$ANTHROPIC_API_KEY is set" in checks["agent claude login"]
        token = daemon.url.split("tkn=")[1]
        assert token not in run.stdout and "sk-ant-not-a-real-key" not in run.stdout
        daemon.terminate()
        assert await daemon.wait() == 0
    assert '"ping"' in capture.read_text()
    wire_clean(capture)


def test_a_broken_set_up_names_each_problem_and_its_fix(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.mkdir(mode=0o700)
    (data / "token").write_text("leaked\n")
    (data / "token").chmod(0o644)
    run = doctor(
        tmp_path,
        "--data-dir",
        str(data),
        "--agent",
        "ghost=/no/such/agent",
        "--agent",
        "mute=sleep 120",
        "--timeout",
        "20",
    )
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    checks = by_name(run.stdout)
    failed = {name for name, line in checks.items() if line.startswith(CROSS)}
    assert {"token", "daemon", "agent ghost", "agent mute", "round trip"} <= failed
    assert {"python", "packages", "data directory", "agent demo", "open files"}.isdisjoint(failed)
    for name in failed:
        assert " — fix: " in checks[name], checks[name]
    assert "readable by others" in checks["token"] and f"delete {data / 'token'}" in checks["token"]
    assert "`ahpd run --data-dir" in checks["daemon"]
    assert "'/no/such/agent' is not found" in checks["agent ghost"]
    assert "did not answer ACP initialize" in checks["agent mute"]
    assert run.stdout.strip().endswith("of the checks failed")


def test_an_agent_that_exits_before_reading_its_stdin_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    """Writing ``initialize`` to an agent that has already exited fails with a broken pipe or
    not, depending on who wins the race; either way it is that agent's ✗ line, and the checks
    after it still run. Twenty such agents in one run make losing the race all but certain.
    An agent answering ``initialize`` with something other than an object is a finding too."""
    quits = tmp_path / "quits"
    quits.write_text("#!/bin/sh\nexit 0\n")
    quits.chmod(0o755)
    agents = [f"false{i}=/bin/false" for i in range(10)] + [f"quits{i}={quits}" for i in range(10)]
    odd = tmp_path / "odd"  # answers initialize with something that is not an object
    odd.write_text('#!/bin/sh\nread line\necho \'{"jsonrpc": "2.0", "id": 0, "result": [1]}\'\n')
    odd.chmod(0o755)
    run = doctor(
        tmp_path,
        "--data-dir",
        str(tmp_path / "d"),
        "--timeout",
        "20",
        "--agent",
        f"odd={odd}",
        *(arg for agent in agents for arg in ("--agent", agent)),
    )
    assert run.returncode == 1
    assert "unexpected" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    checks = by_name(run.stdout)
    for agent in agents:
        name, command = agent.split("=")
        line = checks[f"agent {name}"]
        assert line.startswith(f"{CROSS} agent {name}: {command}: it exited without answering initialize"), line
        assert " — fix: " in line
    assert checks["agent odd"].startswith(f"{CROSS} agent odd: {odd}: initialize answered '[1]', not an object")
    assert {"open files", "round trip"} <= set(checks)
    assert checks["open files"].startswith(CHECK)


def test_an_agent_that_exits_at_once_is_its_line_in_every_one_of_twenty_runs(tmp_path: Path) -> None:
    """Whether doctor's ``initialize`` reaches an agent that quits without reading its stdin is a
    race, lost in some runs and not others: each of twenty runs must print that agent's ✗ line and
    go on to the last check. A missing agent is said once, on its own marked line, never as a
    warning among the check lines (stderr stays empty)."""
    quits = tmp_path / "quits"
    quits.write_text("#!/bin/sh\nexit 0\n")
    quits.chmod(0o755)
    argv = ("--data-dir", str(tmp_path / "d"), "--agent", f"quits={quits}", "--agent", "ghost=/no/such/agent")
    # Four at a time: the race is the agent's, not the suite's, and twenty in a row cost 90 s.
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda _: doctor(tmp_path, *argv), range(20)))
    for attempt, run in enumerate(runs):
        assert run.returncode == 1, (attempt, run.stdout, run.stderr)
        assert run.stderr == "", (attempt, run.stderr)
        checks = by_name(run.stdout)
        assert checks["agent quits"].startswith(f"{CROSS} agent quits: {quits}: it exited without answering"), (
            attempt,
            run.stdout,
        )
        assert checks["agent ghost"].startswith(f"{CROSS} agent ghost: command '/no/such/agent' is not found")
        assert checks["config"].startswith(CHECK), checks["config"]
        assert checks["round trip"].startswith(CROSS)  # the last check ran
        assert run.stdout.count("/no/such/agent") == 1


def test_a_config_key_ahpd_does_not_know_is_the_configs_finding(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[agent.typo]\ncommand = "x"\n')
    run = doctor(tmp_path, "--data-dir", str(tmp_path / "d"), "--config", str(config))
    assert run.returncode == 1 and run.stderr == "", run.stderr
    line = by_name(run.stdout)["config"]
    assert line.startswith(f"{CROSS} config: {config}; agent is not a key ahpd knows"), line
    assert f" — fix: correct or remove it in {config}" in line
