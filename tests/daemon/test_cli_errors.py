"""Everyday mistakes, through the real ``ahpd`` in a subprocess: one line on
stderr, a distinct exit status (man/ahpd.1, EXIT STATUS), never a traceback
unless ``--debug`` asks for one."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from ahpd import __version__
from ahpd.cli_errors import (
    EXIT_ADDRESS_IN_USE,
    EXIT_AGENT,
    EXIT_ALREADY_RUNNING,
    EXIT_DATA_DIR,
    EXIT_INTERRUPTED,
    EXIT_NOT_RUNNING,
    EXIT_REFUSED,
    EXIT_USAGE,
)

from .helpers import daemon_in_process, rpc, running_daemon


def env_for(tmp_path: Path) -> dict[str, str]:
    """A home of the test's own: no user config, no Claude login, no XDG dirs."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(HOME=str(home), CLAUDE_CONFIG_DIR=str(home / ".claude"))
    return env


def ahpd(tmp_path: Path, *argv: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ahpd", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env_for(tmp_path),
        **kwargs,
    )


def one_line(run: subprocess.CompletedProcess[str]) -> str:
    """The error, which must be the only thing on stderr."""
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


def test_a_port_outside_the_range_is_refused_not_wrapped(tmp_path) -> None:
    run = ahpd(tmp_path, "run", "--port", "99999", "--data-dir", str(tmp_path / "d"))
    assert run.returncode == EXIT_USAGE
    assert "99999 is outside 0-65535" in one_line(run)
    assert not (tmp_path / "d").exists()


def test_a_port_in_use_says_so_with_the_hint(tmp_path) -> None:
    """At the default log level too: a daemon that never served logs no "stopped" before the line."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = ahpd(tmp_path, "run", "--port", str(port), "--data-dir", str(tmp_path / "d"))
    assert run.returncode == EXIT_ADDRESS_IN_USE
    line = one_line(run)
    assert f"127.0.0.1:{port}" in line and "in use" in line and "--port 0" in line


def _taken_after_a_free_one() -> tuple[socket.socket, int]:
    """A listening socket on some port Q whose port Q - 1 was free a moment ago."""
    for _ in range(50):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", taken.getsockname()[1] - 1))
            except OSError:
                taken.close()
                continue
        return taken, taken.getsockname()[1]
    raise AssertionError("no free port below a taken one in 50 tries")


def test_a_web_console_port_asked_for_and_in_use_refuses_with_the_hint(tmp_path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = ahpd(tmp_path, "run", "--port", "0", "--web-port", str(port), "--data-dir", str(tmp_path / "d"))
    assert run.returncode == EXIT_ADDRESS_IN_USE
    assert "Traceback" not in run.stderr
    line = run.stderr.strip().splitlines()[-1]  # after the WebSocket's own "listening on"
    assert (
        line.startswith("ahpd: cannot listen on")
        and f"web console's {port}" in line
        and "in use" in line
        and "--web-port 0" in line
    )


async def test_the_default_web_console_port_in_use_gives_way_to_a_free_one(tmp_path) -> None:
    taken, web = _taken_after_a_free_one()
    with taken, (tmp_path / "stderr").open("wb") as stderr:
        args = ("--sessions", "memory", "--port", str(web - 1))
        async with running_daemon(tmp_path / "d", *args, stderr=stderr) as daemon:
            assert daemon.url.startswith(f"ws://127.0.0.1:{web - 1}/")
            page = urlsplit(daemon.web_url)
            assert page.port not in (None, web, web - 1)
            stream = await trio.open_tcp_stream("127.0.0.1", page.port)
            await stream.send_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert (await stream.receive_some(64)).startswith(b"HTTP/1.1 ")
            await stream.aclose()
            assert f"the web console's default port {web} is in use" in (tmp_path / "stderr").read_text()
            daemon.terminate()
            assert await daemon.wait() == 0


def test_an_unusable_data_dir(tmp_path) -> None:
    (tmp_path / "file").write_text("not a directory")
    bad = tmp_path / "file" / "sub"
    run = ahpd(tmp_path, "run", "--port", "0", "--data-dir", str(bad))
    assert run.returncode == EXIT_DATA_DIR
    assert one_line(run) == f"ahpd: cannot use data directory {bad}: Not a directory; choose another with --data-dir"
    debug = ahpd(tmp_path, "--debug", "run", "--port", "0", "--data-dir", str(bad))
    assert debug.returncode == EXIT_DATA_DIR
    assert "Traceback" in debug.stderr and debug.stderr.strip().endswith("choose another with --data-dir")


def test_a_shared_data_dir_is_said_with_one_hint(tmp_path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    for argv in (("run", "--port", "0"), ("users", "list")):
        run = ahpd(tmp_path, *argv, "--data-dir", str(shared))
        assert run.returncode == EXIT_DATA_DIR
        assert one_line(run) == (
            f"ahpd: cannot use data directory {shared}: shared with others (mode 1777, owner uid {os.getuid()}); "
            "choose another with --data-dir"
        )


def test_chat_with_a_url_that_is_not_a_websocket_is_a_usage_error(tmp_path) -> None:
    for url, what in (
        ("http://127.0.0.1:8765/?tkn=secret", "is not a ws:// or wss:// address"),
        ("127.0.0.1:8765", "is not a ws:// or wss:// address"),
        ("ws:///?tkn=secret", "names no host"),
    ):
        run = ahpd(tmp_path, "chat", "--url", url, "hello")
        assert run.returncode == EXIT_USAGE, run.stderr
        line = one_line(run)
        assert f"--url {url.split('?')[0]} {what}" in line and "ahpd status" in line
        assert "secret" not in run.stderr + run.stdout


async def test_a_second_daemon_on_the_same_data_dir_names_the_first(tmp_path) -> None:
    import trio

    data = tmp_path / "d"
    async with running_daemon(data, "--sessions", "memory", env={"HOME": str(tmp_path)}) as daemon:
        run = await trio.to_thread.run_sync(lambda: ahpd(tmp_path, "run", "--port", "0", "--data-dir", str(data)))
        assert run.returncode == EXIT_ALREADY_RUNNING
        line = one_line(run)
        assert f"pid {daemon.process.pid}" in line and str(data) in line
        # The first one is untouched: its record and its answers.
        assert json.loads((data / "ahpd.json").read_text())["pid"] == daemon.process.pid
        async with rpc(daemon.url) as client:
            assert "result" in await client.call("ping")
        daemon.terminate()
        assert await daemon.wait() == 0


def test_ctrl_c_during_start_up(tmp_path) -> None:
    """The daemon is held at reading its config (a FIFO nobody writes) and
    interrupted there, before it could be ready."""
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    process = subprocess.Popen(
        [sys.executable, "-m", "ahpd", "run", "--port", "0", "--data-dir", str(tmp_path / "d"), "--config", str(fifo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(tmp_path),
    )
    try:
        # A hang guard only, never a pace: each wait below is for the daemon's
        # next step, and under load its start-up alone has taken most of a minute.
        deadline = time.monotonic() + 240
        while True:  # opening the writing end succeeds once the daemon has opened it for reading
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        # Then it reads, and blocks there. A SIGINT sent before the read has begun
        # (between open() returning and read() entering the kernel) is taken by
        # Python's handler with nothing to interrupt, and the read then blocks for
        # good: CPython's race, not the daemon's, which the signal must not hit.
        while "pipe_read" not in Path(f"/proc/{process.pid}/wchan").read_text():
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        # On a loaded machine that read can be seen a step late; while the
        # daemon still blocks in it, ^C is pressed again, as a person would.
        while True:
            process.send_signal(signal.SIGINT)
            try:
                out, err = process.communicate(timeout=5)
                break
            except subprocess.TimeoutExpired:
                assert time.monotonic() < deadline, "SIGINT during the config's read did not end the daemon"
                while process.poll() is None and "pipe_read" not in Path(f"/proc/{process.pid}/wchan").read_text():
                    time.sleep(0.01)
        os.close(writer)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == EXIT_INTERRUPTED
    assert out == "" and "Traceback" not in err
    assert err.strip().splitlines() == ["ahpd: interrupted"]


def _shared_objects(pid: int) -> list[str]:
    """The shared libraries ``pid`` has mapped, in the order of their addresses."""
    found: list[str] = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if (path.endswith(".so") or ".so." in path) and path not in found:
            found.append(path)
    return found


def test_ctrl_c_while_the_command_line_loads(tmp_path) -> None:
    """Ctrl-C at each step of loading ``ahpd run`` (its modules, then the daemon's) is one line
    and status 130, never a ``KeyboardInterrupt`` traceback from the module being imported.

    A step is a new C extension mapped into the process: trio's ``_socket`` first, when the
    command line itself is still being imported, then every third one until the daemon is
    ready (a Ctrl-C after that is an ordinary stop, status 0)."""
    interrupted = 0
    for step in range(0, 60, 3):
        process = subprocess.Popen(
            [sys.executable, "-m", "ahpd", "run", "--port", "0", "--data-dir", str(tmp_path / f"d{step}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_for(tmp_path),
        )
        try:
            deadline = time.monotonic() + 60  # a hang guard; each wait is for the process's next library
            baseline: list[str] | None = None
            while process.poll() is None:
                # Its ready line (or its end) ends the wait; otherwise look again after 5 ms.
                if select.select([process.stdout], [], [], 0.005)[0]:
                    break
                mapped = _shared_objects(process.pid)
                if baseline is None:
                    if not any("/_socket." in path for path in mapped):
                        continue
                    baseline = mapped
                if len(mapped) - len(baseline) >= step:
                    break
                assert time.monotonic() < deadline, f"step {step}: no more libraries load: {mapped[-3:]}"
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert "Traceback" not in err, (step, err)
        if out.startswith("ahpd ready:"):  # it was ready first: an ordinary stop
            assert process.returncode == 0, (step, err)
            break
        assert process.returncode == EXIT_INTERRUPTED, (step, process.returncode, err)
        assert err.strip().splitlines()[-1].startswith("ahpd: interrupted"), (step, err)
        interrupted += 1
    assert interrupted >= 2


def test_unknown_config_keys_and_a_missing_agent_command_are_named(tmp_path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('colour = "blue"\n[agents.ok]\ncommand = "true"\ncomand = "typo"\n')
    run = ahpd(
        tmp_path,
        "stdio",
        "--data-dir",
        str(tmp_path / "d"),
        "--config",
        str(config),
        "--agent",
        "ghost=/no/such/agent --flag",
        "--log-level",
        "warning",
        input="",
    )
    assert run.returncode == 0 and "Traceback" not in run.stderr
    assert "config: colour is not a key ahpd knows; ignored" in run.stderr
    assert "config: [agents.ok] comand is not a key ahpd knows; ignored" in run.stderr
    assert "agent ghost: command '/no/such/agent' is not found or not executable" in run.stderr
    assert "agent ok:" not in run.stderr


def test_log_level_debug_shows_ahpds_own_lines(tmp_path) -> None:
    argv = ["stdio", "--data-dir", str(tmp_path / "d"), "--sessions", "memory"]
    debug = ahpd(tmp_path, *argv, "--log-level", "debug", input="")
    assert debug.returncode == 0
    ours = [line for line in debug.stderr.splitlines() if " DEBUG ahpd" in line]
    assert any("agents: demo" in line for line in ours), debug.stderr
    assert [line for line in debug.stderr.splitlines() if " DEBUG " in line] == ours  # no library chatter
    info = ahpd(tmp_path, *argv, input="")
    assert " DEBUG " not in info.stderr


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["run"],
        ["stdio"],
        ["chat"],
        ["status"],
        ["stop"],
        ["service"],
        ["service", "install"],
        ["schema"],
        ["wire-check"],
        ["doctor"],
    ],
)
def test_version_on_every_command(tmp_path, command) -> None:
    for flag in ("-V", "--version"):
        run = ahpd(tmp_path, *command, flag, timeout=60)
        assert (run.returncode, run.stdout.strip()) == (0, f"ahpd {__version__}")


def test_a_usage_mistake_is_one_line(tmp_path) -> None:
    run = ahpd(tmp_path, "run", "--sessions", "disk")
    assert run.returncode == EXIT_USAGE
    assert "invalid choice: 'disk'" in one_line(run) and "ahpd run --help" in run.stderr


# -- ahpd chat --------------------------------------------------------------------------


def test_chat_without_a_daemon_or_with_a_bad_cwd(tmp_path) -> None:
    run = ahpd(tmp_path, "chat", "--data-dir", str(tmp_path / "nothing"), "hello")
    assert run.returncode == EXIT_NOT_RUNNING
    assert "no daemon runs with data directory" in one_line(run) and "ahpd run" in run.stderr
    with socket.socket() as s:  # a port with nobody behind it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = ahpd(tmp_path, "chat", "--url", f"ws://127.0.0.1:{port}/?tkn=secret", "hello")
    assert run.returncode == EXIT_NOT_RUNNING
    line = one_line(run)
    assert f"cannot connect to ws://127.0.0.1:{port}/" in line and "secret" not in line
    run = ahpd(tmp_path, "chat", "--cwd", str(tmp_path / "missing"), "hello")
    assert run.returncode == EXIT_USAGE
    assert "is not a folder" in one_line(run)


async def test_chat_token_provider_and_agent_failures(tmp_path) -> None:
    import trio

    data = tmp_path / "d"
    work = tmp_path / "work"
    work.mkdir()

    def chat(*argv: str) -> subprocess.CompletedProcess[str]:
        return ahpd(tmp_path, "chat", "--data-dir", str(data), "--cwd", str(work), "--yes", *argv, "hello")

    quits = tmp_path / "quits"  # starts, then exits before answering ACP's initialize
    quits.write_text("#!/bin/sh\nexit 0\n")
    quits.chmod(0o755)
    async with daemon_in_process(
        data,
        "--sessions",
        "memory",
        "--agent",
        "ghost=/no/such/agent",
        "--agent",
        f"quits={quits}",
        env={"HOME": str(tmp_path)},
    ) as daemon:
        bare = daemon.url.split("?")[0]
        run = await trio.to_thread.run_sync(chat, "--url", bare + "?tkn=wrong")
        assert run.returncode == EXIT_REFUSED
        line = one_line(run)
        assert "refused the token" in line and "wrong" not in line

        run = await trio.to_thread.run_sync(chat, "--provider", "nope")
        assert run.returncode == EXIT_USAGE
        assert "no agent provider 'nope' here" in one_line(run) and "demo" in run.stderr

        run = await trio.to_thread.run_sync(chat, "--provider", "ghost")
        assert run.returncode == EXIT_AGENT
        assert "the ghost agent did not start" in one_line(run)

        # Agents start at a chat's first turn: one that exits at once is the same status and line.
        run = await trio.to_thread.run_sync(chat, "--provider", "quits")
        assert run.returncode == EXIT_AGENT, run.stdout + run.stderr
        assert one_line(run) == "ahpd: the quits agent did not start; check it with `ahpd doctor`"
        assert "the quits agent did not start: the agent process exited with status 0" in run.stdout

        # A session the daemon does not have: the command line's mistake, said on stderr.
        run = await trio.to_thread.run_sync(chat, "--session", "ahp-session:/no-such-session")
        assert run.returncode == EXIT_USAGE and run.stdout == "", run.stdout
        line = one_line(run)
        assert "--session ahp-session:/no-such-session: no such session" in line and "--list" in line

        # The agent whose command is missing is offered, but not as the default.
        async with rpc(daemon.url) as client:
            result = await client.initialize()
            agents = [a["provider"] for a in result["snapshots"][0]["state"]["agents"]]
            assert "ghost" in agents and agents[0] != "ghost"
            uri = f"ahp-session:/{uuid.uuid4()}"
            reply = await client.call(
                "createSession", {"channel": uri, "workingDirectories": [work.as_uri()]}, timeout=60
            )
            assert "result" in reply, reply
            state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert state["provider"] == agents[0]  # quits, whose command is there
        daemon.terminate()
        assert await daemon.wait() == 0
