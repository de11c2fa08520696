"""``ahpd chat``: a terminal chat client for a running daemon.

A small AHP client, and the quickest way to see the daemon work: it finds
the daemon through its ``ahpd.json`` (or ``--url``), continues the session
it last used in this folder (or creates one), and holds a conversation:
the reply streams as Markdown, tool calls show as they start and finish,
and whatever the agent asks (a tool confirmation, a ``chat/inputRequested``
question) is asked at the prompt. It speaks only the protocol, so what it
shows is what any AHP client would be told.

The modules: :mod:`~ahpd.chat.connection` (the WebSocket and JSON-RPC),
:mod:`~ahpd.chat.sessions` (which session), :mod:`~ahpd.chat.turn` (one
turn, Ctrl-C), :mod:`~ahpd.chat.render` (rich), :mod:`~ahpd.chat.events`
(``--json``) and :mod:`~ahpd.chat.prompt` (prompt_toolkit). Only this module is imported by ``ahpd``'s command line;
the others, and rich and prompt_toolkit with them, load when ``chat`` runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ahpd.ops.paths import default_data_dir


def add_chat_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "chat",
        help="talk to an agent through the running daemon",
        description="Talk to an agent through the running ahpd, in the session last used in this folder "
        "(--new for a fresh one, --session to pick one, --list to see them). The reply streams as "
        "Markdown; you are asked before a tool runs and whenever the agent asks a question. With "
        "MESSAGE, one turn and exit (status 0 when it completed); without, a prompt with line editing "
        "and history. Ctrl-C cancels the running turn; a second Ctrl-C, or Ctrl-C at the prompt, exits "
        "with status 130; Ctrl-D at the prompt (the end of input) exits with status 0. When standard output "
        "is not a terminal the reply is written as the agent wrote it (Markdown source).",
    )
    p.add_argument("message", nargs="*", metavar="MESSAGE", help="send this and exit")
    p.add_argument("--url", help="the daemon's ws:// URL with its token (default: from ahpd.json)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir(),
        metavar="DIR",
        help="find the daemon through DIR/ahpd.json (default: %(default)s)",
    )
    p.add_argument("--provider", help="the agent to talk to (default: the daemon's first)")
    p.add_argument("--cwd", default=".", metavar="DIR", help="the session's folder (default: here)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--session", metavar="URI", help="continue this session (see --list)")
    which.add_argument("--new", action="store_true", help="start a new session instead of continuing")
    which.add_argument("--list", action="store_true", help="list the daemon's sessions, one per line, and exit")
    p.add_argument("--yes", action="store_true", help="allow every tool call without asking")
    p.add_argument("--dispose", action="store_true", help="dispose the session when done")
    p.add_argument(
        "--json",
        action="store_true",
        help="write one JSON object per event (session, text, activity, tool, decision, end) instead of the "
        "screen, for scripts; questions are declined and tools denied unless --yes (with --list: one per session)",
    )
    p.set_defaults(func=_run)
    return p


def _run(args: argparse.Namespace) -> int:
    from ahpd.chat.app import main  # lazily: the client, rich and trio-websocket are ~50 ms --help does not need

    return main(args)
