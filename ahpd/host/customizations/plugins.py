"""Plugins: the agent's own, and the ones a session's clients hand over, as
the agent runs them.

A backend that loads plugins (Claude Code) says which it loads
(``loaded_plugins``) and takes a switch for each while it runs
(``switch_plugins``). Its plugins are published as top-level ``plugin``
customizations, their children read from the plugin's folder when it has
one. A client's switch of one goes through to the agent and is read back;
the switch itself stays where the client put it, kept here by id, because
an agent reports only what it loads and a plugin switched off is not among
what it loads. A CLI started later for the session is started with every
switch decided so far.

A client's plugin is copied by :mod:`ahpd.host.customizations.customizations`; here the
copies that loaded, and that no client switched off, are handed to the
agent when it starts. The agent takes plugin directories only then, so a
change of that set between turns stops the agent, and its next turn starts
it again, resumed (as a change of working directories does); a change
during a turn waits for the turn to end.
"""

from __future__ import annotations

import logging
import weakref
from pathlib import Path
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.kernel.supervise import spawn
from ahpd.host.customizations.decisions import DecisionStore
from ahpd.host.sessions.common import path_of

if TYPE_CHECKING:
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")

#: The plugins a session's own agent last said it loads.
_reported: weakref.WeakKeyDictionary[Session, list[dict[str, Any]]] = weakref.WeakKeyDictionary()
#: Per session, plugin id -> the session's own decision (its ``session``
#: entry); the folder's and everyone's are kept by the host's decision store.
_decided: weakref.WeakKeyDictionary[Session, dict[str, dict[str, Any]]] = weakref.WeakKeyDictionary()
#: Per session, plugin id -> its last row, so a plugin switched off (and so
#: no longer reported) stays listed where the client can switch it on.
_known: weakref.WeakKeyDictionary[Session, dict[str, dict[str, Any]]] = weakref.WeakKeyDictionary()


def enabled(enablement: list[dict[str, Any]] | None) -> bool:
    """The effective value: the most specific decision, else on."""
    return bool(enablement[0]["enabled"]) if enablement else True


def _store(session: Session) -> DecisionStore:
    """The host's decisions for a folder and for every session (in memory
    when the daemon was given no file for them)."""
    store = getattr(session.host, "decisions", None)
    if store is None:
        store = session.host.decisions = DecisionStore(None)
    return store


def enablement_of(session: Session, pid: str) -> list[dict[str, Any]]:
    """Every decision on ``pid`` that reaches the session, most specific
    first: its own, the one for its folder, the one for every session."""
    own = _decided.get(session, {}).get(pid)
    return ([own] if own else []) + _store(session).enablement(pid, session.cwd.as_uri())


def runs_plugins(session: Session) -> bool:
    """Whether the session's backend loads plugins it can report and switch."""
    return hasattr(session.backend, "plugins")


# -- the agent's own --------------------------------------------------------------


def _settings_uri() -> str:
    return (Path.home() / ".claude" / "settings.json").as_uri()


def _row(session: Session, plugin: dict[str, Any]) -> dict[str, Any]:
    """One plugin the agent loads, as a top-level customization. Its uri is
    its folder; a built-in one has none, so it names the ``enabledPlugins``
    key that switches it, as an MCP server names its configuration."""
    source = plugin["source"]
    pid = f"{session.provider}.plugin:{source}"
    path = plugin.get("path")
    folder = Path(path) if isinstance(path, str) and Path(path).is_absolute() else None
    row: dict[str, Any] = {
        "type": "plugin",
        "id": pid,
        "uri": folder.as_uri() if folder else f"{_settings_uri()}#enabledPlugins:{source}",
        "name": plugin["name"],
        "load": {"kind": "loaded"},
        "_meta": {"ahpd.source": source},
    }
    if isinstance(plugin.get("version"), str):
        row["version"] = plugin["version"]
    if folder is not None and folder.is_dir():
        row["children"] = children_of(pid, folder)
    decided = enablement_of(session, pid)
    if decided:
        row["enablement"] = decided
    return row


def _copies(session: Session) -> set[str]:
    """Where this host's copies of the clients' plugins are: the agent reports
    them among its own, and they are listed as the client's instead."""
    root = getattr(session.host, "plugins_root", None)
    return {str(Path(root)), str(Path(root).resolve())} if root is not None else set()


def own(session: Session) -> list[dict[str, Any]]:
    """The agent's plugins (what its CLI said, else the boot probe's), then
    any switched off here, which the agent no longer reports."""
    if not runs_plugins(session):
        return []
    reported = _reported.get(session)
    if reported is None:
        reported = [
            p
            for p in getattr(session.backend, "plugins", None) or []
            if isinstance(p, dict) and isinstance(p.get("source"), str)
        ]
    roots = _copies(session)
    rows = [_row(session, p) for p in reported if not any(str(p.get("path", "")).startswith(r + "/") for r in roots)]
    known = _known.setdefault(session, {})
    known.update({r["id"]: r for r in rows})
    listed = {r["id"] for r in rows}
    for pid, row in known.items():
        decided = enablement_of(session, pid)
        if pid not in listed and not enabled(decided):
            rows.append({**row, "enablement": decided})
    return rows


def switches(session: Session) -> dict[str, bool]:
    """The session's decisions as the agent takes them: source -> on."""
    return {
        row["_meta"]["ahpd.source"]: enabled(decided)
        for pid, row in _known.get(session, {}).items()
        if (decided := enablement_of(session, pid))
    }


def toggled(session: Session, entry: dict[str, Any], action: dict[str, Any]) -> Apply | Refuse:
    """A client switched one of the agent's plugins: kept by id, carried to
    every running CLI of the session, and read back."""
    if not runs_plugins(session) or not (entry.get("_meta") or {}).get("ahpd.source"):
        return refuse_and_resend(
            session, f"{session.provider} has no runtime switch for a plugin ({entry.get('name')!r}); it stays as it is"
        )
    pid = entry["id"]
    mine = next((e for e in action["enablement"] if e.get("kind") == "session"), None)
    if mine is None:
        _decided.get(session, {}).pop(pid, None)
    else:
        _decided.setdefault(session, {})[pid] = dict(mine)
    moved = _store(session).decide(pid, session.cwd.as_uri(), action["enablement"])

    def after() -> None:
        session.save()  # the session's own switch is kept with it (saved)
        spawn(session.nursery, f"switching plugin {entry['name']} of {session.uri}", _switch, session, pid)
        if moved:
            _reach_others(session, pid)

    return Apply(action, after=after)


def saved(session: Session) -> dict[str, Any]:
    """The session's own switches, as the session store keeps them: a
    plugin switched off for this session stays off across a restart."""
    decided = _decided.get(session)
    return {"pluginDecisions": {pid: dict(e) for pid, e in decided.items()}} if decided else {}


def restore(session: Session, kept: Any) -> None:
    """The switches :func:`saved` kept; what is not a session decision is
    left out, as if never kept."""
    if not isinstance(kept, dict):
        return
    decided = {
        pid: {"kind": "session", "enabled": e["enabled"]}
        for pid, e in kept.items()
        if isinstance(pid, str)
        and isinstance(e, dict)
        and e.get("kind") == "session"
        and isinstance(e.get("enabled"), bool)
    }
    if decided:
        _decided[session] = decided


def _reach_others(session: Session, pid: str) -> None:
    """A decision for a folder or for everyone reaches every other running
    session it concerns, which hears it and tells its agent."""
    sessions = session.host.sessions.sessions.values() if session.host.sessions is not None else ()
    for other in list(sessions):
        if (
            other is not session
            and other.provider == session.provider
            and other.nursery is not None
            and pid in _known.get(other, {})
        ):
            spawn(other.nursery, f"switching plugin {pid} of {other.uri}", _switch, other, pid)


async def _switch(session: Session, pid: str) -> None:
    """Every running CLI of the session is told, and what each then loads is
    read back. One that did not take the switch says so on the row."""
    wanted = enabled(enablement_of(session, pid))
    source = _known.get(session, {}).get(pid, {}).get("_meta", {}).get("ahpd.source")
    problem = None
    for chat in list(session.chats.values()):
        conversation = chat.conversation
        if conversation is None or not hasattr(conversation, "switch_plugins"):
            continue
        try:
            loaded = await conversation.switch_plugins(switches(session))
        except Exception as exc:  # noqa: BLE001 - said on the row, in the agent's words
            log.info("%s: plugin %s: %s", session.uri, pid, exc)
            problem = f"{session.provider} did not take the switch: {exc}"
            continue
        _reported[session] = loaded
        if (source in {p["source"] for p in loaded}) != wanted:
            problem = f"{session.provider} still {'does not load' if wanted else 'loads'} it"
    publish(session, always=pid, problem=problem)


async def read_back(session: Session, conversation: Any) -> None:
    """A CLI of the session is up: its word on its plugins replaces the probe's."""
    try:
        _reported[session] = await conversation.loaded_plugins()
    except Exception as exc:  # noqa: BLE001 - the list stays as it was
        log.info("%s: reading the plugins failed: %s", session.uri, exc)
        return
    publish(session)


def publish(session: Session, *, always: str | None = None, problem: str | None = None) -> None:
    """Say what moved among the agent's plugins: a row that changed (and the
    one just switched, read back), and one no longer there."""
    bus = session.host.bus
    if session.uri not in bus.channels:
        return
    held = {
        c["id"]: c
        for c in session.state().get("customizations") or []
        if c.get("type") == "plugin" and not c.get("clientId")
    }
    rows = own(session)
    for gone in held.keys() - {r["id"] for r in rows}:
        bus.emit(session.uri, {"type": "session/customizationRemoved", "id": gone})
    for row in rows:
        if row["id"] == always and problem:
            row = {**row, "load": {"kind": "degraded", "message": problem}}
        if row["id"] == always or held.get(row["id"]) != row:
            bus.emit(session.uri, {"type": "session/customizationUpdated", "customization": row})


# -- the clients' plugins, handed to the agent ---------------------------------------


def client_dirs(session: Session) -> list[Path]:
    """The copies of the clients' plugins that loaded and are not switched off."""
    channel = session.host.bus.channels.get(session.uri)
    out = []
    for c in (channel.state.get("customizations") or []) if channel is not None else []:
        copy = (c.get("_meta") or {}).get("ahpd.copy")
        if (
            c.get("clientId")
            and c.get("type") == "plugin"
            and (c.get("load") or {}).get("kind") == "loaded"
            and isinstance(copy, str)
            and enabled(c.get("enablement"))
        ):
            out.append(path_of(copy))
    return out


def client_enablement(session: Session, cid: str, announced: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A client's plugin's decisions: the session's own as announced, the
    one this host keeps for the folder, then the global one - the client's
    own when it says one (it is authoritative there), else the one kept."""
    kept = _store(session).enablement(cid, session.cwd.as_uri())
    mine = [e for e in announced if e.get("kind") == "session"][:1]
    workspace = [e for e in kept if e["kind"] == "workspace"]
    everywhere = [e for e in announced if e.get("kind") == "global"][:1] or [e for e in kept if e["kind"] == "global"]
    return mine + workspace + everywhere


def client_toggled(session: Session, entry: dict[str, Any], action: dict[str, Any]) -> Apply:
    """A client's plugin switched: this host's to answer. Its folder and
    global decisions are kept, and reach the other sessions holding it; the
    agents are handed the plugin, or not, from their next start."""
    cid = entry["id"]
    moved = entry.get("type") == "plugin" and _store(session).decide(cid, session.cwd.as_uri(), action["enablement"])

    def after() -> None:
        clients_changed(session)
        if not moved:
            return
        for other in list(session.host.sessions.sessions.values() if session.host.sessions is not None else ()):
            channel = session.host.bus.channels.get(other.uri)
            rows = (channel.state.get("customizations") or []) if channel is not None else []
            held = next((c for c in rows if c.get("id") == cid and c.get("clientId")), None)
            if other is session or held is None:
                continue
            decided = client_enablement(other, cid, held.get("enablement") or [])
            if decided != (held.get("enablement") or []):
                row = {k: v for k, v in held.items() if k != "enablement"}
                changed = {**row, **({"enablement": decided} if decided else {})}
                session.host.bus.emit(other.uri, {"type": "session/customizationUpdated", "customization": changed})
                clients_changed(other)

    return Apply(action, after=after)


def for_agent(session: Session) -> dict[str, Any]:
    """What an agent of the session starts with: the clients' plugins and the switches."""
    return {"plugins": client_dirs(session), "plugin_switches": switches(session)}


def clients_changed(session: Session) -> None:
    """The clients' plugins moved: an agent started with another set is
    stopped, and its next turn starts it again, resumed. One running a turn
    is left to finish it (:func:`turn_over` looks again)."""
    want = [str(p) for p in client_dirs(session)]
    for chat in list(session.chats.values()):
        have = getattr(chat.conversation, "plugins", None)
        if have is None or list(have) == want or chat._busy():
            continue
        _restart(chat)


def _restart(chat: Chat) -> None:
    """Stop the agent; its next turn starts it again, resumed (one that has
    said nothing yet has no transcript, and the backend starts it anew)."""
    log.info("%s: the clients' plugins changed; the agent starts again at its next turn", chat.uri)
    spawn(chat.session.nursery, f"restarting the agent of {chat.uri} for its plugins", chat.stop_agent)


def turn_over(chat: Chat) -> None:
    """A turn of ``chat`` ended: a change of the clients' plugins made during
    it applies once the turn has let go of the agent."""

    async def later() -> None:
        turn = chat.turn
        if turn is not None:
            await turn.done.wait()
        clients_changed(chat.session)

    if chat.session.nursery is not None and getattr(chat.conversation, "plugins", None) is not None:
        spawn(chat.session.nursery, f"the plugins of {chat.uri} after its turn", later)


# -- shared with the session's list (ahpd.host.customizations.customizations) --------


_CONTAINER_KINDS = {"skills": "skill", "commands": "prompt", "agents": "agent", "rules": "rule"}


def refuse_and_resend(session: Session, reason: str) -> Refuse:
    """Refused out loud, and the list goes back out so every client's
    control returns to where it was."""

    def resend() -> None:
        if session.uri in session.host.bus.channels:
            session.host.bus.emit(
                session.uri,
                {
                    "type": "session/customizationsChanged",
                    "customizations": session.state().get("customizations") or [],
                },
            )

    spawn(session.nursery, f"re-sending the customizations of {session.uri}", _soon, resend)
    return Refuse(reason)


async def _soon(call: Any) -> None:
    call()


def children_of(plugin_id: str, folder: Path) -> list[dict[str, Any]]:
    """A plugin's leaves, by the conventional folder of each kind:
    ``skills/<name>/SKILL.md``, ``commands/<name>.md``, ``agents/<name>.md``,
    ``rules/<name>.md``."""
    out = []
    for sub, kind in _CONTAINER_KINDS.items():
        base = folder / sub
        if not base.is_dir():
            continue
        for item in sorted(base.iterdir()):
            file = item / "SKILL.md" if kind == "skill" else item
            if kind == "skill" and not file.is_file():
                continue
            if kind != "skill" and (item.suffix != ".md" or not item.is_file()):
                continue
            name = item.name if kind == "skill" else item.stem
            child: dict[str, Any] = {
                "type": kind,
                "id": f"{plugin_id}/{kind}:{name}",
                "uri": file.as_uri(),
                "name": name,
                "enabled": True,
            }
            description = _description(file)
            if description:
                child["description"] = description
            out.append(child)
    return out


def _description(file: Path) -> str | None:
    """``description:`` from a markdown file's front matter, if it has one."""
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not text.startswith("---"):
        return None
    for line in text.splitlines()[1:]:
        if line.strip() == "---":
            break
        key, _, value = line.partition(":")
        if key.strip() == "description" and value.strip():
            return value.strip().strip("\"'")
    return None


# -- what the sessions ask (ahpd.host.table.SESSION_HOOKS) ----------------------------------


def session_created(session: Session, record: dict[str, Any]) -> None:
    restore(session, record.get("pluginDecisions"))


def agent_extras(chat: Chat, accepts: Collection[str]) -> dict[str, Any]:
    return for_agent(chat.session) if "plugins" in accepts else {}
