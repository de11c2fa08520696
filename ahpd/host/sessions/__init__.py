"""Sessions and their chats: the core every feature builds on.

A session is a channel (``SessionState``) with one or more chats, each a
channel (``ChatState``) and one agent conversation. The core objects are
``chat.Chat``, ``session.Session`` and ``manager.SessionManager``; what they
read everywhere is in ``common`` and ``catalogue``; what survives a restart
is ``store``. Around them: the session commands and rules (creating,
disposing and listing sessions, summaries, working directories, config,
annotations, worktree isolation), and ``chats``: turns and what happens
inside a chat.

It is a core, not a feature: features (changesets, terminals,
customizations, automations...) import it, and it imports none of them.
Where a feature must act at a session's moment it registers for a hook
declared in ``hooks``.
"""
