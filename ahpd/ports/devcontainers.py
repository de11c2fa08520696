"""The Dev Container CLI and the container engine under it, as child processes.

A dev container is whatever ``devcontainer up --workspace-folder <folder>``
makes of the folder's ``devcontainer.json``: the CLI builds or reuses the
container and prints, as the last JSON line on its stdout, an outcome object
- ``{"outcome": "success", "containerId", "remoteUser",
"remoteWorkspaceFolder"}`` or ``{"outcome": "error", "message",
"description"}`` - while its log goes to stderr. ``devcontainer exec
--workspace-folder <folder> <command>`` runs a command in that container, in
its workspace folder, as its remote user, with the file's environment. The
container engine (docker, or podman, handed to the CLI as ``--docker-path``
so both agree on one) stops and removes a container by id; a container the
CLI made carries its folder as the label ``devcontainer.local_folder``, which
is how one made before this process started is found again.

The programs are looked up on ``PATH`` at each use, so a CLI installed while
the daemon runs is found without a restart. Nothing here blocks: every
program runs as a trio child process, read as it writes.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

CLI = "devcontainer"
ENGINES = ("docker", "podman")
#: The label the CLI puts its folder under on every container it makes.
FOLDER_LABEL = "devcontainer.local_folder"
#: The longest line read from a child; a longer one is cut there.
MAX_LINE = 64 * 2**20
#: How long a stopped child has to go before it is killed.
GRACE = 5.0


class CliError(Exception):
    """A program failed; the message says which, and why in its words."""


@dataclass(frozen=True)
class Tools:
    """The CLI and the engine found on ``PATH`` (None: not there)."""

    cli: str | None
    engine: str | None

    def missing(self) -> str | None:
        """Why a dev container cannot be served here, or None when it can."""
        if self.cli is None and self.engine is None:
            return "neither the devcontainer CLI nor a container engine (docker or podman) is on PATH"
        if self.cli is None:
            return "the devcontainer CLI is not on PATH (it is npm's @devcontainers/cli)"
        if self.engine is None:
            return "no container engine (docker or podman) is on PATH"
        return None


def tools() -> Tools:
    """What is on ``PATH`` now."""
    engine = next((found for name in ENGINES if (found := shutil.which(name))), None)
    return Tools(shutil.which(CLI), engine)


@dataclass(frozen=True)
class Up:
    """What ``devcontainer up`` made of a folder."""

    container_id: str
    remote_workspace_folder: str
    remote_user: str | None


def outcome(stdout: Sequence[str]) -> dict[str, Any] | None:
    """The CLI's outcome object: the last line of its stdout that is a JSON
    object naming an ``outcome`` (the CLI may print other lines first)."""
    for line in reversed(stdout):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("outcome"), str):
            return value
    return None


async def lines(stream: trio.abc.ReceiveStream, limit: int = MAX_LINE) -> AsyncIterator[bytes]:
    """The lines of ``stream`` without their ``\\n``, the last one even if it
    has none; a line past ``limit`` bytes is handed over cut at the limit and
    the rest of it skipped."""
    buffer = bytearray()
    skipping = False
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if not skipping:
                buffer += chunk[start:end]
                yield bytes(buffer[:limit])
            buffer.clear()
            skipping = False
            start = end + 1
        if not skipping:
            buffer += chunk[start:]
            if len(buffer) > limit:
                yield bytes(buffer[:limit])
                buffer.clear()
                skipping = True
    if buffer and not skipping:
        yield bytes(buffer)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


async def _open(argv: list[str], *, stdin: Any = subprocess.DEVNULL) -> trio.Process:
    try:
        return await trio.lowlevel.open_process(
            argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
    except OSError as exc:
        raise CliError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None


async def end(process: trio.Process) -> None:
    """Stop ``process`` and its group (TERM, then KILL after ``GRACE``) and reap it; shielded."""
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except OSError:
                process.terminate()
            with trio.move_on_after(GRACE):
                await process.wait()
            if process.returncode is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except OSError:
                    process.kill()
                await process.wait()


async def _run(argv: list[str], say: Callable[[str], object] | None = None) -> tuple[int, list[str], list[str]]:
    """Run ``argv`` to its end: its exit code and its stdout and stderr lines,
    each line also handed to ``say`` as it comes (with its newline)."""
    process = await _open(argv)
    out: list[str] = []
    err: list[str] = []

    async def read(stream: trio.abc.ReceiveStream, into: list[str]) -> None:
        async for line in lines(stream):
            text = _text(line)
            into.append(text)
            if say is not None:
                say(text + "\n")

    try:
        async with trio.open_nursery() as nursery:
            assert process.stdout is not None and process.stderr is not None
            nursery.start_soon(read, process.stdout, out)
            nursery.start_soon(read, process.stderr, err)
        code = await process.wait()
    finally:
        await end(process)
    return code, out, err


def _cli_args(found: Tools, *args: str) -> list[str]:
    assert found.cli is not None and found.engine is not None
    return [found.cli, *args[:1], "--docker-path", found.engine, *args[1:]]


async def up(found: Tools, folder: str, say: Callable[[str], object]) -> Up:
    """``devcontainer up`` for ``folder``: the container made or reused. Its
    command line and everything it prints go to ``say`` as they come."""
    argv = _cli_args(found, "up", "--workspace-folder", folder)
    say(f"$ {shlex.join(argv)}\n")
    code, out, err = await _run(argv, say)
    result = outcome(out)
    if result is None:
        said = next((line for line in reversed(err) if line.strip()), "") or "nothing"
        raise CliError(f"devcontainer up for {folder} ended (exit {code}) without an outcome; it last said: {said}")
    if result["outcome"] != "success":
        why = "; ".join(str(result[k]) for k in ("message", "description") if result.get(k))
        raise CliError(f"devcontainer up for {folder} failed: {why or result['outcome']}")
    container, remote = result.get("containerId"), result.get("remoteWorkspaceFolder")
    if not isinstance(container, str) or not container or not isinstance(remote, str) or not remote:
        raise CliError(f"devcontainer up for {folder} succeeded without a containerId and remoteWorkspaceFolder")
    user = result.get("remoteUser")
    return Up(container, remote, user if isinstance(user, str) else None)


async def run_in(found: Tools, folder: str, command: Sequence[str]) -> tuple[int, str]:
    """``devcontainer exec`` of ``command`` in ``folder``'s container, to its
    end: the exit code and what it said on stderr."""
    code, _, err = await _run(_cli_args(found, "exec", "--workspace-folder", folder, *command))
    return code, "\n".join(line for line in err if line.strip())


async def open_in(found: Tools, folder: str, command: Sequence[str]) -> trio.Process:
    """``devcontainer exec`` of ``command`` in ``folder``'s container, started
    with its stdin, stdout and stderr piped to this process."""
    return await _open(_cli_args(found, "exec", "--workspace-folder", folder, *command), stdin=subprocess.PIPE)


async def find(found: Tools, folder: str) -> list[str]:
    """The containers the CLI made for ``folder``, running or not, by its label."""
    assert found.engine is not None
    code, out, err = await _run([found.engine, "ps", "-aq", "--filter", f"label={FOLDER_LABEL}={folder}"])
    if code != 0:
        raise CliError(f"{found.engine} ps failed (exit {code}): {' '.join(err).strip()}")
    return [line.strip() for line in out if line.strip()]


async def change(found: Tools, container: str, operation: str) -> None:
    """``stop`` or ``rm`` (forced) the container ``container``; one that is
    already gone is not an error."""
    assert found.engine is not None and operation in ("stop", "rm")
    argv = [found.engine, operation, *(["--force"] if operation == "rm" else []), container]
    code, _, err = await _run(argv)
    said = " ".join(err).strip()
    if code != 0 and "no such container" not in said.lower():
        raise CliError(f"{found.engine} {operation} {container} failed (exit {code}): {said}")
