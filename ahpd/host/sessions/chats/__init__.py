"""What happens inside a chat: turns, and everything a turn can lead to.

``turns`` runs a turn against the agent; ``turn_rules`` decides what clients
may dispatch on one; ``history`` rebuilds turns from what a backend kept.
Around them: creating and forking chats (``chat_commands``), moving them
(``chat_moves``), rewinding (``rewind``), questions (``input_answers``),
subagents' worker chats (``workers``), background work and auto-approval.
"""
