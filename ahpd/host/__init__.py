"""The AHP host: framing, handshake, subscriptions, the action bus, dispatch.

Plain code over a ``Connection`` (receive/send); the trio transports in
``ahpd.transport`` carry it over WebSocket, stdio or an in-process pair.
"""

from ahpd.host.kernel.host import Host, Peer

__all__ = ["Host", "Peer"]
