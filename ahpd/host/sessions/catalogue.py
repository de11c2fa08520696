"""How what a harness offers reads as the protocol's rows and customizations.

Pure functions from what a backend reported (its stored conversations, its
slash commands, subagents and MCP servers) to ``SessionSummary`` rows and
``Customization`` trees; the session objects use them, and so do the
features that list customizations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ahpd.backends.port import SKILL_META, StoredConversation
from ahpd.host.sessions.common import IDLE, IS_READ, catalogue_uri, default_chat_uri


def catalogue_row(provider: str, conversation: StoredConversation) -> dict[str, Any]:
    """The ``SessionSummary`` of a conversation a backend keeps."""
    uri = catalogue_uri(provider, conversation.backend_id)
    modified = conversation.modified_at or conversation.created_at or ""
    row: dict[str, Any] = {
        "resource": uri,
        "provider": provider,
        "title": conversation.title,
        "status": IDLE | IS_READ,
        "createdAt": conversation.created_at or modified,
        "modifiedAt": modified,
        "defaultChat": default_chat_uri(uri),
    }
    if conversation.cwd:
        folder = Path(conversation.cwd)
        row["workingDirectories"] = [folder.as_uri()]
        row["project"] = {"uri": folder.as_uri(), "displayName": folder.name or str(folder)}
    return row


_KIND_NAMES = {"prompt": "Commands", "skill": "Skills"}


def command_customizations(
    provider: str, commands: list[dict[str, Any]], cwd: Path, dirs: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """An agent's slash commands as the session's customizations: one
    directory container per kind (prompts, skills), each command a child,
    because a prompt or a skill is never a top-level customization. The
    container is where a person would add one - the backend's convention
    (``.claude/commands`` for Claude Code) or the session's own folder - not
    a path read off disk: the agent says what it loaded, never where from.
    A command's argument hint is ``_meta["ahpd.argumentHint"]``, since
    neither child type declares one."""
    children: dict[str, list[dict[str, Any]]] = {"prompt": [], "skill": []}
    for command in commands:
        name = command.get("name")
        if not isinstance(name, str) or not name:
            continue
        kind = "skill" if (command.get("_meta") or {}).get(SKILL_META) else "prompt"
        children[kind].append(command)
    out = []
    for kind, entries in children.items():
        if not entries:
            continue
        relative = (dirs or {}).get(kind)
        folder = cwd / relative if relative else cwd
        container = folder.as_uri()
        items = []
        for command in entries:
            name = command["name"]
            if relative:
                uri = (folder / name / "SKILL.md" if kind == "skill" else folder / f"{name}.md").as_uri()
            else:
                uri = f"{container}#{kind}:{name}"
            child: dict[str, Any] = {
                "id": f"{provider}.{kind}:{name}",
                "uri": uri,
                "name": name,
                "type": kind,
                "enabled": True,
            }
            if command.get("description"):
                child["description"] = command["description"]
            hint = (command.get("input") or {}).get("hint")
            if isinstance(hint, str) and hint:
                child["_meta"] = {"ahpd.argumentHint": hint}
            items.append(child)
        out.append(
            {
                "id": f"{provider}.{kind}s",
                "uri": container,
                "name": _KIND_NAMES[kind],
                "type": "directory",
                "enabled": True,
                "contents": kind,
                "writable": False,
                "load": {"kind": "loaded"},
                "children": items,
            }
        )
    return out


def subagent_customizations(provider: str, subagents: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """The subagents a harness offers, as one container of ``agent`` children."""
    items = []
    for agent in subagents:
        name = agent.get("name") if isinstance(agent, dict) else None
        if not isinstance(name, str) or not name:
            continue
        child: dict[str, Any] = {
            "id": f"{provider}.agent:{name}",
            "uri": (folder / f"{name}.md").as_uri(),
            "name": name,
            "type": "agent",
            "enabled": True,
        }
        if isinstance(agent.get("description"), str):
            child["description"] = agent["description"]
        items.append(child)
    if not items:
        return []
    return [
        {
            "id": f"{provider}.agents",
            "uri": folder.as_uri(),
            "name": "Agents",
            "type": "directory",
            "enabled": True,
            "contents": "agent",
            "writable": False,
            "load": {"kind": "loaded"},
            "children": items,
        }
    ]


def mcp_state(server: dict[str, Any]) -> dict[str, Any]:
    """The CLI's status of a server in the protocol's words. A server that
    needs a sign-in is ``authRequired`` only when the resource to sign in to
    is known (its URL); otherwise it is an error saying so, since a client
    told to sign in with nowhere to do it is worse off than one told why."""
    status = server.get("status")
    if status == "connected":
        return {"kind": "ready"}
    if status == "pending":
        return {"kind": "starting"}
    if status == "disabled":
        return {"kind": "stopped"}
    url = (server.get("config") or {}).get("url")
    if status == "needs-auth" and isinstance(url, str) and url:
        return {"kind": "authRequired", "reason": "required", "resource": {"resource": url}}
    message = server.get("error") or (
        "the server needs a sign-in" if status == "needs-auth" else f"the server is {status}"
    )
    return {
        "kind": "error",
        "error": {
            "errorType": "McpServerNeedsAuth" if status == "needs-auth" else "McpServerFailed",
            "message": message,
        },
    }


def mcp_customizations(provider: str, servers: list[dict[str, Any]], config_file: Path) -> list[dict[str, Any]]:
    """A harness's MCP servers, each a top-level customization with its state
    in the protocol's words (:func:`mcp_state`)."""
    return [
        {
            "id": f"{provider}.mcp:{s['name']}",
            "uri": f"{config_file.as_uri()}#mcp:{s['name']}",
            "name": s["name"],
            "type": "mcpServer",
            "state": mcp_state(s),
        }
        for s in servers
        if isinstance(s.get("name"), str) and s["name"]
    ]
