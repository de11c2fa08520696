"""``!command`` turns: a turn whose message starts with ``!`` runs in a terminal.

The rest of the message runs in a terminal the session claims, under a
tool call of the turn, and never reaches the agent; the turn shows the
command's output and how it ended, and the agent hears of it with its next
prompt (its backend's ``ran``). Cut out from the terminals because it is a
turn: it speaks the chat's actions and ends as a turn does.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, Any

import trio

from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.kernel.supervise import supervised
from ahpd.host.sessions.chats.turns import TurnRunner, take_up_queued
from ahpd.host.terminals.terminal import Terminal

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat


# -- the turn ----------------------------------------------------------------------------

#: What a !command's turn shows of its output, at most (the terminal keeps the rest).
PREVIEW = 16 * 1024


def command_turn(host: Host, peer: Peer | None, chat: Any, action: dict[str, Any]) -> Refuse | Apply:
    """A turn whose message starts with ``!``: the rest runs in a terminal
    the session claims, and never reaches the agent. Its backend is told
    what ran (``ran``), so that the agent hears of it with the next prompt;
    a backend that cannot be told is refused rather than asked the command
    as a question."""
    command = action["message"].get("text", "")[1:].strip()
    backend = host.sessions.backends[chat.session.provider]
    if not hasattr(backend, "ran"):
        return Refuse(
            f"the {chat.session.provider} agent cannot be told what a !command ran, so this host "
            "does not run one in its sessions; send the message without the !"
        )
    if not command:
        return Refuse("a ! message names a command to run after the !")
    # The connection's shell; a queued message the host takes up has no connection.
    shell = (peer.config.get("defaultShell") if peer is not None else None) or os.environ.get("SHELL") or "/bin/sh"

    def start() -> None:
        turn = chat.turn = TurnRunner(chat, action["turnId"], previous=chat.turn)
        chat.session.nursery.start_soon(
            _run_command, turn, command, shell, backend, name=f"!command turn {turn.turn_id} of {chat.uri}"
        )

    return Apply(action, after=start)


async def _run_command(turn: Any, command: str, shell: str, backend: Any) -> None:
    chat = turn.chat
    with supervised(f"!command turn {turn.turn_id} of {chat.uri}", turn.failed):
        try:
            with turn.scope:
                await _command(turn, command, shell, backend)
        finally:
            turn.done.set()
            if chat.turn is turn and turn.ended:
                chat.turn = None
    with supervised(f"after !command turn {turn.turn_id} of {chat.uri}"):
        chat.session.save()
        take_up_queued(chat)


async def _command(turn: Any, command: str, shell: str, backend: Any) -> None:
    chat, terminals = turn.chat, turn.chat.host.terminals
    call_id = f"{turn.turn_id}.command"
    turn.emit(
        {
            "type": "chat/toolCallStart",
            "turnId": turn.turn_id,
            "toolCallId": call_id,
            "toolName": "terminal",
            "displayName": command,
            "_meta": {"toolKind": "terminal"},
        }
    )
    turn.emit(
        {
            "type": "chat/toolCallReady",
            "turnId": turn.turn_id,
            "toolCallId": call_id,
            "invocationMessage": command,
            "toolInput": command,
            "confirmed": "not-needed",
        }
    )
    claim = {
        "kind": "session",
        "session": chat.session.uri,
        "chat": chat.uri,
        "turnId": turn.turn_id,
        "toolCallId": call_id,
    }
    uri = terminals.new_uri("command")
    try:
        terminal = terminals.open(uri, [shell, "-c", command], claim=claim, title=command, folder=chat.session.cwd)
    except OSError as exc:
        turn.emit(
            {
                "type": "chat/toolCallComplete",
                "turnId": turn.turn_id,
                "toolCallId": call_id,
                "result": {
                    "success": False,
                    "pastTenseMessage": f"Could not run {command}",
                    "error": {"message": f"cannot start {shell}: {exc.strerror or exc}"},
                },
            }
        )
        turn.end({"type": "chat/turnComplete", "turnId": turn.turn_id, "duration": turn.duration()})
        return
    reference = {"type": "terminal", "resource": uri, "title": command, "isPty": True}
    turn.emit(
        {"type": "chat/toolCallContentChanged", "turnId": turn.turn_id, "toolCallId": call_id, "content": [reference]}
    )
    async with trio.open_nursery() as nursery:

        async def stop_on_cancel() -> None:
            await turn.until_stopped()
            terminal.kill()

        nursery.start_soon(stop_on_cancel)
        await terminal.exited.wait()
        nursery.cancel_scope.cancel()
    output = terminal.text() if uri in chat.host.bus.channels else ""
    code = terminal.exit_code
    preview = output[-PREVIEW:]
    result: dict[str, Any] = {"preview": preview, "truncated": len(preview) < len(output)}
    if code is not None:
        result["exitCode"] = code
    terminals.claim_call(uri, turn.turn_id, None)
    if turn.ended:
        return  # cancelled: the ending is said
    turn.emit(
        {
            "type": "chat/toolCallComplete",
            "turnId": turn.turn_id,
            "toolCallId": call_id,
            "result": {
                "success": code == 0,
                "pastTenseMessage": f"Ran {command}",
                "content": [{**reference, "result": result}],
                **({} if code == 0 else {"error": {"message": f"{command} exited with {_ended(terminal)}"}}),
            },
        }
    )
    shown = preview.replace("\r\n", "\n").rstrip("\n")
    text = (
        f"```\n{shown}\n```\n\n`{command}` exited with {_ended(terminal)}."
        if shown
        else f"`{command}` printed nothing and exited with {_ended(terminal)}."
    )
    said = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    for action in turn.translator.feed(said):
        turn.emit(action)
    note = backend.ran(command, output, code)
    if note:
        chat.preamble = f"{chat.preamble}\n\n{note}" if chat.preamble else note
    turn.end({"type": "chat/turnComplete", "turnId": turn.turn_id, "duration": turn.duration()})


def _ended(terminal: Terminal) -> str:
    signum = terminal.pty.exit_signal
    if signum:
        return f"signal {signal.Signals(signum).name}"
    return f"exit code {terminal.exit_code}"


# -- what the sessions and the kernel ask (ahpd.host.table) ---------------------------------


def capabilities_of(host: Any) -> dict[str, Any]:
    """A turn starting with ``!`` runs in a terminal, where the host has terminals."""
    return {"terminalCommandPrefix": "!"} if host.terminals is not None else {}


def take_command_turn(host: Any, peer: Peer | None, chat: Chat, action: dict[str, Any]) -> Refuse | Apply | None:
    """A ``!command`` runs in a terminal, not sent to the agent."""
    if host.terminals is None or not action["message"].get("text", "").startswith("!"):
        return None
    return command_turn(host, peer, chat, action)
