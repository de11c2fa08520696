"""Customizations: what shapes an agent beyond its prompt.

The session's customization list and toggles (``customizations``), plugins
(a harness's own and those clients hand over: ``plugins``), the decisions
kept across sessions (``decisions``), and the host's own tools for agents
(``server_tools``: the set and its calling; ``tool_schemas``, ``tool_args``,
``session_tools``, ``artifact_tools``) with the MCP relay an ACP agent
reaches them through (``mcp_bridge``). One package because they are one
list to a client.
"""
