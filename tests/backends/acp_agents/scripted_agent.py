"""An ACP agent that answers from a script, for the boot probe's differential tests.

``scripted_agent.py SCRIPT``: SCRIPT is JSON, ``{"answers": {METHOD: ANSWER},
"after_new": [MESSAGE, ...]}``. Each request is answered with
``answers[METHOD]``: ``{"result": ...}`` or ``{"error": ...}`` as written, a
list of those for successive calls of the same method (``session/list``
pages), ``"exit"`` to exit at once with status 4, or ``"garbage"`` to write a
line that is not JSON and then never answer. Methods not in the script get
"method not found". After answering ``session/new`` it writes each message
of ``after_new`` as it is (``SID`` in it replaced by the session id it
answered), so a test can send updates for other sessions, malformed ones, or
requests of the client. Plain JSON-RPC with the standard library, so it can
say what a well-behaved agent never would.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def write(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def main() -> None:
    script = json.loads(sys.argv[1])
    answers: dict[str, Any] = script.get("answers", {})
    calls: dict[str, int] = {}
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if method is None or ident is None:
            continue  # a reply to one of our requests, or a notification
        answer = answers.get(method)
        if isinstance(answer, list):
            answer = answer[min(calls.get(method, 0), len(answer) - 1)]
        calls[method] = calls.get(method, 0) + 1
        if answer == "exit":
            sys.exit(4)
        if answer == "garbage":
            sys.stdout.write("this is not JSON\n")
            sys.stdout.flush()
            continue
        if answer is None:
            answer = {"error": {"code": -32601, "message": "Method not found"}}
        write({"id": ident, **answer})
        if method == "session/new" and isinstance(answer.get("result"), dict):
            sid = answer["result"].get("sessionId")
            for extra in script.get("after_new", []):
                write(json.loads(json.dumps(extra).replace('"SID"', json.dumps(sid))))


if __name__ == "__main__":
    main()
