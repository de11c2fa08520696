"""``ahpd chat`` from start to exit: connect, pick the session, talk.

Exit status: 0 when the one-shot turn completed, or the input ended: Ctrl-D
at the prompt, or the end of standard input that is not a terminal (the end
of input is how a session is finished, as in a shell); 1 when the turn failed
or was refused; 130 when the user left with Ctrl-C; 141, silently, when the
reader of standard output closed it (``| head``). A daemon that cannot be
reached, a refused token, an unknown provider or an agent that did not start
are said by the command line with their own statuses (``ahpd.cli_errors``).
With ``--json`` the screen is :class:`~ahpd.chat.events.JsonScreen`.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

import trio

from ahpd.chat.connection import Connection, HostError, find_url
from ahpd.chat.events import JsonScreen
from ahpd.chat.render import OutputClosed, Screen, warm
from ahpd.chat.sessions import choose, list_sessions, remember, row_line
from ahpd.chat.turn import Chat, Interrupts, in_thread, run_turn
from ahpd.cli_errors import explain_chat

MAX_MESSAGE = 64 * 2**20
#: The reader closed standard output: 128 + SIGPIPE, as a shell says it.
EXIT_OUTPUT_CLOSED = 141


async def run_chat(args: argparse.Namespace) -> int:
    from trio_websocket import ConnectionClosed, HandshakeError, open_websocket_url

    screen: Any = JsonScreen() if args.json else Screen()
    url = args.url or find_url(args.data_dir)
    interrupts = Interrupts()
    status = 130  # unless the talk below ends by itself
    try:
        async with open_websocket_url(url, max_message_size=MAX_MESSAGE) as ws, trio.open_nursery() as nursery:
            conn = Connection(ws)
            nursery.start_soon(partial(trio.to_thread.run_sync, warm, abandon_on_cancel=True))
            nursery.start_soon(conn.reader)
            nursery.start_soon(interrupts.watch)
            nursery.start_soon(screen.animate)
            with interrupts.scope:
                try:
                    await conn.initialize()
                    status = await _talk(conn, screen, args, interrupts)
                except HostError as exc:
                    # An unknown provider or an agent that did not start has its
                    # own exit status; anything else the host refused is 1.
                    failure = explain_chat(exc, args)
                    if failure is not None:
                        raise failure from None
                    screen.error(f"ahpd chat: {exc}")
                    status = 1
                except ConnectionClosed:
                    screen.error("ahpd chat: the daemon closed the connection")
                    status = 1
            nursery.cancel_scope.cancel()
    except (OSError, HandshakeError):
        # A daemon that is not there or refused the token: said in one line
        # with its own exit status by the command line (cli_errors.explain_chat).
        raise
    return status


async def _talk(conn: Connection, screen: Screen, args: argparse.Namespace, interrupts: Interrupts) -> int:
    if args.list:
        for row in await list_sessions(conn):
            # Tab-separated, for people and for cut(1); or the host's own row.
            print(json.dumps(row) if args.json else row_line(row), flush=True)
        return 0
    cwd = Path(args.cwd).resolve()  # noqa: ASYNC240 - once, before the chat starts: not worth a thread
    uri, created = await choose(
        conn, data_dir=args.data_dir, cwd=cwd, provider=args.provider, session=args.session, new=args.new
    )
    state = (await conn.call("subscribe", {"channel": uri}))["snapshot"]["state"]
    channel = state.get("defaultChat") or (state.get("chats") or [{}])[0].get("resource")
    if not channel:
        raise HostError(f"session {uri} has no chat to talk in")
    turns = len((await conn.call("subscribe", {"channel": channel}))["snapshot"]["state"].get("turns", []))
    screen.session(
        uri,
        title=state.get("title") or "",
        provider=state.get("provider", "?"),
        created=created,
        turns=turns,
        cwd=str(cwd),
    )
    chat = Chat(conn, screen, channel, yes=args.yes, history=args.data_dir / "chat-history", interrupts=interrupts)
    if args.json:
        chat.interactive = False  # a script's input is lines of messages, never answers at a prompt
    try:
        if args.message:
            ended = await run_turn(chat, " ".join(args.message))
            if ended == "agent":  # said by the command line with its own status (cli_errors.explain_chat)
                raise HostError(f"the {state.get('provider', '?')} agent did not start")
            return {"complete": 0, "cancelled": 130}.get(ended, 1)
        return await _prompt_loop(chat)
    finally:
        if args.dispose:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await conn.call("disposeSession", {"channel": uri})
            remember(args.data_dir, cwd.as_uri(), args.provider, None)


async def _prompt_loop(chat: Chat) -> int:
    while True:
        try:
            if chat.interactive:
                line = await in_thread(chat.prompter.line)
            else:
                line = await in_thread(sys.stdin.readline)
                if not line:
                    return 0  # the end of a script
        except EOFError:  # Ctrl-D: the end of input, as in a shell
            return 0
        except KeyboardInterrupt:
            return 130
        if line.strip():
            await run_turn(chat, line.rstrip("\n"))


def main(args: argparse.Namespace) -> Any:
    saved = _terminal_settings()
    if saved is not None:
        _no_control_echo(saved)
    try:
        return trio.run(run_chat, args)
    except KeyboardInterrupt:  # before the handler was installed
        return 130
    except OutputClosed:
        return EXIT_OUTPUT_CLOSED
    except BaseExceptionGroup as group:  # from the nursery the screen was written in
        if group.subgroup(lambda e: not isinstance(e, BaseExceptionGroup | OutputClosed | trio.Cancelled)) is None:
            return EXIT_OUTPUT_CLOSED
        raise
    finally:
        if saved is not None:  # a prompt abandoned mid-read leaves the terminal raw
            import termios

            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)


def _no_control_echo(saved: Any) -> None:
    """Keep the terminal from echoing Ctrl-C as ``^C`` while a turn runs: the
    two characters land wherever the live region left the cursor, before the
    line that says the turn is being cancelled. (Restored on the way out.)"""
    import termios

    quiet = list(saved)
    quiet[3] &= ~termios.ECHOCTL  # the local modes
    try:
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, quiet)
    except (OSError, termios.error):
        pass  # echoed as before: a cosmetic loss


def _terminal_settings() -> Any:
    try:
        import termios

        return termios.tcgetattr(sys.stdin.fileno()) if sys.stdin.isatty() else None
    except (ImportError, OSError, ValueError):
        return None
