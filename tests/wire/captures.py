"""Small captures built in memory: one clean conversation, and the same with
one defect each. The snapshot the client reads at the end is reduced from
the very actions in the capture, so the only problem in a defective capture
is the defect itself (and what follows from it)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ahpd import state as reducers
from ahpd.wire.capture import capture_line

ROOT = "ahp-root://"
CHAT = "ahp-chat:/00000000-0000-4000-8000-000000000001"
EMPTY_CHAT = {"resource": CHAT, "title": "", "status": 1, "modifiedAt": "2026-01-01T00:00:00.000Z", "turns": []}

Line = tuple[str, str, dict[str, Any]]  # direction, connection id, message


def rpc(**fields: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", **fields}


def action(seq: int, body: dict[str, Any], origin: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    params = {"channel": CHAT, "action": body, "serverSeq": seq, **extra}
    if origin is not None:
        params["origin"] = origin
    return rpc(method="action", params=params)


def hello(conn: str, client: str) -> list[Line]:
    return [
        (
            "c2s",
            conn,
            rpc(
                id=1,
                method="initialize",
                params={
                    "channel": ROOT,
                    "protocolVersions": ["1.0.0"],
                    "clientId": client,
                    "initialSubscriptions": [CHAT],
                },
            ),
        ),
        (
            "s2c",
            conn,
            rpc(
                id=1,
                result={
                    "protocolVersion": "1.0.0",
                    "serverSeq": 0,
                    "snapshots": [{"resource": CHAT, "state": EMPTY_CHAT, "fromSeq": 0}],
                },
            ),
        ),
    ]


def join(conn: str, client: str, state: dict[str, Any], seq: int) -> list[Line]:
    """``client`` connects on ``conn`` and is served ``state`` as of ``seq``."""
    return [
        (
            "c2s",
            conn,
            rpc(
                id=1,
                method="initialize",
                params={
                    "channel": ROOT,
                    "protocolVersions": ["1.0.0"],
                    "clientId": client,
                    "initialSubscriptions": [CHAT],
                },
            ),
        ),
        (
            "s2c",
            conn,
            rpc(
                id=1,
                result={
                    "protocolVersion": "1.0.0",
                    "serverSeq": seq,
                    "snapshots": [{"resource": CHAT, "state": state, "fromSeq": seq}],
                },
            ),
        ),
    ]


def closed(conn: str) -> Line:
    """The line that says connection ``conn`` closed."""
    return ("close", conn, {})


def reduced(lines: list[Line], upto: int) -> dict[str, Any]:
    """The chat as connection 1's actions up to serverSeq ``upto`` reduce it."""
    state = copy.deepcopy(EMPTY_CHAT)
    for direction, conn, msg in lines:
        params = msg.get("params") or {}
        if direction == "s2c" and conn == "1" and msg.get("method") == "action" and params["serverSeq"] <= upto:
            state = reducers.reduce("chat", state, params["action"])
    return state


def conversation() -> list[Line]:
    """alice starts a turn, the host streams a reply, alice subscribes again."""
    started = {
        "type": "chat/turnStarted",
        "turnId": "t1",
        "startedAt": "2026-01-01T00:00:00.000Z",
        "message": {"text": "hi", "origin": {"kind": "user"}},
    }
    return [
        *hello("1", "alice"),
        ("c2s", "1", rpc(method="dispatchAction", params={"channel": CHAT, "clientSeq": 1, "action": started})),
        ("s2c", "1", action(1, started, {"clientId": "alice", "clientSeq": 1})),
        (
            "s2c",
            "1",
            action(
                2,
                {"type": "chat/responsePart", "turnId": "t1", "part": {"kind": "markdown", "id": "p1", "content": ""}},
            ),
        ),
        ("s2c", "1", action(3, {"type": "chat/delta", "turnId": "t1", "partId": "p1", "content": "hello"})),
        ("s2c", "1", action(4, {"type": "chat/turnComplete", "turnId": "t1", "duration": 5})),
    ]


#: The line (1-based) of each frame of ``conversation()``.
DISPATCH, STARTED, PART, DELTA, COMPLETE = 3, 4, 5, 6, 7


def with_snapshot(lines: list[Line]) -> list[Line]:
    """``lines`` and a closing subscribe whose snapshot is what the actions reduce to."""
    state = copy.deepcopy(EMPTY_CHAT)
    seq = 0
    for direction, conn, msg in lines:
        params = msg.get("params") or {}
        if direction == "s2c" and conn == "1" and msg.get("method") == "action" and "rejectionReason" not in params:
            try:
                state = reducers.reduce("chat", state, params["action"])
            except KeyError:  # a defect the reducer cannot take: the host's state did not move
                pass
            seq = max(seq, params["serverSeq"])
    return [
        *lines,
        ("c2s", "1", rpc(id=2, method="subscribe", params={"channel": CHAT})),
        ("s2c", "1", rpc(id=2, result={"snapshot": {"resource": CHAT, "state": state, "fromSeq": seq}})),
    ]


def render(lines: list[Line], shape: str = "ahpLog") -> str:
    """The capture text: VS Code's shape, or the older ``{frame}`` one."""
    import json

    clients: dict[str, str] = {}
    out = []
    for n, (direction, conn, msg) in enumerate(lines):
        params = msg.get("params") or {}
        if msg.get("method") == "initialize":
            clients[conn] = params["clientId"]
        if direction == "close":
            out.append(
                json.dumps(
                    {
                        "_ahpLog": {
                            "ts": f"2026-01-01T00:00:{n % 60:02d}.000Z",
                            "dir": "c2s",
                            "connectionId": conn,
                            "transport": "websocket",
                            "event": "close",
                        }
                    }
                )
                + "\n"
            )
            continue
        text = json.dumps(msg)
        if shape == "ahpLog":
            out.append(
                capture_line(
                    text,
                    direction,
                    conn,
                    transport="websocket",
                    client_id=clients.get(conn),
                    ts=f"2026-01-01T00:00:{n % 60:02d}.000Z",
                )
            )
        else:
            out.append(
                json.dumps(
                    {
                        "at": f"2026-01-01T00:00:{n % 60:02d}.000Z",
                        "from": "client" if direction == "c2s" else "host",
                        "peer": conn,
                        "frame": msg,
                    }
                )
                + "\n"
            )
    return "".join(out)


def mutate(lines: list[Line], index: int, change: Callable[[dict[str, Any]], None]) -> list[Line]:
    """``lines`` with the message at 1-based ``index`` changed in place (on a copy)."""
    lines = copy.deepcopy(lines)
    change(lines[index - 1][2])
    return lines
