"""Terminals: a real pty per terminal, its channel and its watchers, shell
integration, ``!`` commands run in a chat's terminal, and the commands an
agent runs made watchable live.
"""
