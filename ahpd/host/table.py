"""What the host serves and who acts at each moment, in this one place.

Each module that serves a family of the protocol exports its own small
``COMMANDS`` (request method -> handler), ``NOTIFICATIONS`` (client
notification -> handler) or ``CLIENT_ACTIONS`` (action type -> rule); this
module joins them. A method claimed by two modules is an error at import
rather than whichever module happened to load last.

The kernel (``ahpd.host.kernel.hooks``) and the sessions core
(``ahpd.host.sessions.hooks``) declare the moments at which a feature acts:
a client says hello, a chat's agent starts, a turn ends, a session goes.
Who acts, and in which order, is registered here too. Nothing registers
itself by being imported, so what runs at each moment is read in this file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ahpd.host.automations import automations
from ahpd.host.changesets import book, changesets, detached, operations, pulls
from ahpd.host.customizations import artifact_tools, customizations, mcp_bridge, plugins, server_tools
from ahpd.host.kernel import auth, commands, dispatch
from ahpd.host.kernel.hooks import KernelHooks
from ahpd.host.resources import resources, watches

# Aliased: ``annotations`` is also the name ``from __future__ import annotations`` binds.
from ahpd.host.sessions import aliases as session_aliases
from ahpd.host.sessions import annotations as session_annotations
from ahpd.host.sessions import directories, manager, session_commands, session_config, summaries
from ahpd.host.sessions.chats import (
    background_work,
    chat_commands,
    chat_moves,
    history,
    input_answers,
    rewind,
    turn_rules,
    turns,
    workers,
)
from ahpd.host.sessions.hooks import SessionHooks
from ahpd.host.telemetry import telemetry
from ahpd.host.terminals import command_turns, terminal_commands, terminals
from ahpd.host.window import window

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Handler


def _join(*tables: dict[str, Any]) -> dict[str, Any]:
    joined: dict[str, Any] = {}
    for part in tables:
        twice = joined.keys() & part.keys()
        if twice:
            raise RuntimeError(f"served by two modules: {sorted(twice)}")
        joined.update(part)
    return joined


COMMANDS: dict[str, Handler] = _join(
    commands.COMMANDS,
    auth.COMMANDS,
    session_commands.COMMANDS,
    chat_commands.COMMANDS,
    chat_moves.COMMANDS,
    resources.COMMANDS,
    window.COMMANDS,
    automations.COMMANDS,
    terminal_commands.COMMANDS,
    operations.COMMANDS,
    detached.COMMANDS,
    artifact_tools.COMMANDS,
)

NOTIFICATIONS: dict[str, Handler] = _join(
    commands.NOTIFICATIONS,
)

CLIENT_ACTIONS = _join(
    dispatch.CLIENT_ACTIONS,
    turn_rules.CLIENT_ACTIONS,
    rewind.CLIENT_ACTIONS,
    summaries.CLIENT_ACTIONS,
    session_annotations.CLIENT_ACTIONS,
    watches.CLIENT_ACTIONS,
    automations.CLIENT_ACTIONS,
    terminal_commands.CLIENT_ACTIONS,
    operations.CLIENT_ACTIONS,
    customizations.CLIENT_ACTIONS,
    directories.CLIENT_ACTIONS,
    session_config.CLIENT_ACTIONS,
    input_answers.CLIENT_ACTIONS,
)

KERNEL_HOOKS = KernelHooks(
    hello=(manager.hello,),
    capabilities=(
        telemetry.capabilities_of,
        window.capabilities_of,
        detached.capabilities_of,
        artifact_tools.capabilities_of,
        automations.capabilities_of,
        command_turns.capabilities_of,
    ),
    stateless=(telemetry.subscribe_stateless,),
    openers=(changesets.open_channel, manager.open_channel),
    aliases=(session_aliases.aliases,),
    left=(changesets.on_left, watches.on_left, manager.left, telemetry.on_left),
    peer_gone=(watches.on_peer_gone,),
    client_gone=(turns.client_gone_everywhere,),
    state_changed=(manager.state_changed,),
    refusals=(workers.read_only,),
    files_touched=(changesets.files_touched,),
    readers=(changesets.read_resource,),
    token_lent=(changesets.token_lent,),
)

SESSION_HOOKS = SessionHooks(
    agent_extras=(
        turns.agent_extras,  # client_tools
        mcp_bridge.agent_extras,  # host_tools
        terminals.agent_extras,  # terminals
        directories.agent_extras,  # additional_directories
        plugins.agent_extras,  # plugins
        rewind.agent_extras,  # resume_at
        session_config.agent_extras,  # config
    ),
    agent_started=(customizations.agent_started,),
    agent_gone=(background_work.agent_gone,),
    agent_event=turns.on_event,
    customizations=customizations.session_list,
    session_created=(plugins.session_created,),
    chat_created=(rewind.chat_created,),
    session_opened=(server_tools.session_opened, changesets.session_opened),
    session_record=(book.record_of, plugins.saved),
    chat_record=(rewind.saved,),
    session_disposed=(changesets.session_disposed, terminals.session_disposed, automations.session_disposed),
    agent_info=(directories.agent_info, pulls.agent_info),
    turn_started=(changesets.turn_started,),
    turn_ended=(changesets.turn_ended,),
    turn_action=(changesets.turn_action, terminals.turn_action),
    turn_takers=(command_turns.take_command_turn,),
    stored_record=history.stored_record,
)
