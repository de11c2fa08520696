"""``ahpd vscode``: the ``settings.json`` entries that connect VS Code to the running daemon.

VS Code's Agents window reaches a daemon through two user settings,
``chat.remoteAgentHostsEnabled`` and ``chat.remoteAgentHosts`` (an entry of
``name``, ``address`` as ``host:port``, and ``connectionToken``). Everything
they need is in the daemon's runtime record (``ahpd.json``: the URL it
printed, with its token), so this prints them for the daemon that runs now
rather than leaving a user to cut a URL into pieces. Standard output is the
JSON alone, a whole object, so a script can merge it into a settings file;
what to do with it goes to standard error.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ahpd.ops.commands import EXIT_NOT_RUNNING, _add_data_dir, _find_daemon

ENABLED = "chat.remoteAgentHostsEnabled"
HOSTS = "chat.remoteAgentHosts"
#: Lets the Agents window open without a GitHub sign-in when an agent is usable without one.
SIGNED_OUT = "chat.agentHost.allowSignedOutWhenUsable"


def settings_for(url: str, name: str, *, signed_out: bool = False) -> dict[str, Any]:
    """The settings for a daemon serving ``url`` (its ``ahpd ready:`` URL)."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    try:
        if ipaddress.ip_address(host).is_unspecified:
            host = "127.0.0.1"  # listening everywhere: this machine reaches it on loopback
    except ValueError:
        pass  # a name
    if ":" in host:
        host = f"[{host}]"
    scheme = "wss://" if parts.scheme == "wss" else ""  # VS Code adds ws:// itself
    entry: dict[str, Any] = {"name": name, "address": f"{scheme}{host}:{parts.port}"}
    query = parse_qs(parts.query)
    tokens = query.get("tkn") or query.get("token")
    if tokens:
        entry["connectionToken"] = tokens[0]
    settings: dict[str, Any] = {ENABLED: True, HOSTS: [entry]}
    if signed_out:
        settings[SIGNED_OUT] = True
    return settings


def add_vscode_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "vscode",
        help="print the settings.json entries that connect VS Code to the running daemon",
        description="Print, as one JSON object, the user settings that connect VS Code's Agents window to "
        f"the daemon running now: {ENABLED} and {HOSTS} (its name, address and connection token). Paste "
        "the keys into your user settings.json (Preferences: Open User Settings (JSON)), then run "
        "Chat: Open Agents Window. Exit status 3 when no daemon runs.",
    )
    _add_data_dir(p)
    p.add_argument("--name", default="ahpd", help="the label VS Code shows for this host (default: %(default)s)")
    p.add_argument(
        "--signed-out",
        action="store_true",
        help=f"also set {SIGNED_OUT}, so the Agents window opens without a GitHub sign-in",
    )
    p.set_defaults(func=_cmd_vscode)
    return p


def _cmd_vscode(args: argparse.Namespace) -> int:
    record, why = _find_daemon(args.data_dir)  # as `ahpd status` finds it: a stale record names nobody
    if record is None or not isinstance(record.get("url"), str):
        why = why or "its record names no URL"
        print(
            f"ahpd: no daemon runs with data directory {args.data_dir} ({why}); start one with `ahpd run`",
            file=sys.stderr,
        )
        return EXIT_NOT_RUNNING
    settings = settings_for(record["url"], args.name, signed_out=args.signed_out)
    sys.stdout.write(json.dumps(settings, indent=2) + "\n")
    if "connectionToken" in settings[HOSTS][0]:
        print("ahpd: this holds the daemon's token; keep it private", file=sys.stderr)
    print(
        "ahpd: paste these keys into your user settings.json (Preferences: Open User Settings (JSON)), "
        "then run Chat: Open Agents Window",
        file=sys.stderr,
    )
    return 0
