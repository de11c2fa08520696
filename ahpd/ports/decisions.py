"""The enablement decisions a host keeps beyond one session.

A client switches a customization for one session, for the folder a session
works in (``workspace``), or for every session (``global``). The first lives
and dies with its session; the other two are kept here, by customization id,
so a decision made in one session reaches a session that has decided
nothing - in the same folder, or anywhere - and survives a restart.

One small JSON file, rewritten whole (:func:`~ahpd.ports.atomic.write_atomic`)
on each change; no file at all keeps them in memory, for a daemon that
keeps nothing on disk.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ahpd.ports.atomic import write_atomic

log = logging.getLogger("ahpd.ports")


class DecisionStore:
    """``global``: id -> on; ``workspace``: folder URI -> id -> on."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._global: dict[str, bool] = {}
        self._workspace: dict[str, dict[str, bool]] = {}
        if path is not None and path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                self._global = {k: v for k, v in (data.get("global") or {}).items() if isinstance(v, bool)}
                self._workspace = {
                    folder: {k: v for k, v in ids.items() if isinstance(v, bool)}
                    for folder, ids in (data.get("workspace") or {}).items() if isinstance(ids, dict)}
            except (OSError, ValueError, AttributeError) as exc:
                # A file nobody can read keeps no decision, and is said rather than fatal.
                log.warning("the customization decisions in %s could not be read: %s", path, exc)

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
        workspace = next((e["enabled"] for e in enablement
                          if e.get("kind") == "workspace" and e.get("uri") == folder), None)
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
        if moved:
            self._save()
        return moved

    def _save(self) -> None:
        if self.path is None:
            return
        data = {"global": self._global, "workspace": self._workspace}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(data, indent=1, sort_keys=True).encode())
