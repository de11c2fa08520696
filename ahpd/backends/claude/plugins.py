"""Claude Code's plugins, through its control protocol.

The CLI says which plugins it loaded in answer to ``reload_plugins`` (a
control request this SDK has no method for): each one's ``name``, ``path``
(a directory, or ``builtin``), ``source`` (``name@marketplace``, or the
sentinels ``@inline`` for a ``--plugin-dir`` and ``@builtin``) and
``version``. A plugin the CLI has switched off is not among them.

The switch is the settings key ``enabledPlugins`` (source -> bool). It is
given in the *flag* settings - ``--settings`` when the CLI starts and
``apply_flag_settings`` while it runs - which is the one scope that belongs
to this process alone: nothing is written into the user's settings files,
and another session's CLI never sees it.

Sending ``reload_plugins`` (and ``mcp_set_servers`` in
``conversation._relist_client_tools``) reaches the SDK's private
``client._query._send_control_request``: the SDK has no public method for
either request, and no public way to send a control request of one's own.
That is why the ``claude`` extra pins the SDK's exact version
(``pyproject.toml``); a version without it is said in the log and the
request is skipped, never a crash.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from claude_agent_sdk import SdkPluginConfig


def local(paths: Sequence[str]) -> list[SdkPluginConfig]:
    """The SDK's ``plugins`` option: each directory a local plugin (``--plugin-dir``)."""
    return [{"type": "local", "path": path} for path in paths]


def settings(switches: Mapping[str, bool]) -> str | None:
    """The flag settings a CLI starts with: the switches decided for its session."""
    return json.dumps({"enabledPlugins": dict(switches)}) if switches else None


async def _send(client: Any, request: dict[str, Any]) -> dict[str, Any]:
    query = getattr(client, "_query", None)
    send = getattr(query, "_send_control_request", None)
    if send is None:
        raise RuntimeError("this SDK cannot send the CLI a control request of its own")
    answer = await send(request)
    return answer if isinstance(answer, dict) else {}


async def reload(client: Any) -> dict[str, Any]:
    """What the CLI loads now: ``plugins``, ``commands``, ``agents``, ``mcpServers``."""
    return await _send(client, {"subtype": "reload_plugins"})


async def switch(client: Any, switches: Mapping[str, bool]) -> dict[str, Any]:
    """Every switch decided for the session, said whole (so whether the CLI
    merges flag settings or replaces them makes no difference), then
    reloaded: the answer is what the CLI loads now."""
    await _send(client, {"subtype": "apply_flag_settings", "settings": {"enabledPlugins": dict(switches)}})
    return await reload(client)


def loaded(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The plugins of a ``reload_plugins`` answer that name themselves."""
    plugins = answer.get("plugins")
    return (
        [
            p
            for p in plugins
            if isinstance(p, dict) and isinstance(p.get("source"), str) and isinstance(p.get("name"), str)
        ]
        if isinstance(plugins, list)
        else []
    )
