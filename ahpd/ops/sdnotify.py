"""systemd's readiness protocol (``sd_notify``) in a few lines of stdlib.

With ``Type=notify`` systemd considers ahpd started only once it says
``READY=1``, i.e. once the WebSocket listens, so ``systemctl start`` and units
ordered after ahpd never race the listener. The protocol is one datagram to
the AF_UNIX socket named in ``$NOTIFY_SOCKET`` (a leading ``@`` means the
Linux abstract namespace). systemd-python is not needed and does not build
from pip on a bare machine.

Messages the daemon sends: ``READY=1`` once it listens, ``STOPPING=1`` when a
graceful stop begins, optionally ``STATUS=<one line for systemctl status>``.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(message: str) -> bool:
    """Send ``message`` to systemd; False when not run under it or the send failed.

    A failure is logged, never raised: readiness reporting must not take the
    daemon down.
    """
    target = os.environ.get("NOTIFY_SOCKET")
    if not target:
        return False
    address = "\0" + target[1:] if target.startswith("@") else target
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(2.0)
            sock.sendto(message.encode("utf-8"), address)
    except OSError as exc:
        log.warning("sd_notify to %s failed: %s", target, exc)
        return False
    return True
