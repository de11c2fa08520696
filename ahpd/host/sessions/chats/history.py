"""Conversations read back from what a backend keeps.

A past conversation (a Claude Code transcript, an ACP agent's stored
session) is opened without an agent: its turns are rebuilt here the way a
live turn is built, its subagents' worker chats beside it, and its rewind
points from the transcript, so that the first new turn resumes it under its
own id.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ahpd import state as reducers
from ahpd.backends.port import HistoryTurn, StoredConversation
from ahpd.backends.translate import TurnTranslator
from ahpd.host.kernel.bus import utc_now
from ahpd.host.sessions.chats import rewind, workers
from ahpd.host.sessions.common import IDLE, IS_READ, catalogue_uri, default_chat_uri

if TYPE_CHECKING:
    from ahpd.host.sessions.manager import SessionManager


def rebuild_turns(
    history: list[HistoryTurn],
    *,
    prefix: str,
    at: str,
    origin: str = "user",
    worker_chat: Callable[[str], str | None] | None = None,
) -> list[dict[str, Any]]:
    """A stored conversation's turns, built the way a live turn is: each past
    turn's updates go through a :class:`TurnTranslator` and its actions
    through the chat reducer, from an empty chat. So a rebuilt turn has
    exactly the live shapes - tool calls with ``confirmed`` and an
    ``invocationMessage``, statuses among the seven, the recorded usage -
    and one builder cannot drift from the other.

    Turn ids are ``<prefix>-<n>``; ``at`` is when they are said to have
    started (a transcript dates its conversation, not each turn). ``origin``
    is who said each turn's message; ``worker_chat`` names the worker chat
    of a subagent call that has one (its calls then link it)."""
    chat: dict[str, Any] = {"resource": "", "title": "", "status": 1, "modifiedAt": at, "turns": []}
    for number, past in enumerate(history, 1):
        turn_id = f"{prefix}-{number}"
        translator = TurnTranslator(turn_id)
        translator.worker_chat = worker_chat
        actions: list[dict[str, Any]] = [
            {
                "type": "chat/turnStarted",
                "turnId": turn_id,
                "startedAt": at,
                "message": {"text": past.text, "origin": {"kind": origin}},
            }
        ]
        for update in past.updates:
            actions += translator.feed(update)
        if past.usage:
            actions.append({"type": "chat/usage", "turnId": turn_id, "usage": past.usage})
        actions.append({"type": "chat/turnComplete", "turnId": turn_id, "duration": 0})
        actions += translator.finish()
        for action in actions:
            chat = reducers.reduce("chat", chat, action)
    return chat["turns"]


def worker_records(
    session_uri: str, chat_uri_: str, turns: list[dict[str, Any]], subagents: dict[str, Any], at: str
) -> list[dict[str, Any]]:
    """The worker chats of a conversation read back from what its backend
    kept (no agent runs): one per subagent call of ``turns`` whose own
    record was found, its one turn rebuilt like any past turn, the
    subagent's prompt as its message. As session records, after its chat."""
    records = []
    for turn in turns:
        for part in turn.get("responseParts") or []:
            call = part.get("toolCall") if part.get("kind") == "toolCall" else None
            past = subagents.get(call["toolCallId"]) if call is not None else None
            if call is None or past is None:
                continue
            uri = workers.chat_uri(session_uri, call["toolCallId"])
            title = (call.get("_meta") or {}).get("subagentDescription") or call.get("displayName") or "Subagent"
            records.append(
                {
                    "uri": uri,
                    "state": {
                        "resource": uri,
                        "title": title,
                        "status": IDLE | IS_READ,
                        "modifiedAt": at,
                        "origin": {"kind": "tool", "chat": chat_uri_, "toolCallId": call["toolCallId"]},
                        "interactivity": workers.READ_ONLY,
                        "turns": rebuild_turns(
                            [past], prefix=f"{turn['id']}-{call['toolCallId']}", at=at, origin="agent"
                        ),
                    },
                }
            )
    return records


async def stored_record(manager: SessionManager, provider: str, conversation: StoredConversation) -> dict[str, Any]:
    """The session record of a conversation ``provider`` keeps, to open
    dormant (``SessionHooks.stored_record``): its turns rebuilt from what the
    backend recorded, its subagents' worker chats after it, no agent started,
    the backend id its own."""
    uri = catalogue_uri(provider, conversation.backend_id)
    backend = manager.backends[provider]
    read_history = getattr(backend, "read_history", None)  # a HistoryReader: only those are catalogued
    if read_history is None:
        raise RuntimeError(f"the {provider} agent cannot read its conversations back")
    history: list[HistoryTurn] = await read_history(conversation.backend_id)
    read_subagents = getattr(backend, "read_subagents", None)
    subagents = await read_subagents(conversation.backend_id) if read_subagents is not None else {}
    at = conversation.modified_at or conversation.created_at or utc_now()
    cwd = Path(conversation.cwd) if conversation.cwd and await trio.Path(conversation.cwd).is_dir() else Path.home()
    chat_uri = default_chat_uri(uri)
    turns = rebuild_turns(
        history,
        prefix=f"turn-{conversation.backend_id[:8]}",
        at=at,
        worker_chat=lambda call_id: workers.chat_uri(uri, call_id) if call_id in subagents else None,
    )
    chat_state = {
        "resource": chat_uri,
        "title": conversation.title,
        "status": IDLE | IS_READ,
        "modifiedAt": at,
        "turns": turns,
    }
    return {
        "uri": uri,
        "provider": provider,
        "cwd": str(cwd),
        "createdAt": conversation.created_at or at,
        "title": conversation.title,
        "status": IS_READ,
        "chats": [
            {
                "uri": chat_uri,
                "backendId": conversation.backend_id,
                "state": chat_state,
                **rewind.from_history(turns, history),
            },
            *worker_records(uri, chat_uri, turns, subagents, at),
        ],
        "defaultChat": chat_uri,
    }
