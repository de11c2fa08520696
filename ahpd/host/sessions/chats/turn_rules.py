"""The rules for what clients dispatch on a chat's turns.

A client starts, cancels, resumes and queues turns, confirms tool calls and
answers questions by dispatching chat actions; each rule here decides
whether the host applies one, and starts what it sets moving
(:mod:`ahpd.host.sessions.chats.turns` runs the turn itself).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ahpd.host.kernel.auth import signed, who
from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.kernel.supervise import spawn
from ahpd.host.sessions.chats import rewind, workers
from ahpd.host.sessions.chats.input_answers import synced
from ahpd.host.sessions.chats.turns import start_turn, take_up_queued

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat

log = logging.getLogger("ahpd.host")


def turn_resume(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    """The latest errored turn, run again: its message sent again to the
    agent started at where it stood before that turn, under the same turn id."""
    chat = host.sessions.chat_owner.get(channel) if host.sessions else None
    if chat is None:
        return Refuse(f"{channel} is not a chat this host runs")
    if not rewind.rewinds(chat):
        return Refuse("this chat's agent cannot re-run a turn that ended in an error; send the message again")
    if chat.state().get("activeTurn") is not None or (chat.turn is not None and not chat.turn.ended):
        return Refuse("a turn is running in this chat")
    turns = list(chat.state().get("turns") or [])
    turn_id = action["turnId"]
    if not turns or turns[-1].get("id") != turn_id:
        return Refuse(f"turn {turn_id} is not the latest turn of this chat")
    last = turns[-1]
    parts = last.get("responseParts") or []
    if last.get("state") != "error" or not parts or parts[-1].get("kind") != "error":
        return Refuse(f"turn {turn_id} did not end in an error")
    if not parts[-1].get("resumable"):
        return Refuse(f"turn {turn_id} ended in an error this host cannot resume")
    point = rewind.point_before(chat, turns[:-1])
    if point is None:
        return Refuse(f"the turn before {turn_id} has no rewind point, so it cannot be run again")
    if chat.session.provider not in host.sessions.backends:
        return Refuse(f"no agent for provider {chat.session.provider} on this host")

    def after() -> None:
        rewind.resume_at(chat, point)
        start_turn(chat, turn_id, last.get("message") or {})
        if chat.turn is not None:
            chat.turn.translator.continue_after(len(parts))

    return Apply(action, after=after)


# -- what clients dispatch on a chat --------------------------------------------------


def _chat(host: Host, channel: str) -> Chat | None:
    return host.sessions.chat_owner.get(channel) if host.sessions else None


def turn_started(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    chat = _chat(host, channel)
    if chat is None:
        return Refuse(f"{channel} is not a chat this host runs")
    if chat.state().get("activeTurn") is not None or (chat.turn is not None and not chat.turn.ended):
        return Refuse("a turn is already running in this chat; queue the message or cancel the turn")
    if chat.session.provider not in host.sessions.backends:
        return Refuse(f"no agent for provider {chat.session.provider} on this host")
    for taker in chat.hooks.turn_takers:  # a !command: run in a terminal, not sent to the agent
        taken = taker(host, peer, chat, action)
        if taken is not None:
            return taken

    chat.lender = peer
    action = signed(action, who(host, peer))
    return Apply(action, after=lambda: start_turn(chat, action["turnId"], action["message"]))


def turn_cancelled(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    chat = _chat(host, channel)
    turn = chat.turn if chat else None
    if chat is None or turn is None or turn.turn_id != action["turnId"] or turn.ended:
        return Apply(action)  # names no running turn: changes nothing, answered as such

    def after() -> None:
        turn.ended = True  # this action is the ending
        turn.lift_all()
        workers.turn_ended(chat, cancelled=True)
        for extra in turn.translator.finish():
            turn.emit(extra)
        host.sessions.sync_summary(chat)
        turn.stop()  # the agent is told, and stopped if it does not listen

    return Apply(action, after=after)


def tool_call_confirmed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    answered = workers.tool_call_confirmed(host, channel, action)
    if answered is not None:
        return answered  # a subagent's call, asked in its worker chat
    chat = _chat(host, channel)
    turn = chat.turn if chat else None
    request = turn.permissions.get(action["toolCallId"]) if turn and turn.turn_id == action["turnId"] else None
    if chat is None or turn is None or request is None:
        return Refuse(f"tool call {action['toolCallId']} is not waiting for a confirmation")
    approved = bool(action.get("approved"))
    wanted = "allow" if approved else "reject"
    option = action.get("selectedOptionId")
    if option not in {o.option_id for o in request.options}:
        option = next((o.option_id for o in request.options if o.kind.startswith(wanted)), None)

    def after() -> None:
        for extra in turn.translator.confirmed(action["toolCallId"], approved):
            turn.emit(extra)
        turn.lift(action["toolCallId"])
        if chat.conversation is not None:
            chat.conversation.answer_permission(request.request_id, option)

    return Apply(action, after=after)


def tool_call_complete(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse:
    """A client's result for a call of its own tool. Only the client the call
    was reported against may send one. It is handed to the agent and not
    applied: the completion comes off the agent's tool result (see above)."""
    chat = _chat(host, channel)
    turn = chat.turn if chat else None
    call_id = action["toolCallId"]
    call = turn.client_calls.get(call_id) if turn and turn.turn_id == action["turnId"] and not turn.ended else None
    if chat is None or turn is None or call is None:
        return Refuse(
            f"tool call {call_id} is not waiting for a client's result: only a call of a tool an "
            "active client provides is completed by a client"
        )
    if peer.client_id != call.client_id:
        return Refuse(f"tool call {call_id} runs on client {call.client_id}: only that client may complete it")
    complete = getattr(chat.conversation, "complete_client_tool", None)
    handed = complete is not None and complete(call_id, action["result"])
    turn.lift_client_call(call_id)
    if not handed:
        return Refuse(f"tool call {call_id} is no longer waiting: the agent has gone")
    return Refuse(
        "taken, not applied as sent: the result went to the agent, and the call completes from the "
        "agent's own tool result, as every call does"
    )


def tool_call_content_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    """Streaming into a running call is its contributor's to do: relayed from
    the client named in the call's ``ToolCallClientContributor``, refused
    from anyone else and for a call no client runs."""
    chat = _chat(host, channel)
    turn = chat.turn if chat else None
    call_id = action["toolCallId"]
    call = turn.client_calls.get(call_id) if turn and turn.turn_id == action["turnId"] and not turn.ended else None
    if call is None:
        return Refuse(f"tool call {call_id} is not run by a client: its content is the agent's to say")
    if peer.client_id != call.client_id:
        return Refuse(f"tool call {call_id} runs on client {call.client_id}: only that client streams into it")
    return Apply(action)


def input_completed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    chat = _chat(host, channel)
    turn = chat.turn if chat else None
    request = turn.inputs.get(action["requestId"]) if turn else None
    if chat is None or turn is None or request is None:
        return Refuse(f"input request {action['requestId']} is not open")
    answers = synced(chat, action["requestId"], action.get("answers"))

    def after() -> None:
        turn.inputs.pop(action["requestId"], None)
        turn._emit_session({"type": "session/inputNeededRemoved", "id": action["requestId"]})
        turn.heard()
        if chat.conversation is not None:
            chat.conversation.answer_input(request.request_id, action["response"], answers)

    return Apply(action, after=after)


def tool_call_result_confirmed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse:
    return Refuse(
        "chat/toolCallResultConfirmed is not served: no agent behind this host asks for a tool's "
        "result to be confirmed after it ran, so there is no such question to answer"
    )


def pending_message_set(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    """A queued message is taken up as soon as the chat is free. A steering
    message goes into the running turn when the agent takes one (Claude
    Code does); otherwise it waits like a queued one, because an ACP agent
    takes no message mid-turn."""
    chat = _chat(host, channel)
    if chat is None:
        return Refuse(f"{channel} is not a chat this host runs")
    # A message a feature would take as a turn (a !command) and refuses is
    # refused here too, rather than reach the agent later as a question.
    as_turn = {"type": "chat/turnStarted", "turnId": action["id"], "message": action["message"]}
    for taker in chat.hooks.turn_takers:
        if isinstance(taken := taker(host, peer, chat, as_turn), Refuse):
            return taken
    turn, conversation = chat.turn, chat.conversation
    steer = getattr(conversation, "steer", None)
    if action["kind"] == "steering" and steer is not None and turn is not None and turn.live and not turn.ended:

        def into_the_turn() -> None:
            # The agent takes it mid-turn: it leaves the queue as it goes in.
            spawn(chat.session.nursery, f"steering {channel}", steer, action["message"].get("text", ""))
            host.bus.emit(channel, {"type": "chat/pendingMessageRemoved", "kind": "steering", "id": action["id"]})

        return Apply(action, after=into_the_turn)
    action = signed(action, who(host, peer))
    return Apply(action, after=lambda: take_up_queued(chat))


CLIENT_ACTIONS = {
    "chat/turnStarted": turn_started,
    "chat/turnResume": turn_resume,
    "chat/turnCancelled": turn_cancelled,
    "chat/toolCallConfirmed": tool_call_confirmed,
    "chat/toolCallComplete": tool_call_complete,
    "chat/toolCallContentChanged": tool_call_content_changed,
    "chat/inputCompleted": input_completed,
    "chat/toolCallResultConfirmed": tool_call_result_confirmed,
    "chat/pendingMessageSet": pending_message_set,
}
