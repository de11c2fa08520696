"""``python -m ahpd.backends.acp.probe SPEC``: an ACP agent's boot probe, in
a process of its own (see :meth:`AcpBackend.probe`). SPEC is the backend as
JSON; what the probe learned is printed as JSON: ``{"models": [...],
"commands": [...], "modes": ..., "configOptions": [...], "conversations": [...]}``
(empty when the agent could not be asked, which it says on standard error).

It learns what :func:`~ahpd.backends.acp.session.learn` learns in-process,
the same way, but speaks JSON-RPC itself (:mod:`~ahpd.backends.acp.rpc`)
instead of loading the ``acp`` library: every daemon probes at its first
hello, and the library with pydantic was three quarters of the probe's CPU.
What it reads is checked as the library's models would check the fields it
uses; an answer that fails is a probe failure said by name.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import attrs
import trio

import ahpd
from ahpd.backends import _child
from ahpd.backends._paths import scratch_root
from ahpd.backends.acp.backend import AcpBackend
from ahpd.backends.acp.rpc import PROTOCOL_VERSION, Peer, open_peer
from ahpd.backends.port import BackendError, StoredConversation
from ahpd.backends.translate import repair

log = logging.getLogger("ahpd.backends.acp.backend")

#: What the client says it can do at ``initialize``: what a conversation's
#: client says (``session._CLIENT_CAPABILITIES``; a test keeps them equal),
#: so an agent offers the probe what it offers a conversation.
CLIENT_CAPABILITIES = {
    "fs": {"readTextFile": True, "writeTextFile": True},
    "terminal": True,
    "elicitation": {"form": {}, "url": {}},
}
#: Seconds the probe waits for the commands a new conversation is offered
#: (``session.PROBE_COMMANDS_WAIT``).
PROBE_COMMANDS_WAIT = 2.0
#: Pages of ``session/list`` read at most (``session.MAX_LIST_PAGES``).
MAX_LIST_PAGES = 50


def _invalid(method: str, why: str) -> BackendError:
    return BackendError(f"the agent answered {method} with an invalid result: {why}")


def _object(value: Any, method: str, what: str = "the result") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _invalid(method, f"{what} is not an object")
    return value


def _string(value: Any, method: str, what: str) -> str:
    if not isinstance(value, str):
        raise _invalid(method, f"{what} is not a string")
    return value


def _list(value: Any, method: str, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise _invalid(method, f"{what} is not a list")
    return value


def _number(value: Any) -> int | None:
    """An integer as pydantic's lax mode reads one (``1``, ``1.0``, ``"1"``, ``true``)."""
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def session_capabilities(answer: Any) -> dict[str, bool]:
    """``initialize``'s answer checked: the version spoken, and which of
    ``sessionCapabilities.list`` / ``.delete`` the agent offers."""
    init = _object(answer, "initialize")
    version = _number(init.get("protocolVersion"))
    if version is None or not 0 <= version <= 65535:
        raise _invalid("initialize", "protocolVersion is not a version number")
    if version != PROTOCOL_VERSION:
        raise BackendError(f"the agent speaks ACP version {version}; ahpd speaks {PROTOCOL_VERSION}")
    # The library reads a malformed capability as not offered, and so does the probe.
    caps = init.get("agentCapabilities")
    session = caps.get("sessionCapabilities") if isinstance(caps, dict) else None
    return {name: isinstance(session, dict) and isinstance(session.get(name), dict) for name in ("list", "delete")}


def stored(sessions: list[dict[str, Any]]) -> list[StoredConversation]:
    """``session/list``'s rows, newest first (undated ones last), as
    :func:`~ahpd.backends.acp.wire.stored_conversations` orders them."""
    items = [
        StoredConversation(
            backend_id=s["sessionId"], title=repair(s.get("title") or ""), cwd=s["cwd"], modified_at=s.get("updatedAt")
        )
        for s in sessions
    ]
    dated = sorted((c for c in items if c.modified_at), key=lambda c: c.modified_at or "", reverse=True)
    return dated + [c for c in items if not c.modified_at]


async def listed(peer: Peer) -> list[StoredConversation]:
    """Every page of ``session/list``. As the library does, a row without a
    string ``sessionId`` and ``cwd`` is skipped and a malformed ``title``,
    ``updatedAt`` or ``nextCursor`` read as absent; a page that is not an
    object with a list of ``sessions`` fails the listing."""
    sessions: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = _object(await peer.call("session/list", {"cursor": cursor} if cursor else {}), "session/list")
        for row in _list(page.get("sessions"), "session/list", "sessions"):
            if isinstance(row, dict) and isinstance(row.get("sessionId"), str) and isinstance(row.get("cwd"), str):
                sessions.append(
                    {**row, "title": _or_none(row.get("title")), "updatedAt": _or_none(row.get("updatedAt"))}
                )
        cursor = _or_none(page.get("nextCursor"))
        if not cursor:
            break
    return stored(sessions)


def _or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _choice(item: Any) -> bool:
    """A ``SessionConfigSelectOption``: a string ``value`` and ``name``."""
    return isinstance(item, dict) and isinstance(item.get("value"), str) and isinstance(item.get("name"), str)


def _choices(option: Any) -> list[dict[str, Any]] | None:
    """A select config option's choices, groups flattened (a group's
    malformed choice skipped); None when the option is not a well-formed
    select, which the library skips."""
    if not (
        isinstance(option, dict)
        and option.get("type") == "select"
        and all(isinstance(option.get(k), str) for k in ("id", "name", "currentValue"))
        and isinstance(option.get("options"), list)
    ):
        return None
    listed = option["options"]
    if all(_choice(item) for item in listed):
        return listed
    groups = [g for g in listed if isinstance(g, dict) and isinstance(g.get("group"), str)]
    if len(groups) != len(listed) or not all(
        isinstance(g.get("name"), str) and isinstance(g.get("options"), list) for g in groups
    ):
        return None
    return [item for g in groups for item in g["options"] if _choice(item)]


def models_from_config(provider: str, options: list[Any]) -> list[dict[str, Any]]:
    """AHP ``SessionModelInfo``s from the ``model`` select option, as
    :func:`~ahpd.backends.acp.wire.models_from_config` makes them from the
    library's models (a malformed option skipped, as the library skips it)."""
    models: list[dict[str, Any]] = []
    for option in options:
        choices = _choices(option)
        if choices is not None and option.get("category") == "model":
            models.extend({"id": c["value"], "provider": provider, "name": c["name"]} for c in choices)
    return models


def _command(c: dict[str, Any]) -> dict[str, Any]:
    """An ``AvailableCommand`` as the library writes it back: its own fields,
    a malformed ``input`` dropped."""
    kept = {k: c[k] for k in ("name", "description", "_meta") if c.get(k) is not None}
    given = c.get("input")
    if isinstance(given, dict) and isinstance(given.get("hint"), str):
        kept["input"] = {k: given[k] for k in ("hint", "_meta") if given.get(k) is not None}
    return kept


def announced(params: Any, session_id: str | None) -> list[dict[str, Any]] | None:
    """The commands an ``available_commands_update`` offers (None when
    ``params`` is another update, or one for another session, or has no list)."""
    if not isinstance(params, dict) or not isinstance(params.get("update"), dict):
        return None
    update = params["update"]
    if update.get("sessionUpdate") != "available_commands_update":
        return None
    if session_id is not None and params.get("sessionId") != session_id:
        log.warning("session/update for unknown session %r ignored", params.get("sessionId"))
        return None
    offered = update.get("availableCommands")
    if not isinstance(offered, list):
        log.warning("an available_commands_update without a list of commands ignored: %.200r", offered)
        return None
    # A malformed command is skipped, as the library skips it; the others stand.
    return [
        _command(c)
        for c in offered
        if isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("description"), str)
    ]


async def learn(backend: AcpBackend) -> None:
    """Ask the agent what a new conversation is offered, into ``backend``,
    as :func:`~ahpd.backends.acp.session.learn` does: its stored
    conversations when it lists them; ``session/new``, the commands it
    announces and ``session/delete`` only when it can delete (so the probe
    leaves nothing in its history). Failure is said on standard error."""
    commands: list[dict[str, Any]] = []
    heard = False
    session_id: str | None = None

    def listen(method: str, params: Any) -> None:
        nonlocal heard
        if method == "session/update" and (offered := announced(params, session_id)) is not None:
            commands[:] = offered
            heard = True

    root = scratch_root()
    try:
        with trio.fail_after(backend.call_timeout):
            async with open_peer(backend, root, listen) as peer:
                client = {"name": "ahpd", "title": "ahpd", "version": ahpd.__version__}
                init = {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": CLIENT_CAPABILITIES,
                    "clientInfo": client,
                }
                offered = session_capabilities(await peer.call("initialize", init))
                if offered["list"]:  # what it keeps, asked while it runs anyway; a failure costs only the listing
                    try:
                        backend.listed = await listed(peer)
                    except BackendError as exc:
                        log.warning("%s: listing its conversations failed: %s", peer.agent.label, exc.message)
                else:
                    backend.listed = []
                if not offered["delete"]:
                    return
                answer = _object(await peer.call("session/new", {"cwd": str(root), "mcpServers": []}), "session/new")
                session_id = _string(answer.get("sessionId"), "session/new", "sessionId")
                options = answer.get("configOptions")
                models = models_from_config(
                    backend.provider, [] if options is None else _list(options, "session/new", "configOptions")
                )
                with trio.move_on_after(PROBE_COMMANDS_WAIT):
                    await peer.serve_until(lambda: heard)
                await peer.call("session/delete", {"sessionId": session_id})
    except (BackendError, trio.TooSlowError) as exc:
        why = exc.message if isinstance(exc, BackendError) else "the agent did not answer in time"
        log.warning("%s: the boot probe failed: %s", backend.provider, why)
        return
    backend._models = models or backend._models
    backend.commands = commands
    backend._offered(answer)


async def _learn(spec: dict) -> dict:
    backend = AcpBackend(
        spec["provider"],
        spec["command"],
        spec.get("args") or (),
        spec.get("env") or {},
        call_timeout=float(spec.get("call_timeout") or 30),
    )
    await learn(backend)
    return {
        "models": backend.agent_info()["models"],
        "commands": backend.commands,
        "modes": backend.modes,
        "configOptions": backend.config_options,
        "conversations": None if backend.listed is None else [attrs.asdict(c) for c in backend.listed],
    }


def main() -> None:
    learned = _child.run(_learn, json.loads(sys.argv[1]))
    try:
        print(json.dumps(learned), flush=True)
    except BrokenPipeError:  # the daemon stopped meanwhile: nobody is waiting for the answer
        pass


if __name__ == "__main__":
    main()
