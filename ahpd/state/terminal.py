"""Terminal channel reducer.

Terminal content is a list of parts: free `unclassified` output, and, once
shell integration reports command boundaries, `command` parts that collect
the output between `commandExecuted` and `commandFinished`. Output always
lands on the tail part, so the reducer only ever looks at the last entry.
"""

from __future__ import annotations

from ._registry import Action, Registry, State
from ._util import assign, field

registry = Registry("terminal")
handles = registry.handles


@handles("terminal/data")
def data(state: State, action: Action, **_: object) -> State:
    content = list(state["content"])
    tail = content[-1] if content else None
    if tail is not None and tail.get("type") == "command" and not tail.get("isComplete"):
        content[-1] = {**tail, "output": tail["output"] + action["data"]}
    elif tail is not None and tail.get("type") == "unclassified":
        content[-1] = {**tail, "value": tail["value"] + action["data"]}
    else:
        content.append({"type": "unclassified", "value": action["data"]})
    return {**state, "content": content}


@handles("terminal/input")
def input_(state: State, action: Action, **_: object) -> State:
    # Keystrokes go to the pty as a side effect; the resulting output comes
    # back as terminal/data, so state is untouched here.
    return state


@handles("terminal/resized")
def resized(state: State, action: Action, **_: object) -> State:
    return {**state, "cols": action["cols"], "rows": action["rows"]}


@handles("terminal/claimed")
def claimed(state: State, action: Action, **_: object) -> State:
    return {**state, "claim": action["claim"]}


@handles("terminal/titleChanged")
def title_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "title": action["title"]}


@handles("terminal/cwdChanged")
def cwd_changed(state: State, action: Action, **_: object) -> State:
    return {**state, "cwd": action["cwd"]}


@handles("terminal/exited")
def exited(state: State, action: Action, **_: object) -> State:
    # The exit code lives in the lifecycle; TerminalState has no top-level one.
    return {**state, "lifecycle": assign({"status": "exited"}, exitCode=field(action, "exitCode"))}


@handles("terminal/cleared")
def cleared(state: State, action: Action, **_: object) -> State:
    return {**state, "content": []}


@handles("terminal/commandDetectionAvailable")
def command_detection_available(state: State, action: Action, **_: object) -> State:
    return {**state, "supportsCommandDetection": True}


@handles("terminal/commandExecuted")
def command_executed(state: State, action: Action, **_: object) -> State:
    part = {
        "type": "command",
        "commandId": action["commandId"],
        "commandLine": action["commandLine"],
        "output": "",
        "timestamp": action["timestamp"],
        "isComplete": False,
    }
    return {**state, "content": [*state["content"], part], "supportsCommandDetection": True}


@handles("terminal/commandFinished")
def command_finished(state: State, action: Action, **_: object) -> State:
    content = [
        assign(
            part,
            isComplete=True,
            exitCode=field(action, "exitCode"),
            durationMs=field(action, "durationMs"),
        )
        if part.get("type") == "command" and part.get("commandId") == action["commandId"]
        else part
        for part in state["content"]
    ]
    return {**state, "content": content}


def reduce_terminal(state: State, action: Action) -> State:
    """Apply one terminal action to a wire-shaped `TerminalState`."""
    return registry.reduce(state, action)
