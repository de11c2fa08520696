"""Shared helpers for the reducer tests: apply actions and check purity."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from ahpd.protocol import model
from ahpd.state import reduce

#: Experimental families: modelled, never reduced.
NOT_REDUCED = ("canvas/", "tcp/", "channel/")


def run(channel: str, state: dict[str, Any], *actions: dict[str, Any]) -> dict[str, Any]:
    """Reduce `actions` in order, asserting no input is ever mutated."""
    for action in actions:
        before_state = copy.deepcopy(state)
        before_action = copy.deepcopy(action)
        nxt = reduce(channel, state, action)
        assert state == before_state, f"{action['type']} mutated its state"
        assert action == before_action, f"{action['type']} mutated its action"
        json.dumps(nxt)  # the result stays plain JSON
        state = nxt
    return state


def same(channel: str, state: dict[str, Any], action: dict[str, Any]) -> None:
    """Assert the action is a no-op that returns the very same object."""
    assert run(channel, state, action) is state


def published_action_types(schema_dir: Path) -> dict[str, str]:
    """Every reducible action type in the published StateAction union -> def name."""
    defs = json.loads((schema_dir / "actions.schema.json").read_text())["$defs"]
    out: dict[str, str] = {}

    def collect(name: str) -> None:
        if not name:
            return  # the union carries one broken `#/$defs/` reference
        node = defs[name]
        if "oneOf" in node:
            for ref in node["oneOf"]:
                collect(ref["$ref"].rsplit("/", 1)[-1])
            return
        out[node["properties"]["type"]["const"]] = name

    for ref in defs["StateAction"]["oneOf"]:
        collect(ref["$ref"].rsplit("/", 1)[-1])
    return {t: n for t, n in out.items() if not t.startswith(NOT_REDUCED)}


def model_action_types() -> dict[str, Any]:
    """Every reducible action type of the generated model -> the class that decodes it.

    The model is generated from the published schemas (and checked against
    them when they are beside the repository), so it is what the reducers
    answer to in a plain clone too.
    """
    return {t: cls for t, cls in model.ACTIONS.items() if not t.startswith(NOT_REDUCED)}
