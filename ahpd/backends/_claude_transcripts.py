"""Past Claude sessions, read off the CLI's own transcripts: no CLI is started.

The CLI writes each conversation to ``~/.claude/projects/<project>/<id>.jsonl``
(``$CLAUDE_CONFIG_DIR`` instead of ``~/.claude`` when set). The SDK ships the
readers (``list_sessions``, ``get_session_messages``, ``delete_session``);
they are blocking file reads, so these run in a worker thread.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import trio

from ahpd.backends.port import StoredConversation

log = logging.getLogger("ahpd.backends.claude")


def _iso(ms: int | None) -> str | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _list() -> list[StoredConversation]:
    from claude_agent_sdk import list_sessions

    rows = []
    for info in list_sessions():
        title = info.custom_title or info.summary or info.first_prompt or ""
        rows.append(StoredConversation(
            backend_id=info.session_id,
            title=" ".join(title.split())[:200],
            cwd=info.cwd,
            created_at=_iso(info.created_at),
            modified_at=_iso(info.last_modified),
        ))
    return rows  # the SDK sorts newest first


def _delete(session_id: str) -> bool:
    from claude_agent_sdk import delete_session

    try:
        delete_session(session_id)
    except FileNotFoundError:
        return False
    return True


async def list_conversations() -> list[StoredConversation]:
    try:
        return await trio.to_thread.run_sync(_list)
    except (OSError, ValueError) as exc:
        log.warning("claude: listing transcripts failed: %s", exc)
        return []


async def delete_conversation(session_id: str) -> bool:
    try:
        return await trio.to_thread.run_sync(_delete, session_id)
    except (OSError, ValueError) as exc:
        log.warning("claude: deleting transcript %s failed: %s", session_id, exc)
        return False
