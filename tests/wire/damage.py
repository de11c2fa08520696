"""Good captures and deliberately damaged copies of them, made the same way
every time (seeded), for the verdicts test (``test_verdicts.py``).

The damage is at random but reproducible: a key deleted, an undeclared key
added, a value of the wrong JSON type put in place of another, a frame sent
twice, dropped, or swapped with the next. The verdicts of the checker as it
was before ``ahpd.protocol.fits`` (the codec building model objects for every
frame) are recorded in ``verdicts.json``; the checker must still give each
capture exactly those problems, on the same lines, at the same paths, with
the same words.

    python -m tests.wire.damage > tests/wire/verdicts.json    # record (with the checker to hold to)
"""

from __future__ import annotations

import io
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ahpd.wire.cli import wire_check

from . import captures

ROOT = Path(__file__).resolve().parents[2]
SEEDS = range(120)
#: Wrong values: no boolean and no numeric string, whose reading the codec
#: deliberately changed (an optional number no longer takes "1.5" or true).
WRONG: list[Any] = [None, [], {}, "x", -1, 3.5, {"type": "nope"}, {"kind": "markdown"}, ["x"]]


def good() -> dict[str, str]:
    """The good captures, by name."""
    lines = captures.with_snapshot(captures.conversation())
    return {
        "conformance": (ROOT / "conformance" / "fixtures" / "wire.jsonl").read_text(),
        "conversation": captures.render(lines),
        "conversation-frame-shape": captures.render(lines, "frame"),
    }


def _spots(node: Any, top: bool = True) -> Iterator[tuple[Any, Any]]:
    if isinstance(node, dict):
        for key in list(node):
            if top and key == "_ahpLog":
                continue
            yield node, key
            yield from _spots(node[key], False)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield node, index
            yield from _spots(item, False)


def damaged(text: str, seed: int) -> str:
    """``text`` with one defect, chosen by ``seed``."""
    rng = random.Random(seed)
    lines = text.splitlines(keepends=True)
    i = rng.randrange(len(lines))
    kind = rng.random()
    if kind < 0.08:
        lines.insert(i, lines[i])  # a frame sent twice
    elif kind < 0.14:
        del lines[i]
    elif kind < 0.2 and i + 1 < len(lines):
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    else:
        record = json.loads(lines[i])
        spots = list(_spots(record))
        if not spots:
            return "".join(lines)
        parent, key = rng.choice(spots)
        change = rng.random()
        if change < 0.25 and isinstance(parent, dict):
            del parent[key]
        elif change < 0.4 and isinstance(parent, dict):
            parent["undeclaredKey"] = rng.choice(WRONG)
        else:
            parent[key] = rng.choice(WRONG)
        lines[i] = json.dumps(record) + "\n"
    return "".join(lines)


def verdict(text: str, folder: Path) -> dict[str, Any]:
    """What ``ahpd wire-check`` says of ``text``: its exit status and problems, without the file's name."""
    path = folder / "capture.jsonl"
    path.write_text(text)
    out = io.StringIO()
    try:
        status = wire_check([str(path)], as_json=True, out=out, err=io.StringIO())
    except Exception as exc:  # noqa: BLE001 - a checker that crashes is a verdict too (an id that is a list)
        return {"crash": type(exc).__name__}
    answer = json.loads(out.getvalue())
    problems = [
        [p["line"], p["rule"], p["json_path"], p["message"], p["excerpt"], p["connection"]]
        for p in answer.get("problems", [])
    ]
    return {"status": status, "problems": problems, "error": answer.get("error", {}).get("reason")}


def cases() -> Iterator[tuple[str, str]]:
    """(name, capture text) for every good capture and every damaged copy."""
    for name, text in good().items():
        yield name, text
        for seed in SEEDS:
            yield f"{name}#{seed}", damaged(text, seed)


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        recorded = {name: verdict(text, Path(folder)) for name, text in cases()}
    json.dump(recorded, sys.stdout, indent=0, ensure_ascii=False, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
