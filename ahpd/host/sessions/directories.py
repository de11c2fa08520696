"""Working directories: where a session's agents may work, acted on.

Index 0 of a session's ``workingDirectories`` is where the agent process is
rooted (its ``cwd``); the rest are granted beside it (ACP
``additionalDirectories``, Claude's ``add_dirs``). No backend here can widen
or narrow a running agent, so a change stops the agents it concerns, and
each starts again at its next turn, resumed - the same conversation in a
wider (or narrower) place. While a turn runs that would cut the turn off,
so the change is refused until it has ended (-32004, a turn in progress).

The rules the seed and the protocol set for index 0: it is never removed
(``session/workingDirectoryRemoved`` of it is refused, out loud), and only
``session/workingDirectoryReplaced`` moves it - which is why this host
advertises ``primaryReplacement`` beside ``immutablePrimary``. A chat holds
a subset of its session's directories and never more, and never loses the
primary.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ahpd.host.kernel.dispatch import Apply, Refuse
from ahpd.host.kernel.supervise import spawn
from ahpd.host.sessions.common import path_of

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.session import Session

#: ``AgentCapabilities.multipleWorkingDirectories`` as every backend here has it.
CAPABILITY = {"immutablePrimary": True, "primaryReplacement": True}


def advertise(info: dict[str, Any]) -> dict[str, Any]:
    """An ``AgentInfo`` with the working-directories capability."""
    capabilities = {**(info.get("capabilities") or {}), "multipleWorkingDirectories": CAPABILITY}
    return {**info, "capabilities": capabilities}


def _path(uri: str) -> Path:
    return path_of(uri)


def additional(chat: Chat) -> list[Path]:
    """The directories the chat's agent is granted beside its cwd: the chat's
    subset when it holds one, else its session's, less the primary."""
    session_dirs = list(chat.session.state().get("workingDirectories") or [])
    subset = chat.state().get("workingDirectories")
    chosen = [d for d in subset if d in session_dirs] if subset else session_dirs
    primary = chat.session.cwd.as_uri()
    out = []
    for uri in chosen:
        if uri == primary or uri == (session_dirs[0] if session_dirs else None):
            continue
        try:
            path = _path(uri)
        except ValueError:
            continue
        if path.is_dir():
            out.append(path)
    return out


def _running(chats: list[Chat]) -> Refuse | None:
    busy = [c for c in chats if c._busy()]
    if busy:
        return Refuse(
            f"a turn is running in {busy[0].uri} (-32004, turn in progress): the working directories "
            "change once it has ended"
        )
    return None


def _restart(chats: list[Chat]) -> None:
    """Stop each chat's agent; its next turn starts it again, resumed, in the new place."""
    for chat in chats:
        if chat.conversation is None and chat.scope is None:
            continue
        if not getattr(chat.conversation, "resumable", True):
            chat._resume_by_transcript()  # an agent that cannot load one is handed what was said
        spawn(chat.session.nursery, f"restarting the agent of {chat.uri}", chat.stop_agent)


def _directory(uri: str) -> str | None:
    """Why ``uri`` cannot be a working directory, or None."""
    try:
        path = _path(uri)
    except ValueError as exc:
        return str(exc)
    if not path.is_dir():
        return f"{path} does not exist or is not a directory"
    return None


def _session(host: Host, channel: str) -> Session | None:
    return host.sessions.sessions.get(channel) if host.sessions else None


def session_directory_set(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    session = _session(host, channel)
    if session is None:
        return Refuse(f"{channel} is not a session this host runs")
    if action["directory"] in (session.state().get("workingDirectories") or []):
        return Apply(action)  # already granted: nothing moves
    problem = _directory(action["directory"]) or _running(list(session.chats.values()))
    if isinstance(problem, Refuse):
        return problem
    if problem is not None:
        return Refuse(problem)
    return Apply(action, after=lambda: _moved(session))


def session_directory_removed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    session = _session(host, channel)
    if session is None:
        return Refuse(f"{channel} is not a session this host runs")
    dirs = session.state().get("workingDirectories") or []
    if dirs and action["directory"] == dirs[0]:
        return Refuse(
            "index 0 is where the agent's process is rooted and is never removed; "
            "session/workingDirectoryReplaced moves it"
        )
    if action["directory"] not in dirs:
        return Apply(action)
    refused = _running(list(session.chats.values()))
    if refused is not None:
        return refused
    return Apply(action, after=lambda: _moved(session))


def session_directory_replaced(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    session = _session(host, channel)
    if session is None:
        return Refuse(f"{channel} is not a session this host runs")
    dirs = session.state().get("workingDirectories") or []
    if action["directory"] not in dirs:
        return Refuse(f"{action['directory']} is not one of the session's working directories")
    problem = _directory(action["replacement"])
    if problem is not None:
        return Refuse(problem)
    refused = _running(list(session.chats.values()))
    if refused is not None:
        return refused
    primary = action["directory"] == dirs[0]

    def after() -> None:
        if primary:
            session.cwd = _path(action["replacement"])
        _moved(session)

    return Apply(action, after=after)


def _moved(session: Session) -> None:
    """The catalogue row follows (its ``workingDirectories``), and the agents restart."""
    session.save()
    dirs = list(session.state().get("workingDirectories") or [])
    session.manager.notify_summary(session, {"workingDirectories": dirs})
    _restart(list(session.chats.values()))


def _chat_moved(chat: Chat) -> None:
    """A chat's subset moved: written down, and its agent restarts."""
    chat.session.save()
    _restart([chat])


def _chat(host: Host, channel: str) -> Chat | None:
    return host.sessions.chat_owner.get(channel) if host.sessions else None


def chat_directory_set(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    chat = _chat(host, channel)
    if chat is None:
        return Refuse(f"{channel} is not a chat this host runs")
    if action["directory"] not in (chat.session.state().get("workingDirectories") or []):
        return Refuse(
            f"{action['directory']} is not one of the session's working directories: a chat holds "
            "a subset of its session's, and never more"
        )
    if action["directory"] in (chat.state().get("workingDirectories") or []):
        return Apply(action)
    refused = _running([chat])
    if refused is not None:
        return refused
    return Apply(action, after=lambda: _chat_moved(chat))


def chat_directory_removed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    chat = _chat(host, channel)
    if chat is None:
        return Refuse(f"{channel} is not a chat this host runs")
    dirs = chat.session.state().get("workingDirectories") or []
    if dirs and action["directory"] == dirs[0]:
        return Refuse("the session's primary directory is where the chat's agent is rooted and cannot be removed")
    if action["directory"] not in (chat.state().get("workingDirectories") or []):
        return Apply(action)
    refused = _running([chat])
    if refused is not None:
        return refused
    return Apply(action, after=lambda: _chat_moved(chat))


CLIENT_ACTIONS = {
    "session/workingDirectorySet": session_directory_set,
    "session/workingDirectoryRemoved": session_directory_removed,
    "session/workingDirectoryReplaced": session_directory_replaced,
    "chat/workingDirectorySet": chat_directory_set,
    "chat/workingDirectoryRemoved": chat_directory_removed,
}


def agent_extras(chat: Chat, accepts: Collection[str]) -> dict[str, Any]:
    """The folders an agent is granted beside its cwd (``SessionHooks.agent_extras``)."""
    return {"additional_directories": additional(chat)} if "additional_directories" in accepts else {}


def agent_info(host: Any, info: dict[str, Any]) -> dict[str, Any]:
    """``RootState.agents``: every agent here takes more than one folder."""
    return advertise(info)
