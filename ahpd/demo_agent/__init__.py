"""The demo agent: a deterministic, offline Agent Client Protocol (ACP) agent.

``ahpd-demo-agent`` (or ``python -m ahpd.demo_agent``) speaks ACP over stdio
with a small JSON-RPC layer of its own rather than the ``agent-client-protocol``
library, whose import alone cost 0.45 s of CPU at every start (one per demo
session); the daemon still reads everything it says through the library's
models. It has no model: it reacts
to trigger words in the prompt (see :mod:`ahpd.demo_agent.script`), and uses
everything a real agent uses (reasoning and reply streaming, tool calls,
permission requests, the client's file system and terminals, elicitation,
plans, cancellation, errors) so that ahpd's ``demo`` provider works offline
and in tests exactly as a real ACP agent would be driven.

Modules, inward first:

* :mod:`~ahpd.demo_agent.script`: prompt → what to do and say (pure).
* :mod:`~ahpd.demo_agent.store`: conversations on disk, one JSON file each.
* :mod:`~ahpd.demo_agent.actions`: what a turn asks of the client (tools, files, terminals, questions).
* :mod:`~ahpd.demo_agent.mcp_calls`: a turn that calls a tool of the MCP servers it was handed.
* :mod:`~ahpd.demo_agent.rpc`: JSON-RPC 2.0, one message per line, on stdin/stdout.
* :mod:`~ahpd.demo_agent.shapes`: ACP's messages as dicts, as the library writes them.
* :mod:`~ahpd.demo_agent.client`: the updates and requests the agent sends the client.
* :mod:`~ahpd.demo_agent.agent`: the ACP agent (asyncio): sessions and turns.
* :mod:`~ahpd.demo_agent.cli`: the command line; stdio wiring and logging.
"""

from ahpd.demo_agent.cli import main

__all__ = ["main"]
