"""Worker chats: a subagent's own chat, read-only, beside the chat that spawned it.

A Task or Agent call runs a subagent. The call stays a row of the chat that
made it; what the subagent does - its words, its thinking, its own tool
calls - is drawn in a chat of its own, which the protocol calls a worker:

* named like the reference host names one,
  ``ahp-chat://subagent/<base64url(session URI)>/<toolCallId>``, so the
  spawning call can carry the URI (``_meta.subagentChatUri``) from its first
  action, before the chat exists;
* opened in the session (``session/chatAdded``) once the call is ready, with
  ``origin: {kind: "tool", chat, toolCallId}`` and
  ``interactivity: "read-only"``, and one turn whose message is the call's
  ``prompt``; the call's result links back to it
  (``ToolResultSubagentContent``), so both ends name the same edge;
* fed by the backend's updates tagged with the spawning call's id
  (``_meta["ahpd.parentToolCallId"]``), through a translator of its own;
* ended when its call completes (an error when the call failed), or when
  the spawning turn ends first (cancelled with it); a subagent the harness
  runs in the background outlives both, and ends when its background entry
  is removed;
* asked in, when the subagent stops a call of its own to ask a person:
  the confirmation is drawn in the worker chat, the session's
  ``inputNeeded`` entry names it, and ``chat/toolCallConfirmed`` is answered
  there - the one thing a client may say in a worker;
* kept like any chat of its session (stored, restored, disposed with it),
  and refused anything a client would use to talk to it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import attrs

from ahpd.backends.port import PARENT_CALL_META, PermissionRequest
from ahpd.backends.translate import TurnTranslator
from ahpd.host.kernel.bus import utc_now
from ahpd.host.kernel.dispatch import Apply
from ahpd.host.sessions.chat import Chat
from ahpd.host.sessions.common import IDLE, default_chat_uri
from ahpd.host.sessions import summaries

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host

log = logging.getLogger("ahpd.host")

WORKER_SCHEME = "ahp-chat://subagent/"
READ_ONLY = "read-only"
#: What a client does to talk to a chat, or to make it run: none of it
#: reaches a worker, whose only speaker is the subagent.
TALKING = frozenset(
    {
        "chat/turnStarted",
        "chat/turnCancelled",
        "chat/turnResume",
        "chat/truncated",
        "chat/pendingMessageSet",
        "chat/queuedMessagesReordered",
        "chat/draftChanged",
        "chat/workingDirectorySet",
        "chat/workingDirectoryRemoved",
    }
)


def chat_uri(session_uri: str, call_id: str) -> str:
    """The worker chat of ``call_id``: the reference host's
    ``buildSubagentChatUri`` (the session encoded as in its default chat's
    URI, the call id percent-encoded as ``encodeURIComponent`` does)."""
    encoded = default_chat_uri(session_uri).removeprefix("ahp-chat://default/")
    return f"{WORKER_SCHEME}{encoded}/{quote(call_id, safe='!*()' + chr(39))}"


@attrs.define
class Worker:
    """A live worker: the subagent of ``call_id``, running its one turn."""

    chat: Chat
    call_id: str
    turn_id: str
    translator: TurnTranslator
    started: float = attrs.Factory(time.monotonic)
    #: The harness runs it in the background: it outlives its call and turn.
    background: bool = False
    #: Its entry on the spawning chat's ``backgroundWork``, once listed.
    work_id: str | None = None
    #: toolCallId -> the subagent's call waiting to be allowed.
    permissions: dict[str, PermissionRequest] = attrs.Factory(dict)

    def emit(self, action: dict[str, Any]) -> None:
        self.chat.host.bus.emit(self.chat.uri, action)


def read_only(host: Host, action_type: str, channel: str) -> str | None:
    """Why a client may not dispatch ``action_type`` on ``channel``, a
    read-only chat; None when it may."""
    target = host.bus.channels.get(channel)
    if action_type not in TALKING or target is None or target.state.get("interactivity") != READ_ONLY:
        return None
    origin = target.state.get("origin") or {}
    spawner = f" of {origin['chat']}" if origin.get("kind") == "tool" and origin.get("chat") else ""
    return (
        f"{channel} is read-only: it is the worker chat of tool call {origin.get('toolCallId', '?')}{spawner}, "
        "and only its subagent speaks in it; talk to the chat that spawned it"
    )


def _call_of(parent: Chat, call_id: str) -> Any:
    turn = parent.turn
    return turn.translator.tools.get(call_id) if turn is not None else None


def open_worker(parent: Chat, call_id: str, raw_input: Any) -> Worker | None:
    """Open the worker chat of ``call_id`` and start its one turn, the
    subagent's prompt as its message; None when that chat exists already."""
    host, session = parent.host, parent.session
    uri = chat_uri(session.uri, call_id)
    if host.sessions is None or uri in host.bus.channels or session.disposed:
        return None
    args = raw_input if isinstance(raw_input, dict) else {}
    title = next(
        (args[k] for k in ("description", "subagent_type") if isinstance(args.get(k), str) and args[k]), "Subagent"
    )
    now = utc_now()
    origin = {"kind": "tool", "chat": parent.uri, "toolCallId": call_id}
    state: dict[str, Any] = {
        "resource": uri,
        "title": title,
        "status": IDLE,
        "modifiedAt": now,
        "turns": [],
        "origin": origin,
        "interactivity": READ_ONLY,
    }
    host.bus.open(uri, "chat", state)
    chat = Chat(session, uri)
    chat.folder = parent.folder
    session.chats[uri] = chat
    host.sessions.chat_owner[uri] = chat
    host.bus.emit(
        session.uri,
        {
            "type": "session/chatAdded",
            "summary": {
                "resource": uri,
                "title": title,
                "status": IDLE,
                "modifiedAt": now,
                "origin": origin,
                "interactivity": READ_ONLY,
            },
        },
    )
    turn_id = host.sessions.new_turn_id()
    translator = TurnTranslator(turn_id)
    translator.worker_chat = lambda nested: chat_uri(session.uri, nested)
    worker = parent.workers[call_id] = Worker(
        chat, call_id, turn_id, translator, background=bool(args.get("run_in_background"))
    )
    prompt = args.get("prompt") if isinstance(args.get("prompt"), str) else ""
    worker.emit(
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": now,
            "message": {"text": prompt, "origin": {"kind": "agent"}},
        }
    )
    host.sessions.sync_summary(chat)
    session.save()
    log.info("%s: tool call %s runs a subagent in %s", parent.uri, call_id, uri)
    return worker


def route(parent: Chat, update: dict[str, Any]) -> bool:
    """A subagent's update (tagged with its spawning call) goes to that
    call's worker chat, opened now if the call never said it was ready;
    False for any other update."""
    call_id, untagged = _untagged(update)
    if call_id is None:
        return False
    worker = parent.workers.get(call_id)
    if worker is None:
        if parent.host.bus.channels.get(chat_uri(parent.session.uri, call_id)) is not None:
            return True  # a straggler of a worker that has ended
        call = _call_of(parent, call_id)
        worker = open_worker(parent, call_id, call.raw_input if call is not None else None)
        if worker is None:
            return True
    actions = worker.translator.feed(untagged)
    for action in actions:
        worker.emit(action)
    if any(a["type"] == "chat/activityChanged" for a in actions):
        parent.host.sessions.sync_summary(worker.chat)
    if parent.turn is not None:
        parent.turn.heard()  # the silence clock stands still while a person is asked
    return True


def _untagged(update: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The spawning call an update is tagged with, and the update without the tag."""
    meta = update.get("_meta")
    if not isinstance(meta, dict) or not isinstance(meta.get(PARENT_CALL_META), str):
        return None, update
    call_id: str = meta[PARENT_CALL_META]
    untagged = {**update, "_meta": {k: v for k, v in meta.items() if k != PARENT_CALL_META}}
    if not untagged["_meta"]:
        del untagged["_meta"]
    return call_id, untagged


def asks(parent: Chat, event: PermissionRequest) -> bool:
    """A subagent's call waiting to be allowed: drawn in its worker chat and
    put on the session's ``inputNeeded`` naming that chat. One whose worker
    is not running is told no. False for a call of the chat's own."""
    call_id, call = _untagged(event.tool_call)
    if call_id is None:
        return False
    worker = parent.workers.get(call_id)
    if worker is None:
        if parent.conversation is not None:
            parent.conversation.answer_permission(event.request_id, None)
        return True
    request = PermissionRequest(event.request_id, call, event.options)
    for action in worker.translator.permission(request):
        worker.emit(action)
    asked = call["toolCallId"]
    worker.permissions[asked] = request
    active = worker.chat.state().get("activeTurn") or {}
    state = next(
        (
            p["toolCall"]
            for p in active.get("responseParts", [])
            if p.get("kind") == "toolCall" and p["toolCall"].get("toolCallId") == asked
        ),
        None,
    )
    if state is not None:
        parent.host.bus.emit(
            parent.session.uri,
            {
                "type": "session/inputNeededSet",
                "request": {
                    "id": request.request_id,
                    "chat": worker.chat.uri,
                    "kind": "toolConfirmation",
                    "turnId": worker.turn_id,
                    "toolCall": state,
                },
            },
        )
    parent.host.sessions.sync_summary(worker.chat)
    if parent.turn is not None:
        parent.turn.heard()  # the silence clock stands still while a person is asked
    return True


def _lift(parent: Chat, worker: Worker, call_id: str, option: str | None) -> None:
    request = worker.permissions.pop(call_id, None)
    if request is None:
        return
    parent.host.bus.emit(parent.session.uri, {"type": "session/inputNeededRemoved", "id": request.request_id})
    if parent.conversation is not None:
        parent.conversation.answer_permission(request.request_id, option)
    if parent.turn is not None:
        parent.turn.heard()


def tool_call_confirmed(host: Host, channel: str, action: dict[str, Any]) -> Apply | None:
    """``chat/toolCallConfirmed`` on a worker chat, for a call its subagent
    asked about: the answer goes to the spawning chat's agent. None for
    anything else (the usual rule answers it)."""
    owner = host.sessions.chat_owner if host.sessions is not None else {}
    target = host.bus.channels.get(channel)
    origin = (target.state.get("origin") or {}) if target is not None else {}
    parent = owner.get(origin.get("chat", "")) if origin.get("kind") == "tool" else None
    worker = parent.workers.get(origin.get("toolCallId", "")) if parent is not None else None
    request = worker.permissions.get(action["toolCallId"]) if worker and worker.turn_id == action["turnId"] else None
    if parent is None or worker is None or request is None:
        return None
    approved = bool(action.get("approved"))
    option = action.get("selectedOptionId")
    if option not in {o.option_id for o in request.options}:
        wanted = "allow" if approved else "reject"
        option = next((o.option_id for o in request.options if o.kind.startswith(wanted)), None)

    def after() -> None:
        for extra in worker.translator.confirmed(action["toolCallId"], approved):
            worker.emit(extra)
        _lift(parent, worker, action["toolCallId"], option)
        host.sessions.sync_summary(worker.chat)

    return Apply(action, after=after)


def end(parent: Chat, worker: Worker, how: str, message: str | None = None) -> None:
    """The worker's one turn ends: ``complete``, ``cancelled`` or ``error``;
    nobody is asked anything in it any more."""
    parent.workers.pop(worker.call_id, None)
    for call_id in list(worker.permissions):
        _lift(parent, worker, call_id, None)
    if worker.chat.uri not in parent.host.bus.channels:
        return
    duration = max(0, round((time.monotonic() - worker.started) * 1000))
    if how == "complete":
        worker.emit({"type": "chat/turnComplete", "turnId": worker.turn_id, "duration": duration})
    elif how == "cancelled":
        worker.emit({"type": "chat/turnCancelled", "turnId": worker.turn_id, "duration": duration})
    else:
        worker.emit(
            {
                "type": "chat/error",
                "turnId": worker.turn_id,
                "duration": duration,
                "part": {
                    "kind": "error",
                    "error": {"errorType": "SubagentFailed", "message": message or "the subagent failed"},
                },
            }
        )
    for extra in worker.translator.finish():
        worker.emit(extra)
    parent.host.sessions.sync_summary(worker.chat)
    worker.chat.session.save()


def follow(parent: Chat, action: dict[str, Any]) -> None:
    """Each action of the spawning chat's turn: a subagent call that is
    ready opens its worker, one that completed ends it, and the turn's
    ending ends the workers still running in the foreground."""
    kind = action.get("type")
    if kind == "chat/toolCallReady" and (action.get("_meta") or {}).get("toolKind") == "subagent":
        call_id = action["toolCallId"]
        if call_id not in parent.workers:
            call = _call_of(parent, call_id)
            open_worker(parent, call_id, call.raw_input if call is not None else None)
    elif kind == "chat/toolCallComplete":
        worker = parent.workers.get(action["toolCallId"])
        if worker is not None and not worker.background:
            result = action.get("result") or {}
            if result.get("success"):
                end(parent, worker, "complete")
            else:
                end(parent, worker, "error", (result.get("error") or {}).get("message"))
    elif kind in ("chat/turnComplete", "chat/error", "chat/turnCancelled"):
        turn_ended(parent, cancelled=kind != "chat/turnComplete")


def turn_ended(parent: Chat, *, cancelled: bool) -> None:
    """The spawning turn ended: its foreground subagents with it."""
    for worker in [w for w in parent.workers.values() if not w.background]:
        end(parent, worker, "cancelled" if cancelled else "complete")


def background_set(parent: Chat, update: dict[str, Any]) -> dict[str, Any]:
    """A backgrounded subagent's entry, with its worker chat: the one its
    spawning call links. The worker now outlives its call and turn."""
    work = dict(update["work"])
    call_id = update.get("toolCallId")
    if work.get("kind") == "subagent" and isinstance(call_id, str):
        work["chat"] = chat_uri(parent.session.uri, call_id)
        worker = parent.workers.get(call_id)
        if worker is not None:
            worker.background, worker.work_id = True, work["id"]
    return work


def background_removed(parent: Chat, work_id: Any) -> None:
    """A backgrounded subagent stopped: its worker's turn ends."""
    worker = next((w for w in parent.workers.values() if w.work_id == work_id), None)
    if worker is not None:
        end(parent, worker, "complete")


def of(chat_uri: str, session: Any) -> list[Chat]:
    """The worker chats that the tool calls of chat ``chat_uri`` spawned in ``session``."""
    channels = session.host.bus.channels
    return [
        c
        for c in session.chats.values()
        if c.uri in channels
        and (channels[c.uri].state.get("origin") or {}).get("kind") == "tool"
        and channels[c.uri].state["origin"].get("chat") == chat_uri
    ]


def carry(chat: Chat, source: Any, target: Any) -> None:
    """``chat`` has moved from session ``source`` to ``target``: its workers
    go with it, each under the URI it was given, right after it. Written
    down first, then said (``session/chatRemoved`` on the source,
    ``session/chatAdded`` on the destination); the caller then says the
    chat's own move and the destination's order."""
    moved = of(chat.uri, source)
    if not moved:
        return
    for worker in moved:
        del source.chats[worker.uri]
        older = source.older_turns.pop(worker.uri, None)
        if older:
            target.older_turns[worker.uri] = older
        worker.session = target
        worker.folder = worker.folder or (source.cwd if source.cwd != target.cwd else None)
        chat.host.sessions.store.move_chat(worker.uri, source.uri, target.uri)
    order = [u for u in target.chats if u not in {w.uri for w in moved}]
    at = order.index(chat.uri) + 1 if chat.uri in order else len(order)
    placed = order[:at] + [w.uri for w in moved] + order[at:]
    target.chats = {uri: (target.chats.get(uri) or next(w for w in moved if w.uri == uri)) for uri in placed}
    source.save()
    target.save()
    for worker in moved:
        chat.host.bus.emit(source.uri, {"type": "session/chatRemoved", "chat": worker.uri})
        chat.host.bus.emit(target.uri, {"type": "session/chatAdded", "summary": summaries.chat_row(worker)})
    log.info("%s took its workers %s to %s", chat.uri, [w.uri for w in moved], target.uri)
