"""``ahpd chat``: talk to an agent through a running daemon, from a terminal.

A small AHP client, and the quickest way to see the daemon work: it finds
the daemon through its ``ahpd.json`` (or ``--url``), creates a session in
the current folder, and holds a conversation, printing the reply as it
streams and asking before a tool runs. It speaks only the protocol, so what
it shows is what any AHP client would be told.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import uuid
from pathlib import Path
from typing import Any, TextIO

import trio
from trio_websocket import open_websocket_url

ROOT = "ahp-root://"


class ChatClient:
    def __init__(self, ws: Any, out: TextIO, ask: Any) -> None:
        self.ws = ws
        self.out = out
        self.ask = ask  # async (question) -> bool
        self.ids = itertools.count(1)
        self.seq = itertools.count(1)
        self.replies: dict[int, trio.MemorySendChannel] = {}
        self.actions_send, self.actions = trio.open_memory_channel[dict](1000)

    async def reader(self) -> None:
        async for text in _messages(self.ws):
            frame = json.loads(text)
            if "id" in frame and "method" not in frame and frame["id"] in self.replies:
                await self.replies.pop(frame["id"]).send(frame)
            elif frame.get("method") == "action":
                await self.actions_send.send(frame["params"])

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        ident = next(self.ids)
        send, receive = trio.open_memory_channel[dict](1)
        self.replies[ident] = send
        await self.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
        reply = await receive.receive()
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']['message']}")
        return reply["result"]

    async def dispatch(self, channel: str, action: dict[str, Any]) -> None:
        await self.ws.send_message(json.dumps({"jsonrpc": "2.0", "method": "dispatchAction", "params": {
            "channel": channel, "clientSeq": next(self.seq), "action": action}}))

    async def turn(self, chat: str, text: str) -> str:
        """One turn: send it, show it, answer what is asked; returns how it ended."""
        turn_id = f"turn-{uuid.uuid4().hex[:12]}"
        await self.dispatch(chat, {
            "type": "chat/turnStarted", "turnId": turn_id, "startedAt": _now(),
            "message": {"text": text, "origin": {"kind": "user"}},
        })
        kinds: dict[str, str] = {}
        while True:
            envelope = await self.actions.receive()
            action = envelope["action"]
            if envelope.get("rejectionReason"):
                self.out.write(f"\n[refused: {envelope['rejectionReason']}]\n")
                return "refused"
            if envelope["channel"] != chat or action.get("turnId") != turn_id:
                continue
            kind = action["type"]
            if kind == "chat/responsePart":
                part = action["part"]
                kinds[part["id"]] = part["kind"]
                self._text(part["kind"], part.get("content", ""), new=True)
            elif kind in ("chat/delta", "chat/reasoning"):
                self._text(kinds.get(action["partId"], "markdown"), action["content"], new=False)
            elif kind == "chat/toolCallStart":
                self.out.write(f"\n[tool] {action['displayName']}\n")
            elif kind == "chat/toolCallReady" and "confirmed" not in action:
                approved = await self.ask(f"Allow {action['invocationMessage']}?")
                confirm: dict[str, Any] = {"type": "chat/toolCallConfirmed", "turnId": turn_id,
                                           "toolCallId": action["toolCallId"], "approved": approved}
                confirm.update({"confirmed": "user-action"} if approved else {"reason": "denied"})
                await self.dispatch(chat, confirm)
            elif kind == "chat/toolCallComplete":
                ok = "done" if action["result"]["success"] else "failed"
                self.out.write(f"[tool {ok}]\n")
            elif kind in ("chat/turnComplete", "chat/turnCancelled"):
                self.out.write("\n")
                return kind.split("/")[1]
            elif kind == "chat/error":
                self.out.write(f"\n[error: {action['part']['error']['message']}]\n")
                return "error"
            self.out.flush()

    def _text(self, kind: str, text: str, *, new: bool) -> None:
        if kind == "reasoning":
            self.out.write(("\n(thinking) " if new else "") + text)
        elif kind == "markdown":
            self.out.write(("\n" if new else "") + text)
        self.out.flush()


async def _messages(ws: Any):
    from trio_websocket import ConnectionClosed

    while True:
        try:
            yield await ws.get_message()
        except ConnectionClosed:
            return


def _now() -> str:
    from ahpd.host.bus import utc_now

    return utc_now()


def find_url(data_dir: Path) -> str:
    from ahpd.ops.runtime import read_runtime

    record = read_runtime(data_dir)
    if record is None:
        raise SystemExit(f"ahpd chat: no daemon runs with data directory {data_dir}; start one with `ahpd run`")
    return record["url"]


async def run_chat(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    url = args.url or find_url(args.data_dir)

    async def ask(question: str) -> bool:
        if args.yes:
            out.write(f"\n{question} yes (--yes)\n")
            return True
        if not sys.stdin.isatty():
            out.write(f"\n{question} no (not a terminal; --yes allows)\n")
            return False
        answer = await trio.to_thread.run_sync(input, f"\n{question} [y/N] ")
        return answer.strip().lower() in ("y", "yes")

    async with open_websocket_url(url, max_message_size=64 * 2**20) as ws, trio.open_nursery() as nursery:
        client = ChatClient(ws, out, ask)
        nursery.start_soon(client.reader)
        await client.call("initialize", {"channel": ROOT, "protocolVersions": ["1.0.0"],
                                         "clientId": f"ahpd-chat-{uuid.uuid4().hex[:8]}"})
        session = f"ahp-session:/{uuid.uuid4()}"
        params: dict[str, Any] = {"channel": session, "workingDirectories": [Path(args.cwd).resolve().as_uri()]}
        if args.provider:
            params["provider"] = args.provider
        await client.call("createSession", params)
        state = (await client.call("subscribe", {"channel": session}))["snapshot"]["state"]
        chat = state["defaultChat"]
        await client.call("subscribe", {"channel": chat})
        out.write(f"session {session} ({state['provider']}) in {args.cwd}\n")
        status = 0
        if args.message:
            status = 0 if await client.turn(chat, " ".join(args.message)) == "turnComplete" else 1
        else:
            while True:
                try:
                    line = await trio.to_thread.run_sync(input, "\nyou> ")
                except EOFError:
                    break
                if line.strip():
                    await client.turn(chat, line)
        if args.dispose:
            await client.call("disposeSession", {"channel": session})
        nursery.cancel_scope.cancel()
    return status


def add_chat_parser(subparsers: Any) -> argparse.ArgumentParser:
    from ahpd.ops.paths import default_data_dir

    p = subparsers.add_parser(
        "chat", help="talk to an agent through the running daemon",
        description="Create a session in a folder and talk to its agent through the running ahpd: "
        "the reply streams as it comes, and you are asked before a tool runs. With MESSAGE, one "
        "turn and exit (status 0 when it completed); without, a prompt until end of input.",
    )
    p.add_argument("message", nargs="*", metavar="MESSAGE", help="send this and exit")
    p.add_argument("--url", help="the daemon's ws:// URL with its token (default: from ahpd.json)")
    p.add_argument("--data-dir", type=Path, default=default_data_dir(), metavar="DIR",
                   help="find the daemon through DIR/ahpd.json (default: %(default)s)")
    p.add_argument("--provider", help="the agent to talk to (default: the daemon's first)")
    p.add_argument("--cwd", default=".", metavar="DIR", help="the session's folder (default: here)")
    p.add_argument("--yes", action="store_true", help="allow every tool call without asking")
    p.add_argument("--dispose", action="store_true", help="dispose the session when done")
    p.set_defaults(func=lambda args: trio.run(run_chat, args))
    return p
