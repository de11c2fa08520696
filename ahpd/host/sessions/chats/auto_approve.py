"""``globalAutoApproveEnabled``: a tool call that would ask is approved.

The root config key is the person's standing answer. When it is on, a
permission an agent asks for (ACP ``session/request_permission``, Claude's
``can_use_tool``) is answered with the agent's own allow-once option without
putting the question to anybody, and the call is said as
``chat/toolCallReady`` with ``confirmed: 'setting'`` - approved by a setting,
not by a person, and not "not needed" either: the agent did ask. Nothing goes
onto the session's ``inputNeeded``, since nobody is waited on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ahpd.backends.port import PermissionRequest

if TYPE_CHECKING:
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.chats.turns import TurnRunner

KEY = "globalAutoApproveEnabled"


def _allow(request: PermissionRequest) -> str | None:
    """The agent's own option that allows this call once (else at all)."""
    for kind in ("allow_once", "allow_always"):
        found = next((o.option_id for o in request.options if o.kind == kind), None)
        if found is not None:
            return found
    return None


def approved(chat: Chat, turn: TurnRunner, request: PermissionRequest) -> bool:
    """Answer ``request`` by the setting when it is on; False when somebody is to be asked."""
    if chat.host.config(KEY) is not True or chat.conversation is None:
        return False
    option = _allow(request)
    if option is None:
        return False
    for action in turn.translator.permission(request, confirmed="setting"):
        turn.emit(action)
    chat.conversation.answer_permission(request.request_id, option)
    return True
