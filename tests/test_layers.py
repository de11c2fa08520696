"""Imports point inward: the import-linter contracts in pyproject.toml hold
for ahpd, and each one catches the import it forbids (checked on a small
throwaway package with the same layout and a single bad import)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _lint(folder: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, "-c", _LINT, "--no-cache", "--no-logo", str(folder / "pyproject.toml")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


#: The host's packages, as the host contract names them.
HOST_PACKAGES = tuple(
    f"host/{p}"
    for p in (
        "kernel",
        "sessions",
        "automations",
        "changesets",
        "customizations",
        "resources",
        "terminals",
        "telemetry",
        "window",
    )
)


def _contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_ahpd_keeps_every_contract() -> None:
    run = _lint(REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    for contract in _contracts():
        assert f"{contract['name']} KEPT" in run.stdout


@pytest.mark.parametrize(
    ("importer", "imported", "broken"),
    [
        ("ports", "host", "Ports know nothing"),
        ("ports", "backends", "Ports know nothing"),
        ("ports", "protocol", "Ports know nothing"),
        ("backends", "host", "Backends know nothing"),
        ("state", "ports", "Protocol and state do no I/O"),
        ("protocol", "backends", "Protocol and state do no I/O"),
        ("protocol", "state", "Layers point inward"),
        ("host", "transport", "Layers point inward"),
        ("host.kernel", "host.sessions", "Host: kernel < sessions"),
        ("host.kernel", "host.terminals", "Host: kernel < sessions"),
        ("host.kernel", "host.table", "Host: kernel < sessions"),
        ("host.sessions", "host.changesets", "Host: kernel < sessions"),
        ("host.sessions", "host.table", "Host: kernel < sessions"),
        ("host.terminals", "host.changesets", "Host: kernel < sessions"),  # features are independent
        ("host.customizations", "host.resources", "Host: kernel < sessions"),
        ("host.table", "host.assembly", "Host: kernel < sessions"),
    ],
)
def test_each_contract_catches_its_import(tmp_path: Path, importer: str, imported: str, broken: str) -> None:
    package = tmp_path / "src" / "fakeahpd"
    for module in ("protocol", "state", "host", "transport", "ports", "backends", "ops", "wire", *HOST_PACKAGES):
        (package / module).mkdir(parents=True)
        (package / module / "__init__.py").write_text("")
    for module in ("__init__", "cli", "daemon", "host/table", "host/assembly"):
        (package / f"{module}.py").write_text("")
    where = package / importer.replace(".", "/")
    (where / "__init__.py" if where.is_dir() else where.with_suffix(".py")).write_text(f"import fakeahpd.{imported}\n")
    config = (REPO / "pyproject.toml").read_text()
    section = config[config.index("[tool.importlinter]") :]
    (tmp_path / "pyproject.toml").write_text(section.replace("ahpd", "fakeahpd"))

    run = _lint(tmp_path, pythonpath=tmp_path / "src")
    assert run.returncode != 0, run.stdout + run.stderr
    verdicts = [line for line in run.stdout.splitlines() if line.endswith((" KEPT", " BROKEN"))]
    assert len(verdicts) == len(_contracts()), run.stdout
    assert [v for v in verdicts if v.endswith("BROKEN")] == [v for v in verdicts if v.startswith(broken)] and any(
        v.startswith(broken) for v in verdicts
    )
    assert f"fakeahpd.{importer} -> fakeahpd.{imported}" in run.stdout
