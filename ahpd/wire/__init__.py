"""Wire captures and the checker that reads them.

A *capture* is every frame a connection carried, one JSON line each, in the
shape VS Code's agent host writes its own AHP log: the JSON-RPC message with
an ``_ahpLog`` object beside it (``ts``, ``dir`` = ``c2s``/``s2c``,
``connectionId``, ``transport``, ``byteLength``; ``clientId`` is ours, once
known). roblourens/ahp-inspector reads ``ts`` and ``dir`` off that object.

``capture`` writes them (``ahpd run --wire``, ``tools/tee.py``); ``reader``
streams them back, in that shape or the older one with the frame under
``frame``; ``check`` is a pure checker over the frames (schema, reducer
replay against snapshots, protocol invariants); ``cli`` is
``ahpd wire-check``. Nothing here is imported by the protocol layers: the
recorder wraps a transport ``Connection`` from the outside.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ahpd.wire.capture import CaptureFile, RecordingConnection, capture_line, recording, redact
    from ahpd.wire.check import Checker, Problem, check_frames
    from ahpd.wire.reader import Frame, ReadError, read_frames

#: Where each name lives, imported when first read: ``ahpd run --wire`` needs the recorder
#: alone, and the checker with its schema and reducers is 1.5 MB and ~10 ms of a daemon's
#: start that only ``wire-check`` and the tests use.
_HOMES = {
    **dict.fromkeys(("CaptureFile", "RecordingConnection", "capture_line", "recording", "redact"), "capture"),
    **dict.fromkeys(("Checker", "Problem", "check_frames"), "check"),
    **dict.fromkeys(("Frame", "ReadError", "read_frames"), "reader"),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
    "CaptureFile",
    "Checker",
    "Frame",
    "Problem",
    "ReadError",
    "RecordingConnection",
    "capture_line",
    "check_frames",
    "read_frames",
    "recording",
    "redact",
]
