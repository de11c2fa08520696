"""Log lines a client cannot forge: the formatter every handler of ahpd uses."""

from __future__ import annotations

import logging

from ahpd.ops.logs import FORMAT, SafeFormatter, escape


def _record(msg: str, *args: object, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("ahpd.host", logging.INFO, __file__, 1, msg, args, exc_info)


def test_escape_writes_every_control_character_visibly() -> None:
    assert escape("plain text, é and 🙂\ttab") == "plain text, é and 🙂\\ttab"
    assert escape("a\nb\rc\x1b[31m\x00\x7f\x85") == "a\\nb\\rc\\x1b[31m\\x00\\x7f\\x85"
    assert escape("line\u2028sep\u202eevil") == "line\\u2028sep\\u202eevil"


def test_a_message_is_one_line_and_a_traceback_is_indented() -> None:
    formatter = SafeFormatter(FORMAT)
    line = formatter.format(_record("%s: initialized", "client x\nahpd ready: ws://forged/"))
    assert "\n" not in line and line.endswith("client x\\nahpd ready: ws://forged/: initialized")
    try:
        raise ValueError("quoted\nahpd ready: forged")
    except ValueError as exc:
        text = formatter.format(_record("%s failed", "m\x1b", exc_info=(type(exc), exc, exc.__traceback__)))
    first, *rest = text.split("\n")
    assert first.endswith("m\\x1b failed")
    assert len(rest) > 3 and all(line.startswith("    ") for line in rest)
    assert "    ahpd ready: forged" in rest
