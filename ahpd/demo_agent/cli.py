"""``ahpd-demo-agent``: run the demo agent over stdio.

Standard output carries the protocol and nothing else: once the protocol's
stream is set up, ``sys.stdout`` is pointed at standard error, so a stray
``print`` cannot corrupt the wire. Logs go to standard error, warnings only
unless ``--log-level`` says otherwise. The process ends, with status 0, when
standard input closes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from ahpd import __version__
from ahpd.demo_agent.agent import DemoAgent
from ahpd.demo_agent.rpc import Connection, open_stdio
from ahpd.demo_agent.script import SLOW_DELAY_SECONDS
from ahpd.demo_agent.store import SessionStore

HOME_ENV = "AHPD_DEMO_AGENT_HOME"
LOG_LEVELS = ("debug", "info", "warning", "error")


def default_home() -> Path:
    """``$AHPD_DEMO_AGENT_HOME``, else ``$XDG_STATE_HOME/ahpd/demo-agent``, else ``~/.local/state/ahpd/demo-agent``."""
    explicit = os.environ.get(HOME_ENV, "")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "ahpd" / "demo-agent"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ahpd-demo-agent",
        description=(
            "A deterministic, offline Agent Client Protocol agent over stdio: "
            "ahpd's demo provider. Send it a prompt of /help to see what it reacts to."
        ),
    )
    parser.add_argument(
        "--home",
        type=Path,
        metavar="DIR",
        help=f"where conversations are kept (default: ${HOME_ENV}, else $XDG_STATE_HOME/ahpd/demo-agent)",
    )
    parser.add_argument(
        "--slow-delay",
        type=float,
        default=SLOW_DELAY_SECONDS,
        metavar="SECONDS",
        help=f"pause between the chunks of a 'slow' reply (default: {SLOW_DELAY_SECONDS})",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="warning", help="log level on stderr")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        stream=sys.stderr,
        format="ahpd-demo-agent %(levelname)s %(name)s: %(message)s",
    )
    home = (args.home or default_home()).expanduser().absolute()
    try:
        asyncio.run(serve(home, slow_delay=max(0.0, args.slow_delay)))
    except KeyboardInterrupt:
        return 130
    return 0


async def serve(home: Path, *, slow_delay: float = SLOW_DELAY_SECONDS) -> None:
    """Speak ACP on stdin/stdout until stdin closes."""
    agent = DemoAgent(SessionStore(home), slow_delay=slow_delay)
    stdio = await open_stdio()
    sys.stdout = sys.stderr
    conn = Connection(stdio, agent.on_request, agent.on_notification)
    agent.connect(conn)
    await conn.serve()
