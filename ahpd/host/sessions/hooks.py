"""The moments at which the sessions core lets a feature act.

A chat's agent starts, a session opens, is written down or goes: features
(changesets, terminals, customizations, the host's tools) and the chat
machinery above the core (turns, rewind, workers) must act then, and the
core must not know them. The core declares each moment here and calls what
``ahpd.host.table.SESSION_HOOKS`` registers for it, in that order; nothing
registers itself by being imported.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ahpd.backends.port import Conversation, StoredConversation
    from ahpd.host.kernel.dispatch import Apply, Refuse
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.manager import SessionManager
    from ahpd.host.sessions.session import Session


def _no_customizations(session: Session, listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return listed


def _no_event(chat: Chat, event: Any) -> None:
    return None


@dataclass(frozen=True)
class SessionHooks:
    #: What a backend that takes it is given when a chat's agent starts,
    #: beyond the port: each returns the keyword arguments it adds, given the
    #: chat and the names ``run_conversation`` accepts (a lent token, the
    #: client's and the host's tools, terminals, folders, plugins, config).
    agent_extras: tuple[Callable[[Chat, Collection[str]], dict[str, Any]], ...] = ()
    #: A chat's agent started (its conversation is live).
    agent_started: tuple[Callable[[Session, Conversation], None], ...] = ()
    #: A chat's agent process ended, stopped or on its own.
    agent_gone: tuple[Callable[[Chat], None], ...] = ()
    #: What the agent says, handled under the turn's boundary (the turn
    #: machinery: ``ahpd.host.sessions.chats.turns.on_event``).
    agent_event: Callable[[Chat, Any], None] = _no_event
    #: The session's customizations, given the harness's commands as a list.
    customizations: Callable[[Session, list[dict[str, Any]]], list[dict[str, Any]]] = _no_customizations
    #: A ``Session`` was made from its record, before any channel opens.
    session_created: tuple[Callable[[Session, dict[str, Any]], None], ...] = ()
    #: A ``Chat`` was made from its record.
    chat_created: tuple[Callable[[Chat, dict[str, Any]], None], ...] = ()
    #: The session's channels are open and its nursery runs.
    session_opened: tuple[Callable[[Session, dict[str, Any]], None], ...] = ()
    #: What a feature keeps in the session's stored record, and in a chat's.
    session_record: tuple[Callable[[Session], dict[str, Any]], ...] = ()
    chat_record: tuple[Callable[[Chat], dict[str, Any]], ...] = ()
    #: The session is being disposed: its channels close next.
    session_disposed: tuple[Callable[[Session], None], ...] = ()
    #: ``RootState.agents``: each agent's info as features extend it.
    agent_info: tuple[Callable[[Host, dict[str, Any]], dict[str, Any]], ...] = ()
    #: The record to open a conversation a backend keeps (its turns rebuilt
    #: from the backend's transcript): ``ahpd.host.sessions.chats.history``.
    #: A turn is about to be sent to the agent, and one has ended: the tree
    #: it starts from is kept, and what it changed is read again.
    turn_started: tuple[Callable[[Session, str], Awaitable[None]], ...] = ()
    turn_ended: tuple[Callable[[Session, str], Awaitable[None]], ...] = ()
    #: Each action a turn says from what its agent did (a tool call that
    #: completed changed files; a command the agent ran has a terminal).
    turn_action: tuple[Callable[[Chat, dict[str, Any]], None], ...] = ()
    #: A turn a client starts that a feature takes instead of the agent (a
    #: ``!command`` runs in a terminal): each returns its decision, or None.
    #: Asked too for a queued message the host takes up (no connection: None).
    turn_takers: tuple[Callable[[Host, Peer | None, Chat, dict[str, Any]], Refuse | Apply | None], ...] = ()
    stored_record: Callable[[SessionManager, str, StoredConversation], Awaitable[dict[str, Any]]] | None = None
