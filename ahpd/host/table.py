"""The host's command tables, assembled in this one place.

Each module that serves a family of the protocol exports its own small
``COMMANDS`` (request method -> handler), ``NOTIFICATIONS`` (client
notification -> handler) or ``CLIENT_ACTIONS`` (action type -> rule); this
module joins them. Nothing registers itself by being imported, so what the
host serves is read here, and a method claimed by two modules is an error at
import rather than whichever module happened to load last.
"""

from __future__ import annotations

from typing import Any

from ahpd.host.sessions import annotations, directories, session_commands, session_config, summaries
from ahpd.host.kernel import auth, commands, dispatch
from ahpd.host.automations import automations
from ahpd.host.changesets import changesets, detached
from ahpd.host.sessions.chats import chat_commands, chat_moves, input_answers, rewind, turns
from ahpd.host.customizations import customizations, server_tools
from ahpd.host.resources import resources, watches
from ahpd.host.terminals import terminals
from ahpd.host.window import window


def _join(*tables: dict[str, Any]) -> dict[str, Any]:
    joined: dict[str, Any] = {}
    for part in tables:
        twice = joined.keys() & part.keys()
        if twice:
            raise RuntimeError(f"served by two modules: {sorted(twice)}")
        joined.update(part)
    return joined


COMMANDS = _join(
    commands.COMMANDS,
    auth.COMMANDS,
    session_commands.COMMANDS,
    chat_commands.COMMANDS,
    chat_moves.COMMANDS,
    resources.COMMANDS,
    window.COMMANDS,
    automations.COMMANDS,
    terminals.COMMANDS,
    changesets.COMMANDS,
    detached.COMMANDS,
    server_tools.COMMANDS,
)

NOTIFICATIONS = _join(
    commands.NOTIFICATIONS,
)

CLIENT_ACTIONS = _join(
    dispatch.CLIENT_ACTIONS,
    turns.CLIENT_ACTIONS,
    rewind.CLIENT_ACTIONS,
    summaries.CLIENT_ACTIONS,
    annotations.CLIENT_ACTIONS,
    watches.CLIENT_ACTIONS,
    automations.CLIENT_ACTIONS,
    terminals.CLIENT_ACTIONS,
    changesets.CLIENT_ACTIONS,
    customizations.CLIENT_ACTIONS,
    directories.CLIENT_ACTIONS,
    session_config.CLIENT_ACTIONS,
    input_answers.CLIENT_ACTIONS,
)
