"""The one schema check the tests share.

Every test that says "this value is what the protocol allows" asks the same
question of ahpd's strict schema (``ahpd schema``): the errors, each with the
path inside the value where it was found, and an assertion that there are
none. One copy, so that what a failure prints is the same everywhere.
"""

from __future__ import annotations

from typing import Any

from ahpd.protocol.strict_schema import validator


def fits(pointer: str, value: Any) -> None:
    """``value`` is valid against the strict schema at ``pointer`` (``/$defs/ChatState``,
    ``/notifications/action``, ``/commands/initialize/result``...)."""
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator(pointer).iter_errors(value)]
    assert errors == [], errors
