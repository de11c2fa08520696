"""Past Claude sessions, read off the CLI's own transcripts: no CLI is started.

The CLI writes each conversation to ``~/.claude/projects/<project>/<id>.jsonl``
(``$CLAUDE_CONFIG_DIR`` instead of ``~/.claude`` when set). The SDK ships the
readers (``list_sessions``, ``get_session_messages``, ``delete_session``);
they are blocking file reads, so these run in a worker thread.

One piece is not public: ``get_session_messages`` hands back each entry's
raw message dict, and turning one into the typed message a live stream
carries (what :class:`~ahpd.backends.claude.wire.StreamMapper` reads, so a
past turn is drawn exactly as a live one) is the SDK's
``_internal.message_parser.parse_message``, which it does not export. A
parser of our own would be a second copy of the SDK's block shapes to keep
in step with every CLI release, so the ``claude`` extra pins the SDK's
version exactly (``pyproject.toml``), and the history tests
(``tests/backends/test_claude_e2e.py``, ``tests/daemon/test_claude_catalogue.py``)
say when a new release moved it.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any


from ahpd.backends.claude.wire import StreamMapper, usage_info
from ahpd.backends.port import HistoryTurn, StoredConversation
from ahpd.backends.translate import repair
from ahpd.ports import threads

log = logging.getLogger("ahpd.backends.claude.backend")


def _iso(ms: int | None) -> str | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _list() -> list[StoredConversation]:
    from claude_agent_sdk import list_sessions

    rows = []
    for info in list_sessions():
        title = info.custom_title or info.summary or info.first_prompt or ""
        rows.append(
            StoredConversation(
                backend_id=info.session_id,
                title=repair(" ".join(title.split())[:200]),
                cwd=info.cwd,
                created_at=_iso(info.created_at),
                modified_at=_iso(info.last_modified),
            )
        )
    return rows  # the SDK sorts newest first


def _delete(session_id: str) -> bool:
    from claude_agent_sdk import delete_session

    try:
        delete_session(session_id)
    except FileNotFoundError:
        return False
    return True


def state_file(session_id: str) -> Path | None:
    """Where the CLI keeps ``session_id``'s transcript: under whichever
    project folder holds it (the CLI's spelling of the directory, or one the
    conversation moved from), or None when it wrote none."""
    if not session_id or any(c in session_id for c in "/\\*?[]"):
        return None
    root = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude") / "projects"
    return next(iter(sorted(root.glob(f"*/{session_id}.jsonl"))), None)


async def list_conversations() -> list[StoredConversation]:
    try:
        return await threads.run("agents", _list)
    except (OSError, ValueError) as exc:
        log.warning("claude: listing transcripts failed: %s", exc)
        return []


async def delete_conversation(session_id: str) -> bool:
    try:
        return await threads.run("agents", _delete, session_id)
    except (OSError, ValueError) as exc:
        log.warning("claude: deleting transcript %s failed: %s", session_id, exc)
        return False


def _user_text(content: Any) -> str | None:
    """A person's message (not a tool result, not the CLI's own note)."""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return None
        text = "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    else:
        return None
    if not text.strip() or text.startswith("[Request interrupted"):
        return None
    return text


def _history(session_id: str) -> list[HistoryTurn]:
    from claude_agent_sdk import get_session_messages

    return _turns(session_id, get_session_messages(session_id))


def _subagents(session_id: str) -> dict[str, HistoryTurn]:
    """Each subagent's own transcript (``<id>/subagents/agent-*.jsonl``), as
    the one turn its worker chat holds, by the call that spawned it."""
    from claude_agent_sdk import get_subagent_messages, list_subagents

    found: dict[str, HistoryTurn] = {}
    for agent_id in list_subagents(session_id):
        entries = get_subagent_messages(session_id, agent_id)
        call_id = next((e.parent_tool_use_id for e in entries if e.parent_tool_use_id), None)
        # Its entries read as a conversation of their own: the first message
        # is the prompt, what follows the subagent's words and calls.
        turns = _turns(
            session_id,
            [SimpleNamespace(type=e.type, message=e.message, parent_tool_use_id=None, uuid=e.uuid) for e in entries],
        )
        if isinstance(call_id, str) and turns:
            first = turns[0]
            found[call_id] = HistoryTurn(
                text=first.text, updates=[u for t in turns for u in t.updates], usage=first.usage
            )
    return found


def _turns(session_id: str, entries: Any) -> list[HistoryTurn]:
    from claude_agent_sdk._internal.message_parser import parse_message

    turns: list[HistoryTurn] = []
    mapper = StreamMapper()
    text: str | None = None
    updates: list[dict[str, Any]] = []
    totals: dict[str, int] = {}
    counted: set[str | None] = set()  # message ids whose usage is in totals: entries of one message share it

    def close() -> None:
        if text is not None:
            usage = usage_info(totals, model=mapper.model) if totals else None
            # The turn's rewind point, as a live turn records it: its last main-chain entry.
            turns.append(HistoryTurn(text=repair(text), updates=list(updates), usage=usage, point=mapper.point))

    for entry in entries:
        raw = entry.message if isinstance(entry.message, dict) else {}
        if entry.type == "user" and entry.parent_tool_use_id is None:
            said = _user_text(raw.get("content"))
            if said is not None:
                close()
                text, updates, totals, counted = said, [], {}, set()
                mapper.point = None  # one of this turn's own entries, or none
                continue
        message = parse_message(
            {
                "type": entry.type,
                "message": raw,
                "session_id": session_id,
                "parent_tool_use_id": entry.parent_tool_use_id,
                "uuid": entry.uuid,
            }
        )
        if message is None:
            continue
        updates += mapper.feed(message)
        usage = raw.get("usage") if entry.type == "assistant" else None
        if isinstance(usage, dict) and raw.get("id") not in counted:
            counted.add(raw.get("id"))
            for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
                if isinstance(usage.get(key), int):
                    totals[key] = totals.get(key, 0) + usage[key]
    close()
    return turns


async def read_subagents(session_id: str) -> dict[str, HistoryTurn]:
    """The subagents of a past session, by spawning call; empty when there
    are none or they cannot be read."""
    try:
        return await threads.run("agents", _subagents, session_id)
    except Exception as exc:  # noqa: BLE001 - a subagent the SDK cannot read leaves its call unlinked
        log.warning("claude: reading the subagents of %s failed: %s", session_id, exc)
        return {}


async def read_history(session_id: str) -> list[HistoryTurn]:
    """A past session's turns, read off its transcript (no CLI); empty when
    there is none or it cannot be read."""
    try:
        return await threads.run("agents", _history, session_id)
    except Exception as exc:  # noqa: BLE001 - a transcript the SDK cannot read is an empty history
        log.warning("claude: reading transcript %s failed: %s", session_id, exc)
        return []
