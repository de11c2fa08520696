"""``python -m ahpd.mcp_relay``: the stdio MCP server an ACP agent is handed.

A byte pipe and nothing else: it connects to the daemon's unix socket
(``AHPD_MCP_SOCKET``), says the chat's secret (``AHPD_MCP_SECRET``) on the
first line, and then copies the agent's stdin to the socket and the socket
to its stdout, so the MCP the agent speaks is answered by the daemon itself
(``ahpd.host.customizations.mcp_bridge``). Standard library only: it starts in a blink and
has nothing to get out of step with the daemon.
"""

from __future__ import annotations

import io
import os
import socket
import sys
import threading
from typing import cast


def _upstream(sock: socket.socket) -> None:
    # A BufferedReader (whose read1 returns what has arrived rather than waiting for a full
    # chunk) for any stdin the agent can hand us; typeshed types it as the general BinaryIO.
    stdin = cast(io.BufferedReader, sys.stdin.buffer)
    try:
        while chunk := stdin.read1(1 << 16):
            sock.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def main() -> int:
    path, secret = os.environ.get("AHPD_MCP_SOCKET"), os.environ.get("AHPD_MCP_SECRET")
    if not path or not secret:
        print("ahpd.mcp_relay: AHPD_MCP_SOCKET and AHPD_MCP_SECRET must be set (the daemon sets them)", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        print(f"ahpd.mcp_relay: cannot reach the daemon at {path}: {exc}", file=sys.stderr)
        return 1
    sock.sendall(secret.encode() + b"\n")
    threading.Thread(target=_upstream, args=(sock,), daemon=True).start()
    stdout = sys.stdout.buffer
    try:
        while chunk := sock.recv(1 << 16):
            stdout.write(chunk)
            stdout.flush()
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
