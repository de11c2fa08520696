"""What a chat's agent runs in the background: ``chat/backgroundWorkSet`` /
``chat/backgroundWorkRemoved``.

Background work outlives the turn that started it (a shell a Bash call left
running ends long after), so it is said on the chat's channel whenever the
backend reports it, turn or no turn. The backend says each entry whole and
each removal once (Claude Code: ``shell:<task_id>`` and ``subagent:<task_id>``
off the harness's own task ids - a subagent's entry names its worker chat,
``ahpd.host.sessions.chats.workers`` - its ``background_tasks_changed`` level and ``task_started``
edges); a removal for an entry the chat was never told about changes
nothing, and is not said.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ahpd.host.sessions.chats import workers

if TYPE_CHECKING:
    from ahpd.host.sessions.chat import Chat


def said(chat: Chat, update: dict[str, Any]) -> bool:
    """Emit a backend's background-work update on the chat; False for any
    other update."""
    kind = update.get("sessionUpdate")
    if kind not in ("background_work_set", "background_work_removed"):
        return False
    channel = chat.host.bus.channels.get(chat.uri)
    if channel is None:
        return True  # the chat is gone
    if kind == "background_work_set" and isinstance(update.get("work"), dict):
        chat.host.bus.emit(chat.uri, {"type": "chat/backgroundWorkSet", "work": workers.background_set(chat, update)})
    elif kind == "background_work_removed":
        listed = {w.get("id") for w in channel.state.get("backgroundWork") or []}
        if update.get("id") in listed:
            chat.host.bus.emit(chat.uri, {"type": "chat/backgroundWorkRemoved", "id": update["id"]})
        workers.background_removed(chat, update.get("id"))
    chat.rest()  # the idle clock waits while anything runs in the background
    return True


def agent_gone(chat: Chat) -> None:
    """The chat's agent process ended (stopped, or died): what it ran in the
    background is no longer any agent's to report - one started again
    begins with an empty list - so a list still naming it would be a
    running indicator nothing will ever clear."""
    channel = chat.host.bus.channels.get(chat.uri)
    if channel is None:
        return
    for work in list(channel.state.get("backgroundWork") or []):
        chat.host.bus.emit(chat.uri, {"type": "chat/backgroundWorkRemoved", "id": work["id"]})
        workers.background_removed(chat, work["id"])
