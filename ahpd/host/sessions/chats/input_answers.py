"""Answers to an open question, as people type them (``chat/inputAnswerChanged``).

Two people answering one elicitation are answering one form, so each answer
is held on the request the host already keeps open - in the chat's active
turn, where the reducer puts it - and mirrored on the session's
``inputNeeded`` entry for that request, so a client that watches only the
session, or arrives mid-question, reads what is already filled in.
``chat/inputCompleted`` with no answers of its own completes the request
with what was synced, which is where the protocol says the answers are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ahpd.host.kernel.dispatch import Apply, Refuse

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat


def open_request(chat: Chat, request_id: str) -> dict[str, Any] | None:
    """The chat's ``ChatInputRequest`` ``request_id`` as it stands in the active turn."""
    active = chat.state().get("activeTurn") or {}
    for part in active.get("responseParts") or []:
        if part.get("kind") == "inputRequest" and (part.get("request") or {}).get("id") == request_id:
            return part["request"]
    return None


def synced(chat: Chat, request_id: str, answers: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the agent is handed on completion: the answers synced so far,
    overlaid with any the completing action carries itself."""
    request = open_request(chat, request_id) or {}
    merged = {**(request.get("answers") or {}), **(answers or {})}
    return merged or None


def answer_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    chat = host.sessions.chat_owner.get(channel) if host.sessions else None
    turn = chat.turn if chat else None
    if chat is None or turn is None or action["requestId"] not in turn.inputs:
        return Refuse(f"input request {action['requestId']} is not open")

    def mirror() -> None:
        request = open_request(chat, action["requestId"])
        if request is None or action["requestId"] not in turn.inputs:
            return
        turn._emit_session(
            {
                "type": "session/inputNeededSet",
                "request": {
                    "id": action["requestId"],
                    "chat": chat.uri,
                    "kind": "chatInput",
                    "request": request,
                },
            }
        )

    return Apply(action, after=mirror)


CLIENT_ACTIONS = {"chat/inputAnswerChanged": answer_changed}
