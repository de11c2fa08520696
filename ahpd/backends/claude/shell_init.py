"""The shell init scripts a client sends, run before each of Claude Code's shell commands.

``shellInitScripts`` is the reference host's platform config key: a list of
``{shell, script}`` the window generates from the folder's shell profile and
the Python environment it selected. The CLI's shell tool (Bash) has no
setting for a script to run first, so a PreToolUse hook on Bash rewrites
each command to source the bash entry before it. The script is written to a
file of its own, kept while the conversation lives and rewritten whenever
the list changes; sourcing it drops its standard error, and a nonzero status
is printed on the command's output rather than stopping the command, which
is how the reference runtime treats a profile that fails.

A PowerShell entry is kept in the session's config but never sourced: the
CLI's shell tool is bash on every platform. An empty list, or one without a
bash entry, takes the file away and commands run as written.
"""

from __future__ import annotations

import logging
import os
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ahpd.ports import threads

log = logging.getLogger("ahpd.backends.claude.backend")

#: The config key, under the reference host's name.
KEY = "shellInitScripts"

#: Its ``SessionConfigPropertySchema``: ``readOnly``, since nobody types one
#: (the window sends what it generated); no default, so "absent" and "an
#: empty list" stay apart.
PROPERTY: dict[str, Any] = {
    "type": "array",
    "title": "Shell Init Script",
    "description": "A script sourced before each command of the agent's shell tool.",
    "items": {
        "type": "object",
        "title": "Shell Init Script",
        "properties": {
            "shell": {"type": "string", "title": "Shell", "enum": ["bash", "powershell"]},
            "script": {"type": "string", "title": "Script"},
        },
        "required": ["shell", "script"],
    },
    "readOnly": True,
    "sessionMutable": True,
}


def bash_entry(scripts: Any) -> str | None:
    """The script of the list's bash entry (the last, if there are several), or None."""
    found = None
    for entry in scripts if isinstance(scripts, Sequence) and not isinstance(scripts, str) else ():
        if isinstance(entry, Mapping) and entry.get("shell") == "bash" and isinstance(entry.get("script"), str):
            found = entry["script"]
    return found


def sourcing(path: Path, command: str) -> str:
    """``command`` with the script at ``path`` sourced first: its standard
    error dropped, a nonzero status said on standard output, then the
    command, whatever the script did."""
    quoted = shlex.quote(str(path))
    return f'{{ . {quoted}; }} 2>/dev/null || echo "(the shell init script exited with status $?)"\n{command}'


class ShellInit:
    """One conversation's script file and the hook that sources it."""

    def __init__(self, label: str) -> None:
        self._label = label
        #: The file holding the bash entry now; None while there is none.
        self.path: Path | None = None
        #: The list last set, as the session holds it.
        self.scripts: list[Any] | None = None

    async def set(self, scripts: Any) -> None:
        """The session's list now: the file written, rewritten or taken away."""
        self.scripts = list(scripts) if isinstance(scripts, Sequence) and not isinstance(scripts, str) else None
        script = bash_entry(scripts)
        if script is None:
            await self.close()
            return
        self.path = await threads.run("agents", _write, self.path, script)

    async def close(self) -> None:
        path, self.path = self.path, None
        if path is not None:
            await threads.run("agents", _remove, path)

    def command(self, command: str) -> str:
        """What the shell tool is to run for ``command`` (as written, with no script)."""
        return command if self.path is None else sourcing(self.path, command)

    def strip(self, command: str) -> str:
        """``command`` as the model wrote it, without the sourcing this put in front."""
        if self.path is not None:
            prefix = sourcing(self.path, "")
            if command.startswith(prefix):
                return command[len(prefix) :]
        return command

    async def before_bash(self, hook_input: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        """The PreToolUse hook on Bash: the command, with the script sourced
        first, while there is one; no opinion otherwise. Whether the command
        may run at all is still ``can_use_tool``'s to ask."""
        tool_input = hook_input.get("tool_input") if isinstance(hook_input, Mapping) else None
        if self.path is None or not isinstance(tool_input, Mapping) or not isinstance(tool_input.get("command"), str):
            return {}
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "updatedInput": {**tool_input, "command": self.command(tool_input["command"])},
            }
        }


def _write(path: Path | None, script: str) -> Path:
    """Write ``script`` to ``path`` (a new private file when None), whole or not at all."""
    if path is None:
        fd, name = tempfile.mkstemp(prefix="ahpd-shell-init-", suffix=".sh")
        os.close(fd)
        path = Path(name)
    partial = path.with_name(path.name + ".new")
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as out:
        out.write(script)
    os.replace(partial, path)
    return path


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("the shell init script %s could not be removed: %s", path, exc)
