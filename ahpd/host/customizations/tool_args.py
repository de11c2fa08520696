"""What every host tool shares: the refusal it raises, the peer it acts as,
and how its arguments are read and its answer written.

A tool is an async ``(host, chat, arguments) -> text`` (``Runner``); it
refuses with :class:`ToolError`, whose message is the tool's error result.
It acts through the same command handlers a client's requests go through,
as :class:`AgentPeer`, the agent of its chat. Cut out so that the tools
(``session_tools``, ``artifact_tools``) and the code that calls them
(``server_tools``) depend on it and not on each other.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ahpd.host.kernel.host import Peer

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.chat import Chat


class ToolError(Exception):
    """A call refused: its message is the tool's error result."""


#: A host tool: ``(host, chat, arguments) -> text``, raising :class:`ToolError` to refuse.
Runner = Callable[["Host", "Chat", dict[str, Any]], Awaitable[str]]


class AgentPeer(Peer):
    """The agent of a chat, asking the host as a client would: what it lends
    (tokens) and who it acts for are those of whoever started its turn. It
    has no connection and no client id."""

    def __init__(self, chat: Chat) -> None:
        super().__init__(conn=None, number=0)
        self.chat = chat
        lender = chat.lender
        self.user = getattr(lender, "user", None)
        self.tokens = getattr(lender, "tokens", {})

    @property
    def name(self) -> str:
        return f"the agent of {self.chat.uri}"

    def send(self, text: Any, size: int | None = None) -> bool:
        return True  # nothing is sent to an agent this way (a progress note, say)


def text_arg(args: dict[str, Any], key: str) -> str:
    """``args[key]``, a string with something in it."""
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{key} must be a non-empty string")
    return value


def optional_text(args: dict[str, Any], key: str) -> str | None:
    """``args[key]`` when given (a string with something in it), else None."""
    return None if args.get(key) is None else text_arg(args, key)


def flag_arg(args: dict[str, Any], key: str) -> bool:
    value = args.get(key, False)
    if not isinstance(value, bool):
        raise ToolError(f"{key} must be true or false")
    return value


def dump(value: Any) -> str:
    """A tool's answer as the JSON text the agent reads."""
    return json.dumps(value, ensure_ascii=False, indent=1)
