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

from ahpd.wire.capture import CaptureFile, RecordingConnection, capture_line, recording, redact
from ahpd.wire.check import Checker, Problem, check_frames
from ahpd.wire.reader import Frame, ReadError, read_frames

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
