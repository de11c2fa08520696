"""``ahpd wire-check FILE...``: the checker over capture files.

Exit 0 when every frame is clean, 1 when a problem was found, 2 when the
input cannot be read (a missing file, a line that is not a frame) or holds
no frames at all: an empty capture is not a clean one. Problems
are printed one per line - ``file:line: rule: message at $.path: excerpt`` -
or, with ``--json``, as one JSON object.
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from ahpd.wire.check import Checker, Problem
from ahpd.wire.reader import ReadError, read_frames

CLEAN, PROBLEMS, UNREADABLE = 0, 1, 2


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """The cyclic collector run ~70 times less often while frames are read: each
    line makes a few hundred containers and the checker keeps few of them, so
    the default pace (every 700) spent ~7% of the check scanning them."""
    before = gc.get_threshold()
    gc.set_threshold(50_000, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _check(paths: list[str]) -> tuple[list[Problem], int, int]:
    """(problems, frames, connections) of the capture files ``paths``."""
    checker = Checker()
    frames = 0
    for frame in read_frames(paths):
        checker.feed(frame)
        frames += not frame.closed
    if not frames:
        raise ReadError(", ".join(paths), None, "no frames")
    return checker.finish(), frames, len(checker.connections)


def wire_check(paths: list[str], *, as_json: bool = False, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        # The checker and what it kept are freed as ``_check`` returns, before
        # the collector's pace is restored: it has nothing of theirs left to scan.
        with _fewer_collections():
            problems, frames, connections = _check(paths)
    except ReadError as exc:
        if as_json:
            json.dump({"error": {"path": exc.path, "line": exc.line, "reason": exc.reason}}, out)
            out.write("\n")
        else:
            print(f"ahpd wire-check: {exc}", file=err)
        return UNREADABLE
    if as_json:
        json.dump(
            {"frames": frames, "connections": connections, "problems": [p.to_json() for p in problems]},
            out,
            ensure_ascii=False,
            indent=1,
        )
        out.write("\n")
    else:
        for problem in problems:
            print(problem, file=out)
        verdict = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else "clean"
        print(f"{verdict}: {frames} frames, {connections} connections", file=out)
    return PROBLEMS if problems else CLEAN
