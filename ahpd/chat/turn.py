"""One turn of ``ahpd chat``: send the message, show what comes, answer what is asked.

Ctrl-C while the turn runs dispatches ``chat/turnCancelled`` for it and the
turn ends when the host says it did; a second Ctrl-C in the same turn gives
up waiting and leaves (status 130). SIGINT is received for the client's
whole life (:class:`Interrupts`), so one that lands between a turn and the
next prompt leaves too instead of raising somewhere arbitrary. While a
question or a tool confirmation is on screen the prompt has the terminal in
raw mode, so Ctrl-C arrives there as a key: it cancels the turn the same way
(an open question is first answered ``cancel``).
"""

from __future__ import annotations

import datetime
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from ahpd.chat.connection import Connection
from ahpd.chat.render import Screen, plain


def utc_now() -> str:
    """Now, as the protocol writes a time (the host's own helper would import the host)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Interrupts:
    """Where Ctrl-C (SIGINT) goes: to the running turn, or else out of ``ahpd chat``."""

    def __init__(self) -> None:
        self.turn: _Turn | None = None
        #: Around everything the client does; cancelled to leave with status 130.
        self.scope = trio.CancelScope()

    async def watch(self) -> None:
        """Take SIGINT for as long as the client runs. Each one counts: trio's own
        signal receiver would fold two quick Ctrl-C into one."""
        token = trio.lowlevel.current_trio_token()
        send, received = trio.open_memory_channel[None](100)

        def on_sigint(signum: int, frame: Any) -> None:
            token.run_sync_soon(_offer, send)

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            async for _ in received:
                if self.turn is not None and not self.turn.cancelling:
                    await self.turn.cancel()
                else:
                    self.scope.cancel()
        finally:
            signal.signal(signal.SIGINT, previous)


def _offer(send: trio.MemorySendChannel[None]) -> None:
    try:
        send.send_nowait(None)
    except trio.WouldBlock:
        pass  # a hundred unread Ctrl-C say the same as one


async def in_thread(fn: Any, *args: Any) -> Any:
    """Run a prompt in a worker thread; abandoned if the client leaves meanwhile
    (the terminal's settings are restored on the way out)."""
    return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)


@dataclass
class Chat:
    """What a turn needs: the connection, the screen, and how to ask."""

    conn: Connection
    screen: Screen
    channel: str
    yes: bool = False
    interactive: bool = field(default_factory=sys.stdin.isatty)
    history: Path | None = None
    interrupts: Interrupts = field(default_factory=Interrupts)
    _prompter: Any = None

    @property
    def prompter(self) -> Any:
        if self._prompter is None:
            from ahpd.chat.prompt import Prompter  # lazily: prompt_toolkit, ~20 ms a one-shot chat may not need

            self._prompter = Prompter(self.history)
        return self._prompter


class _Turn:
    def __init__(self, chat: Chat, text: str) -> None:
        self.chat = chat
        self.text = text
        self.turn_id = f"turn-{uuid.uuid4().hex[:12]}"
        self.started = time.monotonic()
        self.cancelling = False
        self.kinds: dict[str, str] = {}
        self.tools: dict[str, str] = {}
        self.invocations: set[str] = set()  # what a tool says it does, as activity says it too

    async def cancel(self) -> None:
        if self.cancelling:
            return
        self.cancelling = True
        self.chat.screen.info("cancelling the turn… (Ctrl-C again to quit)", style="yellow")
        await self.chat.conn.dispatch(
            self.chat.channel,
            {
                "type": "chat/turnCancelled",
                "turnId": self.turn_id,
                "duration": int((time.monotonic() - self.started) * 1000),
            },
        )

    async def run(self) -> tuple[str, str]:
        await self.chat.conn.dispatch(
            self.chat.channel,
            {
                "type": "chat/turnStarted",
                "turnId": self.turn_id,
                "startedAt": utc_now(),
                "message": {"text": self.text, "origin": {"kind": "user"}},
            },
        )
        self.chat.screen.start()
        async for envelope in self.chat.conn.actions:
            ended = await self.on(envelope)
            if ended is not None:
                return ended
        return "error", "the connection to the daemon closed"

    async def on(self, envelope: dict[str, Any]) -> tuple[str, str] | None:
        action = envelope["action"]
        kind = action.get("type")
        screen = self.chat.screen
        if envelope.get("rejectionReason"):
            if kind == "chat/turnStarted" and action.get("turnId") == self.turn_id:
                return "refused", envelope["rejectionReason"]
            screen.error(f"[refused {kind}: {envelope['rejectionReason']}]")
            return None
        if envelope.get("channel") != self.chat.channel:
            return None
        if kind == "chat/inputRequested":  # carries no turnId: the chat's active turn is ours
            await self.answer(action["request"])
            return None
        if kind == "chat/activityChanged":  # nor this: a plan's step, or the tool running
            text = action.get("activity")
            screen.activity(text, tool=text in self.tools.values() or text in self.invocations)
            return None
        if action.get("turnId") != self.turn_id:
            return None
        if kind == "chat/responsePart":
            part = action["part"]
            if part["kind"] in ("markdown", "reasoning"):
                self.kinds[part["id"]] = part["kind"]
                screen.text(part["id"], part["kind"], part.get("content", ""))
            elif part["kind"] == "systemNotification":
                screen.info(plain(part.get("content")))
            elif part["kind"] == "resource":
                screen.info(f"resource: {plain(part.get('uri', ''))}")
        elif kind in ("chat/delta", "chat/reasoning"):
            screen.text(action["partId"], self.kinds.get(action["partId"], "markdown"), action.get("content", ""))
        elif kind == "chat/toolCallStart":
            self.tools[action["toolCallId"]] = action.get("displayName") or action.get("toolName", "tool")
            screen.tool_started(self.tools[action["toolCallId"]])
        elif kind == "chat/toolCallReady":
            self.invocations.add(action.get("invocationMessage") or "")
            if "confirmed" not in action:
                await self.confirm(action)
        elif kind == "chat/toolCallConfirmed" and action.get("approved") is False:
            # Denied (here or by another client): the call never runs, and
            # no chat/toolCallComplete will come to say so.
            screen.tool_denied(self.tools.get(action["toolCallId"], "tool"))
        elif kind == "chat/toolCallComplete":
            result = action.get("result") or {}
            name = self.tools.get(action["toolCallId"], "tool")
            message = plain(result.get("pastTenseMessage") or name)
            if not result.get("success") and result.get("error"):
                message += f": {plain(result['error'].get('message', ''))}"
            screen.tool_finished(name, bool(result.get("success")), message)
        elif kind == "chat/turnComplete":
            return "complete", ""
        elif kind == "chat/turnCancelled":
            return "cancelled", ""
        elif kind == "chat/error":
            error = action["part"]["error"]
            how = "agent" if error.get("errorType") == "AgentDidNotStart" else "error"  # exit status 8, not 1
            return how, plain(error.get("message", "the turn failed"))
        return None

    # -- what the turn asks -----------------------------------------------------------

    async def confirm(self, action: dict[str, Any]) -> None:
        question = f"Allow {plain(action.get('confirmationTitle') or action.get('invocationMessage'))}?"
        screen = self.chat.screen
        if self.chat.yes:
            screen.decision(question, "yes", "--yes")
            approved = True
        elif not self.chat.interactive:
            screen.decision(question, "no", "not a terminal; --yes allows")
            approved = False
        else:
            screen.pause()
            try:
                approved = await in_thread(self.chat.prompter.yes_no, question)
            except (KeyboardInterrupt, EOFError):
                await self.cancel()
                return
            finally:
                screen.resume()
        confirm: dict[str, Any] = {
            "type": "chat/toolCallConfirmed",
            "turnId": self.turn_id,
            "toolCallId": action["toolCallId"],
            "approved": approved,
        }
        confirm.update({"confirmed": "user-action"} if approved else {"reason": "denied"})
        await self.chat.conn.dispatch(self.chat.channel, confirm)

    async def answer(self, request: dict[str, Any]) -> None:
        screen = self.chat.screen
        rid = request["id"]
        if not self.chat.interactive:
            asked = plain(request.get("message") or "The agent asks a question")
            screen.decision(f"{asked}:", "declined", "not a terminal")
            await self._complete(rid, "decline")
            return
        screen.pause()
        try:
            answers = await in_thread(self.chat.prompter.answers, request, screen.info)
        except (KeyboardInterrupt, EOFError):
            await self._complete(rid, "cancel")
            await self.cancel()
            return
        finally:
            screen.resume()
        if answers is None:
            await self._complete(rid, "decline")
            return
        for qid, answer in answers.items():
            await self.chat.conn.dispatch(
                self.chat.channel,
                {"type": "chat/inputAnswerChanged", "requestId": rid, "questionId": qid, "answer": answer},
            )
        await self._complete(rid, "accept", answers)

    async def _complete(self, rid: str, response: str, answers: dict[str, Any] | None = None) -> None:
        action: dict[str, Any] = {"type": "chat/inputCompleted", "requestId": rid, "response": response}
        if answers:
            action["answers"] = answers
        await self.chat.conn.dispatch(self.chat.channel, action)


async def run_turn(chat: Chat, text: str) -> str:
    """Run one turn to its end; returns ``complete``, ``cancelled``, ``error``, ``agent`` (its
    agent did not start) or ``refused``."""
    turn = _Turn(chat, text)
    chat.interrupts.turn = turn
    try:
        how, message = await turn.run()
    except trio.Cancelled:  # a second Ctrl-C: the client is leaving
        chat.screen.finish("cancelled")
        raise
    finally:
        chat.interrupts.turn = None
    chat.screen.finish(how, message)
    return how
