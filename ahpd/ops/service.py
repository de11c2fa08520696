"""Running ahpd as a systemd *user* service: write, remove and inspect its unit.

A user unit (``~/.config/systemd/user/ahpd.service``) runs ahpd as the user,
with their home, token and agents, started at login, restarted on a crash and
logged to the journal, with no root needed. ``Type=notify`` makes systemd wait
for the daemon's ``READY=1`` (see ``sdnotify``), so "started" means listening.

``ExecStart`` names this very ahpd by absolute path, because a user manager's
PATH is not the shell's (a virtualenv's ``bin`` is rarely on it). We prefer the
executable that is running now (``sys.argv[0]`` when it is an ``ahpd``
program), then ``ahpd`` on PATH, then ``python -m ahpd`` with this interpreter.

systemctl is optional: it may be absent (containers) or have no user bus (an
SSH session without lingering). Every systemctl step is best effort and its
outcome comes back as a line for the user, never as an exception; the unit
file is written either way. Functions return those lines; the caller prints.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ahpd.ports.atomic import write_atomic

UNIT_NAME = "ahpd.service"
SERVICE = "ahpd"
SYSTEMCTL_TIMEOUT = 30.0


def user_unit_dir() -> Path:
    """``$XDG_CONFIG_HOME/systemd/user``, else ``~/.config/systemd/user``."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".config"
    return root / "systemd" / "user"


def ahpd_command() -> list[str]:
    """The absolute command that runs this ahpd (see the module docstring for the order)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 and os.path.basename(argv0).startswith("ahpd"):
        p = Path(argv0).resolve()
        if p.is_file() and os.access(p, os.X_OK) and p.suffix != ".py":
            return [str(p)]
    found = shutil.which("ahpd")
    if found:
        return [str(Path(found).resolve())]
    # Not resolved: a virtualenv's python is a symlink whose target knows no venv.
    return [os.path.abspath(sys.executable), "-m", "ahpd"]


def _quote(arg: str) -> str:
    """One ExecStart word: systemd expands ``%`` specifiers and ``$`` variables even in quotes."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if arg and not any(c.isspace() or c in "\"'\\;" for c in arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unit_text(exec_path: str | Sequence[str], args: Sequence[str] = ()) -> str:
    """The unit file for ``<exec_path> run <args...>``; ``exec_path`` may be a command list."""
    command = [exec_path] if isinstance(exec_path, str) else list(exec_path)
    if not os.path.isabs(command[0]):
        raise ValueError(f"ExecStart needs an absolute path, got {command[0]!r}")
    exec_start = " ".join(_quote(a) for a in [*command, "run", *args])
    return (
        "# Written by `ahpd service install`; `ahpd service uninstall` removes it.\n"
        "[Unit]\n"
        "Description=ahpd: hosts AI coding agents behind the Agent Host Protocol\n"
        "Documentation=man:ahpd(1)\n"
        "\n"
        "[Service]\n"
        "Type=notify\n"
        f"ExecStart={exec_start}\n"
        "Restart=on-failure\n"
        "RestartSec=2\n"
        # room for --max-connections' default (1024, half the soft limit) and the agents
        "LimitNOFILE=8192\n"
        "Environment=PYTHONUNBUFFERED=1\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def _systemctl(*args: str) -> tuple[int, str] | None:
    """Run ``systemctl --user ARGS``: None if absent, else (exit status, output on one line)."""
    exe = shutil.which("systemctl")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, "--user", *args],
            capture_output=True,
            text=True,
            timeout=SYSTEMCTL_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    return done.returncode, " ".join((done.stdout + " " + done.stderr).split())


def _step(lines: list[str], *args: str) -> None:
    """Run one best-effort systemctl step and add a line saying how it went."""
    cmd = "systemctl --user " + " ".join(args)
    result = _systemctl(*args)
    if result is None:
        lines.append(f"systemctl not found on PATH; skipped `{cmd}`")
        return
    code, output = result
    if code == 0:
        lines.append(f"ran `{cmd}`" + (f": {output}" if output else ""))
    else:
        lines.append(f"`{cmd}` failed (exit status {code}): {output or 'no output'}")


def install(
    unit_dir: str | os.PathLike[str] | None = None,
    exec_path: str | Sequence[str] | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """Write the unit (atomically), reload systemd if it can, and say what to run next."""
    directory = Path(unit_dir) if unit_dir is not None else user_unit_dir()
    path = directory / UNIT_NAME
    text = unit_text(exec_path if exec_path is not None else ahpd_command(), extra_args)
    existed = path.exists()
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode("utf-8"), mode=0o644)
    lines = [f"{'updated' if existed else 'wrote'} {path}"]
    _step(lines, "daemon-reload")
    lines.append(f"next: systemctl --user enable --now {SERVICE}")
    if existed:
        lines.append(f"(already running? apply the new unit with: systemctl --user restart {SERVICE})")
    return lines


def uninstall(unit_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Stop and disable the service (best effort), remove its unit, reload systemd."""
    directory = Path(unit_dir) if unit_dir is not None else user_unit_dir()
    path = directory / UNIT_NAME
    lines: list[str] = []
    if path.exists():
        _step(lines, "disable", "--now", SERVICE)  # needs the unit file, so before removing it
        path.unlink()
        lines.append(f"removed {path}")
        _step(lines, "daemon-reload")
    else:
        lines.append(f"no unit to remove at {path}")
    return lines


def status(unit_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Whether the unit file exists and what systemd says of it (when systemctl exists)."""
    directory = Path(unit_dir) if unit_dir is not None else user_unit_dir()
    path = directory / UNIT_NAME
    lines = [f"unit file: {path} ({'present' if path.exists() else 'absent'})"]
    for verb in ("is-enabled", "is-active"):
        result = _systemctl(verb, SERVICE)
        if result is None:
            lines.append("systemctl not found on PATH; cannot ask systemd")
            break
        code, output = result
        lines.append(f"systemctl --user {verb} {SERVICE}: {output or f'exit status {code}'}")
    return lines
