"""An ACP agent's own stored conversations, for the session catalogue.

``python -m ahpd.backends._acp_catalogue SPEC list`` prints what the agent
keeps (ACP ``session/list``, where its ``sessionCapabilities.list`` says it
offers one); ``... SPEC history ID`` prints one conversation's past turns.
ACP has no read-only way to a conversation's history: ``session/load``
replays it as ``session/update`` notifications, so the turns are rebuilt from
that replay (:func:`history_turns`) in an agent that is ended as soon as it
has answered. Both run in a short-lived Python process of their own, as the
boot probe does (``_acp_probe``): the daemon loads no ACP library to list or
open a row, and no agent process outlives the answer.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ahpd.backends._paths import ignore, scratch_root
from ahpd.backends.port import BackendError, Event, HistoryTurn, StoredConversation, Update

if TYPE_CHECKING:
    from ahpd.backends.acp import AcpBackend

log = logging.getLogger("ahpd.backends.acp")

#: Pages of ``session/list`` read at most (a runaway cursor ends here).
MAX_LIST_PAGES = 50
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
    from ahpd.backends import acp

    acp._load()
    with trio.fail_after(backend.call_timeout):
        async with backend._open_agent(scratch_root(), ignore) as link:
            return await listed(link, (await link.initialize()).agent_capabilities)


async def listed(link: Any, caps: Any) -> list[StoredConversation]:
    """Every page of ``session/list`` over an initialized link, when ``caps`` offer it."""
    from ahpd.backends.acp import ListSessionsResponse, stored_conversations

    if not (caps and caps.session_capabilities and caps.session_capabilities.list):
        return []
    sessions = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        answer = await link.call("session/list", {"cursor": cursor} if cursor else {}, "session/list")
        page = ListSessionsResponse.model_validate(answer)
        sessions.extend(page.sessions)
        cursor = page.next_cursor
        if not cursor:
            break
    return stored_conversations(sessions)


async def read_stored(backend: AcpBackend, backend_id: str) -> list[HistoryTurn]:
    """One stored conversation's turns, from ``session/load``'s replay; the
    conversation is loaded in the directory the agent listed it under."""
    from ahpd.backends import acp

    acp._load()
    replay: list[dict[str, Any]] = []

    def record(event: Event) -> None:
        if isinstance(event, Update):
            replay.append(event.update)

    with trio.fail_after(backend.call_timeout):
        async with backend._open_agent(scratch_root(), record) as link:
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
    from ahpd.backends.acp import AcpBackend

    spec, what, *rest = json.loads(sys.argv[1]), *sys.argv[2:]
    backend = AcpBackend(spec["provider"], spec["command"], spec.get("args") or (), spec.get("env") or {},
                         call_timeout=float(spec.get("call_timeout") or 30))
    try:
        if what == "list":
            answer: Any = [attrs.asdict(c) for c in trio.run(list_stored, backend)]
        else:
            answer = [attrs.asdict(t) for t in trio.run(read_stored, backend, rest[0])]
    except Exception as exc:  # noqa: BLE001 - a child's one answer to any failure is "could not", said
        why = exc.message if isinstance(exc, BackendError) else "no answer in time" if isinstance(
            exc, trio.TooSlowError) else f"{type(exc).__name__}: {exc}"
        print(f"ahpd: {backend.provider}: the catalogue could not be read: {why}", file=sys.stderr)
        sys.exit(1)
    try:
        print(json.dumps(answer), flush=True)
    except BrokenPipeError:  # the daemon stopped meanwhile: nobody is waiting for the answer
        pass


# -- in the daemon -------------------------------------------------------------------


async def _ask(backend: AcpBackend, *argv: str) -> Any:
    """Run this module as a child process and read its JSON answer; None when
    it failed (said on the daemon's standard error by the child)."""
    spec = {"provider": backend.provider, "command": backend.command, "args": list(backend.args),
            "env": backend.env, "call_timeout": backend.call_timeout}
    try:
        with trio.fail_after(backend.call_timeout + 30):
            done = await trio.run_process([sys.executable, "-m", "ahpd.backends._acp_catalogue", json.dumps(spec),
                                           *argv], capture_stdout=True, stderr=None, check=False)
        answer = json.loads(done.stdout or b"null")
    except (OSError, ValueError, trio.TooSlowError) as exc:
        log.warning("%s: asking the agent for %s failed: %s", backend.provider, argv[0], exc)
        return None
    if done.returncode != 0 or not isinstance(answer, list):
        log.warning("%s: asking the agent for %s failed (exit status %s)", backend.provider, argv[0], done.returncode)
        return None
    return answer


async def listed_by_probe(link: Any, caps: Any) -> list[StoredConversation] | None:
    """:func:`listed`, for the boot probe: a listing that fails (None) costs
    the catalogue its first reading, never the probe what it came for."""
    from ahpd.backends.acp import ValidationError

    try:
        return await listed(link, caps)
    except (BackendError, ValidationError) as exc:
        log.warning("%s: listing its conversations failed: %s", link.agent.label, exc)
        return None


def probe_listed(backend: AcpBackend, learned: Any) -> None:
    """Keep what the boot probe listed (it runs the agent anyway); called
    while the probe still holds ``backend.probing``."""
    rows = learned.get("conversations") if isinstance(learned, dict) else None
    if isinstance(rows, list):
        backend.probe_listing = (trio.current_time(), [StoredConversation(**row) for row in rows])


async def list_conversations(backend: AcpBackend) -> list[StoredConversation]:
    """What the agent keeps. A listing the boot probe finished after this
    was asked is as new as one started now, so it is taken instead: the
    first reading of the catalogue, at a daemon's first hello, starts no
    agent beyond the probe's."""
    asked = trio.current_time()
    async with backend.probing:
        if backend.probe_listing is not None and backend.probe_listing[0] >= asked:
            return list(backend.probe_listing[1])
        answer = await _ask(backend, "list")
    return [StoredConversation(**row) for row in answer or []]


async def read_history(backend: AcpBackend, backend_id: str) -> list[HistoryTurn]:
    answer = await _ask(backend, "history", backend_id)
    return [HistoryTurn(**turn) for turn in answer or []]


if __name__ == "__main__":
    main()
