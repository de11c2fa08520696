"""The root channel's config: what a client may set, and what each key means.

Three kinds of key are declared. The host's own (``clientQueueBytes``,
``replayBytes``) bound what it holds for a client that stops reading, and
``agentSilenceTimeout`` bounds how long a turn waits on a silent agent, and
``agentIdleTimeout`` how long an agent with no turn keeps its process;
``automationRunLimit`` and ``agentProcessLimit`` cap the automation runs and
agent processes under way at once (test-only switches are never keys a
client can set: they are the daemon's environment). The
keys VS Code's agent-host client pushes are declared so that a client can
draw them and a value pushed for one reads back as a setting rather than an
unknown key; this host does not act on most of them. Two keys belong to the
connection that pushed them and are never shared: ``defaultShell`` and
``workspaceTrust``.

A key nobody declared is refused by name, and the rest of the push applies.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ahpd.host.kernel.writes import PendingWrites, read_kept
from ahpd.ports.atomic import write_atomic

log = logging.getLogger("ahpd.host")

#: ``changeWords`` modes; the last two are declared and refused (see check_value).
CHANGE_WORDS = ("session-title", "forced", "model", "agent")
MIB = 2**20
GIB = 2**30
#: Keys that are the pushing connection's own, not the host's.
CONNECTION_KEYS = frozenset({"defaultShell", "workspaceTrust"})
#: Keys that need a scope to push when the host has a users directory
#: (``ahpd.host.kernel.auth.granted``): the host's own limits, which set what
#: it holds in memory and how much it runs for everyone, need ``config:write``;
#: a connection's ``workspaceTrust`` needs ``trust:push``. Filled in below.
NEEDS_SCOPE: dict[str, str] = {"workspaceTrust": "trust:push"}
#: Host keys' bounds in bytes, which ``ConfigPropertySchema`` cannot
#: express: below the floor a client could starve itself of its own frames,
#: above the ceiling one push could let the host hold memory without limit.
BOUNDS = {"clientQueueBytes": (MIB, GIB), "replayBytes": (MIB, GIB), "terminalScrollback": (64 * 1024, 64 * MIB)}
BOUNDS["terminalInputBytes"] = (4096, 64 * MIB)
#: Host keys' bounds in seconds: an idle agent is kept at most a week (0: never stopped).
SECONDS_BOUNDS = {"agentIdleTimeout": (0, 7 * 24 * 3600)}
#: Host keys that count things, and their bounds: a person's laptop runs a
#: few agents at once; watches share one inotify instance, each folder a kernel watch.
COUNT_BOUNDS = {
    "automationRunLimit": (1, 64),
    "agentProcessLimit": (1, 256),
    "resourceWatches": (1, 4096),
    "resourceWatchesPerConnection": (1, 4096),
    "terminalsPerClient": (1, 1024),
    "terminalsRunning": (1, 4096),
}

NEEDS_SCOPE.update(dict.fromkeys([*BOUNDS, *SECONDS_BOUNDS, *COUNT_BOUNDS, "agentSilenceTimeout"], "config:write"))


def _bool(title: str, default: bool) -> dict[str, Any]:
    return {"type": "boolean", "title": title, "default": default}


def _names(title: str) -> dict[str, Any]:
    return {"type": "array", "title": title, "items": {"type": "string", "title": "Tool"}}


#: The schema served in ``RootState.config.schema`` (wire JSON).
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        # -- this host's own ------------------------------------------------
        "clientQueueBytes": {
            "type": "number",
            "title": "Client queue limit (bytes)",
            "description": "A client with more than this many bytes queued and unread is "
            "disconnected (it can reconnect and catch up). From 1 MiB to 1 GiB.",
            "default": 16 * MIB,
        },
        "replayBytes": {
            "type": "number",
            "title": "Replay buffer size (bytes)",
            "description": "How many bytes of recent actions are kept for clients that "
            "reconnect (at most 1000 actions). From 1 MiB to 1 GiB.",
            "default": 32 * MIB,
        },
        "agentSilenceTimeout": {
            "type": "number",
            "title": "Agent silence timeout (seconds)",
            "description": "A turn whose agent says nothing for this long (while nobody is being "
            "asked anything) ends with an error saying so, and the agent is stopped. 0 waits for ever.",
            "default": 300,
        },
        "automationRunLimit": {
            "type": "number",
            "title": "Automation runs at once",
            "description": "How many automation runs may be under way at once; a run due beyond it "
            "fails at once, saying so. From 1 to 64.",
            "default": 4,
        },
        "agentProcessLimit": {
            "type": "number",
            "title": "Agent processes at once",
            "description": "How many agent processes may run at once. A turn that needs one more stops "
            "an agent that has no turn first; if every agent is busy, the turn ends with an error "
            "saying so. From 1 to 256.",
            "default": 8,
        },
        "terminalScrollback": {
            "type": "number",
            "title": "Terminal scrollback (characters)",
            "description": "How much of each terminal's output is kept for a client that subscribes "
            "late; the oldest goes first. From 64 KiB to 64 MiB.",
            "default": MIB,
        },
        "terminalInputBytes": {
            "type": "number",
            "title": "Terminal input queue (bytes)",
            "description": "How much typed input may wait for a terminal's program to read it; input "
            "past it is refused (a program that reads nothing cannot make the host hold more). "
            "From 4 KiB to 64 MiB.",
            "default": MIB,
        },
        "terminalsPerClient": {
            "type": "number",
            "title": "Running terminals per client",
            "description": "How many running terminals one client may hold; createTerminal past it is "
            "refused. From 1 to 1024.",
            "default": 32,
        },
        "terminalsRunning": {
            "type": "number",
            "title": "Running terminals in all",
            "description": "How many terminals may run at once on this host, clients' and agents' "
            "together; a terminal past it is refused. From 1 to 4096.",
            "default": 128,
        },
        "agentIdleTimeout": {
            "type": "number",
            "title": "Agent idle timeout (seconds)",
            "description": "An agent process with no turn for this long is stopped; the next turn "
            "resumes its conversation. 0 keeps it running. At most 604800 (a week).",
            "default": 600,
        },
        "resourceWatches": {
            "type": "number",
            "title": "Resource watches (all clients)",
            "description": "How many resource watches this host keeps at once, for all clients together; "
            "a createResourceWatch past it is refused, naming this key. From 1 to 4096.",
            "default": 256,
        },
        "resourceWatchesPerConnection": {
            "type": "number",
            "title": "Resource watches per connection",
            "description": "How many resource watches one connection may have created and keep at once; "
            "a createResourceWatch past it is refused, naming this key. From 1 to 4096.",
            "default": 64,
        },
        "changeWords": {
            "type": "object",
            "title": "Commit words",
            "description": "How a commit's words are written when nobody gives them: session-title uses the "
            "session's title; forced refuses a commit without the person's own message. model and agent are "
            "declared and refused: this host does not ask a model for the words yet.",
            "properties": {"mode": {"type": "string", "title": "Mode", "enum": list(CHANGE_WORDS)}},
            "default": {"mode": "session-title"},
        },
        # -- the connection's own --------------------------------------------
        "defaultShell": {
            "type": "string",
            "title": "Default shell",
            "description": "The shell this connection's terminals start; kept per connection.",
        },
        "workspaceTrust": {
            "type": "object",
            "title": "Workspace trust",
            "description": "This connection's workspace trust; kept per connection.",
        },
        # -- pushed by VS Code's agent-host client ----------------------------
        "permissions": {
            "type": "object",
            "title": "Tool permissions",
            "properties": {"allow": _names("Allowed tools"), "deny": _names("Denied tools")},
            "default": {"allow": [], "deny": []},
        },
        "disableRepoInfoTelemetry": _bool("Repository telemetry off", False),
        "telemetryLevel": {
            "type": "string",
            "title": "Telemetry level",
            "enum": ["all", "error", "crash", "off"],
            "default": "all",
        },
        "editTelemetryEnabled": _bool("Edit telemetry", True),
        "sessionSyncEnabled": _bool("Session sync", False),
        "codexAgentEnabled": _bool("Codex agent", False),
        "terminalAutoApproveEnabled": _bool("Terminal auto-approve", True),
        "globalAutoApproveEnabled": _bool("Approve every tool call", False),
        "autoReplyEnabled": _bool("Auto-reply to questions", False),
        "preferLongContextEnabled": _bool("Prefer long context", True),
        "systemProxyEnabled": _bool("Use the system proxy", True),
        "migrateLegacyCopilotCliEnabled": _bool("Migrate legacy Copilot CLI sessions", False),
        "copilotMultiRootEnabled": _bool("Copilot: several working directories", False),
        "claudeMultiRootEnabled": _bool("Claude: several working directories", False),
        "codexMultiRootEnabled": _bool("Codex: several working directories", False),
        "terminalAutoApproveRules": {
            "type": "object",
            "title": "Terminal auto-approve rules",
            "default": {},
        },
        "mcpServers": {"type": "object", "title": "MCP servers", "default": {}},
        "automationsEnabled": _bool("Automations", True),
        "sandboxEnabled": _bool("Sandbox", False),
        "shellInitScripts": {
            "type": "array",
            "title": "Shell init scripts",
            "readOnly": True,
            "items": {"type": "object", "title": "Script"},
        },
    },
}

DEFAULT_VALUES: dict[str, Any] = {
    "clientQueueBytes": 16 * MIB,
    "replayBytes": 32 * MIB,
    "agentSilenceTimeout": 300,
    "terminalScrollback": MIB,
    "agentIdleTimeout": 600,
    "automationRunLimit": 4,
    "agentProcessLimit": 8,
    "terminalInputBytes": MIB,
    "terminalsPerClient": 32,
    "terminalsRunning": 128,
}

_JSON_TYPES = {
    "string": str,
    "boolean": bool,
    "array": list,
    "object": dict,
}


def _mib(n: int) -> str:
    return f"{n // GIB} GiB" if n >= GIB else f"{n // MIB} MiB" if n >= MIB else f"{n // 1024} KiB"


def check_value(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be set for ``key``, or None when it can."""
    prop = SCHEMA["properties"].get(key)
    if prop is None:
        return f"{key} is not a config key this host declares"
    kind = prop["type"]
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{key} must be a number"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{key} must be a finite number"
    elif not isinstance(value, _JSON_TYPES[kind]):
        return f"{key} must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    if "enum" in prop and value not in prop["enum"]:
        return f"{key} must be one of {prop['enum']}"
    if key == "changeWords":
        mode = value.get("mode", "session-title")
        if mode not in CHANGE_WORDS:
            return f"changeWords.mode must be one of {list(CHANGE_WORDS)}"
        if mode in ("model", "agent"):
            return (
                f"changeWords.mode {mode} is not served: "
                "this host does not ask a model or an agent for a commit's words"
            )
    if key == "agentSilenceTimeout" and value < 0:
        return f"{key} must be 0 (wait for ever) or a number of seconds"
    if (seconds := SECONDS_BOUNDS.get(key)) is not None and not seconds[0] <= value <= seconds[1]:
        return f"{key} must be from {seconds[0]} (never) to {seconds[1]} seconds, not {value}"
    if (count := COUNT_BOUNDS.get(key)) is not None and not (value == int(value) and count[0] <= value <= count[1]):
        return f"{key} must be a whole number from {count[0]} to {count[1]}, not {value}"
    bounds = BOUNDS.get(key)
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        unit = "characters" if key == "terminalScrollback" else "bytes"
        return (
            f"{key} must be from {bounds[0]} {unit} ({_mib(bounds[0])}) to {bounds[1]} {unit} "
            f"({_mib(bounds[1])}), not {value}"
        )
    return None


class RootConfigStore:
    """The root config values a client pushed, kept across restarts
    (``--sessions file``), or not at all (``--sessions memory``). A value
    the host no longer accepts is dropped at start, by name."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.writes = PendingWrites(f"root config {path}", self._prepare)

    def load(self) -> dict[str, Any]:
        # NaN is read, so that check_value drops that one key and keeps what else a person set
        values = read_kept(self.path, "the values", constants=True) if self.path is not None else None
        kept = {}
        for key, value in (values or {}).items():
            problem = check_value(key, value)
            if problem is None and key not in CONNECTION_KEYS:
                kept[key] = value
            else:
                log.error("%s: %s; the default applies", self.path, problem or f"{key} is a connection's own")
        return kept

    def save(self, values: dict[str, Any]) -> None:
        if self.path is not None:
            self.writes.put("values", values)

    def _prepare(self, _: str, values: dict[str, Any]) -> Callable[[], None]:
        assert self.path is not None
        path, data = self.path, json.dumps(values, indent=1, sort_keys=True, allow_nan=False).encode()
        return lambda: write_atomic(path, data)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.writes.run(task_status=task_status)

    def close(self) -> None:
        self.writes.close()
