"""An ACP agent's own stored conversations, for the session catalogue.

``python -m ahpd.backends.acp.catalogue SPEC list`` prints what the agent
keeps (ACP ``session/list``, where its ``sessionCapabilities.list`` says it
offers one); ``... SPEC history ID`` prints one conversation's past turns.
ACP has no read-only way to a conversation's history: ``session/load``
replays it as ``session/update`` notifications, so the turns are rebuilt from
that replay (:func:`history_turns`) in an agent that is ended as soon as it
has answered. Both run in a short-lived Python process of their own, as the
boot probe does (``_acp_probe``): the daemon loads no ACP library to list or
open a row, and no agent process outlives the answer. The daemon's side,
which starts this process and reads its answer, is
:meth:`~ahpd.backends.acp.backend.AcpBackend.list_conversations`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import attrs
import trio

from ahpd.backends.acp.session import listed, open_agent
from ahpd.backends import _child
from ahpd.backends._paths import ignore, scratch_root
from ahpd.backends.acp.backend import AcpBackend
from ahpd.backends.port import BackendError, Event, HistoryTurn, StoredConversation, Update

#: What a past turn is made of; the rest of a replay (the commands, modes,
#: config options and title the agent announces) describes the session now.
_TURN_UPDATES = frozenset({"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"})


def history_turns(updates: list[dict[str, Any]]) -> list[HistoryTurn]:
    """A ``session/load`` replay cut into turns: each run of
    ``user_message_chunk``s opens one (one message, so its chunks join), and
    what the agent said until the next is that turn's."""
    turns: list[HistoryTurn] = []
    said: list[str] = []
    replies: list[dict[str, Any]] = []
    asking = False

    def close() -> None:
        if said:
            turns.append(HistoryTurn(text="".join(said), updates=list(replies)))

    for update in updates:
        kind = update.get("sessionUpdate")
        if kind == "user_message_chunk":
            if not asking:
                close()
                said, replies, asking = [], [], True
            content = update.get("content") or {}
            if content.get("type") == "text":
                said.append(str(content.get("text") or ""))
        elif kind in _TURN_UPDATES and said:
            asking = False
            replies.append(update)
    close()
    return turns


# -- in the child process ----------------------------------------------------------


async def list_stored(backend: AcpBackend) -> list[StoredConversation]:
    """``session/list``, every page, when the agent advertises it."""
    with trio.fail_after(backend.call_timeout):
        async with open_agent(backend, scratch_root(), ignore) as link:
            return await listed(link, (await link.initialize()).agent_capabilities)


async def read_stored(backend: AcpBackend, backend_id: str) -> list[HistoryTurn]:
    """One stored conversation's turns, from ``session/load``'s replay; the
    conversation is loaded in the directory the agent listed it under."""
    replay: list[dict[str, Any]] = []

    def record(event: Event) -> None:
        if isinstance(event, Update):
            replay.append(event.update)

    with trio.fail_after(backend.call_timeout):
        async with open_agent(backend, scratch_root(), record) as link:
            caps = (await link.initialize()).agent_capabilities
            if not (caps and caps.load_session):
                raise BackendError(f"the {backend.provider} agent cannot load a conversation (no loadSession)")
            kept = {c.backend_id: c for c in await listed(link, caps)}
            if backend_id not in kept:
                raise BackendError(f"the {backend.provider} agent does not list conversation {backend_id}")
            link.client.session_id = backend_id
            cwd = kept[backend_id].cwd or str(scratch_root())
            await link.call("session/load", {"sessionId": backend_id, "cwd": cwd, "mcpServers": []}, "session/load")
    return history_turns(replay)


def main() -> None:
    spec, what, *rest = json.loads(sys.argv[1]), *sys.argv[2:]
    backend = AcpBackend(
        spec["provider"],
        spec["command"],
        spec.get("args") or (),
        spec.get("env") or {},
        call_timeout=float(spec.get("call_timeout") or 30),
    )
    try:
        if what == "list":
            answer: Any = [attrs.asdict(c) for c in _child.run(list_stored, backend)]
        else:
            answer = [attrs.asdict(t) for t in _child.run(read_stored, backend, rest[0])]
    except Exception as exc:  # noqa: BLE001 - a child's one answer to any failure is "could not", said
        why = (
            exc.message
            if isinstance(exc, BackendError)
            else "no answer in time"
            if isinstance(exc, trio.TooSlowError)
            else f"{type(exc).__name__}: {exc}"
        )
        print(f"ahpd: {backend.provider}: the catalogue could not be read: {why}", file=sys.stderr)
        sys.exit(1)
    try:
        print(json.dumps(answer), flush=True)
    except BrokenPipeError:  # the daemon stopped meanwhile: nobody is waiting for the answer
        pass


if __name__ == "__main__":
    main()
