"""``ahpd chat --json``: what the chat shows, as one JSON object per line.

For scripts: the same turn as on screen, each thing that happens one
object on standard output with an ``event`` key, written as it happens
and flushed, so a reader can act on a line without waiting for the turn.

* ``session``: ``uri``, ``title``, ``provider``, ``created``, ``turns`` (before this run), ``cwd``
* ``text``: a finished part of the reply, ``kind`` ``markdown`` or ``reasoning``, its ``text`` whole
* ``activity``: what the agent says it is doing (a plan's step, the tool running); ``text`` or null
* ``tool``: ``name``, ``status`` ``started``, ``completed``, ``failed`` or ``denied``, and ``message``
* ``decision``: a question answered without asking (``--yes``, no terminal): ``question``, ``answer``, ``why``
* ``info`` and ``error``: a line the screen would print, in ``text``
* ``end``: the turn ended; ``state`` ``complete``, ``cancelled``, ``error`` or ``refused``, and ``message``

Nothing here is ever a terminal sequence: every character outside ASCII is
written as a JSON escape, C1 controls and bidirectional overrides included.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from ahpd.chat.render import output_closed


class JsonScreen:
    """The :class:`~ahpd.chat.render.Screen` interface, written as JSON lines."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._part = ""
        self._part_id: str | None = None
        self._kind = ""

    def emit(self, event: str, **fields: Any) -> None:
        try:
            self.out.write(json.dumps({"event": event, **fields}) + "\n")
            self.out.flush()
        except BrokenPipeError:
            raise output_closed() from None

    async def animate(self) -> None:
        """Nothing to redraw: every event is a line of its own."""

    def session(self, uri: str, *, title: str, provider: str, created: bool, turns: int, cwd: str) -> None:
        self.emit("session", uri=uri, title=title, provider=provider, created=created, turns=turns, cwd=cwd)

    def info(self, text: str, style: str = "") -> None:
        self.emit("info", text=text)

    def error(self, text: str) -> None:
        self.emit("error", text=text)

    def start(self) -> None:
        self._part, self._part_id, self._kind = "", None, ""

    def text(self, part_id: str, kind: str, text: str) -> None:
        if part_id != self._part_id:
            self._commit()
            self._part_id, self._kind = part_id, kind
        self._part += text

    def activity(self, text: str | None, *, tool: bool = False) -> None:
        self.emit("activity", text=text or None)

    def tool_started(self, name: str) -> None:
        self._commit()
        self.emit("tool", name=name, status="started", message="")

    def tool_finished(self, name: str, ok: bool, message: str) -> None:
        self._commit()
        self.emit("tool", name=name, status="completed" if ok else "failed", message=message)

    def tool_denied(self, name: str) -> None:
        self._commit()
        self.emit("tool", name=name, status="denied", message="")

    def decision(self, question: str, answer: str, why: str = "") -> None:
        self.emit("decision", question=question, answer=answer, why=why)

    def pause(self) -> None:
        self._commit()

    def resume(self) -> None:
        pass

    def finish(self, how: str, message: str = "") -> None:
        self._commit()
        self.emit("end", state=how, message=message)

    def _commit(self) -> None:
        if self._part:
            self.emit("text", kind=self._kind, text=self._part)
        self._part, self._part_id = "", None
