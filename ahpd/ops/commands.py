"""The ``ahpd status``, ``ahpd stop`` and ``ahpd service`` subcommands.

``ahpd/cli.py`` calls ``add_*_parser(subparsers)``; each sets ``func`` to a
function of the parsed arguments returning the exit status. Exit statuses
follow the LSB init-script convention where one exists: 0 done, 1 failed,
3 not running.

They find the daemon through its runtime record (``ahpd.json``) and ask it for
live counts over the control socket, so they work without a token and without
knowing the port.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ahpd.ops import service
from ahpd.ops.control import query_status
from ahpd.ops.paths import default_data_dir
from ahpd.ops.runtime import pid_alive, pid_is_ahpd, read_runtime, runtime_path

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_NOT_RUNNING = 3


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir(),
        metavar="DIR",
        help="ahpd's state directory, holding its token, ahpd.json and control socket (default: %(default)s)",
    )


def format_duration(seconds: float) -> str:
    """A short human duration: ``45s``, ``3m12s``, ``2h05m``, ``3d4h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def _uptime_seconds(record: dict[str, Any]) -> float | None:
    try:
        started = dt.datetime.fromisoformat(record["startedAt"])
    except (KeyError, TypeError, ValueError):
        return None
    if started.tzinfo is None:
        started = started.replace(tzinfo=dt.timezone.utc)
    return (dt.datetime.now(dt.timezone.utc) - started).total_seconds()


def _find_daemon(data_dir: Path) -> tuple[dict[str, Any] | None, str]:
    """The live daemon's record, or None and a sentence saying why nothing runs."""
    path = runtime_path(data_dir)
    record = read_runtime(data_dir)
    if record is None:
        if path.exists():
            return None, f"ahpd is not running ({path} is stale or unreadable)"
        return None, f"ahpd is not running (no {path})"
    if not pid_is_ahpd(record["pid"]):
        return None, (f"ahpd is not running ({path} names pid {record['pid']}, which is now another program)")
    return record, ""


def cmd_status(args: argparse.Namespace) -> int:
    record, why = _find_daemon(args.data_dir)
    if record is None:
        if args.json:
            print(json.dumps({"running": False, "dataDir": str(args.data_dir), "reason": why}))
        else:
            print(why)
        return EXIT_NOT_RUNNING
    live = query_status(args.data_dir)
    unavailable = "the control socket did not answer"
    if live is not None and "error" in live:
        unavailable = f"the control socket answered: {live['error']}"
        live = None
    uptime = _uptime_seconds(record)
    if args.json:
        out = {
            "running": True,
            "dataDir": str(args.data_dir),
            **record,
            "uptimeSeconds": None if uptime is None else int(uptime),
            "live": live,
        }
        print(json.dumps(out, indent=2))
        return EXIT_OK
    print(f"ahpd is running at {record.get('url', '(url unknown)')}")
    if record.get("webUrl"):
        print(f"web console: {record['webUrl']}")
    print(f"pid: {record['pid']}")
    print(f"uptime: {'unknown' if uptime is None else format_duration(uptime)} (since {record.get('startedAt', '?')})")
    if live is None:
        print(f"connections: unavailable ({unavailable})")
        print("sessions: unavailable")
    else:
        print(f"connections: {live.get('connections', '?')}")
        print(f"sessions: {live.get('sessions', '?')}")
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    record, why = _find_daemon(args.data_dir)
    if record is None:
        print(why)
        return EXIT_NOT_RUNNING
    pid = record["pid"]
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        print(f"ahpd (pid {pid}) had already exited")
        return EXIT_OK
    except PermissionError:
        print(f"not allowed to signal ahpd (pid {pid}); it runs as another user", file=sys.stderr)
        return EXIT_FAILED
    deadline = time.monotonic() + args.timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            print(
                f"ahpd (pid {pid}) did not exit within {args.timeout:g}s after SIGTERM; "
                f"it may still be closing sessions (force it with: kill -KILL {pid})",
                file=sys.stderr,
            )
            return EXIT_FAILED
        time.sleep(0.05)
    print(f"stopped ahpd (pid {pid})")
    return EXIT_OK


def cmd_service(args: argparse.Namespace) -> int:
    if args.action == "install":
        run_args = list(args.run_args)
        if args.data_dir.resolve() != default_data_dir().resolve():
            run_args = ["--data-dir", str(args.data_dir.resolve()), *run_args]
        lines = service.install(extra_args=run_args)
    elif args.action == "uninstall":
        lines = service.uninstall()
    else:
        lines = service.status()
    for line in lines:
        print(line)
    return EXIT_OK


def add_status_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "status",
        help="say whether ahpd runs, where, and how busy it is",
        description="Print the URL, pid and uptime of the running ahpd (from its ahpd.json) "
        "and its live connection and session counts (from its control socket). "
        "Exit status 0 when it runs, 3 when it does not.",
    )
    _add_data_dir(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    p.set_defaults(func=cmd_status)
    return p


def add_stop_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "stop",
        help="stop the running ahpd gracefully",
        description="Send SIGTERM to the ahpd named in ahpd.json (after checking the pid "
        "still belongs to ahpd) and wait for it to exit. Exit status 0 when it stopped, "
        "3 when none was running, 1 when it did not exit in time. Under systemd, prefer "
        "`systemctl --user stop ahpd`.",
    )
    _add_data_dir(p)
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for it to exit (default: %(default)gs)",
    )
    p.set_defaults(func=cmd_stop)
    return p


def add_service_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "service",
        help="run ahpd as a systemd user service",
        description="Manage ~/.config/systemd/user/ahpd.service, which runs `ahpd run` at "
        "login, restarts it on failure and logs to the journal (journalctl --user -u ahpd).",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    install = actions.add_parser(
        "install",
        help="write the unit file and reload systemd",
        description="Write the unit with an absolute ExecStart for this ahpd, run "
        "`systemctl --user daemon-reload` when possible, and print the command that "
        "enables it. Arguments after `--` are passed to `ahpd run`.",
    )
    _add_data_dir(install)
    install.add_argument("run_args", nargs="*", metavar="RUN_ARG", help="extra arguments for `ahpd run` (after `--`)")
    actions.add_parser(
        "uninstall",
        help="stop, disable and remove the unit",
        description="Stop and disable the service (best effort), remove the unit file and reload systemd.",
    )
    actions.add_parser(
        "status",
        help="show whether the unit exists and whether systemd runs it",
        description="Say whether the unit file exists and print systemctl's is-enabled "
        "and is-active answers when systemctl is available.",
    )
    p.set_defaults(func=cmd_service)
    return p
