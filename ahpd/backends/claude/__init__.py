"""Claude Code as a backend, through claude-agent-sdk (``backend.ClaudeBackend``).

The provider (probe, starting and restarting the CLI, transcripts) is
``backend``; one live conversation is ``conversation``; what the SDK says,
translated, is ``wire``; the host's and clients' tools are ``tools``. The
SDK is an optional extra and is imported only on first use; the boot probe
and the transcripts' catalogue ask it from a child process (``catalogue``)
until a conversation has loaded it into the daemon.
"""
