"""The artifact tools: what an agent notes beside the chat input, and the
window's request to take one off.

``add_artifact_or_reference``, ``remove_artifact_or_reference`` and
``list_artifacts_and_references`` keep what the agent recorded under
``_meta['agentHost/sessionArtifacts']`` on the session and its catalogue row
- the session store keeps ``_meta``, so they survive a restart - and answer
in the reference's words. ``vscode/removeSessionArtifact`` is the window
taking an artifact pill off (``InitializeResult._meta`` says it can). Cut
out from the session tools because they touch one session's ``_meta`` and
nothing else.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ahpd.host.customizations.tool_args import ToolError, text_arg
from ahpd.host.customizations.tool_schemas import ARTIFACT_TYPES, ARTIFACTS
from ahpd.host.kernel.commands import SESSION_NOT_FOUND
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError, string_param
from ahpd.host.sessions import summaries

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.session import Session

#: The kinds that need a link, and the kinds that need a URI.
_LINKED = ("pullRequest", "issue", "commit", "website")
_BY_URI = ("file", "resource")


# -- what a session keeps ------------------------------------------------------------------------------


def artifacts_of(session: Session) -> list[dict[str, Any]]:
    return [dict(a) for a in (session.state().get("_meta") or {}).get(ARTIFACTS) or []]


def keep_artifacts(session: Session, held: list[dict[str, Any]]) -> None:
    """``_meta`` rebuilt whole with ``held`` (the key gone when none is left),
    told to the session and its row, and written down."""
    summaries.set_meta(session, ARTIFACTS, held or None)
    session.save()


def _noun(entry: dict[str, Any]) -> str:
    return "artifact" if entry.get("isArtifact") else "reference"


def _describe(entry: dict[str, Any]) -> str:
    value = entry.get("link") or entry.get("uri") or entry.get("commitHash") or ""
    return f"{entry['id']} ({entry['type']}, {_noun(entry)}) {entry['label']}" + (f" — {value}" if value else "")


def _artifact_input(item: Any, at: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise ToolError(f"{at} must be an object")
    kind = item.get("type")
    if kind not in ARTIFACT_TYPES:
        raise ToolError(f"{at}.type must be one of {', '.join(ARTIFACT_TYPES)}")
    label = item.get("label")
    if not isinstance(label, str) or not label.strip():
        raise ToolError(f"{at}.label must be a non-empty string")
    if not isinstance(item.get("isArtifact"), bool):
        raise ToolError(f"{at}.isArtifact must be true or false")
    entry: dict[str, Any] = {"type": kind, "label": label.strip(), "isArtifact": item["isArtifact"]}
    for key in ("link", "uri", "commitHash"):
        value = item.get(key)
        if value is not None:
            if not isinstance(value, str) or not value.strip():
                raise ToolError(f"{at}.{key} must be a non-empty string")
            entry[key] = value.strip()
    if kind in _LINKED and "link" not in entry:
        raise ToolError(f"{at}.link is required for a {kind}")
    if kind in _BY_URI:
        if "uri" not in entry:
            raise ToolError(f"{at}.uri is required for a {kind}")
        if not urlsplit(entry["uri"]).scheme or len(urlsplit(entry["uri"]).scheme) < 2:
            raise ToolError(f"{at}.uri must be an absolute URI with its scheme (file:///...), not {entry['uri']!r}")
    if kind == "commit" and "commitHash" not in entry:
        raise ToolError(f"{at}.commitHash is required for a commit")
    return entry


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["type"] == b["type"] and all(a.get(k) == b.get(k) for k in ("link", "uri", "commitHash"))


async def add_artifact_or_reference(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    items = args.get("items")
    if not isinstance(items, list) or not items:
        raise ToolError("items must be a non-empty list")
    entries = [_artifact_input(item, f"items[{n}]") for n, item in enumerate(items)]
    held = artifacts_of(chat.session)
    said = []
    for entry in entries:
        known = next((a for a in held if _same(a, entry)), None)
        if known is None:
            entry = {"id": str(uuid.uuid4()), **entry}
            held.append(entry)
            said.append(f"Added {_noun(entry)}: {_describe(entry)}")
        elif entry["isArtifact"] and not known.get("isArtifact"):
            known["isArtifact"] = True  # a reference the session then worked on is its artifact
            said.append(f"Added artifact: {_describe(known)}")
        else:
            said.append(f"Already recorded: {_describe(known)}")
    keep_artifacts(chat.session, held)
    return "\n".join(said)


def remove_artifact(session: Session, artifact_id: str) -> dict[str, Any] | None:
    held = artifacts_of(session)
    gone = next((a for a in held if a.get("id") == artifact_id), None)
    if gone is not None:
        keep_artifacts(session, [a for a in held if a is not gone])
    return gone


async def remove_artifact_or_reference(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    artifact_id = text_arg(args, "id")
    gone = remove_artifact(chat.session, artifact_id)
    if gone is None:
        return f"No artifact or reference with id {artifact_id}."
    return f"Removed {_noun(gone)}: {_describe(gone)}"


async def list_artifacts_and_references(host: Host, chat: Chat, args: dict[str, Any]) -> str:
    held = artifacts_of(chat.session)
    if not held:
        return "No artifacts or references recorded for this session."
    return "\n".join(_describe(a) for a in held)


# -- vscode/removeSessionArtifact -----------------------------------------------------------


def _required(params: Any, key: str) -> str:
    """``params[key]``, a non-empty string (-32602 naming the key otherwise)."""
    value = string_param(params, key)
    assert value is not None  # required: string_param answered -32602 already
    return value


async def remove_session_artifact(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    """The window takes an artifact pill off: ``{session, artifactId}``."""
    uri, artifact_id = _required(params, "session"), _required(params, "artifactId")
    session = host.sessions.named(uri) if host.sessions is not None and await host.ensure_channel(uri) else None
    if session is None:  # named by its own name or another spelling (ahp-session:/<id>)
        raise RpcError(SESSION_NOT_FOUND, f"no session {uri}", {"session": uri})
    if remove_artifact(session, artifact_id) is None:
        raise RpcError(INVALID_PARAMS, f"session {uri} records no artifact {artifact_id}", {"path": "$.artifactId"})
    return {}


COMMANDS = {
    "vscode/removeSessionArtifact": remove_session_artifact,
}


def capabilities_of(host: Any) -> dict[str, Any]:
    """``InitializeResult._meta``: an artifact pill can be taken off."""
    return {"_meta": {"vscode.removeSessionArtifact": True}}
