"""The kernel: what every AHP server needs, whatever it hosts.

Connections (``host``: one ``Peer`` per client, the frame loop), JSON-RPC
framing (``jsonrpc``, ``frame``), version negotiation (``versions``), the
connection-level commands (``commands``: initialize, subscribe, reconnect,
dispatchAction), the action bus and replay (``bus``, ``replay``), dispatch's
Apply/Refuse rules (``dispatch``), serverSeq and the stores' shared writer
(``seqstore``, ``writes``), supervision of tasks (``supervise``), requests
sent to clients (``forward``), lent tokens and signed-in users (``auth``:
they belong to the connection), and the root channel's config
(``rootconfig``: the kernel's own queue and replay bounds live there).

It imports no feature. The moments at which a feature acts are declared in
``hooks``; who acts is registered in ``ahpd.host.table``.
"""
