"""Changesets: what a session's turns changed in its git tree, and the
operations on it (stage, discard, commit...), plus the window's handles on
detached worktrees (``detached``). A session's trees, reviews and git facts
are ``book``; one changeset channel is a ``view``; ``changesets`` opens and
closes them and is what the hooks call; ``operations`` is what a client
presses. The tree a turn starts from and ends with is kept through the
sessions' turn hooks; a changeset's before side is served through
``resourceRead`` by the kernel's ``readers`` hook.
"""
