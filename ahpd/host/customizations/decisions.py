"""The customization decisions the host keeps beyond one session.

A person switches a customization for the folder a session works in or for
every session; the decision must reach sessions that decided nothing and
survive a restart, so it is written like every other store the host keeps
(``ahpd.host.kernel.writes``): off the event loop, retried while the disk
refuses, a damaged file set aside rather than written over.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ahpd.host.kernel.writes import PendingWrites, read_kept
from ahpd.ports.atomic import write_atomic


class DecisionStore:
    """The enablement decisions kept beyond one session: for the folder a
    session works in (``workspace``) and for every session (``global``), by
    customization id, so a decision made in one session reaches a session
    that has decided nothing, and survives a restart (``--sessions file``:
    ``DATA_DIR/customizations.json``, rewritten whole off the event loop and
    retried while the disk refuses; ``None`` keeps them in memory). A file
    that cannot be read is set aside, not written over."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.writes = PendingWrites(f"customization decisions {path}", self._prepare)
        self._global: dict[str, bool] = {}
        self._workspace: dict[str, dict[str, bool]] = {}
        data = read_kept(path, "the decisions") if path is not None else None
        if data is None:
            return
        self._global = {k: v for k, v in (data.get("global") or {}).items() if isinstance(v, bool)}
        self._workspace = {
            folder: {k: v for k, v in ids.items() if isinstance(v, bool)}
            for folder, ids in (data.get("workspace") or {}).items()
            if isinstance(ids, dict)
        }

    def enablement(self, cid: str, folder: str) -> list[dict[str, Any]]:
        """The kept decisions for ``cid`` in a session working in ``folder``,
        most specific first (workspace, then global)."""
        out: list[dict[str, Any]] = []
        if cid in self._workspace.get(folder, {}):
            out.append({"kind": "workspace", "uri": folder, "enabled": self._workspace[folder][cid]})
        if cid in self._global:
            out.append({"kind": "global", "enabled": self._global[cid]})
        return out

    def decide(self, cid: str, folder: str, enablement: list[dict[str, Any]]) -> bool:
        """Keep what ``enablement`` says for ``folder`` and for every session
        (an entry for another folder is not this session's to decide); a
        scope it leaves out is a decision taken back. True when anything moved."""
        workspace = next(
            (e["enabled"] for e in enablement if e.get("kind") == "workspace" and e.get("uri") == folder), None
        )
        everywhere = next((e["enabled"] for e in enablement if e.get("kind") == "global"), None)
        before = (self._workspace.get(folder, {}).get(cid), self._global.get(cid))
        if workspace is None:
            self._workspace.get(folder, {}).pop(cid, None)
        else:
            self._workspace.setdefault(folder, {})[cid] = bool(workspace)
        if everywhere is None:
            self._global.pop(cid, None)
        else:
            self._global[cid] = bool(everywhere)
        self._workspace = {f: ids for f, ids in self._workspace.items() if ids}
        moved = before != (workspace, everywhere)
        if moved and self.path is not None:
            self.writes.put("decisions", None)
        return moved

    def _prepare(self, _: str, __: Any) -> Callable[[], None]:
        assert self.path is not None
        path = self.path
        data = json.dumps({"global": self._global, "workspace": self._workspace}, indent=1, sort_keys=True).encode()

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)

        return write

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.writes.run(task_status=task_status)

    def close(self) -> None:
        self.writes.close()
