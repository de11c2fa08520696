"""``ahpd run`` and ``ahpd stdio``: a Host wired to its transports and stores.

Everything here is lifetime: the host's nursery owns the listener, the
control socket and (through the transport) one nursery per connection, so
a signal cancels them all, clients are told 1001 (going away), and what must
survive (the serverSeq reservation, the root config a user set, the runtime
record) is written or removed on the way out.
"""

from __future__ import annotations

import gc
import ipaddress
import logging
import os
import signal
import sys
import time
import tomllib
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ahpd.backends.registry import ConfigError, build_backends
from ahpd.cli_errors import EXIT_INTERRUPTED, CliError
from ahpd.host.assembly import Host
from ahpd.host.automations.automations import Automations
from ahpd.host.automations.catalogue import TEST_SECONDS_ENV
from ahpd.host.customizations.decisions import DecisionStore
from ahpd.ports.github import GitHub
from ahpd.host.kernel.rootconfig import RootConfigStore
from ahpd.host.sessions.store import FileSessionStore, MemorySessionStore
from ahpd.host.telemetry.telemetry import Telemetry
from ahpd.host.kernel.bus import ROOT
from ahpd.host.kernel.seqstore import FileSeqStore
from ahpd.ops import control, logs, runtime, sdnotify
from ahpd.ops.token import token_warning
from ahpd.ports.automation_store import AutomationStore
from ahpd.ports.pty import PtyPort
from ahpd.ports.users import UserDirectory
from ahpd.wire.capture import CaptureFile, recording

if TYPE_CHECKING:
    from ahpd.transport.websocket import Limits

log = logging.getLogger("ahpd")

MAX_FRAME = 16 * 2**20
ROOT_CONFIG_FILE = "root-config.json"


class UsageError(Exception):
    """A command line or configuration that cannot run; said, not raised."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_config_file(path: Path, explicit: bool) -> dict[str, Any]:
    """The TOML config, or an empty one when the default path does not exist."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        if explicit:
            raise UsageError(f"config file {path} does not exist") from None
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from None


def make_host(
    data_dir: Path, sessions: str, backends: dict[str, Any] | None = None, worktrees_root: Path | None = None
) -> Host:
    """A host whose serverSeq, user-set root config and sessions live in ``data_dir``."""

    log.debug("data in %s (sessions: %s); agents: %s", data_dir, sessions, ", ".join(backends or {}) or "none")
    config_store = RootConfigStore(data_dir / ROOT_CONFIG_FILE if sessions == "file" else None)
    decisions = DecisionStore(data_dir / "customizations.json" if sessions == "file" else None)
    session_store = FileSessionStore(data_dir / "sessions") if sessions == "file" else MemorySessionStore()
    telemetry = Telemetry()
    host: Host

    def on_state_change(channel: str) -> None:
        if channel == ROOT:
            config_store.save(host.bus.channels[ROOT].state["config"]["values"])

    host = Host(
        seq_store=FileSeqStore(data_dir / "serverSeq"),
        config_values=config_store.load(),
        on_state_change=on_state_change,
        backends=backends if backends is not None else {},
        session_store=session_store,
        stores=(config_store, decisions, telemetry),
        users=UserDirectory.configured(data_dir),
        telemetry=telemetry,
        terminals=PtyPort(),
    )
    automations_file = data_dir / "automations.sqlite3" if sessions == "file" else None
    host.automations = Automations(
        host, AutomationStore(automations_file), seconds=os.environ.get(TEST_SECONDS_ENV) == "1"
    )
    host.plugins_root = data_dir / "plugins"
    host.decisions = decisions
    host.worktrees_root = worktrees_root.expanduser().resolve() if worktrees_root is not None else None
    host.github = GitHub()  # asked only with a lent token or gh's, and only for a GitHub remote
    if host.sessions is not None:
        host.seed_root(agents=host.sessions.agents())  # each agent advertises GitHub's resource
    return host


def status_of(host: Host, started: float) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "uptime": round(time.monotonic() - started, 3),
        "connections": len(host.peers),
        "sessions": int(host.bus.channels[ROOT].state.get("activeSessions") or 0),
        "serverSeq": host.bus.server_seq,
    }


async def _until_signalled(
    cancel_scope: trio.CancelScope, caught: list[int] | None = None, early: Sequence[int] = ()
) -> None:
    """Cancel ``cancel_scope`` at the first SIGTERM or SIGINT: one received
    here, or one the command line remembered (``early``) before this
    listened (see ``cli._cmd_run``), looked at once this listens, so no
    signal falls between the two."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        signum = early[0] if early else await anext(aiter(signals))
        log.info("%s: shutting down", signal.Signals(signum).name)
        if caught is not None:
            caught.append(signum)
        cancel_scope.cancel()


def _notify(message: str) -> None:
    sdnotify.notify(message)


async def run(
    *,
    data_dir: Path,
    host_name: str,
    port: int,
    token: str | None,
    sessions: str,
    backends: dict[str, Any],
    max_frame: int = MAX_FRAME,
    ready_out: Any = None,
    wire: Path | None = None,
    limits: Limits | None = None,
    worktrees_root: Path | None = None,
    web_port: int | None = 0,
    web_port_pinned: bool = False,
    early_signals: Sequence[int] = (),
) -> int:
    """Serve AHP over WebSocket until SIGTERM/SIGINT (or at once for one in
    ``early_signals``, received before this listened); and the web console
    on ``web_port`` (0: a free port; a free one too when it is in use and
    not ``web_port_pinned``) unless it is None."""
    # lazily: `ahpd doctor` imports this module to read the config, and the transports are ~0.2 s
    from ahpd.transport.web import origins, serve_web
    from ahpd.transport.websocket import serve_websocket

    ready_out = ready_out or sys.stdout
    host = make_host(data_dir, sessions, backends, worktrees_root)
    host.stop = partial(os.kill, os.getpid(), signal.SIGTERM)  # `shutdown`: the way `ahpd stop` stops it
    log_file = logs.to_file(data_dir)
    handler, capture = _handler(host, wire, "websocket")
    started = time.monotonic()
    caught: list[int] = []
    ready = False
    # The browser origins the WebSocket admits: the console's, once it listens
    # (before the ready line); None without a console (the door's older rule).
    browser_origins: set[str] | None = set() if web_port is not None else None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_until_signalled, nursery.cancel_scope, caught, early_signals)
            await nursery.start(host.run)
            await nursery.start(partial(control.serve_control, data_dir, lambda: status_of(host, started)))
            listening = await nursery.start(
                partial(
                    serve_websocket,
                    handler,
                    host=host_name,
                    port=port,
                    token=token,
                    max_message_size=max_frame,
                    queue_limit=host.queue_limit,
                    limits=limits,
                    origins=browser_origins,
                )
            )
            shown = f"[{host_name}]" if ":" in host_name else host_name
            url = f"ws://{shown}:{listening.port}/" + (f"?tkn={token}" if token else "")
            web: dict[str, Any] = {}
            if web_port is not None and browser_origins is not None:
                page = await nursery.start(
                    partial(
                        serve_web,
                        host=host_name,
                        port=web_port,
                        ws_port=listening.port,
                        token=token,
                        pinned=web_port_pinned,
                    )
                )
                browser_origins.update(origins(host_name, page.port))
                web = {"webPort": page.port, "webUrl": page.url + (f"?tkn={token}" if token else "")}
            runtime.write_runtime(
                data_dir,
                pid=os.getpid(),
                host=host_name,
                port=listening.port,
                url=url,
                startedAt=runtime.utc_now_iso(),
                **web,
            )
            # Everything imported and built so far lives as long as the process:
            # moving it out of the collector's reach keeps full collections (tens
            # of milliseconds, the latency tail under load) short.
            gc.freeze()
            print(f"ahpd ready: {url}", file=ready_out, flush=True)
            if web:
                print(f"ahpd web console: {web['webUrl']}", file=ready_out, flush=True)
            ready = True
            log.info("listening on %s (data in %s)", url.split("?")[0], data_dir)
            if (weak := token_warning(token, url.split("?")[0])) is not None:
                log.warning("%s", weak)
            _notify("READY=1")
    finally:
        _notify("STOPPING=1")
        host.close()
        if capture is not None:
            capture.close()
        runtime.remove_runtime(data_dir)
        if ready:  # one that never served (a port in use, say) is said by the command line alone
            log.info("stopped")
        logging.getLogger().removeHandler(log_file)
        log_file.close()
    if signal.SIGINT in caught and not ready:  # Ctrl-C before it served anyone: said as such
        raise CliError("interrupted during start-up", EXIT_INTERRUPTED)
    return 0


async def run_stdio(
    *, data_dir: Path, sessions: str, backends: dict[str, Any], max_frame: int = MAX_FRAME, wire: Path | None = None
) -> int:
    """One AHP connection over stdin/stdout, until stdin closes."""
    # lazily: `ahpd doctor` imports this module to read the config, and the transports are ~0.2 s
    from ahpd.transport.stdio import serve_stdio

    host = make_host(data_dir, sessions, backends)
    # An editor may start several: they share the file, and each line says whose it is.
    log_file = logs.to_file(data_dir, pid=True)
    handler, capture = _handler(host, wire, "stdio")
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_until_signalled, nursery.cancel_scope)
            await nursery.start(host.run)
            await serve_stdio(handler, max_message_size=max_frame, queue_limit=host.queue_limit)
            nursery.cancel_scope.cancel()
    finally:
        host.close()
        if capture is not None:
            capture.close()
        logging.getLogger().removeHandler(log_file)
        log_file.close()
    return 0


def _handler(
    host: Host, wire: Path | None, transport: str
) -> tuple[Callable[[Any], Awaitable[None]], CaptureFile | None]:
    """The connection handler, recording every frame to ``wire`` when one is given."""
    if wire is None:
        return host.serve_connection, None
    try:
        capture = CaptureFile(wire, transport=transport, trusted=True)
    except OSError as exc:
        raise UsageError(f"cannot write the wire capture {wire}: {exc.strerror or exc}") from None
    log.info("recording every frame to %s", wire)
    return recording(host.serve_connection, capture), capture


def load_backends(config: dict[str, Any], cli_agents: list[str], data_dir: Path) -> dict[str, Any]:
    try:
        return build_backends(config, cli_agents, data_dir)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def free_port_hint(host_name: str, port: int, web_port: int | None = None) -> str:
    """A sentence for an address in use (``web_port``: one the console was pinned to)."""
    web = f" or the web console's {web_port}" if web_port else ""
    return (
        f"cannot listen on {host_name}:{port}{web}: the address is in use "
        "(another ahpd? try `ahpd status`, or pick --port 0 and --web-port 0 for free ports)"
    )
