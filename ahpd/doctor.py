"""``ahpd doctor``: is this machine ready to host agents, and if not, what to do.

Each check is a small function returning :class:`Check` lines (one, or one
per agent), each saying what was found and, when it fails, the fix. The
checks touch what a daemon would touch (the data directory, the token file,
each agent's command, the running daemon over its real socket) but change
nothing: an agent is started only long enough to answer ACP's ``initialize``,
and the daemon is asked ``initialize`` and ``ping`` like any client would.
Secrets are never printed: the token is stripped from URLs, and a login is
named by where it comes from, not by its value.

It sits beside ``daemon.py`` rather than in ``ops`` because it builds the
agents from the config as the daemon does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import resource
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path
from typing import Any

import trio

from ahpd.cli_errors import leaves
from ahpd.ops.control import query_status
from ahpd.ops.runtime import read_runtime
from ahpd.ops.token import TOKEN_FILE, TokenError, _read_private

MIN_OPEN_FILES = 1024
ACP_PROTOCOL_VERSION = 1
#: The logger reading the config (``ahpd.backends.registry``) says its warnings on.
CONFIG_LOG = logging.getLogger("ahpd.config")
#: Where Claude Code finds a login, besides a credentials file.
CLAUDE_LOGIN_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")


@dataclass
class Check:
    ok: bool
    name: str
    line: str
    fix: str = ""

    def render(self, good: str, bad: str) -> str:
        text = f"{good if self.ok else bad} {self.name}: {self.line}"
        return text if self.ok or not self.fix else f"{text} — fix: {self.fix}"


# -- this installation -------------------------------------------------------------


def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info >= (3, 11):
        return Check(True, "python", f"{version} ({sys.executable})")
    return Check(False, "python", f"{version} is too old", "use Python 3.11 or newer")


def check_packages() -> Check:
    """ahpd's own requirements (and the ``claude`` extra's, when it is installed)."""
    from packaging.requirements import Requirement

    found, wrong = [], []
    claude = _installed("claude-agent-sdk") is not None
    for text in metadata.requires("ahpd") or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": "claude" if claude else ""}):
            continue
        version = _installed(req.name)
        if version is None:
            wrong.append(f"{req.name} missing")
        elif not req.specifier.contains(version, prereleases=True):
            wrong.append(f"{req.name} {version} (wants {req.specifier})")
        else:
            found.append(f"{req.name} {version}")
    own = f"ahpd {_installed('ahpd')}"
    if wrong:
        return Check(
            False,
            "packages",
            f"{own}; {', '.join(wrong)}",
            f"{sys.executable} -m pip install --upgrade 'ahpd{'[claude]' if claude else ''}'",
        )
    return Check(True, "packages", f"{own}; {', '.join(found)}")


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_open_files() -> Check:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    shown = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    if soft == resource.RLIM_INFINITY or soft >= MIN_OPEN_FILES:
        return Check(True, "open files", f"limit {shown}")
    return Check(
        False,
        "open files",
        f"limit {shown}, below {MIN_OPEN_FILES} (every agent and connection takes several)",
        f"`ulimit -n {min(4096, hard) if hard != resource.RLIM_INFINITY else 4096}` "
        "before `ahpd run`, or LimitNOFILE=4096 in the service unit",
    )


# -- the data directory --------------------------------------------------------------


def check_data_dir(data_dir: Path) -> Check:
    name = "data directory"
    if not data_dir.exists():
        parent = next((p for p in data_dir.parents if p.exists()), None)
        if parent is not None and parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
            return Check(True, name, f"{data_dir} does not exist yet; `ahpd run` creates it (0700)")
        return Check(
            False,
            name,
            f"{data_dir} cannot be created (under {parent})",
            "choose a directory of your own with --data-dir",
        )
    st = data_dir.stat()
    if not stat.S_ISDIR(st.st_mode):
        return Check(False, name, f"{data_dir} is not a directory", "remove it, or choose another --data-dir")
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid():
        return Check(
            False,
            name,
            f"{data_dir} belongs to uid {st.st_uid}, not to us",
            "choose a directory of your own with --data-dir",
        )
    if not os.access(data_dir, os.W_OK | os.X_OK):
        return Check(False, name, f"{data_dir} is not writable (mode {mode:04o})", f"chmod 0700 {data_dir}")
    if mode & 0o077:
        return Check(False, name, f"{data_dir} is open to others (mode {mode:04o})", f"chmod 0700 {data_dir}")
    return Check(True, name, f"{data_dir} (mode {mode:04o})")


def check_token(data_dir: Path) -> Check:
    path = data_dir / TOKEN_FILE
    if not os.path.lexists(path):
        return Check(True, "token", f"{path} does not exist yet; `ahpd run` creates it (0600)")
    try:
        _read_private(path)
    except TokenError as exc:
        return Check(False, "token", str(exc).split(";")[0], f"delete {path}; ahpd makes a new one")
    return Check(True, "token", f"{path} (mode 0600, ours)")


# -- the daemon --------------------------------------------------------------------


def check_daemon(data_dir: Path) -> tuple[Check, dict[str, Any] | None]:
    record = read_runtime(data_dir)
    if record is None:
        return Check(
            False,
            "daemon",
            f"none runs with {data_dir}",
            f"start it: `ahpd run --data-dir {data_dir}` (or `ahpd service install`)",
        ), None
    where = f"pid {record['pid']} at {str(record.get('url', '?')).split('?')[0]}"
    live = query_status(data_dir)
    if live is None or "error" in live:
        return Check(
            False,
            "daemon",
            f"{where}, but its control socket does not answer",
            f"see its log; restart it with `ahpd stop --data-dir {data_dir}` and `ahpd run`",
        ), record
    return Check(
        True, "daemon", f"{where}, {live.get('connections', '?')} connections, {live.get('sessions', '?')} sessions"
    ), record


async def _round_trip(url: str, timeout: float) -> str:
    from trio_websocket import open_websocket_url

    async def call(ws: Any, ident: int, method: str, params: dict[str, Any]) -> Any:
        await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
        while True:
            frame = json.loads(await ws.get_message())
            if frame.get("id") == ident and "method" not in frame:
                if "error" in frame:
                    raise RuntimeError(f"{method} answered {frame['error'].get('message')}")
                return frame.get("result")

    with trio.fail_after(timeout):
        async with open_websocket_url(url, max_message_size=64 * 2**20) as ws:
            result = await call(
                ws,
                1,
                "initialize",
                {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "ahpd-doctor"},
            )
            await call(ws, 2, "ping", {"channel": "ahp-root://"})
            return f"protocol {result['protocolVersion']}, serverSeq {result['serverSeq']}"


def check_round_trip(record: dict[str, Any] | None, timeout: float) -> Check:
    from trio_websocket import ConnectionRejected

    name = "round trip"
    if record is None:
        return Check(False, name, "not tried: no daemon runs", "start the daemon, then run `ahpd doctor` again")
    url = str(record.get("url", ""))
    shown = url.split("?")[0]
    try:
        how = trio.run(_round_trip, url, timeout)
    except trio.TooSlowError:
        return Check(False, name, f"{shown} did not answer within {timeout:g}s", "see the daemon's log")
    except ConnectionRejected as exc:
        return Check(
            False,
            name,
            f"{shown} refused the token in ahpd.json (HTTP {exc.status_code})",
            "restart the daemon so that ahpd.json and its token agree",
        )
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        cause = next(iter(leaves(exc)))
        cause = cause.__cause__ or cause
        return Check(
            False,
            name,
            f"{shown}: {str(cause) or type(cause).__name__}",
            "see the daemon's log; `ahpd status` says what it serves",
        )
    return Check(True, name, f"initialize and ping answered at {shown} ({how})")


# -- the agents --------------------------------------------------------------------


def load_agents(args: argparse.Namespace, data_dir: Path) -> tuple[Check, dict[str, Any]]:
    # Lazily, and not for speed: these bring the host and the agents' libraries, and on a broken
    # install the checks before this one (the packages check above all) must still print.
    from ahpd.backends.registry import ConfigError, build_backends
    from ahpd.daemon import UsageError, load_config_file

    try:
        config = load_config_file(args.config, explicit=args.config_given)
        with _warnings_of(CONFIG_LOG) as warned:
            backends = build_backends(config, args.agent, data_dir)
    except (UsageError, ConfigError) as exc:
        return Check(False, "config", str(exc), f"fix {args.config}"), {}
    # An agent whose command is missing gets its own ✗ line below; anything else the config
    # reading warned about (a key ahpd does not know) is the config's finding, not stray stderr.
    missing = tuple(f"agent {name}: " for name in backends)
    other = [text.removeprefix("config: ") for text in warned if not text.startswith(missing)]
    where = f"{args.config}" if args.config.exists() else f"none at {args.config} (defaults)"
    if other:
        fix = f"correct or remove it in {args.config}"
        return Check(False, "config", f"{where}; {'; '.join(other)}", fix), backends
    return Check(True, "config", f"{where}; agents: {', '.join(backends)}"), backends


@contextlib.contextmanager
def _warnings_of(logger: logging.Logger) -> Iterator[list[str]]:
    """What ``logger`` says meanwhile, kept (not printed): doctor's output is its check lines,
    each with its mark, and a warning printed among them would be neither."""
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    keep, propagate = Keep(logging.WARNING), logger.propagate
    logger.addHandler(keep)
    logger.propagate = False
    try:
        yield said
    finally:
        logger.removeHandler(keep)
        logger.propagate = propagate


async def _acp_initialize(argv: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Start an ACP agent, ask ``initialize`` on its stdin, read the answer, stop it."""
    process = await trio.lowlevel.open_process(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    # Both are pipes because we asked for pipes; trio types them as optional.
    assert process.stdin is not None and process.stdout is not None
    try:
        request = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": ACP_PROTOCOL_VERSION,
                "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
            },
        }
        with trio.fail_after(timeout):
            try:
                await process.stdin.send_all((json.dumps(request) + "\n").encode())
            except trio.BrokenResourceError:
                # The agent closed its stdin (it exited, say) before reading the request. Whether the
                # write lands first is a race, so read on as if it had: its stdout then ends and the
                # finding is the same "exited without answering" either way, not a crash.
                pass
            buf = b""
            while True:
                chunk = await process.stdout.receive_some(65536)
                if not chunk:
                    raise RuntimeError("it exited without answering initialize")
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    try:
                        frame = json.loads(line)
                    except ValueError:
                        raise RuntimeError(f"it wrote something that is not JSON-RPC: {line[:80]!r}") from None
                    if isinstance(frame, dict) and frame.get("id") == 0:
                        if "error" in frame:
                            raise RuntimeError(f"initialize answered {frame['error'].get('message')}")
                        result = frame.get("result") or {}
                        if not isinstance(result, dict):
                            raise RuntimeError(f"initialize answered {str(result)[:80]!r}, not an object")
                        return result
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()


def check_acp_agent(backend: Any, timeout: float) -> Check:
    from ahpd.backends.registry import command_found  # loaded by load_agents already (see there)

    name = f"agent {backend.provider}"
    command = backend.command
    if not command_found(command):
        return Check(
            False,
            name,
            f"command {command!r} is not found or not executable",
            f"install it, or correct the command in [agents.{backend.provider}] or --agent",
        )
    env = {**os.environ, **getattr(backend, "env", {})}
    try:
        result = trio.run(_acp_initialize, [command, *backend.args], env, timeout)
    except trio.TooSlowError:
        return Check(
            False,
            name,
            f"{command} started but did not answer ACP initialize within {timeout:g}s",
            "check that it speaks ACP on stdio (some agents need a flag, e.g. --acp)",
        )
    except (OSError, RuntimeError) as exc:
        return Check(False, name, f"{command}: {exc}", "run the command by hand to see why")
    info = result.get("agentInfo")
    if not isinstance(info, dict):
        info = {}
    who = f"{info.get('name')} {info.get('version', '')}".strip() if info.get("name") else command
    return Check(True, name, f"{who} speaks ACP (protocol {result.get('protocolVersion', '?')})")


def claude_cli(backend: Any) -> str | None:
    """The CLI the SDK would run: ours if configured, the bundled one, else PATH's."""
    if getattr(backend, "cli_path", None):
        return str(backend.cli_path)
    # Found, not imported: importing the SDK (with the MCP library and pydantic) is most of a second.
    spec = util.find_spec("claude_agent_sdk")
    for folder in (spec and spec.submodule_search_locations) or ():
        bundled = Path(folder) / "_bundled" / "claude"
        if bundled.is_file():
            return str(bundled)
    return shutil.which("claude")


def claude_login(env: dict[str, str]) -> str | None:
    """Where Claude Code would find a login, named without its value."""
    for var in CLAUDE_LOGIN_VARS:
        if env.get(var):
            return f"${var} is set"
    base = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else Path(env.get("HOME", "~")) / ".claude"
    credentials = base.expanduser() / ".credentials.json"
    return f"{credentials} exists" if credentials.is_file() else None


def check_claude(backend: Any) -> list[Check]:
    name = f"agent {backend.provider}"
    cli = claude_cli(backend)
    if cli is None or not os.access(cli, os.X_OK):
        return [
            Check(
                False,
                name,
                "the Claude Code CLI is not found",
                f"{sys.executable} -m pip install --force-reinstall claude-agent-sdk",
            )
        ]
    version_file = Path(cli).with_name("claude.version")
    version = version_file.read_text().strip() if version_file.is_file() else ""
    found = Check(True, name, f"Claude Code CLI {version} at {cli}".replace("  ", " "))
    login = claude_login({**os.environ, **backend.env})
    if login is None:
        return [
            found,
            Check(
                False,
                f"{name} login",
                "not logged in (no API key, no credentials file)",
                f"run `{cli} /login` once, or set ANTHROPIC_API_KEY for the daemon",
            ),
        ]
    return [found, Check(True, f"{name} login", login)]


def check_agents(backends: dict[str, Any], timeout: float) -> list[Check]:
    checks: list[Check] = []
    for backend in backends.values():
        if hasattr(backend, "command"):
            checks.append(check_acp_agent(backend, timeout))
        elif type(backend).__name__ == "ClaudeBackend":
            checks += check_claude(backend)
    return checks


# -- the command -------------------------------------------------------------------


def run_checks(args: argparse.Namespace) -> Iterable[Check]:
    data_dir = Path(args.data_dir).expanduser()
    yield check_python()
    yield check_packages()
    yield check_data_dir(data_dir)
    yield check_token(data_dir)
    daemon, record = check_daemon(data_dir)
    yield daemon
    config, backends = load_agents(args, data_dir)
    yield config
    yield from check_agents(backends, args.timeout)
    yield check_open_files()
    yield check_round_trip(record, args.timeout)


def doctor(args: argparse.Namespace) -> int:
    """Print every check as it completes; 0 only when all pass."""
    encoding = sys.stdout.encoding or "ascii"
    try:
        "✓✗—".encode(encoding)
        good, bad = "✓", "✗"
    except UnicodeEncodeError:
        good, bad = "ok", "FAIL"
    failed = 0
    for check in run_checks(args):
        line = check.render(good, bad)
        print(line.encode(encoding, "replace").decode(encoding), flush=True)
        failed += not check.ok
    print(f"{failed} of the checks failed" if failed else "all checks passed")
    return 1 if failed else 0
