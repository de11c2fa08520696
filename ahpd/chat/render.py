"""What ``ahpd chat`` shows: the agent's text as Markdown, tool calls, a spinner.

Everything an agent (or a host) says is untrusted terminal input: a reply
could carry escape sequences that retitle the window, move the cursor,
rewrite what was shown or answer a terminal query. :func:`neutralise`
replaces every C0 and C1 control character (but newline and tab) and the
bidirectional overrides with visible stand-ins before rich sees the text,
and text is handed to rich as ``Text``/``Markdown`` objects, never as markup.

While a turn runs a ``Live`` region at the bottom holds the part being
streamed and a spinner; finished parts and tool lines are printed above it
and stay. The region is stopped while a question is asked, so the prompt
has the terminal to itself. It is redrawn by :meth:`Screen.animate`, a task
of the client's own trio run, never by rich's refresh thread: a redraw from
that thread could land between a line printed above the region and the
region drawn under it, and move the cursor up by the region's old height,
wiping the tail of a reply just printed or leaving a spinner behind.

When standard output is not a terminal nothing is drawn live and the
agent's text is written as it came (Markdown source, neutralised), so a
pipe gets no padding to 80 columns and no wrapping.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any, TextIO

import trio
from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from rich.live import Live

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _stand_in(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures block: ESC shows as ␛
    if code == 0x7F:
        return "\u2421"
    return "\ufffd"


def warm() -> None:
    """Import what a turn draws with (Markdown, the live region): most of the
    client's start-up, so ``ahpd chat`` runs this in a worker thread while it
    waits for the daemon, and a one-shot chat does not wait for it first."""
    import rich.live
    import rich.markdown
    import rich.spinner  # noqa: F401


def neutralise(text: Any) -> str:
    """``text`` with every control character but ``\\n`` and ``\\t`` made visible and inert."""
    return _CONTROLS.sub(_stand_in, str(text))


def plain(value: Any) -> str:
    """A ``StringOrMarkdown`` (or anything) as neutralised text."""
    if isinstance(value, dict):
        value = value.get("markdown", "")
    return neutralise(value if value is not None else "")


#: How often the live region is redrawn while a turn runs.
FRAMES_PER_SECOND = 8


class OutputClosed(Exception):
    """Standard output was closed by its reader (``ahpd chat … | head``):
    the client leaves quietly, with status 141 as a shell's SIGPIPE would."""


def output_closed() -> OutputClosed:
    """What to raise when a write met a closed pipe: what is still to be
    written goes to /dev/null, so nothing on the way out raises again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return OutputClosed()


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """rich's documented override: leave through :class:`OutputClosed`
        instead of a ``SystemExit(1)`` that would read as a failure."""
        self.quiet = True
        raise output_closed()


class Screen:
    def __init__(self, out: TextIO | None = None) -> None:
        self.console = _Console(file=out, highlight=False, soft_wrap=False)
        self._live: Live | None = None
        self._kind = ""  # of the part being streamed: "markdown" or "reasoning"
        self._part = ""
        self._part_id: str | None = None
        self._activity = "working"
        self._said = ""  # the last activity printed as a line
        self._shown = trio.Event()  # set while the live region is up

    async def animate(self) -> None:
        """Redraw the live region while there is one, for the client's life
        (asleep while there is none: at the prompt, during a question)."""
        while True:
            await self._shown.wait()
            while self._live is not None:
                await trio.sleep(1 / FRAMES_PER_SECOND)
                if self._live is not None:
                    self._live.refresh()

    def session(self, uri: str, *, title: str, provider: str, created: bool, turns: int, cwd: str) -> None:
        """The line saying which session this is."""
        how = "new" if created else f"continued, {turns} turn{'s' * (turns != 1)} before"
        named = f" “{plain(title)}”" if title else ""
        self.info(f"session {uri}{named} ({neutralise(provider)}, {how}) in {cwd}")

    # -- plain lines -----------------------------------------------------------------

    def info(self, text: str, style: str = "dim") -> None:
        self.console.print(Text(neutralise(text), style=style), soft_wrap=True)

    def error(self, text: str) -> None:
        self.console.print(Text(neutralise(text), style="bold red"), soft_wrap=True)

    # -- a turn ----------------------------------------------------------------------

    def start(self) -> None:
        self._part, self._part_id, self._kind, self._activity, self._said = "", None, "", "working", ""
        self._open()

    def text(self, part_id: str, kind: str, text: str) -> None:
        if part_id != self._part_id:
            self._commit()
            self._part_id, self._kind = part_id, kind
        self._part += neutralise(text)
        self._activity = "thinking" if kind == "reasoning" else "writing"

    def activity(self, text: str | None, *, tool: bool = False) -> None:
        """What the chat is doing (``chat/activityChanged``): under the spinner,
        and as a line of its own when it is not a tool's (a plan's step), so
        that it stays on screen once the turn is over."""
        self._activity = neutralise(text) if text else "working"
        if text and not tool and text != self._said:
            self._commit()
            self.console.print(Text.assemble(("  → ", "dim"), (neutralise(text), "dim")), soft_wrap=True)
        self._said = text or ""

    def tool_started(self, name: str) -> None:
        self._commit()
        self._activity = f"running {neutralise(name)}"
        self.console.print(Text.assemble(("  ⚙ ", "cyan"), (neutralise(name), "cyan")))

    def tool_finished(self, name: str, ok: bool, message: str) -> None:
        mark, style = ("✓", "green") if ok else ("✗", "red")
        self._commit()
        self.console.print(Text.assemble((f"  {mark} ", style), (neutralise(message or name), style)), soft_wrap=True)
        self._activity = "working"

    def tool_denied(self, name: str) -> None:
        """A call that was not allowed: it never runs, so nothing else will say it ended."""
        self.tool_finished(name, False, f"{name}: denied")

    def decision(self, question: str, answer: str, why: str = "") -> None:
        """A question this client answered by itself (``--yes``, no terminal)."""
        self.info(f"{question} {answer}{f' ({why})' if why else ''}")

    def pause(self) -> None:
        """Give the terminal to a prompt."""
        self._commit()
        if self._live is not None:
            self._live.stop()
            self._live = None
            self._shown = trio.Event()

    def resume(self) -> None:
        self._open()

    def finish(self, how: str, message: str = "") -> None:
        self.pause()
        if how == "cancelled":
            self.console.print(Text("[turn cancelled]", style="yellow"))
        elif how in ("error", "agent"):
            self.error(f"[error: {message}]")
        elif how == "refused":
            self.error(f"[refused: {message}]")

    # -- the live region -------------------------------------------------------------

    def _open(self) -> None:
        """The live region reads this screen's state whenever it redraws (eight
        times a second), so a long reply is not re-rendered for every chunk."""
        if self._live is None and self.console.is_terminal:
            from rich.live import Live

            self._live = Live(
                _Region(self), console=self.console, transient=True, auto_refresh=False, vertical_overflow="ellipsis"
            )
            self._live.start(refresh=True)
            self._shown.set()

    def _part_renderable(self) -> Any:
        if self._kind == "reasoning":
            return Text(self._part, style="dim italic")
        from rich.markdown import Markdown

        return Markdown(self._part)

    def _commit(self) -> None:
        """Print the part being streamed above the live region, where it stays."""
        if not self._part:
            return
        if self.console.is_terminal:
            done = self._part_renderable()
        else:  # the source as it came: a pipe wants no padding, no wrapping
            done = Text(self._part.rstrip("\n"))
        self._part, self._part_id = "", None  # first, or the region would show it a second time
        self.console.print(done, soft_wrap=not self.console.is_terminal)


class _Region:
    """The live region: the part being streamed, and a spinner saying what goes on."""

    def __init__(self, screen: Screen) -> None:
        from rich.spinner import Spinner

        self.screen = screen
        self.spinner = Spinner("dots")

    def __rich_console__(self, console: Any, options: Any) -> Any:
        self.spinner.text = Text(self.screen._activity + "…", style="dim")
        if self.screen._part:
            yield self.screen._part_renderable()
        yield self.spinner
