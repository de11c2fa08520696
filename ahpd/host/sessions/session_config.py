"""Session config: what a person picks for a session's agent, reaching it.

A session's ``config`` is the schema its backend takes (``mode``, ``model``,
``effortLevel``, as each backend names its own properties through
``config_properties()``) and the values picked so far. Every key here
reaches every chat of the session: a model set on one chat is a session
where two conversations answer differently.

A value reaches the agent before the next turn at the latest: a running
conversation is told at once where its backend can take it live (ACP
``session/set_mode``/``set_config_option``, Claude's ``set_model``), and
otherwise it is started again, resumed, with it (Claude's effort, which the
CLI takes only when it starts). A key the backend does not take, or a value
it does not offer, is refused by name; an agent that refuses a value it
offered is refused in its own words.

A turn's ``message.model`` (and its ``config.thinkingLevel``) moves the
session's ``model`` and ``effortLevel`` for that turn and the ones after it,
said as ``session/configChanged``, so the picker and the session never
describe different futures. An agent that moves a setting on its own (ACP
``current_mode_update``, ``config_option_update``) is said the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any


from ahpd.backends.port import BackendError
from ahpd.host.kernel.dispatch import Apply, Refuse

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.chat import Chat
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")

#: Agent updates that move a setting.
AGENT_UPDATES = frozenset({"current_mode_update", "config_option_update"})
EFFORT = "effortLevel"


def properties(backend: Any) -> dict[str, dict[str, Any]]:
    """The ``SessionConfigPropertySchema``s a backend takes; none for one that says nothing."""
    offer = getattr(backend, "config_properties", None)
    return dict(offer()) if offer is not None else {}


def _thinking_levels(backend: Any, model_id: Any) -> list[Any] | None:
    """The thinking levels a model's own ``configSchema`` offers, if it has one."""
    for model in backend.agent_info().get("models") or []:
        if model.get("id") == model_id:
            prop = ((model.get("configSchema") or {}).get("properties") or {}).get("thinkingLevel")
            return list(prop.get("enum") or []) if prop else None
    return None


def check(backend: Any, key: str, value: Any, values: Mapping[str, Any]) -> str | None:
    """Why ``key: value`` is refused for ``backend``'s sessions, or None."""
    props = properties(backend)
    provider = backend.provider
    if key == EFFORT and key not in props:
        levels = _thinking_levels(backend, values.get("model"))
        if levels is None:
            return (
                f"the {provider} agent takes a thinking level only with a model that has one; pick such a model first"
            )
        if value not in levels:
            return (
                f"the model {values.get('model')} offers no thinking level {value!r}; "
                f"it offers {', '.join(map(str, levels))}"
            )
        return None
    prop = props.get(key)
    if prop is None:
        offered = ", ".join(props) or "none"
        return f"the {provider} agent takes no {key!r} setting (it takes: {offered})"
    if not prop.get("sessionMutable"):
        return f"{key} is set when the session is created and cannot change after"
    if prop.get("type") == "boolean" and not isinstance(value, bool):
        return f"{key} is true or false, not {value!r}"
    enum = prop.get("enum")
    if enum is not None and value not in enum:
        title = str(prop.get("title") or key).lower()
        return f"the {provider} agent offers no {title} {value!r}; it offers {', '.join(map(str, enum))}"
    if prop.get("type") in ("array", "object"):  # a shape, checked against the property's own schema
        import jsonschema  # when first asked: ~80 ms of start-up only a list or object setting should pay

        wrong = next(iter(jsonschema.Draft202012Validator(prop).iter_errors(value)), None)
        if wrong is not None:
            where = "".join(f"[{p!r}]" for p in wrong.absolute_path)
            return f"{key}{where} does not fit the {provider} agent's schema: {wrong.message}"
    return None


def initial(backend: Any, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """A new session's ``SessionConfigState``: the backend's schema, its
    defaults, and what the client picked that the backend takes."""
    props = properties(backend)
    values = {k: p["default"] for k, p in props.items() if "default" in p}
    for key, value in (given or {}).items():
        if (key in props or key == EFFORT) and check(backend, key, value, {**values, **(given or {})}) is None:
            values[key] = value
    return {"schema": {"type": "object", "properties": props}, "values": values}


def desired(chat: Chat) -> dict[str, Any]:
    """What the chat's agent is to run with: the session's values its backend takes."""
    backend = chat.session.backend
    props = properties(backend)
    values = (chat.session.state().get("config") or {}).get("values") or {}
    # And what a backend keeps of keys it no longer declares (a stored sandbox).
    kept = getattr(backend, "config_kept", ())
    return {k: v for k, v in values.items() if k in props or k == EFFORT or k in kept}


async def settle(chat: Chat, conversation: Any) -> Any:
    """Before a prompt: the conversation runs with what the session says, set
    live where it can be, else started again, resumed. The conversation to
    prompt."""
    have = getattr(conversation, "settings", None)
    want = desired(chat)
    if have is None or all(have.get(k) == v for k, v in want.items()):
        return conversation
    configure = getattr(conversation, "configure", None)
    try:
        if configure is not None and await configure(want):
            return conversation
    except BackendError as err:
        log.warning("%s: the agent kept its own settings: %s", chat.uri, err.message)
        return conversation
    log.info("%s: starting the agent again, resumed, with %s", chat.uri, want)
    await chat.stop_agent()
    return await chat.ensure_agent()


def _say(session: Session, changes: dict[str, Any]) -> None:
    if changes:
        session.host.bus.emit(session.uri, {"type": "session/configChanged", "config": changes})
        session.save()


def from_message(chat: Chat, message: Mapping[str, Any]) -> None:
    """A turn's model and thinking level become the session's (see above)."""
    picked = message.get("model")
    if not isinstance(picked, Mapping) or not isinstance(picked.get("id"), str):
        return
    session = chat.session
    backend = session.backend
    values = dict((session.state().get("config") or {}).get("values") or {})
    changes: dict[str, Any] = {}
    if values.get("model") != picked["id"] and check(backend, "model", picked["id"], values) is None:
        changes["model"] = values["model"] = picked["id"]
    level = (picked.get("config") or {}).get("thinkingLevel")
    if level is not None and values.get(EFFORT) != level and check(backend, EFFORT, level, values) is None:
        changes[EFFORT] = level
    _say(session, changes)


def agent_said(chat: Chat, update: Mapping[str, Any]) -> None:
    """The agent moved a setting on its own: the session says so."""
    conversation = chat.conversation
    heard = getattr(conversation, "heard", None)
    if heard is None:
        return
    heard(update)
    # What it runs with now (read after ``heard``, which moves it); a
    # conversation that keeps no settings has none to say.
    settings: Mapping[str, Any] = getattr(conversation, "settings", None) or {}
    session = chat.session
    if session.host.bus.channels.get(session.uri) is None:
        return
    values = (session.state().get("config") or {}).get("values") or {}
    props = properties(session.backend)
    changes = {k: v for k, v in settings.items() if k in props and values.get(k) != v}
    _say(session, changes)


async def config_changed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    """``session/configChanged`` from a client: checked against what the
    backend takes, told to every running conversation of the session."""
    session = host.sessions.sessions.get(channel) if host.sessions else None
    if session is None:
        return Refuse(f"{channel} is not a session this host runs")
    if session.provider not in host.sessions.backends:
        return Refuse(f"no agent for provider {session.provider} on this host")
    backend = session.backend
    values = dict((session.state().get("config") or {}).get("values") or {})
    merged = dict(action["config"]) if action.get("replace") else {**values, **action["config"]}
    taken: dict[str, Any] = {}
    refused: list[str] = []
    for key, value in action["config"].items():
        problem = check(backend, key, value, merged)
        if problem is None:
            taken[key] = value
        else:
            refused.append(problem)
    if refused and (action.get("replace") or not taken):
        return Refuse("; ".join(refused))
    want = {k: v for k, v in {**values, **taken}.items() if k in taken or not action.get("replace")}
    for chat in list(session.chats.values()):
        configure = getattr(chat.conversation, "configure", None)
        if configure is None:
            continue
        try:
            await configure(want)  # False: it takes them when it starts again, before its next turn
        except BackendError as err:
            return Refuse(err.message)
    return Apply({**action, "config": taken}, refused="; ".join(refused) or None)


CLIENT_ACTIONS = {"session/configChanged": config_changed}


def agent_extras(chat: Chat, accepts: Collection[str]) -> dict[str, Any]:
    """The config an agent starts with (``SessionHooks.agent_extras``)."""
    return {"config": desired(chat)} if "config" in accepts else {}
