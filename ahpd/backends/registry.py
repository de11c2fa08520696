"""Which agents this host offers: the shipped demo agent and configured ACP agents.

Agents come from ``config.toml``::

    [agents.gemini]
    command = "gemini"
    args = ["--experimental-acp"]
    env = { GEMINI_MODEL = "..." }
    displayName = "Gemini CLI"

and from ``ahpd run --agent NAME=COMMAND`` (the command split like a shell
would). An entry with ``type = "claude"`` is a Claude Code preset instead of
an ACP agent, offered under its own name when the ``claude`` extra is
installed::

    [agents.claude-boxed]
    type = "claude"
    sandbox = "on"        # "default" (the CLI's settings decide), "on" or "off"
    model = "sonnet"
    env = { CLAUDE_CODE_MAX_OUTPUT_TOKENS = "8000" }
 The demo agent is always there, so everything works offline; it is
the default provider unless another agent is configured first. Claude Code
is offered as ``claude`` when the ``claude`` extra is installed.

A key ahpd does not know is warned about by name and skipped, so a typo is
seen and a config written for a newer ahpd still starts. An agent whose
command cannot be found is said at start and still offered (it may be
installed later), but it is never the default provider: a client that names
no provider gets one that starts.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ahpd.backends.acp.backend import AcpBackend
from ahpd.backends.port import Backend

log = logging.getLogger("ahpd.config")

DEMO = "demo"
AGENT_KEYS = frozenset({"command", "args", "env", "displayName", "description"})
CLAUDE_KEYS = frozenset({"type", "sandbox", "model", "env", "displayName", "description"})
TOP_LEVEL_KEYS = frozenset({"agents"})


class ConfigError(ValueError):
    """A config entry that cannot make an agent; the message names it."""


def _demo(data_dir: Path) -> Backend:
    return AcpBackend(
        provider=DEMO,
        command=sys.executable,
        args=["-m", "ahpd.demo_agent", "--home", str(data_dir / "demo-agent")],
        display_name="Demo agent",
        description="A deterministic offline agent shipped with ahpd, for trying things out and for tests",
    )


def _claude(name: str = "claude", entry: Mapping[str, Any] | None = None) -> Backend | None:
    """Claude Code, when the ``claude`` extra (claude-agent-sdk) is installed.

    Asked of the installed distribution rather than by importing the SDK
    (most of a daemon's start-up otherwise; the backend imports it when a
    probe or a conversation first needs it): the package that an import
    would find must be the one that distribution installed."""
    from importlib import metadata, util

    try:
        spec = util.find_spec("claude_agent_sdk")
        installed = metadata.distribution("claude-agent-sdk").locate_file("claude_agent_sdk/__init__.py")
    except (ImportError, ValueError, metadata.PackageNotFoundError):
        return None
    if spec is None or spec.origin is None or Path(spec.origin).resolve() != Path(str(installed)).resolve():
        return None
    # Imported only when the extra is there: the backend and its helpers are
    # 25-35 ms of import (python -X importtime, on this loaded 2-core machine)
    # that a daemon without Claude Code would spend for nothing.
    from ahpd.backends.claude.backend import SANDBOX_MODES, ClaudeBackend

    if entry is None:
        return ClaudeBackend()
    for key in sorted(set(entry) - CLAUDE_KEYS):
        log.warning("config: [agents.%s] %s is not a key of a Claude preset; ignored", name, key)
    sandbox = entry.get("sandbox", "default")
    if sandbox not in SANDBOX_MODES:
        raise ConfigError(f"[agents.{name}] sandbox is one of {', '.join(SANDBOX_MODES)}, not {sandbox!r}")
    model, env = entry.get("model"), entry.get("env", {})
    if model is not None and not isinstance(model, str):
        raise ConfigError(f"[agents.{name}] model must be a string")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ConfigError(f"[agents.{name}] env must be a table of strings")
    extra = {k: entry[k] for k in ("displayName", "description") if isinstance(entry.get(k), str)}
    return ClaudeBackend(
        name,
        env=env,
        model=model,
        sandbox=sandbox,
        **({"display_name": extra["displayName"]} if "displayName" in extra else {}),
        **({"description": extra["description"]} if "description" in extra else {}),
    )


def _acp(name: str, entry: Mapping[str, Any]) -> AcpBackend:
    command = entry.get("command")
    if not isinstance(command, str) or not command:
        raise ConfigError(f"[agents.{name}] needs a command (a string)")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"[agents.{name}] args must be a list of strings")
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ConfigError(f"[agents.{name}] env must be a table of strings")
    for key in sorted(set(entry) - AGENT_KEYS):
        log.warning(
            "config: [agents.%s] %s is not a key ahpd knows; ignored (known: %s)",
            name,
            key,
            ", ".join(sorted(AGENT_KEYS)),
        )
    return AcpBackend(
        provider=name,
        command=command,
        args=args,
        env=env,
        display_name=entry.get("displayName") or name,
        description=entry.get("description"),
    )


def build_backends(config: Mapping[str, Any], cli_agents: Iterable[str], data_dir: Path) -> dict[str, Backend]:
    """Configured agents first (the first is the default provider), demo last."""
    configured: dict[str, AcpBackend] = {}
    presets: dict[str, Backend] = {}
    for key in sorted(set(config) - TOP_LEVEL_KEYS):
        log.warning("config: %s is not a key ahpd knows; ignored (known: %s)", key, ", ".join(sorted(TOP_LEVEL_KEYS)))
    agents = config.get("agents", {})
    if not isinstance(agents, dict):
        raise ConfigError("[agents] must be a table of agents")
    for name, entry in agents.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"[agents.{name}] must be a table")
        if entry.get("type") == "claude":
            preset = _claude(name, entry)
            if preset is None:
                log.warning("agent %s: a Claude preset, but the claude extra is not installed; not offered", name)
            else:
                presets[name] = preset
            continue
        if "type" in entry:
            raise ConfigError(f'[agents.{name}] type is "claude" or left out (an ACP agent), not {entry["type"]!r}')
        configured[name] = _acp(name, entry)
    for spec in cli_agents:
        name, sep, command = spec.partition("=")
        if not sep or not name or not command.strip():
            raise ConfigError(f"--agent {spec!r}: expected NAME=COMMAND")
        argv = shlex.split(command)
        presets.pop(name, None)  # the command line's word over the config file's
        configured[name] = _acp(name, {"command": argv[0], "args": argv[1:]})
    missing = [name for name, backend in configured.items() if not command_found(backend.command)]
    for name in missing:
        log.warning(
            "agent %s: command %r is not found or not executable; offered, but not as the default provider",
            name,
            configured[name].command,
        )
    backends: dict[str, Backend] = {**configured, **presets}
    backends.setdefault(DEMO, _demo(data_dir))
    if "claude" not in backends and (claude := _claude()) is not None:
        backends["claude"] = claude
    for name in missing:  # after every agent that starts, so none of them is the default
        backends[name] = backends.pop(name)
    return backends


def command_found(command: str) -> bool:
    """Whether ``command`` names an executable, as a path or on ``PATH``."""
    if os.sep in command:
        return os.path.isfile(command) and os.access(command, os.X_OK)
    return shutil.which(command) is not None
