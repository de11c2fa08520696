"""The committed model and strict schema are what their generators make."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema

from ahpd.protocol import model
from ahpd.protocol.strict_schema import render, strict_schema

from ..conftest import ROOT

SEED_ACTION_COUNT = 103
SEED_COMMAND_COUNT = 33  # requests and the two client notifications
SEED_SERVER_COMMAND_COUNT = 10
SEED_NOTIFICATION_COUNT = 9


def test_generated_model_matches_the_published_schemas(published_schemas: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_protocol.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_check_fails_on_a_stale_model(tmp_path: Path, published_schemas: Path) -> None:
    stale = tmp_path / "model.py"
    stale.write_text((ROOT / "ahpd" / "protocol" / "model.py").read_text().replace("turnId", "turnID", 1))
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_protocol.py"), "--check", "--output", str(stale)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1
    assert "stale" in run.stderr


def test_generator_names_a_missing_schema_directory(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_protocol.py"), "--check", "--schema-dir", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert f"no AHP schemas in {tmp_path / 'absent'}" in run.stderr
    assert "Traceback" not in run.stderr


def test_committed_strict_schema_is_current() -> None:
    committed = ROOT / "conformance" / "schema" / "ahp-strict.schema.json"
    assert committed.read_text() == render(), "run: ahpd schema -o conformance/schema/ahp-strict.schema.json"


def test_strict_schema_is_valid_and_closed() -> None:
    doc = strict_schema()
    jsonschema.Draft202012Validator.check_schema(doc)
    for name, schema in doc["$defs"].items():
        if schema.get("type") == "object" and "properties" in schema:
            assert schema["additionalProperties"] is False, name
    # _meta is the declared open bag.
    assert doc["$defs"]["SessionState"]["properties"]["_meta"] == {"type": "object"}


def test_counts_match_the_seed() -> None:
    doc = strict_schema()
    served = [t for t in doc["actions"] if t not in model.EXPERIMENTAL]
    assert len(served) == SEED_ACTION_COUNT
    commands = [m for m in doc["commands"] if m not in model.EXPERIMENTAL]
    assert len(commands) + len(doc["clientNotifications"]) == SEED_COMMAND_COUNT
    assert len(doc["serverCommands"]) == SEED_SERVER_COMMAND_COUNT
    notes = [m for m in doc["notifications"] if m not in model.EXPERIMENTAL]
    assert len(notes) == SEED_NOTIFICATION_COUNT


def test_every_published_action_type_is_named(published_schemas: Path) -> None:
    published = json.loads((published_schemas / "actions.schema.json").read_text())["$defs"]
    types = {
        d["properties"]["type"]["const"]
        for name, d in published.items()
        if name.endswith("Action") and "const" in d.get("properties", {}).get("type", {})
    }
    assert types <= set(strict_schema()["actions"])


def test_cli_prints_the_schema() -> None:
    run = subprocess.run([sys.executable, "-m", "ahpd", "schema"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0
    assert json.loads(run.stdout)["$id"] == strict_schema()["$id"]
