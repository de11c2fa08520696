"""What the reference window asks a host about itself, outside the protocol.

VS Code's agents window makes a few requests of its own host that AHP does
not declare; they are served here in the shapes the window reads, so it runs
against this host unchanged. A client that speaks only the protocol never
sends one. Their params are not in the protocol model, so each handler reads
its own (the host hands them over as JSON) and refuses -32602 naming what
was wrong.

* ``shutdown`` answers ``{}`` and then stops the daemon the way ``ahpd stop``
  does (SIGTERM to itself); -32601 on a host built without a way to stop.
* ``getNetworkDiagnosticsInfo``: version, platform, the proxy variables that
  are set (a password in one is not repeated), and the endpoints the agents
  here reach. ``getManagedSettingsDiagnostics``: an empty list, since the
  policy layer it reports on is Copilot's.
* ``diagnosticsFetch`` looks up and fetches the one URL it was given and no
  other: a direct connection (no proxy in between, so a loopback URL is
  reached on this machine), redirects answered rather than followed, a
  timeout, and the body kept to 64 KiB.
* ``vscode/getAgentHostSessionStateFile``: the backend's own record of a
  session or chat (the Claude CLI's transcript); none for a backend that
  writes none.
* ``vscode/collectAgentHostDebugLogs`` packs the daemon's log files under
  ``agenthost/``, the session's record as ``events.jsonl`` and the backend's
  transcript under ``provider/``, as a zip or a directory in a private
  temporary folder, let go of after ten minutes;
  ``vscode/readAgentHostDebugLogsChunk`` reads such an archive back a
  megabyte at a time, and only an archive this host made.
* ``vscode/devContainers/*``: the dev container relay, in its own module
  (``ahpd.host.window.containers``).
"""

from __future__ import annotations

import atexit
import base64
import json
import logging
import math
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
import urllib.parse
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ahpd import __version__
from ahpd.host.kernel import forward
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError, string_param
from ahpd.host.window import containers
from ahpd.ports import threads

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer

log = logging.getLogger("ahpd.host")

SESSION_NOT_FOUND = -32001
CHUNK_BYTES = 1024 * 1024
BODY_BYTES = 64 * 1024
FETCH_TIMEOUT = 10.0
LEASE_SECONDS = 600.0
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)
_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64", "i686": "ia32", "armv7l": "arm"}


def _required(params: Any, key: str) -> str:
    """``params[key]``, a non-empty string (-32602 naming the key otherwise)."""
    value = string_param(params, key)
    assert value is not None  # required: string_param answered -32602 already
    return value


# -- shutdown and diagnostics ----------------------------------------------------------


def shutdown(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    if host.stop is None:
        raise RpcError(METHOD_NOT_FOUND, "shutdown is not served: this host was started without a way to stop it")
    log.info("%s asked the daemon to stop", peer.name)
    trio.lowlevel.current_trio_token().run_sync_soon(host.stop)  # after the answer is queued
    return {}


def _redacted(value: str) -> str:
    """A proxy URL without the password it may carry."""
    parts = urllib.parse.urlsplit(value)
    if parts.password is None:
        return value
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def network_info(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    endpoints = []
    providers = host.sessions.backends if host.sessions is not None else {}
    if "claude" in providers:
        endpoints.append({"name": "Anthropic API", "url": "https://api.anthropic.com/v1/models", "expectedStatus": 401})
    return {
        "version": __version__,
        "os": sys.platform,
        "arch": _ARCH.get(platform.machine().lower(), platform.machine().lower()),
        "proxySettings": {},
        "proxyEnv": {k: _redacted(v) for k in PROXY_VARIABLES if (v := os.environ.get(k))},
        "endpoints": endpoints,
    }


def managed_settings(host: Host, peer: Peer, params: Any) -> list[Any]:
    return []


def _lookup(hostname: str, family: int) -> dict[str, Any]:
    started = time.monotonic()
    try:
        found = socket.getaddrinfo(hostname, None, family, socket.SOCK_STREAM)
        out: dict[str, Any] = {"address": found[0][4][0]}
    except OSError as exc:
        out = {"error": str(exc.strerror or exc)}
    out["durationMs"] = round((time.monotonic() - started) * 1000)
    return out


def _reason(exc: BaseException) -> str:
    """What went wrong, in the words of the deepest cause that has some (an
    httpx error wraps the system's ``Connection refused``)."""
    said = str(exc) or type(exc).__name__
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        if isinstance(cause, BaseExceptionGroup):  # trio's "all attempts to connect failed"
            cause = cause.exceptions[0]
            continue
        if str(cause):
            said = str(cause)
        cause = cause.__cause__ or cause.__context__
    return said


async def _fetch(url: str, hostname: str) -> dict[str, Any]:
    """The answer of one GET, on trio's own sockets: a server that trickles
    holds no thread, and the whole exchange ends at ``FETCH_TIMEOUT``."""
    import httpx  # when first asked: the HTTP client is start-up only a diagnostics fetch should pay

    result: dict[str, Any] = {"url": url}
    for key, family in (("dnsIpv4", socket.AF_INET), ("dnsIpv6", socket.AF_INET6)):
        with trio.move_on_after(FETCH_TIMEOUT):
            # a lookup that hangs is given up, and its thread counted in its own family
            result[key] = await threads.run("net", _lookup, hostname, family, abandon_on_cancel=True)
        result.setdefault(key, {"error": f"no answer in {FETCH_TIMEOUT:g} seconds"})
    started = time.monotonic()
    with trio.move_on_after(FETCH_TIMEOUT) as deadline:
        try:
            async with (
                httpx.AsyncClient(
                    trust_env=False,  # a direct connection: no proxy in between
                    follow_redirects=False,  # the redirect is the answer: its target is a URL nobody gave
                    timeout=FETCH_TIMEOUT,
                    headers={"User-Agent": f"ahpd/{__version__} diagnosticsFetch"},
                ) as client,
                client.stream("GET", url) as response,
            ):
                result["statusCode"] = response.status_code
                result["statusMessage"] = response.reason_phrase or ""
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) >= BODY_BYTES:
                        break
                result["body"] = body[:BODY_BYTES].decode("utf-8", errors="replace")
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            result["error"] = _reason(exc)
    if deadline.cancelled_caught:
        result["error"] = f"no complete answer in {FETCH_TIMEOUT:g} seconds"
    result["durationMs"] = round((time.monotonic() - started) * 1000)
    return result


async def diagnostics_fetch(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    url = _required(params, "url")
    parts = urllib.parse.urlsplit(url)
    hostname = parts.hostname
    if parts.scheme not in ("http", "https") or not hostname:
        raise RpcError(INVALID_PARAMS, f"{url!r} is not an http or https URL", {"path": "$.url"})
    forward.let_go(f"diagnosticsFetch of {url}")  # a web server's answer: the connection reads on meanwhile
    return await _fetch(url, hostname)


# -- the backend's own record ------------------------------------------------------------


def _session_and_chat(host: Host, params: Any) -> tuple[Any, Any]:
    session_uri = _required(params, "session")
    chat_uri = string_param(params, "chat", required=False)
    session = host.sessions.named(session_uri) if host.sessions is not None else None
    if session is None:
        raise RpcError(
            SESSION_NOT_FOUND,
            f"no open session {session_uri} on this host (subscribe to it first)",
            {"path": "$.session"},
        )
    if chat_uri and chat_uri in host.bus.aliases and chat_uri not in host.bus.channels:
        chat_uri = host.bus.aliases[chat_uri].target  # its default chat, under the session's other spelling
    chat = session.chats.get(chat_uri) if chat_uri else next(iter(session.chats.values()), None)
    if chat_uri and chat is None:
        raise RpcError(INVALID_PARAMS, f"{session_uri} has no chat {chat_uri}", {"path": "$.chat"})
    return session, chat


def _state_file(session: Any, chat: Any) -> Path | None:
    finder = getattr(session.backend, "state_file", None)
    if finder is None or chat is None or not chat.backend_id:
        return None
    return finder(chat.backend_id)


def session_state_file(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    session, chat = _session_and_chat(host, params)
    path = _state_file(session, chat)
    return {"resource": path.as_uri()} if path is not None else {}


# -- the debug-log bundle ------------------------------------------------------------------

#: What this host made, by resource: (path, when it is let go of).
_made: dict[str, tuple[Path, float]] = {}


def log_files() -> list[Path]:
    """The daemon's log files: every rotating file it logs to, with its rotations."""
    files: list[Path] = []
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            base = Path(handler.baseFilename)
            files += sorted(p for p in base.parent.glob(base.name + "*") if p.is_file())
    return files


def _let_go(now: float) -> None:
    for resource, (path, until) in list(_made.items()):
        if until <= now:
            _made.pop(resource)
            shutil.rmtree(path.parent, ignore_errors=True)


def _collect(files: dict[str, Path | bytes], kind: str) -> dict[str, Any]:
    """Write ``files`` (archive name -> source file or bytes) as a zip or a directory."""
    folder = Path(tempfile.mkdtemp(prefix="ahpd-debug-logs-"))  # 0700
    stamp = time.strftime("%Y%m%dT%H%M%S")
    entries: list[dict[str, Any]] = []
    target = folder / (f"ahpd-logs-{stamp}.zip" if kind == "archive" else f"ahpd-logs-{stamp}")
    if kind == "archive":
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as bundle:
            for name, source in files.items():
                data = source if isinstance(source, bytes) else source.read_bytes()
                bundle.writestr(name, data)
                entries.append({"path": name, "size": len(data)})
        size = target.stat().st_size
    else:
        for name, source in files.items():
            dest = target / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = source if isinstance(source, bytes) else source.read_bytes()
            dest.write_bytes(data)
            entries.append({"path": name, "size": len(data)})
        size = sum(e["size"] for e in entries)
    return {
        "kind": kind,
        "resource": target.as_uri(),
        "size": size,
        "uncompressedSize": sum(e["size"] for e in entries),
        "entries": entries,
        "_path": target,
    }


async def collect_debug_logs(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    kind = params.get("kind") if isinstance(params, dict) else None
    if kind not in ("archive", "directory"):
        raise RpcError(INVALID_PARAMS, "kind must be 'archive' or 'directory'", {"path": "$.kind"})
    files: dict[str, Path | bytes] = {f"agenthost/{p.name}": p for p in log_files()}
    provider = False
    if isinstance(params, dict) and params.get("session") is not None:
        session, chat = _session_and_chat(host, params)
        session.save()
        record = session.record()
        lines = [{k: v for k, v in record.items() if k != "chats"}, *(record.get("chats") or [])]
        files["events.jsonl"] = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
        transcript = await threads.run("agents", _state_file, session, chat)
        if transcript is not None and transcript.is_file():
            files[f"provider/{transcript.name}"] = transcript
            provider = True
    _let_go(time.monotonic())
    if not _made:
        atexit.register(_let_go, math.inf)  # a daemon stopping sooner takes them with it
    made = await threads.run("files", _collect, files, kind)
    path = made.pop("_path")
    _made[made["resource"]] = (path, time.monotonic() + LEASE_SECONDS)
    log.info("%s: debug logs collected as %s (%d entries)", peer.name, made["resource"], len(made["entries"]))
    return {**made, "providerLogsIncluded": provider}


def read_debug_logs_chunk(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    resource = _required(params, "resource")
    position = params.get("position")
    if not isinstance(position, int) or isinstance(position, bool) or position < 0:
        raise RpcError(INVALID_PARAMS, "position must be a non-negative integer", {"path": "$.position"})
    _let_go(time.monotonic())
    made = _made.get(resource)
    if made is None or not made[0].is_file():
        raise RpcError(
            INVALID_PARAMS,
            f"{resource} is not an archive this host collected (or its ten minutes "
            "are up): only vscode/collectAgentHostDebugLogs archives can be read",
            {"path": "$.resource"},
        )
    path = made[0]
    size = path.stat().st_size
    if position > size:
        raise RpcError(
            INVALID_PARAMS, f"position {position} is past the end of {resource} ({size} bytes)", {"path": "$.position"}
        )
    with open(path, "rb") as f:
        f.seek(position)
        data = f.read(CHUNK_BYTES)
    return {"data": base64.b64encode(data).decode(), "eof": position + len(data) >= size}


COMMANDS = {
    "shutdown": shutdown,
    "getNetworkDiagnosticsInfo": network_info,
    "getManagedSettingsDiagnostics": managed_settings,
    "diagnosticsFetch": diagnostics_fetch,
    "vscode/getAgentHostSessionStateFile": session_state_file,
    "vscode/collectAgentHostDebugLogs": collect_debug_logs,
    "vscode/readAgentHostDebugLogsChunk": read_debug_logs_chunk,
    **containers.COMMANDS,
}


def capabilities_of(host: Any) -> dict[str, Any]:
    """``InitializeResult._meta``: a chat's own record is served
    (``getAgentHostSessionStateFile``), and the dev container relay when it
    can be (``ahpd.host.window.containers``)."""
    meta = {"vscode.getAgentHostSessionStateFile.chat": True}
    return {"_meta": {**meta, **containers.capabilities_of(host).get("_meta", {})}}
