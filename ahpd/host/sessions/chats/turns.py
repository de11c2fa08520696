"""Turns: a client's message in, the agent's answer out, one ending.

``chat/turnStarted`` from a client is said back to everyone and then run:
the chat's agent is started (or resumed) if it is not running, the prompt is
sent, and every event the agent produces is translated into chat actions as
it arrives. Exactly one action ends the turn: ``chat/turnComplete`` when it
worked, ``chat/error`` when it did not, ``chat/turnCancelled`` when somebody
stopped it; each carries the duration measured here.

A tool call the agent stops to ask about is mirrored onto the session's
``inputNeeded`` list, so a client watching only the session sees the session
is blocked, and lifted again once somebody answered.

A call of a tool an active client provides is mirrored there too, as a
``toolClientExecution`` entry naming the client: that client runs it and
answers with ``chat/toolCallComplete``, which only it may send. Its result
goes back to the agent and is *not* applied as sent: the completion every
client sees comes off the agent's own tool result, the path every call
takes, so the row is finished once, from what happened. The sender is told
so as a refusal - the honest answer, since applying its action would have
completed the row from the client's word (an "unchanged" answer would
claim the opposite, and leave the sender's mirror ahead of the host's). A
client that leaves fails its calls, so a turn never waits on nobody.

No turn wedges its chat. A cancelled turn's agent is told ``session/cancel``
and gets ``CANCEL_GRACE`` seconds to return its prompt; one that does not is
stopped (its process killed) and the next turn starts it again. An agent
that says nothing for ``agentSilenceTimeout`` seconds (a root config value;
the clock stops while the turn waits on a person) ends its turn with
``chat/error`` saying so, and is stopped the same way. Each turn is a task
of its own under a failure boundary (``ahpd.host.kernel.supervise``): whatever
fails inside it ends that turn with ``chat/error`` and nothing else.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import trio

from ahpd.backends.port import (
    BackendError,
    ClientToolCall,
    Event,
    InputRequest,
    PermissionRequest,
    Update,
)
from ahpd.backends.translate import TurnTranslator, pending_edits

# Aliased: ``annotations`` is also the name ``from __future__ import annotations`` binds.
from ahpd.host.sessions import annotations as session_annotations
from ahpd.host.sessions import session_config, summaries
from ahpd.host.sessions.chats import auto_approve, background_work, rewind, workers
from ahpd.host.kernel.bus import utc_now
from ahpd.host.kernel.dispatch import Apply
from ahpd.host.kernel.supervise import supervised

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.chat import Chat

log = logging.getLogger("ahpd.host")

#: Seconds a cancelled turn's agent gets to return its prompt before it is stopped.
CANCEL_GRACE = 10.0


class TurnRunner:
    def __init__(self, chat: Chat, turn_id: str, previous: TurnRunner | None = None) -> None:
        self.chat = chat
        self.turn_id = turn_id
        #: A cancelled turn whose prompt the agent has not returned yet: this
        #: one is sent only after it, and hears nothing before its own prompt.
        self.previous = previous
        self.live = False
        self.done = trio.Event()
        self.translator = TurnTranslator(turn_id)
        self.translator.worker_chat = lambda call_id: workers.chat_uri(chat.session.uri, call_id)
        self.started = time.monotonic()
        self.ended = False
        #: toolCallId -> (permission request id, options) awaiting an answer
        self.permissions: dict[str, PermissionRequest] = {}
        self.inputs: dict[str, InputRequest] = {}
        #: toolCallId -> the call of a client's tool waiting on that client
        self.client_calls: dict[str, ClientToolCall] = {}
        #: The turn's own scope: its chat's disposal cancels it.
        self.scope = trio.CancelScope()
        self.conversation: Any = None
        self._prompt_scope: trio.CancelScope | None = None
        #: Its deadline is when the agent's silence ends the turn.
        self._silence: trio.CancelScope | None = None
        #: Set when the agent is to be told to stop (a cancel, a failure).
        self._stop = trio.Event()

    def duration(self) -> int:
        return max(0, round((time.monotonic() - self.started) * 1000))

    def emit(self, action: dict[str, Any]) -> None:
        self.chat.host.bus.emit(self.chat.uri, action)
        workers.follow(self.chat, action)
        self.chat.session.save_soon()  # what was said so far reaches the disk in batches

    def end(self, action: dict[str, Any]) -> None:
        """The one ending; anything after it is dropped."""
        if self.ended:
            return
        self.ended = True
        self.lift_all()
        self.emit(action)
        for extra in self.translator.finish():
            self.emit(extra)
        self.chat.host.sessions.sync_summary(self.chat)

    def lift_all(self) -> None:
        for call_id in list(self.permissions):
            self.lift(call_id)
        for request_id in list(self.inputs):
            self.inputs.pop(request_id)
            self._emit_session({"type": "session/inputNeededRemoved", "id": request_id})
        for call_id in list(self.client_calls):
            self.lift_client_call(call_id)

    def lift_client_call(self, call_id: str) -> ClientToolCall | None:
        call = self.client_calls.pop(call_id, None)
        if call is not None:
            self._emit_session({"type": "session/inputNeededRemoved", "id": client_request_id(call_id)})
        self.heard()
        return call

    def lift(self, call_id: str) -> None:
        request = self.permissions.pop(call_id, None)
        if request is not None:
            self._emit_session({"type": "session/inputNeededRemoved", "id": request.request_id})
        self.chat.host.sessions.settle_edits(call_id)
        self.heard()

    def heard(self) -> None:
        """The agent said something, or a person answered it: the silence
        clock starts again (and stands still while a person is asked)."""
        if self._silence is None:
            return
        timeout = float(self.chat.host.config("agentSilenceTimeout") or 0)
        waiting = (
            self.permissions
            or self.inputs
            or self.client_calls
            or any(w.permissions for w in self.chat.workers.values())
        )  # a subagent's question
        self._silence.deadline = math.inf if waiting or timeout <= 0 else trio.current_time() + timeout

    def _emit_session(self, action: dict[str, Any]) -> None:
        self.chat.host.bus.emit(self.chat.session.uri, action)

    def agent_gone(self, conversation: Any, *, stopped: bool) -> None:
        """The agent's task ended (``stopped``: because the host ended it): a
        prompt still waiting on it never returns."""
        if conversation is not self.conversation or self._prompt_scope is None:
            return
        if not stopped:
            self._fail(
                "AgentGone",
                "the agent went away"
                + (f": {conversation.end_reason}" if getattr(conversation, "end_reason", None) else ""),
            )
        self._prompt_scope.cancel()

    def failed(self, exc: BaseException) -> None:
        """A fault in this turn (or in handling its agent's events): the turn
        ends with ``chat/error``, and its agent is told to stop."""
        self._fail(type(exc).__name__, str(exc) or type(exc).__name__)
        self.stop()

    async def until_stopped(self) -> None:
        """Until the turn is told to stop (cancelled, failed)."""
        await self._stop.wait()

    def stop(self) -> None:
        """The turn has ended: its agent is told to stop (and stopped, if it
        does not within ``CANCEL_GRACE``)."""
        self._stop.set()

    async def run(self, text: str, attachments: list[dict[str, Any]]) -> None:
        chat = self.chat
        chat.rest()  # no idle stop while a turn runs
        chat.session.save_soon()  # its prompt, kept should the host stop before it ends
        with supervised(f"turn {self.turn_id} of {chat.uri}", self.failed):
            try:
                with self.scope:
                    await self._run(text, attachments)
            finally:
                self.done.set()
                if chat.turn is self and self.ended:
                    # One cancelled with its session's failed nursery stays
                    # until that failure's report ends it.
                    chat.turn = None
                chat.rest()
        with supervised(f"after turn {self.turn_id} of {chat.uri}"):
            rewind.remember(chat, self.turn_id, self.conversation)
            for ended in chat.hooks.turn_ended:  # the changesets read what it changed
                await ended(chat.session, self.turn_id)
            chat.session.save()
            take_up_queued(chat)
            chat.host.sessions.refresh_catalogue_soon(chat.session.provider)

    async def _run(self, text: str, attachments: list[dict[str, Any]]) -> None:
        chat = self.chat
        if self.previous is not None:
            await self.previous.done.wait()
            self.previous = None
        if self.ended:
            return  # cancelled before it began: the agent never hears of it
        try:
            conversation = await chat.ensure_agent()
            await rewind.catch_up(chat, conversation)
            conversation = await session_config.settle(chat, conversation)
        except BackendError as err:
            self._fail(err.error_type, err.message)
            return
        if self.ended:
            return  # cancelled while its agent started
        for started in chat.hooks.turn_started:  # the tree it starts from is kept
            await started(chat.session, self.turn_id)
        if chat.preamble:
            text, chat.preamble = f"{chat.preamble}\n\n{text}", None
        offer_client_tools(chat)
        self.conversation = conversation
        self.live = True
        async with trio.open_nursery() as nursery:
            self._prompt_scope = trio.CancelScope()
            nursery.start_soon(self._watch, conversation)
            try:
                with self._prompt_scope:
                    result = await conversation.prompt(text, attachments)
            except BackendError as err:
                self._fail(err.error_type, err.message)
                return
            finally:
                nursery.cancel_scope.cancel()
        if self._prompt_scope.cancelled_caught:
            return  # the agent was stopped; the ending is said
        if result.usage:
            self.emit({"type": "chat/usage", "turnId": self.turn_id, "usage": result.usage})
        if result.stop_reason == "cancelled":
            self.end({"type": "chat/turnCancelled", "turnId": self.turn_id, "duration": self.duration()})
        else:
            self.end({"type": "chat/turnComplete", "turnId": self.turn_id, "duration": self.duration()})

    async def _watch(self, conversation: Any) -> None:
        """Beside the prompt: ends the turn when the agent falls silent, and
        stops an agent told to stop that keeps its prompt past the grace."""
        with trio.CancelScope() as self._silence:
            self.heard()
            await self._stop.wait()
        if self._silence.cancelled_caught:
            timeout = float(self.chat.host.config("agentSilenceTimeout") or 0)
            log.warning("%s: turn %s: the agent said nothing for %g s", self.chat.uri, self.turn_id, timeout)
            self._fail("AgentSilent", f"the agent produced nothing for {timeout:g} seconds")
        with trio.move_on_after(CANCEL_GRACE):
            with supervised(f"{self.chat.uri}: cancelling turn {self.turn_id}"):
                await conversation.cancel()
            await trio.sleep_forever()  # until the prompt returns, which cancels this task
        log.warning(
            "%s: turn %s: the agent kept its prompt %g s after being told to stop; stopping it",
            self.chat.uri,
            self.turn_id,
            CANCEL_GRACE,
        )
        await self.chat.stop_agent()
        if self._prompt_scope is not None:
            self._prompt_scope.cancel()

    def _fail(self, error_type: str, message: str) -> None:
        part: dict[str, Any] = {"kind": "error", "error": {"errorType": error_type, "message": message}}
        if not self.ended and rewind.resumable(self.chat):
            part["resumable"] = True  # chat/turnResume runs it again
        self.end({"type": "chat/error", "turnId": self.turn_id, "duration": self.duration(), "part": part})


LEFT = "the client that provides this tool has left"


def client_request_id(call_id: str) -> str:
    """The ``inputNeeded`` id of a call waiting on a client."""
    return f"client-tool-{call_id}"


def announced_tools(chat: Chat) -> dict[str, list[dict[str, Any]]]:
    """client id -> the ``ToolDefinition``s it announces on the chat's session."""
    out: dict[str, list[dict[str, Any]]] = {}
    for client in chat.session.state().get("activeClients") or []:
        tools = [dict(t) for t in client.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("name"), str)]
        if tools and isinstance(client.get("clientId"), str):
            out[client["clientId"]] = tools
    return out


def offer_client_tools(chat: Chat) -> None:
    """Before a turn: the agent is offered what the active clients announce now."""
    offer = getattr(chat.conversation, "set_client_tools", None)
    if offer is not None:
        try:
            offer(announced_tools(chat))
        except Exception:  # noqa: BLE001 - the turn runs with the tools the agent has
            log.exception("%s: offering the clients' tools failed", chat.uri)


def _client_connected(chat: Chat, client_id: str) -> bool:
    return any(p.client_id == client_id for p in chat.host.peers)


def _fail_client_call(chat: Chat, call_id: str, message: str) -> None:
    complete = getattr(chat.conversation, "complete_client_tool", None)
    if complete is not None:
        complete(call_id, {"success": False, "pastTenseMessage": message, "error": {"message": message}})


def client_gone(chat: Chat, client_id: str) -> None:
    """``client_id`` has no connection left: every call waiting on it is
    answered as failed (the agent then writes the failed tool result, which
    completes the row), and its entries are lifted."""
    turn = chat.turn
    if turn is not None:
        for call_id, call in list(turn.client_calls.items()):
            if call.client_id == client_id:
                turn.lift_client_call(call_id)
    fail = getattr(chat.conversation, "fail_client_tools", None)
    if fail is not None:
        fail(client_id, LEFT)


def start_turn(chat: Chat, turn_id: str, message: dict[str, Any]) -> None:
    """Run a turn whose ``chat/turnStarted`` has been applied."""
    session_config.from_message(chat, message)
    turn = chat.turn = TurnRunner(chat, turn_id, previous=chat.turn)
    attachments = session_annotations.resolve(chat.host, list(message.get("attachments") or []))
    chat.session.nursery.start_soon(
        turn.run, message.get("text", ""), attachments, name=f"turn {turn_id} of {chat.uri}"
    )
    _name_after_first_message(chat, message.get("text", ""))
    chat.host.sessions.sync_summary(chat)


def take_up_queued(chat: Chat) -> None:
    """The protocol's queue is the queue: when a turn ends, the host starts
    the next queued message itself, saying which one it took up."""
    if chat.host.bus.channels.get(chat.uri) is None:
        return  # the chat is gone
    state = chat.state()
    pending = state.get("steeringMessage") or next(iter(state.get("queuedMessages") or []), None)
    if state.get("activeTurn") is not None or (chat.turn is not None and not chat.turn.ended) or not pending:
        return
    turn_id = chat.host.sessions.new_turn_id()
    started = {
        "type": "chat/turnStarted",
        "turnId": turn_id,
        "startedAt": utc_now(),
        "message": pending["message"],
        "queuedMessageId": pending["id"],
        **_sender_of(pending["message"]),
    }
    for taker in chat.hooks.turn_takers:  # a queued !command runs in a terminal too
        taken = taker(chat.host, None, chat, started)
        if isinstance(taken, Apply):
            chat.host.bus.emit(chat.uri, started)
            if taken.after is not None:
                taken.after()
            return
    chat.host.bus.emit(chat.uri, started)
    start_turn(chat, turn_id, pending["message"])


def _sender_of(message: dict[str, Any]) -> dict[str, Any]:
    sender = (message.get("_meta") or {}).get("ahpd.sender")
    return {"_meta": {"ahpd.sender": sender}} if sender else {}


def on_event(chat: Chat, event: Event) -> None:
    """A backend event, in arrival order."""
    turn = chat.turn
    if isinstance(event, Update):
        if workers.route(chat, event.update):
            return  # a subagent's: its worker chat's, whether or not a turn runs
        if background_work.said(chat, event.update):
            return  # the chat's, whether or not a turn runs
        if event.update.get("sessionUpdate") == "available_commands_update":
            chat.commands = list(event.update.get("availableCommands") or [])
            if chat.host.bus.channels.get(chat.session.uri) is not None:
                chat.session.publish_commands(chat.commands)
        if event.update.get("sessionUpdate") in session_config.AGENT_UPDATES:
            session_config.agent_said(chat, event.update)
        if event.update.get("sessionUpdate") == "session_info_update":
            summaries.agent_said_info(chat.session, event.update)  # the model it is on
        if turn is None or turn.ended or not turn.live:
            return  # history replayed on resume, or a straggler of a turn that ended
        actions = turn.translator.feed(event.update)
        for action in actions:
            turn.emit(action)
            if action["type"] == "chat/toolCallComplete" and action["toolCallId"] in turn.client_calls:
                turn.lift_client_call(action["toolCallId"])
            for said in chat.hooks.turn_action:  # changesets, terminals
                said(chat, action)
        if any(a["type"] == "chat/activityChanged" for a in actions):
            chat.host.sessions.sync_summary(chat)
    elif isinstance(event, PermissionRequest):
        if workers.asks(chat, event):
            return  # a subagent's call: asked in its worker chat
        if turn is None or turn.ended or not turn.live:
            _answer_later(chat, event)
            return
        if auto_approve.approved(chat, turn, event):
            return
        call_id = event.tool_call["toolCallId"]
        for block, edit in pending_edits(call_id, event.tool_call.get("content") or []):
            # Served until the call is settled, so the diff is drawn before anybody decides.
            edit_of_call = (call_id, block["path"], block["newText"])
            chat.host.sessions.pending_edits[edit["after"]["content"]["uri"]] = edit_of_call
        for action in turn.translator.permission(event):
            turn.emit(action)
        turn.permissions[call_id] = event
        pending = _tool_call_state(chat, turn.turn_id, call_id)
        if pending is not None:
            turn._emit_session(
                {
                    "type": "session/inputNeededSet",
                    "request": {
                        "id": event.request_id,
                        "chat": chat.uri,
                        "kind": "toolConfirmation",
                        "turnId": turn.turn_id,
                        "toolCall": pending,
                    },
                }
            )
        chat.host.sessions.sync_summary(chat)  # the chat waits on a person: its row and the root's say so
    elif isinstance(event, InputRequest):
        if turn is None or turn.ended or not turn.live:
            _answer_later(chat, event)
            return
        request: dict[str, Any] = {"id": event.request_id, "message": event.message}
        if event.questions:
            request["questions"] = list(event.questions)
        turn.inputs[event.request_id] = event
        turn.emit({"type": "chat/inputRequested", "request": request})
        turn._emit_session(
            {
                "type": "session/inputNeededSet",
                "request": {
                    "id": event.request_id,
                    "chat": chat.uri,
                    "kind": "chatInput",
                    "request": request,
                },
            }
        )
        chat.host.sessions.sync_summary(chat)

    elif isinstance(event, ClientToolCall):
        call_id = event.tool_call_id
        if turn is None or turn.ended or not turn.live:
            _fail_client_call(chat, call_id, "no turn is running to report the call against")
            return
        if not _client_connected(chat, event.client_id):
            _fail_client_call(chat, call_id, LEFT)
            return
        turn.client_calls[call_id] = event
        running = _tool_call_state(chat, turn.turn_id, call_id)
        if running is not None and running.get("status") == "running":
            turn._emit_session(
                {
                    "type": "session/inputNeededSet",
                    "request": {
                        "id": client_request_id(call_id),
                        "chat": chat.uri,
                        "kind": "toolClientExecution",
                        "turnId": turn.turn_id,
                        "clientId": event.client_id,
                        "toolCall": running,
                    },
                }
            )


def _answer_later(chat: Chat, event: Event) -> None:
    """Nobody can be asked outside a turn: the agent is told no."""
    if chat.conversation is None:
        return
    if isinstance(event, PermissionRequest):
        chat.conversation.answer_permission(event.request_id, None)
    elif isinstance(event, InputRequest):
        chat.conversation.answer_input(event.request_id, "cancel", None)


def _tool_call_state(chat: Chat, turn_id: str, call_id: str) -> dict[str, Any] | None:
    active = chat.state().get("activeTurn")
    if not active or active.get("id") != turn_id:
        return None
    for part in active.get("responseParts", []):
        call = part.get("toolCall") if part.get("kind") == "toolCall" else None
        if call and call.get("toolCallId") == call_id:
            return call
    return None


def _name_after_first_message(chat: Chat, text: str) -> None:
    """An untitled session is one nobody can find again: name it."""
    session_state = chat.session.state()
    title = " ".join(text.split())[:60]
    if session_state.get("title") or not title:
        return
    host = chat.host
    host.bus.emit(chat.session.uri, {"type": "session/titleChanged", "title": title})
    host.sessions.notify_summary(chat.session, {"title": title})


# -- what the kernel and the sessions core ask (ahpd.host.table) ----------------------------


def agent_extras(chat: Chat, accepts: Collection[str]) -> dict[str, Any]:
    """The tools the chat's active clients run, for a backend that takes them."""
    return {"client_tools": announced_tools(chat)} if "client_tools" in accepts else {}


def client_gone_everywhere(host: Host, client_id: str) -> None:
    """``client_id`` has no connection left: the calls of its tools that
    agents wait on are answered as failed, so no turn waits for ever."""
    if host.sessions is None:
        return
    for session in list(host.sessions.sessions.values()):
        for chat in list(session.chats.values()):
            client_gone(chat, client_id)
