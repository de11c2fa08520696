"""The window's requests: what VS Code's agent-host client asks beyond the
protocol (shutdown, diagnostics, a session's state file), each a method of
its own outside ``model.COMMANDS``.
"""
