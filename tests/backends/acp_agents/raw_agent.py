"""A small ACP agent for the ACP backend's tests, including its misbehaviour.

It speaks real ACP over stdio through the library's low-level ``Connection``
(so it can also do what a well-behaved agent never would). What it does is
chosen by the first word of the prompt:

* ``order N``: N message chunks ``0``..``N-1`` as fast as it can, then ``end_turn``;
* ``call METHOD JSON``: one request to the client; the reply (``{"result": ...}``
  or ``{"error": ...}``) comes back as one message chunk of JSON;
* ``term JSON``: ``terminal/create`` with JSON, then wait, output, release;
  ``termkill JSON``: create, wait for some output, kill, wait, output, release;
  the replies come back as one message chunk, a JSON list;
* ``chatty N``: N bytes of stderr lines before answering;
* ``huge N``: one session/update line of more than N bytes;
* ``garbage``: lines that are not JSON objects, then an answer;
* ``cut``: a message chunk whose text ends in half a surrogate pair, as an
  agent that cuts its text by UTF-16 code unit writes it (``\\ud83d``);
* ``die``: a last word on stderr, then exit status 3 in the middle of the turn;
* ``hang``: says ``hanging``, then never answers, not even a cancel;
* ``slow``: message chunks every 50 ms until cancelled;
* anything else: one message chunk echoing the prompt.

Flags: ``--no-load`` (no loadSession), ``--ignore-sigterm``, ``--pidfile F``
(the pid of a child it leaves running in its process group).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from typing import Any

from acp.connection import Connection
from acp.exceptions import RequestError
from acp.stdio import stdio_streams

NO_LOAD = "--no-load" in sys.argv
if "--ignore-sigterm" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

conn: Connection
cancelled: dict[str, asyncio.Event] = {}


def chunk(session_id: str, text: str) -> dict[str, Any]:
    return {
        "sessionId": session_id,
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}},
    }


async def say(session_id: str, text: str) -> None:
    await conn.send_notification("session/update", chunk(session_id, text))


async def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"result": await conn.send_request(method, params)}
    except RequestError as exc:
        return {"error": {"code": exc.code, "message": str(exc), "data": exc.data}}


async def prompt(params: dict[str, Any]) -> dict[str, Any]:
    sid = params["sessionId"]
    text = "".join(b.get("text", "") for b in params["prompt"] if b.get("type") == "text")
    word, _, rest = text.partition(" ")
    cancelled[sid] = asyncio.Event()
    if word == "order":
        for i in range(int(rest)):
            await say(sid, str(i))
    elif word == "call":
        method, _, arg = rest.partition(" ")
        body = json.loads(arg or "{}")
        body.setdefault("sessionId", sid)
        await say(sid, json.dumps(await call(method, body)))
    elif word in ("term", "termkill"):
        body = json.loads(rest)
        body["sessionId"] = sid
        replies = [await call("terminal/create", body)]
        tid = replies[0].get("result", {}).get("terminalId")
        ref = {"sessionId": sid, "terminalId": tid}
        if word == "termkill":
            for _ in range(100):
                out = await call("terminal/output", ref)
                if out.get("result", {}).get("output"):
                    break
                await asyncio.sleep(0.05)
            replies.append(out)
            replies.append(await call("terminal/kill", ref))
        replies.append(await call("terminal/wait_for_exit", ref))
        replies.append(await call("terminal/output", ref))
        replies.append(await call("terminal/release", ref))
        replies.append(await call("terminal/output", ref))  # released: an error
        await say(sid, json.dumps(replies))
    elif word == "chatty":
        line = b"chatter " * 15 + b"\n"
        for _ in range(int(rest) // len(line) + 1):
            sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()
        await say(sid, "still here")
    elif word == "huge":
        await say(sid, "x" * int(rest))
    elif word == "garbage":
        os.write(1, b'this is not json\n[1, 2, 3]\n\n{"jsonrpc": "2.0", "id": 999, "result": {}}\n')
        await say(sid, "after the garbage")
    elif word == "cut":
        update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "half an emoji: @"}}
        line = json.dumps(
            {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": update}}
        )
        os.write(1, line.replace("@", "\\ud83d").encode() + b"\n")
        await say(sid, " and on")
    elif word == "die":
        await say(sid, "about to die")
        await asyncio.sleep(0.2)
        sys.stderr.write("fatal: out of cheese\n")
        sys.stderr.flush()
        os._exit(3)
    elif word == "hang":
        await say(sid, "hanging")  # the prompt is here: a test can wait for that
        await asyncio.Event().wait()
    elif word == "slow":
        for i in range(400):
            if cancelled[sid].is_set():
                return {"stopReason": "cancelled"}
            await say(sid, f"{i} ")
            try:
                await asyncio.wait_for(cancelled[sid].wait(), 0.05)
            except asyncio.TimeoutError:
                pass
        return {"stopReason": "cancelled" if cancelled[sid].is_set() else "end_turn"}
    else:
        await say(sid, f"echo: {text}")
    return {"stopReason": "end_turn"}


async def handle(method: str, params: Any, is_notification: bool) -> Any:
    if method == "initialize":
        return {
            "protocolVersion": 1,
            "agentCapabilities": {"loadSession": not NO_LOAD},
            "agentInfo": {"name": "raw-agent", "version": "1"},
        }
    if method == "session/new":
        if "--pidfile" in sys.argv:
            child = subprocess.Popen(["sleep", "300"])  # noqa: ASYNC220 - a fake agent: its loop serves this one request
            with open(sys.argv[sys.argv.index("--pidfile") + 1], "w") as f:  # noqa: ASYNC230 - a fake agent: its loop serves this one request
                f.write(str(child.pid))
        return {"sessionId": "raw-session"}
    if method == "session/load":
        return {}
    if method == "session/prompt":
        return await prompt(params)
    if method == "session/cancel":
        if params["sessionId"] in cancelled:
            cancelled[params["sessionId"]].set()
        return None
    raise RequestError.method_not_found(method)


async def main() -> None:
    global conn
    reader, writer = await stdio_streams(limit=64 * 1024 * 1024)
    conn = Connection(handle, writer, reader, listening=False)
    await conn.main_loop()


if __name__ == "__main__":
    asyncio.run(main())
