"""Every schema action has exactly one handler, and the dispatch table agrees.

The action types come from the generated model; one test checks that the
model's reducible actions are the published StateAction union.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import ahpd.state as state_pkg
from ahpd.state import CHANNELS, CLIENT_DISPATCHABLE, channel_of_action, reduce
from state_helpers import model_action_types, published_action_types

SCHEMA_TYPES = model_action_types()


def _handlers() -> dict[str, object]:
    return {t: fn for reg in state_pkg._REGISTRIES.values() for t, fn in reg.handlers.items()}


def test_model_actions_are_the_published_state_actions(published_schemas: Path) -> None:
    assert set(SCHEMA_TYPES) == set(published_action_types(published_schemas))


def test_schema_lists_the_expected_families() -> None:
    counts: dict[str, int] = {}
    for action_type in SCHEMA_TYPES:
        counts[action_type.split("/")[0]] = counts.get(action_type.split("/")[0], 0) + 1
    assert counts == {
        "root": 4,
        "session": 30,
        "chat": 37,
        "terminal": 11,
        "changeset": 8,
        "annotations": 5,
        "resourceWatch": 1,
        "automation": 4,
        "automationRun": 5,
    }


@pytest.mark.parametrize("action_type", sorted(SCHEMA_TYPES))
def test_every_schema_action_has_a_handler(action_type: str) -> None:
    channel = channel_of_action(action_type)
    assert channel in CHANNELS
    assert action_type in state_pkg._REGISTRIES[channel].handlers


def test_no_handler_for_an_action_the_schema_lacks() -> None:
    assert set(_handlers()) == set(SCHEMA_TYPES)


def test_client_dispatchable_covers_exactly_the_schema_actions() -> None:
    assert set(CLIENT_DISPATCHABLE) == set(SCHEMA_TYPES)
    assert all(isinstance(v, bool) for v in CLIENT_DISPATCHABLE.values())


@pytest.mark.parametrize(
    ("action_type", "expected"),
    [
        ("root/configChanged", True),
        ("root/agentsChanged", False),
        ("chat/turnStarted", True),
        ("chat/delta", False),
        ("chat/turnResume", True),
        ("chat/turnComplete", False),
        ("session/chatsReordered", False),
        ("session/mcpServerBackgroundRequested", True),
        ("changeset/filesReviewChanged", True),
        ("changeset/fileSet", False),
        ("annotations/entryRemoved", True),
        ("terminal/input", True),
        ("terminal/data", False),
        ("automationRun/cancelRequested", True),
        ("automationRun/lifecycleChanged", False),
    ],
)
def test_client_dispatchable_facts(action_type: str, expected: bool) -> None:
    assert CLIENT_DISPATCHABLE[action_type] is expected


@pytest.mark.parametrize(
    ("action_type", "channel"),
    [
        ("root/agentsChanged", "root"),
        ("session/ready", "session"),
        ("chat/delta", "chat"),
        ("terminal/data", "terminal"),
        ("changeset/cleared", "changeset"),
        ("annotations/set", "annotations"),
        ("resourceWatch/changed", "resourceWatch"),
        ("automation/set", "automation"),
        ("automationRun/sessionSet", "automationRun"),
        ("canvas/stateChanged", None),
        ("tcp/data", None),
        ("nonsense", None),
        ("", None),
    ],
)
def test_channel_of_action(action_type: str, channel: str | None) -> None:
    assert channel_of_action(action_type) == channel


@pytest.mark.parametrize("channel", CHANNELS)
def test_unknown_action_type_returns_the_same_state(channel: str) -> None:
    state = {"anything": [1, 2]}
    assert reduce(channel, state, {"type": f"{channel}/fromTheFuture"}) is state
    assert reduce(channel, state, {"type": "other/thing"}) is state


def test_an_action_of_another_channel_is_ignored() -> None:
    state = {"title": "t", "status": 1}
    assert reduce("session", state, {"type": "chat/draftChanged"}) is state


def test_unknown_channel_is_an_error() -> None:
    with pytest.raises(ValueError):
        reduce("canvas", {}, {"type": "canvas/stateChanged"})


def test_each_handler_is_named_by_its_wire_type_in_its_module() -> None:
    # A reader greps for the wire type and lands on the decorator line.
    for action_type, fn in _handlers().items():
        source = inspect.getsource(fn)
        decorator = ast.parse(source).body[0].decorator_list[0]
        assert ast.literal_eval(decorator.args[0]) == action_type


def test_side_effect_only_actions_leave_state_alone() -> None:
    terminal = {"content": [], "title": "t"}
    assert reduce("terminal", terminal, {"type": "terminal/input", "data": "ls\r"}) is terminal
    watch = {"root": "file:///w"}
    assert reduce("resourceWatch", watch, {"type": "resourceWatch/changed", "changes": {"items": []}}) is watch
