"""sessions.chats."""
