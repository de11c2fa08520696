"""Make a capture stable enough to commit and diff.

What differs between two runs of the same scenario is replaced, each value
consistently wherever it appears, so the capture still checks clean:
timestamps, etags and generated ids become the n-th of their kind in order of first
appearance, durations become 0, the run's temporary folder a fixed path, and
``_ahpLog`` keeps only what does not depend on the clock or the pid. Lines
are grouped by connection, in order of each connection's first line: two
clients' frames interleave as the scheduler pleases, but one connection's
order is the protocol's.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

_PATTERNS = (
    ("time", re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")),
    ("uuid", re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")),
    # A file's etag (ahpd.ports.fs.etag): inode, size, and times in nanoseconds, in hex.
    ("etag", re.compile(r"(?<![0-9a-zA-Z-])[0-9a-f]+-[0-9a-f]+-[0-9a-f]{12,}-[0-9a-f]{12,}(?![0-9a-zA-Z-])")),
    ("hex", re.compile(r"(?<![0-9a-zA-Z])[0-9a-f]{16,32}(?![0-9a-zA-Z])")),
    ("turn", re.compile(r"turn-[0-9a-f]{12}")),
)
WORK = "/tmp/ahpd-conformance"
_EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Normalizer:
    def __init__(self, tmp: Path) -> None:
        self.tmp = [(tmp.as_uri(), "file://" + WORK), (str(tmp), WORK)]
        self.seen: dict[str, dict[str, str]] = {kind: {} for kind, _ in _PATTERNS}

    def stable(self, kind: str, value: str) -> str:
        table = self.seen[kind]
        if value not in table:
            n = len(table) + 1
            table[value] = {
                # One instant for all: whether two events shared a millisecond is the clock's business.
                "time": "2026-01-01T00:00:00.000Z",
                "uuid": f"00000000-0000-4000-8000-{n:012d}",
                "etag": f"{n:x}-0-0-0",
                "hex": f"{n:032x}"[-len(value) :],
                "turn": f"turn-{n:012d}",
            }[kind]
        return table[value]

    def text(self, value: str) -> str:
        for old, new in self.tmp:
            value = value.replace(old, new)
        for kind, pattern in _PATTERNS:
            value = pattern.sub(lambda m, k=kind: self.stable(k, m.group(0)), value)
        return value

    def value(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {self.text(k): self.value(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        if key == "duration" and isinstance(value, (int, float)):
            return 0
        return value


def normalize(capture: str, tmp: Path) -> str:
    """``capture`` (the text of a capture file) made stable; see the module docstring."""
    norm = Normalizer(tmp)
    by_connection: dict[str, list[dict[str, Any]]] = {}
    for line in capture.splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        log = record.pop("_ahpLog")
        by_connection.setdefault(log["connectionId"], []).append({**record, "_ahpLog": log})
    lines = []
    for number, records in enumerate(by_connection.values(), 1):
        for record in records:
            log = record.pop("_ahpLog")
            at = _EPOCH + dt.timedelta(milliseconds=len(lines))
            stable_log = {
                "ts": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "dir": log["dir"],
                "connectionId": str(number),
                "transport": log["transport"],
            }
            if "clientId" in log:
                stable_log["clientId"] = log["clientId"]
            if "event" in log:  # a connection's close
                stable_log["event"] = log["event"]
            lines.append(
                json.dumps({**norm.value(record), "_ahpLog": stable_log}, ensure_ascii=False, separators=(",", ":"))
            )
    return "\n".join(lines) + "\n"
