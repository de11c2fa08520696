"""Which session ``ahpd chat`` talks in, so that running it again continues.

Without ``--session`` or ``--new`` the client goes back to the session it
last used for the same folder and provider (remembered in
``DATA_DIR/chat-sessions.json``), or else to the most recently modified idle
session in that folder, and creates one only when there is none: running
``ahpd chat`` ten times leaves one session, not ten.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

from ahpd.chat.connection import ROOT, Connection
from ahpd.chat.render import neutralise
from ahpd.ports.atomic import write_atomic

REMEMBERED = "chat-sessions.json"
IDLE = 1
IS_ARCHIVED = 64
#: A provider whose name is a URI scheme names its sessions; any other the spec's ``ahp-session``.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def _key(cwd_uri: str, provider: str | None) -> str:
    return f"{provider or ''} {cwd_uri}"


def _load(data_dir: Path) -> dict[str, str]:
    try:
        data = json.loads((data_dir / REMEMBERED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return (
        {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(data, dict) else {}
    )


def remember(data_dir: Path, cwd_uri: str, provider: str | None, uri: str | None) -> None:
    """Write (or with ``uri=None`` forget) the session for this folder; best effort."""
    known = _load(data_dir)
    if uri is None:
        known.pop(_key(cwd_uri, provider), None)
    else:
        known[_key(cwd_uri, provider)] = uri
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(data_dir / REMEMBERED, json.dumps(known, indent=2) + "\n")
    except OSError:
        pass


async def list_sessions(conn: Connection) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    params: dict[str, Any] = {"channel": ROOT}
    while True:
        page = await conn.call("listSessions", params)
        rows.extend(page.get("items", []))
        if not page.get("nextCursor"):
            return rows
        params = {"channel": ROOT, "cursor": page["nextCursor"]}


async def default_provider(conn: Connection) -> str | None:
    """The agent a session made without naming one runs: the first the host
    describes (``RootState.agents``, the host's default first)."""
    root = await conn.call("subscribe", {"channel": ROOT})
    await conn.notify("unsubscribe", {"channel": ROOT})
    agents = ((root or {}).get("snapshot") or {}).get("state", {}).get("agents") or []
    return next((a["provider"] for a in agents if isinstance(a, dict) and isinstance(a.get("provider"), str)), None)


def row_line(row: dict[str, Any]) -> str:
    """One ``--list`` line: URI, provider, last change, status word, title."""
    status = row.get("status", 0)
    word = (
        "archived"
        if status & IS_ARCHIVED
        else "input"
        if status & 16
        else "busy"
        if status & 8
        else ("error" if status & 2 else "idle")
    )
    folder = ",".join(row.get("workingDirectories") or [])
    return neutralise(
        "\t".join(
            [
                row.get("resource", ""),
                row.get("provider", ""),
                row.get("modifiedAt", ""),
                word,
                folder,
                row.get("title", ""),
            ]
        )
    )


async def choose(
    conn: Connection, *, data_dir: Path, cwd: Path, provider: str | None, session: str | None, new: bool
) -> tuple[str, bool]:
    """The session to talk in and whether it was created now."""
    cwd_uri = cwd.as_uri()
    uri = session
    if uri is None and not new:
        rows = await list_sessions(conn)
        listed = {row["resource"] for row in rows}
        remembered = _load(data_dir).get(_key(cwd_uri, provider))
        if remembered in listed:
            uri = remembered
        else:
            uri = next(
                (
                    row["resource"]
                    for row in rows  # most recently modified first
                    if cwd_uri in (row.get("workingDirectories") or [])
                    and (provider is None or row.get("provider") == provider)
                    and row.get("status", 0) & IDLE
                    and not row.get("status", 0) & IS_ARCHIVED
                ),
                None,
            )
    created = uri is None
    if uri is None:
        # Named as the host lists it, <provider>:/<uuid>, so that the name
        # remembered here is the one --list and every other client show.
        runs = provider or await default_provider(conn)
        scheme = runs if runs and _SCHEME.fullmatch(runs) else "ahp-session"
        uri = f"{scheme}:/{uuid.uuid4()}"
        params: dict[str, Any] = {"channel": uri, "workingDirectories": [cwd_uri]}
        if provider:
            params["provider"] = provider
        await conn.call("createSession", params)
    remember(data_dir, cwd_uri, provider, uri)
    return uri, created
