"""The ``ahpd`` command line.

Each subcommand is a small function here; the work itself lives in the
package, so the command line stays a thin, readable table of what a user can
ask for.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn

import trio

from ahpd import __version__
from ahpd.chat import add_chat_parser
from ahpd.cli_errors import (
    EXIT_ADDRESS_IN_USE,
    EXIT_ALREADY_RUNNING,
    EXIT_DATA_DIR,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    chat_preflight,
    explain,
    explain_chat,
)
from ahpd.ops import commands as ops
from ahpd.ops import completion, logs, vscode
from ahpd.ops import users
from ahpd.ops.paths import default_config_path, default_data_dir, ensure_private_dir
from ahpd.ops.runtime import AlreadyRunning, hold_data_dir
from ahpd.ops.token import TokenError, load_or_create_token, read_token_file

if TYPE_CHECKING:
    from ahpd.transport.websocket import Limits

# Above: what every command loads anyway (building the parser takes most of it). Imported where
# used instead, with what that saves: what one command needs and `ahpd --help` should not pay for.

LOG_LEVELS = ("debug", "info", "warning", "error")


def _cmd_schema(args: argparse.Namespace) -> int:
    from ahpd.protocol import strict_schema  # lazily: the generated model is ~0.5 s no other command needs

    text = strict_schema.render()
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _setup_logging(level: str) -> None:

    logs.setup(level)


def _port(text: str) -> int:
    """An argparse type: a TCP port, 0-65535 (the kernel would take 99999 modulo 65536)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is outside 0-65535")
    return port


def _token_choice(args: argparse.Namespace, data_dir: Path) -> str | None:
    if args.without_connection_token:
        return None
    if args.connection_token is not None:
        if not args.connection_token:
            raise SystemExit("ahpd: --connection-token is empty; give a token or --without-connection-token")
        return args.connection_token
    if args.connection_token_file is not None:
        return read_token_file(args.connection_token_file)
    return load_or_create_token(data_dir)


def _daemon() -> ModuleType:
    """The daemon module, imported on first use: it and the host are ~1 s
    that --help, status, stop and chat do not need."""
    from ahpd import daemon

    return daemon


def _prepare(args: argparse.Namespace, *, hold: bool = False) -> tuple[Path, dict]:
    """What ``run`` and ``stdio`` both need first: the private data directory
    (held for this process's life when ``hold``, so a second daemon on it is
    refused) and the agents the config file and ``--agent`` name."""
    daemon = _daemon()

    try:
        data_dir = ensure_private_dir(args.data_dir)
        if hold:
            hold_data_dir(data_dir)
    except AlreadyRunning as exc:
        raise CliError(
            f"{exc}; stop it with `ahpd stop --data-dir {args.data_dir}` or give this one another --data-dir",
            EXIT_ALREADY_RUNNING,
        ) from None
    except OSError as exc:
        raise CliError(
            f"cannot use data directory {args.data_dir}: {exc.strerror or exc}; choose another with --data-dir",
            EXIT_DATA_DIR,
        ) from None
    config = daemon.load_config_file(args.config, explicit=args.config_given)
    return data_dir, daemon.load_backends(config, args.agent, data_dir)


def _cmd_run(args: argparse.Namespace) -> int:
    daemon = _daemon()

    _setup_logging(args.log_level)
    explicit_token = (
        args.without_connection_token or args.connection_token is not None or args.connection_token_file is not None
    )
    if not daemon.is_loopback(args.host) and not explicit_token:
        print(
            f"ahpd: refusing to listen on {args.host}, which is not loopback, without an explicit "
            "token choice: pass --connection-token, --connection-token-file or "
            "--without-connection-token",
            file=sys.stderr,
        )
        return 2
    early: list[int] = []
    try:
        # From here the daemon touches its data directory: a Ctrl-C while it reads its config (a
        # FIFO can block that read) is a KeyboardInterrupt, said by main().
        signal.signal(signal.SIGINT, signal.default_int_handler)
        data_dir, backends = _prepare(args, hold=True)
        token = _token_choice(args, data_dir)
        # Then it is remembered rather than raised wherever the code happens to be (where a
        # library's bare `except` could swallow it, or trio's start-up be torn), and taken as the
        # daemon's first signal once it listens for signals: the start-up stops cleanly, saying so.
        signal.signal(signal.SIGINT, lambda signum, frame: early.append(signum))
        return trio.run(
            functools.partial(
                daemon.run,
                early_signals=early,
                data_dir=data_dir,
                host_name=args.host,
                port=args.port,
                token=token,
                sessions=args.sessions,
                backends=backends,
                max_frame=args.max_frame_bytes,
                wire=args.wire,
                limits=_limits(args),
                worktrees_root=args.worktrees_root,
                web_port=web_port(args),
                web_port_pinned=args.web_port is not None,
            )
        )
    except (daemon.UsageError, TokenError) as exc:
        print(f"ahpd: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:  # trio hands a failed bind over inside exception groups
        failure = explain(exc)
        if failure is not None and failure.status == EXIT_ADDRESS_IN_USE:
            raise CliError(daemon.free_port_hint(args.host, args.port, args.web_port), EXIT_ADDRESS_IN_USE) from exc
        raise


def web_port(args: argparse.Namespace) -> int | None:
    """The web console's port: None with ``--no-web``; ``--web-port``; else
    the port after ``--port`` (a free one when ``--port`` is 0)."""
    if args.no_web:
        return None
    if args.web_port is not None:
        return int(args.web_port)
    return 0 if args.port in (0, 65535) else args.port + 1


def _limits(args: argparse.Namespace) -> Limits:
    from ahpd.transport.websocket import Limits  # lazily: the transports are ~0.2 s only run needs

    return Limits.for_this_process(args.max_connections, args.max_pending_connections, args.max_queued_bytes)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _add_limit_options(run: argparse.ArgumentParser) -> None:
    """How much ``run`` takes on at once; the defaults fit the open-file limit."""
    run.add_argument(
        "--max-connections",
        type=_positive,
        default=None,
        metavar="N",
        help="at most N connections open at once; a newcomer drops the oldest not yet admitted, "
        "or is answered 503 when all are WebSockets (default: half the open-file limit, at most 1024)",
    )
    run.add_argument(
        "--max-pending-connections",
        type=_positive,
        default=None,
        metavar="N",
        help="at most N connections not yet admitted (in their request head); a newcomer beyond "
        "them drops the oldest (default: --max-connections)",
    )
    run.add_argument(
        "--max-queued-bytes",
        type=_positive,
        default=None,
        metavar="N",
        help="when the bytes queued for all clients together pass N, close the client with the "
        "most queued (default: 256 MiB)",
    )


def _cmd_stdio(args: argparse.Namespace) -> int:
    daemon = _daemon()

    _setup_logging(args.log_level)
    try:
        data_dir, backends = _prepare(args)
        return trio.run(
            functools.partial(
                daemon.run_stdio,
                data_dir=data_dir,
                sessions=args.sessions,
                backends=backends,
                max_frame=args.max_frame_bytes,
                wire=args.wire,
            )
        )
    except daemon.UsageError as exc:  # a bad config, or a --wire FILE that cannot be written
        print(f"ahpd: {exc}", file=sys.stderr)
        return 2


def _cmd_wire_check(args: argparse.Namespace) -> int:
    from ahpd.wire.cli import wire_check  # lazily: it loads the generated model, ~0.5 s

    return wire_check(args.files, as_json=args.json)


def _add_host_options(parser: argparse.ArgumentParser) -> None:
    """Options ``run`` and ``stdio`` share: where state lives and what to load."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir(),
        metavar="DIR",
        help="where ahpd keeps its token, runtime record and stores (default: %(default)s)",
    )
    parser.add_argument(
        "--sessions",
        choices=("file", "memory"),
        default="file",
        help="keep what clients set across restarts (file) or forget it on exit (memory); default: %(default)s",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"the TOML config file (default: {default_config_path()}, if it exists)",
    )
    parser.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="offer the ACP agent started by COMMAND as provider NAME (repeatable); "
        "agents also come from [agents.NAME] in the config file, and the demo agent is always there",
    )
    parser.add_argument(
        "--max-frame-bytes",
        type=int,
        default=16 * 2**20,
        metavar="N",
        help="refuse incoming frames larger than N bytes (default: 16 MiB)",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="how much to log on stderr (default: %(default)s)",
    )
    parser.add_argument(
        "--wire",
        type=Path,
        default=None,
        metavar="FILE",
        help="append every frame, both ways, to FILE as JSON lines (VS Code's agent host log shape, "
        "credentials redacted, mode 0600); check it with `ahpd wire-check`",
    )


class _Parser(argparse.ArgumentParser):
    """A command line mistake in one line, not the whole usage (``--help`` has it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def manual_page() -> Path | None:
    """This installation's man page: where pip put it (``PREFIX/share/man/man1``), or the source
    tree's for an editable install (which installs no data files).

    ``man ahpd`` finds the page only through ``PATH`` (a ``bin`` on it, its ``../share/man``
    searched): not when ahpd runs as ``.venv/bin/ahpd`` from a venv that is not activated, nor
    from ``uv tool``'s own folder, so ``--help`` names the file itself."""
    for page in (
        Path(sys.prefix, "share", "man", "man1", "ahpd.1"),
        Path(__file__).resolve().parent.parent / "man" / "ahpd.1",
    ):
        if page.is_file():
            return page
    return None


def build_parser() -> argparse.ArgumentParser:
    page = manual_page()
    parser = _Parser(
        prog="ahpd",
        description=(
            "Host AI coding agents behind the Agent Host Protocol (AHP), so that\n"
            "VS Code's agent sessions view and any other AHP client can drive them."
        ),
        # As written: a path wrapped at its hyphens could not be pasted.
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="The manual: `man ahpd`" + (f", or where man does not find it:\n  man {page}" if page else "."),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    schema = sub.add_parser(
        "schema",
        help="print the strict JSON Schema of every AHP shape ahpd speaks",
        description=(
            "Print a JSON Schema (draft 2020-12) generated from ahpd's own protocol "
            "model, in which every object is closed: an undeclared key fails. "
            "Actions are selectable under /actions/<type>, commands under "
            "/commands/<method>/params|result, notifications under "
            "/notifications/<method>."
        ),
    )
    schema.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    schema.set_defaults(func=_cmd_schema)

    run = sub.add_parser(
        "run",
        help="serve AHP over WebSocket on loopback (the daemon)",
        description=(
            "Serve AHP over WebSocket until SIGTERM or SIGINT. When ready it prints one line, "
            "'ahpd ready: ws://HOST:PORT/?tkn=TOKEN' (and, unless --no-web, a second, "
            "'ahpd web console: http://HOST:WEBPORT/?tkn=TOKEN'), writes DATA_DIR/ahpd.json and tells systemd "
            "READY=1 when NOTIFY_SOCKET is set. A client must present the token (?tkn= or ?token= "
            "in the URL, or Authorization: Bearer); by default it is generated once and kept in "
            "DATA_DIR/token (mode 0600)."
        ),
    )
    run.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    run.add_argument(
        "--port", type=_port, default=8765, help="port to listen on; 0 picks a free one (default: %(default)s)"
    )
    webs = run.add_mutually_exclusive_group()
    webs.add_argument(
        "--web-port",
        type=_port,
        default=None,
        metavar="PORT",
        help="serve the web console on PORT, or refuse to start if it is in use; 0 picks a free one "
        "(default: the port after --port, or a free one when that is in use or with --port 0)",
    )
    webs.add_argument("--no-web", action="store_true", help="do not serve the web console")
    tokens = run.add_mutually_exclusive_group()
    tokens.add_argument("--connection-token", metavar="TOKEN", help="require this token")
    tokens.add_argument("--connection-token-file", metavar="FILE", type=Path, help="require the token in FILE")
    tokens.add_argument(
        "--without-connection-token",
        action="store_true",
        help="require no token (anyone who can reach the port can drive your agents)",
    )
    run.add_argument(
        "--worktrees-root",
        type=Path,
        default=None,
        metavar="DIR",
        help="make a session's worktree at DIR/REPO/NAME instead of beside its repository (REPO.worktrees/NAME)",
    )
    _add_host_options(run)
    _add_limit_options(run)
    run.set_defaults(func=_cmd_run)

    stdio = sub.add_parser(
        "stdio",
        help="serve one AHP connection over stdin/stdout (for an editor that spawns ahpd)",
        description=(
            "Serve one AHP connection over stdin/stdout, one JSON-RPC message per line (UTF-8). "
            "Logs go to stderr. Exits when stdin closes."
        ),
    )
    _add_host_options(stdio)
    stdio.set_defaults(func=_cmd_stdio)

    wire = sub.add_parser(
        "wire-check",
        help="check wire captures against the strict schema, the reducers and the protocol's invariants",
        description=(
            "Read captures (ahpd --wire, tools/tee.py, or VS Code's agent host log; the older "
            "{frame} lines too) and report every frame that breaks the strict schema, every snapshot "
            "that differs from the state its channel's actions reduce to, and every broken protocol "
            "invariant, with its line, JSON path, an excerpt and the rule. Exit 0 when clean, 1 when "
            "a problem was found, 2 when the input cannot be read."
        ),
    )
    wire.add_argument("files", nargs="+", metavar="FILE", help="capture files, read in order")
    wire.add_argument("--json", action="store_true", help="print the problems as one JSON object")
    wire.set_defaults(func=_cmd_wire_check)

    _add_chat_parser(sub)
    _add_doctor_parser(sub)

    ops.add_stop_parser(sub)
    ops.add_status_parser(sub)
    ops.add_service_parser(sub)
    users.add_users_parser(sub)
    completion.add_completion_parser(sub)
    vscode.add_vscode_parser(sub)
    _add_common_options(parser, top=True)
    return parser


def _add_common_options(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``-V``/``--version`` and ``--debug`` on every command, before or after its name."""
    parser.add_argument("-V", "--version", action="version", version=f"ahpd {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="on an unexpected failure, print the traceback (otherwise one line says what happened)",
    )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _add_common_options(sub)


def _add_chat_parser(sub: argparse._SubParsersAction) -> None:
    """``ahpd chat``, with its connection failures said in one line (see ``cli_errors``)."""
    chat = add_chat_parser(sub)
    talk = chat.get_default("func")

    def chat_or_explain(args: argparse.Namespace) -> int:
        chat_preflight(args)
        try:
            return talk(args)
        except BaseException as exc:
            failure = explain_chat(exc, args)
            if failure is None:
                raise
            raise failure from exc

    chat.set_defaults(func=chat_or_explain)


def _cmd_doctor(args: argparse.Namespace) -> int:
    from ahpd.doctor import doctor  # lazily: its checks and importlib.metadata are ~10 ms others do not need

    return doctor(args)


def _add_doctor_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="check this machine's ahpd set-up, one line per check",
        description="Check Python and the packages ahpd needs, the data directory, the token file, "
        "whether a daemon runs and answers, every configured agent (found, starts, speaks ACP; "
        "Claude Code present and logged in), the open-file limit, and a round trip through the "
        "daemon. Each check prints one line with a fix when it fails. Exit 0 only when all pass.",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir(),
        metavar="DIR",
        help="the data directory to check (default: %(default)s)",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"the TOML config file naming the agents (default: {default_config_path()}, if it exists)",
    )
    p.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="also check this ACP agent, as `ahpd run --agent` would offer it (repeatable)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="how long an agent or the daemon may take to answer (default: %(default)gs)",
    )
    p.set_defaults(func=_cmd_doctor)


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        completion.complete_if_asked(parser)  # a shell's Tab: answers and exits
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("ahpd: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if hasattr(args, "config"):
        args.config_given = args.config is not None
        args.config = args.config or default_config_path()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if args.func is not _cmd_run:  # `run` takes Ctrl-C over itself: see _cmd_run
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a KeyboardInterrupt, said below
    try:
        return args.func(args)
    except BaseException as exc:  # noqa: BLE001 - judged by explain(), re-raised when a bug
        if isinstance(exc, SystemExit):
            raise
        failure = explain(exc) or CliError(
            f"unexpected {type(exc).__name__}: {exc} (run again with --debug for the traceback)", EXIT_FAILED
        )
        if getattr(args, "debug", False):
            traceback.print_exception(exc)
        print(f"ahpd: {failure}", file=sys.stderr)
        return failure.status


if __name__ == "__main__":
    sys.exit(main())
