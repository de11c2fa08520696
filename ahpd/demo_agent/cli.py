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
import json
import logging
import os
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO

from ahpd import __version__
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
    # The ACP library, and the agent made with it, are imported here rather
    # than with this module: 0.55-0.7 s of import (python -X importtime) that
    # --help, --version and every import of the package (whose __init__
    # imports this module) would otherwise pay.
    from acp import run_agent
    from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
    from acp.stdio import stdio_streams

    from ahpd.demo_agent.agent import DemoAgent

    agent = DemoAgent(SessionStore(home), slow_delay=slow_delay)
    # (type: ignore below) The router calls the agent's methods by name: one it
    # lacks (authenticate, session/fork, ext_*) answers "method not found", as
    # it should, though the library's Agent protocol names them all.
    if _is_file(0) or _is_file(1):
        transport = FileTransport(sys.stdin.buffer, sys.stdout.buffer)
        sys.stdout = sys.stderr
        # Unstable: routes session/close and session/resume, which the agent implements.
        await run_agent(agent, transport, use_unstable_protocol=True)  # type: ignore[arg-type]
    else:
        reader, writer = await stdio_streams(limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
        sys.stdout = sys.stderr
        await run_agent(agent, writer, reader, use_unstable_protocol=True)  # type: ignore[arg-type]


def _is_file(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


class FileTransport:
    """Newline-delimited JSON-RPC over plain files, for redirected stdio.

    asyncio's pipe transports, which the library's stdio streams use, refuse
    regular files (``ahpd-demo-agent < requests.jsonl > replies.jsonl``). This
    implements the library's message-level transport seam instead: lines are
    read in a worker thread and written synchronously.
    """

    def __init__(self, source: BinaryIO, sink: BinaryIO) -> None:
        self._source = source
        self._sink = sink

    async def send(self, message: dict[str, Any]) -> None:
        self._sink.write(json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n")
        self._sink.flush()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await asyncio.to_thread(self._source.readline)
            if not line:
                return None
            if not line.strip():
                continue
            try:
                return json.loads(line)
            except ValueError:
                logging.getLogger(__name__).warning("ignoring a line that is not JSON")

    async def close(self) -> None:
        self._sink.flush()
