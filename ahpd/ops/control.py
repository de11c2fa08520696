"""A local control socket, so ``ahpd status`` gets live counts without speaking AHP.

The WebSocket needs the token and a protocol handshake; a status query should
need neither. ``<data_dir>/control.sock`` is an AF_UNIX stream socket whose
file is ``0600`` inside the ``0700`` data directory, so the kernel lets only
our user connect: file permissions are the authentication.

The wire is one JSON line each way per connection: ``{"cmd": "status"}`` in,
``status()`` out (or ``{"error": "..."}``), then close. Line-per-connection
keeps the client a dozen lines of stdlib and the server free of state.

The socket is bound under a temporary name, restricted, then renamed into
place, so it is never reachable with looser permissions and a stale file left
by a crash is replaced atomically. A file that still answers belongs to a
running ahpd and is not replaced. On exit the file is removed only if it is
still ours (same inode), never a successor's.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ahpd.ops.paths import ensure_private_dir

log = logging.getLogger(__name__)

CONTROL_SOCKET = "control.sock"
MAX_REQUEST = 64 * 1024
REQUEST_TIMEOUT = 5.0
_SUN_PATH_MAX = 107  # sizeof(sun_path) - 1 on Linux


class ControlSocketInUse(OSError):
    """Another live process answers on the control socket (another ahpd runs here)."""


def control_path(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / CONTROL_SOCKET


async def _answers(path: Path) -> bool:
    with trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            with trio.fail_after(1.0):
                await probe.connect(os.fspath(path))
        except (OSError, trio.TooSlowError):
            return False
    return True


def _answer(line: bytes, status: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        request = json.loads(line)
    except ValueError:
        return {"error": "request is not one JSON line"}
    cmd = request.get("cmd") if isinstance(request, dict) else None
    if cmd != "status":
        return {"error": f"unknown cmd {cmd!r}; known: 'status'"}
    return status()


async def _handle(stream: trio.SocketStream, status: Callable[[], dict[str, Any]]) -> None:
    # Nothing may escape: an exception here would tear down every connection.
    try:
        async with stream:
            buf = b""
            with trio.move_on_after(REQUEST_TIMEOUT):
                while b"\n" not in buf and len(buf) <= MAX_REQUEST:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    buf += chunk
            try:
                body = json.dumps(_answer(buf.split(b"\n", 1)[0], status))
            except Exception as exc:  # noqa: BLE001 - status() failed or returned something not JSON
                log.exception("control request failed")
                body = json.dumps({"error": f"status failed: {exc}"})
            with trio.move_on_after(REQUEST_TIMEOUT):
                await stream.send_all(body.encode("utf-8") + b"\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client went away
    except Exception:  # noqa: BLE001 - nothing may escape a control connection (see above)
        log.exception("control connection failed")


async def serve_control(
    data_dir: str | os.PathLike[str],
    status: Callable[[], dict[str, Any]],
    *,
    task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``<data_dir>/control.sock`` until cancelled; ``nursery.start`` returns its path.

    ``status()`` is called on the event loop for each request and must return
    a JSON-able dict; ``ahpd status`` prints its ``connections`` and
    ``sessions`` counts and includes all of it under ``--json``.
    """
    directory = ensure_private_dir(data_dir)
    path = directory / CONTROL_SOCKET
    tmp = directory / f".c{os.getpid()}.sock"
    for p in (path, tmp):
        if len(os.fsencode(p)) > _SUN_PATH_MAX:
            raise OSError(f"control socket path {p} is too long for AF_UNIX; use a shorter --data-dir")
    # A stat in the private local data directory, once at start-up: not worth a thread.
    if os.path.lexists(path) and await _answers(path):  # noqa: ASYNC240
        raise ControlSocketInUse(f"{path} answers: another ahpd is running with this data directory")
    with trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        tmp.unlink(missing_ok=True)
        await sock.bind(os.fspath(tmp))
        try:
            os.chmod(tmp, 0o600)
            sock.listen()
            os.replace(tmp, path)  # replaces a stale socket file, if any
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        inode = path.stat().st_ino
        try:
            listener = trio.SocketListener(sock)
            async with trio.open_nursery() as nursery:
                await nursery.start(trio.serve_listeners, lambda s: _handle(s, status), [listener])
                task_status.started(path)
        finally:
            try:
                if path.stat().st_ino == inode:
                    path.unlink()
            except FileNotFoundError:
                pass


def query_status(data_dir: str | os.PathLike[str], timeout: float = 2.0) -> dict[str, Any] | None:
    """Ask a running ahpd for ``status()``; None if nothing answers within ``timeout`` seconds.

    Blocking stdlib code for the command line; from trio, run it in a thread.
    """
    deadline = time.monotonic() + timeout
    buf = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(os.fspath(control_path(data_dir)))
            sock.sendall(b'{"cmd": "status"}\n')
            while b"\n" not in buf:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
        answer = json.loads(buf.split(b"\n", 1)[0])
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) else None
