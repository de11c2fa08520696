"""The prompt of ``ahpd chat`` and the questions it asks, with prompt_toolkit.

prompt_toolkit owns the terminal while it reads (raw mode), so Ctrl-C and
Ctrl-D act at once, without Enter, and arrive as ``KeyboardInterrupt`` and
``EOFError``. It runs its own asyncio loop, so each read runs in a worker
thread (``trio.to_thread``) while the trio side keeps the connection alive.

Questions are a ``ChatInputRequest``'s (``chat/inputRequested``): each kind
of question is read as text and turned into the ``ChatInputAnswer`` the
protocol wants. :func:`answers` returns ``None`` when the user declines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ahpd.chat.render import neutralise, plain
from ahpd.ports.atomic import private_file


class Prompter:
    def __init__(self, history: Path | None) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, InMemoryHistory

        try:
            store = FileHistory(str(private_file(history))) if history is not None else InMemoryHistory()
        except OSError:
            store = InMemoryHistory()
        self._session: Any = PromptSession(history=store)
        self._plain: Any = PromptSession()  # questions do not go into the history

    def line(self) -> str:
        """The next message (raises ``KeyboardInterrupt`` on Ctrl-C, ``EOFError`` on Ctrl-D)."""
        return self._session.prompt("you> ", handle_sigint=False)

    def ask(self, text: str, default: str = "") -> str:
        return self._plain.prompt(neutralise(text), default=default, handle_sigint=False)

    def yes_no(self, question: str, default: bool = False) -> bool:
        hint = "[Y/n]" if default else "[y/N]"
        while True:
            reply = self.ask(f"{question} {hint} ").strip().lower()
            if not reply:
                return default
            if reply in ("y", "yes", "n", "no"):
                return reply.startswith("y")

    def answers(self, request: dict[str, Any], say: Any) -> dict[str, Any] | None:
        """Answers for every question of ``request`` (``say`` prints a line), or
        ``None`` when the user declines."""
        if request.get("message"):
            say(plain(request["message"]))
        if request.get("url"):
            say(f"Open: {plain(request['url'])}")
            if not request.get("questions"):
                return {} if self.yes_no("Done?", default=True) else None
        result: dict[str, Any] = {}
        for question in request.get("questions") or []:
            while (value := self._one(question, say)) is None and question.get("required"):
                if self.yes_no("An answer is required. Decline the request instead?"):
                    return None
            result[question["id"]] = {"state": "skipped"} if value is None else {"state": "submitted", "value": value}
        return result

    def _one(self, q: dict[str, Any], say: Any) -> dict[str, Any] | None:
        """One question's ``ChatInputAnswerValue``, or ``None`` when left empty."""
        kind = q.get("kind")
        title, message = plain(q.get("title") or ""), plain(q.get("message", ""))
        # A form's field often carries one text as both (an ACP elicitation's
        # property title is the question's title and message): said once.
        say(title if title == message or not message else (title + ": " if title else "") + message)
        if kind in ("single-select", "multi-select"):
            return self._select(q, say, many=kind == "multi-select")
        while True:
            default = q.get("defaultValue")
            if kind == "boolean":
                reply = self.ask("[y/n] ", "" if default is None else ("y" if default else "n")).strip().lower()
                if not reply:
                    return None
                if reply in ("y", "yes", "n", "no"):
                    return {"kind": "boolean", "value": reply.startswith("y")}
            elif kind in ("number", "integer"):
                reply = self.ask("> ", "" if default is None else str(default)).strip()
                if not reply:
                    return None
                try:
                    number: float = int(reply) if kind == "integer" else float(reply)
                except ValueError:
                    say(f"Please enter {'a whole number' if kind == 'integer' else 'a number'}.")
                    continue
                return {"kind": "number", "value": number}
            else:  # text, and any kind this client does not know
                reply = self.ask("> ", str(default or ""))
                return {"kind": "text", "value": reply} if reply else None

    def _select(self, q: dict[str, Any], say: Any, *, many: bool) -> dict[str, Any] | None:
        options = q.get("options") or []
        for number, option in enumerate(options, 1):
            extra = f" — {plain(option['description'])}" if option.get("description") else ""
            star = " (recommended)" if option.get("recommended") else ""
            say(f"  {number}. {plain(option['label'])}{star}{extra}")
        free = bool(q.get("allowFreeformInput"))
        hint = "numbers, comma-separated" if many else "a number"
        while True:
            reply = self.ask(f"({hint}{' or text' if free else ''}) > ").strip()
            if not reply:
                return None
            picked: list[str] = []
            typed: list[str] = []
            for token in reply.split(",") if many else [reply]:
                token = token.strip()
                if token.isdigit() and 1 <= int(token) <= len(options):
                    picked.append(options[int(token) - 1]["id"])
                elif free and token:
                    typed.append(token)
                else:
                    picked = typed = []
                    break
            if not picked and not typed:
                say(f"Please choose {hint} between 1 and {len(options)}.")
                continue
            value: dict[str, Any] = (
                {"kind": "selected-many", "value": picked}
                if many
                else {"kind": "selected", "value": picked[0] if picked else ""}
            )
            if typed:
                value["freeformValues"] = typed
            return value
