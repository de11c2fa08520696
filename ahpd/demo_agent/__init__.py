"""The demo agent: a deterministic, offline Agent Client Protocol (ACP) agent.

``ahpd-demo-agent`` (or ``python -m ahpd.demo_agent``) speaks ACP over stdio,
written with the ``agent-client-protocol`` library. It has no model: it reacts
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
* :mod:`~ahpd.demo_agent.agent`: the ACP agent (asyncio): sessions and turns.
* :mod:`~ahpd.demo_agent.cli`: the command line; stdio wiring and logging.
"""

from ahpd.demo_agent.cli import main

__all__ = ["main"]
