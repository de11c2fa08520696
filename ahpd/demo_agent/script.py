"""What the demo agent does with a prompt: plain functions, no I/O.

The demo agent has no model. It reads trigger words in the prompt and turns
them into a :class:`Script`: the actions to carry out (tool calls through the
client), the turn's modifiers (a plan, slow streaming, a failure), and every
text it will stream (reasoning, reply). Everything here is deterministic, so
the agent's behaviour can be tested without a process or a socket; the
protocol side lives in :mod:`ahpd.demo_agent.agent`.

Rules (words are case-insensitive and matched as whole words, anywhere):

* A prompt that starts with ``/help`` or ``/echo`` is that slash command and
  nothing else. Any other slash command is read as plain text.
* ``read <path>`` takes the next token as the path. ``write <path> <text>`` and
  ``run <command>`` take the rest of their line. Text consumed as an argument
  is not searched for other trigger words (``run echo plan`` runs a command, it
  does not show a plan).
* ``permission``/``tool`` and ``ask`` are actions; each happens once per turn.
  ``read``, ``write`` and ``run`` happen once per occurrence. Actions run in the
  order they appear in the prompt.
* ``plan``, ``slow`` and ``fail`` change the whole turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

ActionKind = Literal["permission", "read", "write", "run", "ask"]

#: The ``/`` commands offered through ``available_commands_update``: name,
#: description, input hint (or ``None``).
SLASH_COMMANDS: tuple[tuple[str, str, str | None], ...] = (
    ("help", "List the words the demo agent reacts to", None),
    ("echo", "Reply with exactly the given text", "text to echo back"),
)

#: How many chunks a ``slow`` reply is streamed in, and the pause before each.
SLOW_CHUNKS = 40
SLOW_DELAY_SECONDS = 0.1

#: The question that ``ask`` puts to the user, and its two answers.
QUESTION = "Shall the demo agent carry on?"
ANSWERS = ("yes", "no")

#: The plan shown for ``plan``; its statuses advance as the turn goes on.
#: An ACP ``PlanEntry`` status.
PlanStatus = Literal["pending", "in_progress", "completed"]

PLAN_STEPS = (
    "Read the prompt",
    "Carry out the requested actions",
    "Write the reply",
)

HELP_TEXT = """\
**Demo agent**: a deterministic, offline ACP agent. It reacts to these words:

| word | what happens |
| --- | --- |
| `permission`, `tool` | a tool call that asks for permission first |
| `read <path>` | reads a file through the client (`fs/read_text_file`) |
| `write <path> <text>` | asks, then writes the text to a file through the client (`fs/write_text_file`) |
| `run <command>` | asks, then runs `sh -c <command>` in a client terminal (`terminal/*`) |
| `ask` | asks you a question |
| `plan` | shows a three-step plan |
| `slow` | streams the reply slowly (try cancelling it) |
| `fail` | the prompt fails with an error |

Anything else is echoed back."""

_WORD_TRIGGERS = re.compile(r"\b(permissions?|tools?|ask|plan|slow|fail)\b", re.IGNORECASE)
_ARG_TRIGGERS = re.compile(r"\b(read|write|run)\b", re.IGNORECASE)
_READ_ARGS = re.compile(r"[ \t]+(\S+)")
_WRITE_ARGS = re.compile(r"[ \t]+(\S+)[ \t]+([^\n]*\S)")
_RUN_ARGS = re.compile(r"[ \t]+([^\n]*\S)")
_SLASH = re.compile(r"/([A-Za-z][\w-]*)(?:[ \t]+|\n|$)")
_QUOTES = "\"'`“”‘’"


@dataclass(frozen=True)
class Action:
    """One thing to do through the client during the turn."""

    kind: ActionKind
    #: The path (read, write) or the shell command (run); empty otherwise.
    target: str = ""
    #: The text to write (write only).
    text: str = ""


@dataclass(frozen=True)
class Script:
    """Everything the agent will do for one prompt."""

    prompt: str
    #: ``"help"`` or ``"echo"`` for those slash commands, else ``None``.
    command: str | None = None
    #: The text after a slash command.
    argument: str = ""
    actions: tuple[Action, ...] = ()
    plan: bool = False
    slow: bool = False
    fail: bool = False
    #: Trigger words found, in order of appearance (for the reasoning).
    triggers: tuple[str, ...] = field(default=())


def parse(prompt: str) -> Script:
    """Read the trigger words of ``prompt`` (see the module docstring)."""
    text = prompt.strip()
    slash = _SLASH.match(text)
    if slash and slash.group(1).lower() in {name for name, _, _ in SLASH_COMMANDS}:
        name = slash.group(1).lower()
        return Script(prompt=text, command=name, argument=text[slash.end() :].strip(), triggers=("/" + name,))

    found: list[tuple[int, str, Action | None]] = []
    masked = list(text)
    end_of_last = 0
    for match in _ARG_TRIGGERS.finditer(text):
        if match.start() < end_of_last:
            continue  # inside an earlier command's argument
        word = match.group(1).lower()
        pattern = {"read": _READ_ARGS, "write": _WRITE_ARGS, "run": _RUN_ARGS}[word]
        args = pattern.match(text, match.end())
        if args is None:
            continue  # the word without its arguments is just a word
        if word == "read":
            action = Action("read", target=_unquote(args.group(1)))
        elif word == "write":
            action = Action("write", target=_unquote(args.group(1)), text=args.group(2))
        else:
            action = Action("run", target=args.group(1))
        found.append((match.start(), word, action))
        end_of_last = args.end()
        masked[match.start() : args.end()] = " " * (args.end() - match.start())

    seen: set[str] = set()
    flags = {"plan": False, "slow": False, "fail": False}
    for match in _WORD_TRIGGERS.finditer("".join(masked)):
        word = match.group(1).lower()
        if word.startswith("tool") or word.startswith("permission"):
            word = "permission"
        if word in seen:
            continue
        seen.add(word)
        if word in flags:
            flags[word] = True
            found.append((match.start(), word, None))
        else:
            found.append((match.start(), word, Action(word)))  # type: ignore[arg-type]

    found.sort(key=lambda item: item[0])
    return Script(
        prompt=text,
        actions=tuple(action for _, _, action in found if action is not None),
        triggers=tuple(word for _, word, _ in found),
        plan=flags["plan"],
        slow=flags["slow"],
        fail=flags["fail"],
    )


def _unquote(token: str) -> str:
    return token.strip(_QUOTES) or token


def thoughts(script: Script) -> list[str]:
    """The reasoning streamed before anything else: three chunks."""
    words = len(script.prompt.split())
    first = f"Reading the prompt ({words} word{'' if words == 1 else 's'}). "
    if script.command is not None:
        second = f"It is the /{script.command} command. "
    elif script.triggers:
        second = "Trigger words: " + ", ".join(script.triggers) + ". "
    else:
        second = "No trigger words, so I will echo it back. "
    if script.fail:
        third = "I was asked to fail, so I will."
    elif script.slow:
        third = "I will write the reply slowly."
    else:
        third = "Writing the reply."
    return [first, second, third]


def reply(script: Script, results: list[str]) -> str:
    """The markdown reply, given one summary line per action carried out."""
    if script.command == "help":
        return HELP_TEXT
    if script.command == "echo":
        return script.argument or "(nothing to echo)"
    text = f"Demo agent here. You said: “{script.prompt}”"
    if results:
        text += "\n\n" + "\n".join(f"- {line}" for line in results)
    if script.slow:
        text += "\n\nStreaming slowly: " + " ".join(str(i) for i in range(1, SLOW_CHUNKS + 1)) + "."
    return text


def chunks(text: str, words_per_chunk: int = 4) -> list[str]:
    """Split ``text`` into chunks of a few words; joined, they give ``text`` back."""
    tokens = re.findall(r"\S+\s*|\s+", text)
    return ["".join(tokens[i : i + words_per_chunk]) for i in range(0, len(tokens), words_per_chunk)]


def even_chunks(text: str, count: int) -> list[str]:
    """Split ``text`` into ``count`` chunks (fewer if it has fewer words)."""
    tokens = re.findall(r"\S+\s*|\s+", text)
    count = max(1, min(count, len(tokens)))
    size, extra = divmod(len(tokens), count)
    out: list[str] = []
    start = 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append("".join(tokens[start:end]))
        start = end
    return out


def plan_statuses(stage: int) -> list[PlanStatus]:
    """The statuses of :data:`PLAN_STEPS` at ``stage`` 0-3 (3: all completed)."""
    return ["completed" if i < stage else "in_progress" if i == stage else "pending" for i in range(len(PLAN_STEPS))]


def title_of(prompt: str, limit: int = 80) -> str:
    """A session title: the first non-empty line of the first prompt, cut short."""
    line = next((line.strip() for line in prompt.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def count_words(*texts: str) -> int:
    """The demo agent's "tokens": whitespace-separated words."""
    return sum(len(text.split()) for text in texts)
