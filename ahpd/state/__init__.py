"""Pure state reducers for the AHP channels.

The host keeps channel state only by reducing the actions it emits, and
clients run the protocol's canonical reducers on the same actions, so these
must agree with them exactly. States and actions are the wire JSON values
(camelCase dicts). Inputs are never mutated: results share unchanged
structure, and an action that changes nothing returns the very same state
object, so `new is old` detects a no-op.
"""

# No ``from __future__ import annotations`` here: it would bind the name
# ``annotations`` that the channel module of that name takes below.
from collections.abc import Callable
from typing import Any

from . import annotations, automation, automation_run, changeset, chat, resource_watch, root, session, terminal
from ._registry import Registry
from .annotations import reduce_annotations
from .automation import reduce_automation
from .automation_run import reduce_automation_run
from .changeset import reduce_changeset
from .chat import reduce_chat
from .resource_watch import reduce_resource_watch
from .root import reduce_root
from .session import reduce_session
from .terminal import reduce_terminal

__all__ = [
    "CHANNELS",
    "CLIENT_DISPATCHABLE",
    "channel_of_action",
    "reduce",
    "reduce_annotations",
    "reduce_automation",
    "reduce_automation_run",
    "reduce_changeset",
    "reduce_chat",
    "reduce_resource_watch",
    "reduce_root",
    "reduce_session",
    "reduce_terminal",
    "reducer",
]

_REGISTRIES: dict[str, Registry] = {
    module.registry.channel: module.registry
    for module in (root, session, chat, terminal, changeset, annotations, resource_watch, automation, automation_run)
}

CHANNELS: tuple[str, ...] = tuple(_REGISTRIES)
"""Channel names accepted by `reduce`."""


def channel_of_action(action_type: str) -> str | None:
    """The channel an action type travels on, from its `<channel>/` prefix."""
    prefix, sep, _ = action_type.partition("/")
    return prefix if sep and prefix in _REGISTRIES else None


def reduce(channel: str, state: dict[str, Any], action: dict[str, Any]) -> dict[str, Any]:
    """Apply one action to the state of `channel`.

    An action of another channel or of an unknown type returns `state`
    unchanged. No reducer reads a clock: what a state holds follows from
    its actions alone, so every client reduces the host's state exactly.
    """
    registry = _REGISTRIES.get(channel)
    if registry is None:
        raise ValueError(f"unknown channel {channel!r}")
    return registry.reduce(state, action)


def reducer(channel: str) -> Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]:
    """`reduce` for one channel, its table looked up once: for a caller that
    applies a great many actions (`ahpd wire-check` replaying a capture)."""
    registry = _REGISTRIES.get(channel)
    if registry is None:
        raise ValueError(f"unknown channel {channel!r}")
    return registry.reduce


# Which actions a client may originate (the protocol's client-dispatchable
# table); the host must reject any other type in `dispatchAction`. Entries
# newer than the generated table we could read follow the action
# descriptions and the guide's actions tables.
CLIENT_DISPATCHABLE: dict[str, bool] = {
    "root/agentsChanged": False,
    "root/activeSessionsChanged": False,
    "root/terminalsChanged": False,
    "root/configChanged": True,
    "session/ready": False,
    "session/creationFailed": False,
    "session/chatAdded": False,
    "session/chatRemoved": False,
    "session/chatUpdated": False,
    "session/chatsReordered": False,
    "session/defaultChatChanged": False,
    "session/titleChanged": True,
    "session/serverToolsChanged": False,
    "session/activeClientSet": True,
    "session/activeClientRemoved": True,
    "session/workingDirectorySet": True,
    "session/workingDirectoryRemoved": True,
    "session/workingDirectoryReplaced": True,
    "session/inputNeededSet": False,
    "session/inputNeededRemoved": False,
    "session/customizationsChanged": False,
    "session/customizationToggled": True,
    "session/customizationUpdated": False,
    "session/customizationRemoved": False,
    "session/mcpServerStateChanged": False,
    "session/mcpServerStartRequested": True,
    "session/mcpServerStopRequested": True,
    "session/mcpServerBackgroundRequested": True,
    "session/isReadChanged": True,
    "session/isArchivedChanged": True,
    "session/activityChanged": False,
    "session/changesetsChanged": False,
    "session/configChanged": True,
    "session/metaChanged": False,
    "chat/turnStarted": True,
    "chat/delta": False,
    "chat/responsePart": False,
    "chat/toolCallStart": False,
    "chat/toolCallDelta": False,
    "chat/toolCallReady": False,
    "chat/toolCallConfirmed": True,
    "chat/toolCallComplete": True,
    "chat/toolCallResultConfirmed": True,
    "chat/toolCallContentChanged": True,
    "chat/toolCallAuthRequired": False,
    "chat/toolCallAuthResolved": False,
    "chat/turnComplete": False,
    "chat/turnCancelled": True,
    "chat/error": False,
    "chat/turnResume": True,
    "chat/activityChanged": False,
    "chat/backgroundWorkSet": False,
    "chat/backgroundWorkRemoved": False,
    "chat/movableChanged": False,
    "chat/changesetsChanged": False,
    "chat/canvasesChanged": False,
    "chat/workingDirectorySet": True,
    "chat/workingDirectoryRemoved": True,
    "chat/usage": False,
    "chat/reasoning": False,
    "chat/pendingMessageSet": True,
    "chat/pendingMessageRemoved": True,
    "chat/queuedMessagesReordered": True,
    "chat/draftChanged": True,
    "chat/isReadChanged": True,
    "chat/isArchivedChanged": True,
    "chat/inputRequested": False,
    "chat/inputAnswerChanged": True,
    "chat/inputCompleted": True,
    "chat/truncated": True,
    "chat/turnsLoaded": False,
    "changeset/statusChanged": False,
    "changeset/fileSet": False,
    "changeset/fileRemoved": False,
    "changeset/filesReviewChanged": True,
    "changeset/contentChanged": False,
    "changeset/operationsChanged": False,
    "changeset/operationStatusChanged": False,
    "changeset/cleared": False,
    "annotations/set": True,
    "annotations/updated": True,
    "annotations/removed": True,
    "annotations/entrySet": True,
    "annotations/entryRemoved": True,
    "terminal/data": False,
    "terminal/input": True,
    "terminal/resized": True,
    "terminal/claimed": True,
    "terminal/titleChanged": True,
    "terminal/cwdChanged": False,
    "terminal/exited": False,
    "terminal/cleared": True,
    "terminal/commandDetectionAvailable": False,
    "terminal/commandExecuted": False,
    "terminal/commandFinished": False,
    "resourceWatch/changed": False,
    "automation/createRequested": True,
    "automation/updateRequested": True,
    "automation/set": False,
    "automation/removed": True,
    "automationRun/lifecycleChanged": False,
    "automationRun/sessionSet": False,
    "automationRun/sessionRemoved": False,
    "automationRun/primarySessionChanged": False,
    "automationRun/cancelRequested": True,
}
