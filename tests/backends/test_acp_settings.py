"""An ACP agent's modes and config options in the host's keys (pure)."""

from __future__ import annotations

from ahpd.backends.acp import settings

MODES = {
    "currentModeId": "ask",
    "availableModes": [
        {"id": "ask", "name": "Ask", "description": "Asks first"},
        {"id": "code", "name": "Code", "description": "Acts"},
    ],
}
OPTIONS = [
    {
        "id": "m",
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": "a",
        "options": [
            {"group": "g", "name": "Group", "options": [{"value": "a", "name": "A"}, {"value": "b", "name": "B"}]}
        ],
    },
    {
        "id": "t",
        "name": "Thinking",
        "category": "thought_level",
        "type": "select",
        "currentValue": "low",
        "options": [{"value": "low", "name": "Low"}, {"value": "high", "name": "High"}],
    },
    {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": False},
]


def test_properties_are_keyed_by_what_a_person_picks() -> None:
    props = settings.properties(MODES, OPTIONS)
    assert list(props) == ["mode", "model", "effortLevel", "fast"]
    assert props["mode"] == {
        "type": "string",
        "title": "Mode",
        "enum": ["ask", "code"],
        "enumLabels": ["Ask", "Code"],
        "sessionMutable": True,
        "enumDescriptions": ["Asks first", "Acts"],
        "default": "ask",
    }
    assert props["model"]["enum"] == ["a", "b"] and props["model"]["default"] == "a"
    assert props["effortLevel"]["enum"] == ["low", "high"] and props["effortLevel"]["title"] == "Thinking"
    assert props["fast"] == {"title": "Fast", "sessionMutable": True, "type": "boolean", "default": False}
    assert settings.properties(None, None) == {}


def test_values_and_the_request_that_sets_each() -> None:
    assert settings.values(MODES, OPTIONS) == {"mode": "ask", "model": "a", "effortLevel": "low", "fast": False}
    assert settings.request("mode", "code", MODES, OPTIONS) == ("session/set_mode", {"modeId": "code"})
    assert settings.request("effortLevel", "high", MODES, OPTIONS) == (
        "session/set_config_option",
        {"configId": "t", "value": "high"},
    )
    assert settings.request("fast", True, MODES, OPTIONS) == (
        "session/set_config_option",
        {"configId": "fast", "value": True, "type": "boolean"},
    )
    assert settings.request("colour", "red", MODES, OPTIONS) is None
    # A mode config option wins over the modes list, as ACP has it.
    mode_option = {
        "id": "mo",
        "name": "Mode",
        "category": "mode",
        "type": "select",
        "currentValue": "x",
        "options": [{"value": "x", "name": "X"}],
    }
    assert settings.request("mode", "x", MODES, [mode_option]) == (
        "session/set_config_option",
        {"configId": "mo", "value": "x"},
    )
