"""Terminals: a real pty per terminal (``terminal``), its channel and its
watchers, shell integration; the host's terminals and the port an agent's
commands run through, made watchable live (``terminals``); what clients ask
of them (``terminal_commands``); and ``!`` commands run in a chat's terminal
(``command_turns``).
"""
