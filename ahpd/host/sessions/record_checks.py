"""What a stored session record must be for the host to read it.

A record read at start is checked before anything opens it: the keys the
host reads, of the types it reads them as, and each chat's state in the
shape a client is served. A record that fails is set aside by the store
(``ahpd.host.sessions.store``) with the reason these say, and every other
session is still offered.
"""

from __future__ import annotations

from typing import Any

from ahpd.host.kernel.writes import MAX_DEPTH
from ahpd.protocol import DecodeError, codec, model


def record_problem(record: Any) -> str | None:
    """What is wrong with a stored session record, or None: the keys the
    host reads, of the types it reads them as, and each chat's state in
    the shape a client is served (``ChatState``)."""
    if not isinstance(record, dict):
        return f"a record is an object, not {type(record).__name__}"
    if too_deep(record):
        return f"nested deeper than {MAX_DEPTH} levels"
    for key in ("uri", "provider", "cwd", "createdAt"):
        if not isinstance(record.get(key), str) or not record[key]:
            return f"{key} is missing or not a string"
    if not isinstance(record.get("title", ""), str):
        return "title is not a string"
    if record.get("defaultChat") is not None and not isinstance(record["defaultChat"], str):
        return "defaultChat is not a string"
    status = record.get("status", 0)
    if isinstance(status, bool) or not isinstance(status, int):
        return "status is not an integer"
    chats = record.get("chats")
    if chats is not None and not isinstance(chats, list):
        return "chats is not a list of chats"
    problem = shape_problem("config", "SessionConfigState", record.get("config"))
    for n, chat in enumerate(chats or []):
        if problem is not None:
            break
        if not isinstance(chat, dict) or not isinstance(chat.get("uri"), str):
            return f"chats[{n}] has no uri"
        if chat.get("backendId") is not None and not isinstance(chat["backendId"], str):
            return f"chats[{n}].backendId is not a string"
        problem = shape_problem(f"chats[{n}].state", "ChatState", chat.get("state"))
    return problem


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON ``value`` nests deeper than ``limit`` (looked at without recursing)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return False


def shape_problem(where: str, model_name: str, value: Any) -> str | None:
    if value is None:
        return None
    try:
        codec.decode(getattr(model, model_name), value, strict=False)
    except DecodeError as err:
        return f"{where}: {err.reason} at {err.path}"
    except RecursionError:
        return f"{where} is nested deeper than a record can be"
    return None
