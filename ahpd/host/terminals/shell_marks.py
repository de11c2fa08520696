"""Reading a shell's integration marks back out of its output (no I/O).

The shell integration scripts shipped in ``ahpd/ports/shell`` make the shell
write OSC 7 (``ESC ] 7 ; file://host/path BEL``: the working directory) and
OSC 133 marks (``A`` a prompt starts, ``B`` it ends and typing begins, ``C``
the typed command runs, ``D;<code>`` it finished). ``MarkReader.feed`` takes
raw pty bytes and gives back, in order, ``Text`` (the output with those marks
cut out, decoded as UTF-8 and never cut inside a character) and ``Mark``
events. A mark split across two reads is held until it is complete; any
other escape sequence passes through untouched, since that is terminal
output a client draws.

``CommandLine`` reads the command back off what was echoed between ``B`` and
``C``: the typed characters, with the pty's echo of control keys and the line
editor's escape sequences taken out.
"""

from __future__ import annotations

import codecs
import re
from urllib.parse import unquote, urlsplit

import attrs

#: A mark longer than this is not one of ours: it is passed through as text.
MAX_MARK = 4096
_OSC = b"\x1b]"
_OURS = (b"\x1b]7;", b"\x1b]133;")


@attrs.frozen
class Text:
    text: str


@attrs.frozen
class Mark:
    """``kind``: ``cwd`` (``value`` the path) or ``A``/``B``/``C``/``D``
    (``value`` the exit code's text for ``D``, else empty)."""

    kind: str
    value: str = ""


class MarkReader:
    def __init__(self) -> None:
        self._held = b""
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes) -> list[Text | Mark]:
        data = self._held + data
        self._held = b""
        events: list[Text | Mark] = []
        start = 0
        while True:
            at = data.find(_OSC, start)
            if at < 0:
                # A lone ESC at the very end may be the first half of a mark.
                if data.endswith(b"\x1b"):
                    self._text(events, data[start:-1])
                    self._held = b"\x1b"
                else:
                    self._text(events, data[start:])
                return events
            head = data[at : at + 6]
            if not any(head.startswith(p) or p.startswith(head) for p in _OURS):
                self._text(events, data[start : at + 2])  # someone else's OSC: output
                start = at + 2
                continue
            end, size = _terminator(data, at)
            if end < 0:
                if len(data) - at > MAX_MARK:
                    self._text(events, data[start : at + 2])
                    start = at + 2
                    continue
                self._text(events, data[start:at])
                self._held = data[at:]
                return events
            if not any(head.startswith(p) for p in _OURS):
                self._text(events, data[start : at + 2])
                start = at + 2
                continue
            self._text(events, data[start:at])
            mark = _mark(data[at + 2 : end].decode("utf-8", "replace"))
            if mark is not None:
                events.append(mark)
            start = end + size

    def _text(self, events: list[Text | Mark], chunk: bytes) -> None:
        if not chunk:
            return
        text = self._decoder.decode(chunk)
        if not text:
            return
        if events and isinstance(events[-1], Text):
            events[-1] = Text(events[-1].text + text)
        else:
            events.append(Text(text))


def _terminator(data: bytes, at: int) -> tuple[int, int]:
    bel = data.find(b"\x07", at)
    st = data.find(b"\x1b\\", at + 2)
    if bel < 0 and st < 0:
        return -1, 0
    if st < 0 or (0 <= bel < st):
        return bel, 1
    return st, 2


def _mark(body: str) -> Mark | None:
    if body.startswith("7;"):
        url = urlsplit(body[2:])
        return Mark("cwd", unquote(url.path)) if url.path.startswith("/") else None
    if body.startswith("133;"):
        parts = body[4:].split(";")
        if parts[0] in ("A", "B", "C"):
            return Mark(parts[0])
        if parts[0] == "D":
            return Mark("D", parts[1] if len(parts) > 1 else "")
    return None


_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|\x1b.")


def command_line(echoed: str) -> str:
    """The command a person typed, read back off the pty's echo of it."""
    text = _ESCAPES.sub("", echoed)
    out: list[str] = []
    for ch in text:
        if ch in "\b\x7f":
            if out:
                out.pop()
        elif ch in "\r\n":
            continue
        elif ch >= " " or ch == "\t":
            out.append(ch)
    return "".join(out).strip()
