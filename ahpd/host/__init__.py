"""The AHP host: a kernel (``ahpd.host.kernel``: connections, the action
bus and replay, dispatch, JSON-RPC, serverSeq, supervision) with a feature
package per protocol family around it, joined in ``ahpd.host.table`` and
built into the daemon's host by ``ahpd.host.assembly``. ARCHITECTURE.md at
the repository's root is the map.

Plain code over a ``Connection`` (receive/send); the trio transports in
``ahpd.transport`` carry it over WebSocket, stdio or an in-process pair.
"""
