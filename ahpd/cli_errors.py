"""Everyday mistakes as one line and an exit status, never a traceback.

A person who gives a port in use, a second daemon on the same data directory
or a wrong token needs a sentence saying what happened and what to do, and a
script needs a status it can tell apart. Tracebacks are for bugs, and only
with ``--debug``. The table below is the one in ``man/ahpd.1`` (EXIT STATUS).

trio wraps what fails inside a nursery in exception groups, so what reaches
the command line is unwrapped to the first leaf we know before it is judged.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from ahpd.ops.runtime import read_runtime

EXIT_OK = 0
EXIT_FAILED = 1  # a check failed, a turn did not complete, a daemon did not stop in time
EXIT_USAGE = 2  # the command line or the configuration is wrong
EXIT_NOT_RUNNING = 3  # no daemon runs (status, stop, chat)
EXIT_ADDRESS_IN_USE = 4
EXIT_DATA_DIR = 5  # the data directory cannot be used
EXIT_ALREADY_RUNNING = 6  # another ahpd already runs with this data directory
EXIT_REFUSED = 7  # the daemon refused the token
EXIT_AGENT = 8  # the agent did not start
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT) before the daemon was ready


class CliError(Exception):
    """A failure the user can fix: said in one line, with its exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups, in order; ``exc`` itself otherwise."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


def explain(exc: BaseException) -> CliError | None:
    """The one-line account of ``exc``, or None when it is a bug (let it show)."""
    found = list(leaves(exc))
    for leaf in found:
        if isinstance(leaf, CliError):
            return leaf
    for leaf in found:
        if isinstance(leaf, OSError) and leaf.errno == errno.EADDRINUSE:
            return CliError("the address is in use", EXIT_ADDRESS_IN_USE)
    if any(isinstance(leaf, KeyboardInterrupt) for leaf in found):
        return CliError("interrupted", EXIT_INTERRUPTED)
    return None


# -- ahpd chat ---------------------------------------------------------------------
#
# Kept apart from the chat client itself: what a failed connection or a refused
# createSession means to a person is the command line's business.


def chat_preflight(args: object) -> None:
    """What ``ahpd chat`` can tell before connecting: a folder that is not
    one, and no daemon to find."""
    cwd = Path(getattr(args, "cwd", "."))
    if not cwd.is_dir():
        raise CliError(f"--cwd {cwd} is not a folder; give the folder the session works in", EXIT_USAGE)
    url = getattr(args, "url", None)
    if url:
        parts = urlsplit(url)
        shown = url.split("?")[0]  # never print the token
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            what = "names no host" if parts.scheme in ("ws", "wss") else "is not a ws:// or wss:// address"
            raise CliError(f"--url {shown} {what}; take it from `ahpd status` (ws://HOST:PORT/?tkn=TOKEN)", EXIT_USAGE)
    data_dir = getattr(args, "data_dir", None)
    if not getattr(args, "url", None) and data_dir is not None and read_runtime(data_dir) is None:
        raise CliError(f"no daemon runs with data directory {data_dir}; start one with `ahpd run`", EXIT_NOT_RUNNING)


def explain_chat(exc: BaseException, args: object) -> CliError | None:
    """A chat that failed to connect or to start its session, in one line."""
    # lazily: every command imports this module, and trio-websocket is ~50 ms only a chat needs here
    from trio_websocket import ConnectionRejected, HandshakeError

    where = getattr(args, "url", None) or f"the daemon of {getattr(args, 'data_dir', '?')}"
    where = where.split("?")[0]  # never print the token
    for leaf in leaves(exc):
        if isinstance(leaf, CliError):
            return leaf
        if isinstance(leaf, ConnectionRejected) and leaf.status_code in (401, 403):
            return CliError(
                f"{where} refused the token (HTTP {leaf.status_code}); take the URL "
                "from `ahpd status`, or the token from the data directory's token file",
                EXIT_REFUSED,
            )
        if isinstance(leaf, (OSError, HandshakeError)):
            reason = leaf.__cause__ if isinstance(leaf, HandshakeError) and leaf.__cause__ else leaf
            return CliError(
                f"cannot connect to {where}: {str(reason) or type(reason).__name__}; is it running? try `ahpd status`",
                EXIT_NOT_RUNNING,
            )
        # The host's own sentences, whatever the client put before them.
        text = str(leaf)
        session = getattr(args, "session", None)
        if session and f"no channel {session} on this host" in text:
            return CliError(
                f"--session {session}: no such session on {where}; `ahpd chat --list` shows them", EXIT_USAGE
            )
        if (found := re.search(r"no agent provider .*", text)) is not None:
            return CliError(f"--provider: {found.group()}", EXIT_USAGE)
        if (found := re.search(r"the \S+ agent did not start.*", text)) is not None:
            return CliError(f"{found.group()}; check it with `ahpd doctor`", EXIT_AGENT)
    return explain(exc)
