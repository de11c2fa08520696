"""Any Agent Client Protocol agent as a backend (``backend.AcpBackend``).

trio owns the agent's process and pipes; the ACP library, which runs on
asyncio, is loaded only when a conversation starts (``session``, ``client``),
since it costs more at import than the rest of the daemon. The catalogue of
an agent's stored conversations is read by a short-lived child process
(``python -m ahpd.backends.acp.catalogue``).
"""
