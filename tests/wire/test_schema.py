"""The checker's fast path (our strict codec) and the strict schema agree:
on every payload of the committed capture, and on mutations of them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ahpd.protocol import DecodeError, codec
from ahpd.protocol.strict_schema import validator
from ahpd.wire import read_frames, schema

FIXTURE = Path(__file__).resolve().parents[2] / "conformance" / "fixtures" / "wire.jsonl"


def payloads() -> list[tuple[schema.Target, Any]]:
    found, asked = [], {}
    for frame in read_frames([str(FIXTURE)]):
        if frame.closed:
            continue
        msg, method = frame.message, frame.message.get("method")
        if frame.direction == "c2s" and method and "id" in msg:
            asked[(frame.connection, msg["id"])] = method
            where = schema.target("commands", method, "params")
        elif method:
            where = schema.target("clientNotifications" if frame.direction == "c2s" else "notifications", method)
        elif "result" in msg:
            where = schema.target("commands", asked[(frame.connection, msg["id"])], "result")
        else:
            continue
        if where is not None and where[1] is not None:
            found.append((where, _in_protocol(method, msg.get("params", msg.get("result")))))
    return found


def _in_protocol(method: str | None, value: Any) -> Any:
    """``activity: null`` on a root row is served outside the protocol (the
    seed lists it; the checker passes it the same way): judged without it."""
    changes = value.get("changes") if method == "root/sessionSummaryChanged" else None
    if isinstance(changes, dict) and "activity" in changes and changes["activity"] is None:
        return {**value, "changes": {k: v for k, v in changes.items() if k != "activity"}}
    return value


def schema_ok(where: schema.Target, value: Any) -> bool:
    return next(iter(validator(where[0]).iter_errors(value)), None) is None


def test_the_codec_and_the_schema_accept_every_payload() -> None:
    every = payloads()
    assert len(every) > 300
    for where, value in every:
        assert schema.problems(where, value) == [], (where, value)
        assert schema_ok(where, value), (where, value)


def test_they_refuse_the_same_mutations() -> None:
    checked = 0
    for where, value in payloads():
        if not where[0].startswith("/notifications/action"):
            continue
        action = value["action"]
        required = [k for k in action if k != "type"]
        mutations = [lambda a: a.update(undeclared=1)] + ([lambda a, key=required[0]: a.pop(key)] if required else [])
        for change in mutations:
            bad = copy.deepcopy(value)
            change(bad["action"])
            assert codec_ok(where, bad) == schema_ok(where, bad), bad
            checked += 1
        if checked >= 120:
            return
    raise AssertionError(f"only {checked} mutations")


def codec_ok(where: schema.Target, value: Any) -> bool:
    try:
        codec.decode(where[1], value)
    except DecodeError:
        return False
    return True
