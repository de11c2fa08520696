"""What ``pip install`` gets: the dependencies ahpd imports, its licence, its man page."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from .conftest import ROOT, copy_repository

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: What ahpd itself runs with: the core dependencies and the extras that add a backend.
RUNTIME_EXTRAS = ("claude",)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = PYPROJECT["project"]
    specs = project["dependencies"] + [s for extra in RUNTIME_EXTRAS for s in project["optional-dependencies"][extra]]
    return {_normal(re.split(r"[\s<>=!~;\[(]", spec, maxsplit=1)[0]) for spec in specs}


def _imported() -> dict[str, str]:
    """Third-party top-level modules imported anywhere in ahpd/ -> one file that does."""
    out: dict[str, str] = {}
    for path in sorted((ROOT / "ahpd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "ahpd" and top not in sys.stdlib_module_names:
                    out.setdefault(top, str(path.relative_to(ROOT)))
    return out


def test_every_direct_import_is_declared_and_every_declared_dependency_imported() -> None:
    declared, imported = _declared(), _imported()
    providers = {module: {_normal(d) for d in dists} for module, dists in packages_distributions().items()}
    absent = sorted(m for m in imported if m not in providers)
    if absent:
        pytest.skip(f"not installed here, so their distributions are unknown: {', '.join(absent)}")
    undeclared = {m: where for m, where in imported.items() if not providers[m] & declared}
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
    used = set().union(*(providers[m] for m in imported))
    assert declared <= used, f"declared but imported nowhere in ahpd/: {sorted(declared - used)}"


def test_the_licence_is_an_spdx_expression_with_its_text() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n\nCopyright (c) 2026 the ahpd authors\n")


def test_the_wheel_carries_the_man_page_and_the_licence(tmp_path: Path) -> None:
    # Built from a copy: building in place leaves build/ and egg-info behind.
    source = copy_repository(tmp_path / "source")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    [wheel] = (tmp_path / "dist").glob("ahpd-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        # pip installs <wheel>.data/data/X as <prefix>/X: the unit's man:ahpd(1) then resolves.
        [man] = [n for n in names if n.endswith(".data/data/share/man/man1/ahpd.1")]
        assert archive.read(man) == (ROOT / "man" / "ahpd.1").read_bytes()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        fields = archive.read(metadata).decode()
        assert "License-Expression: MIT" in fields.splitlines()
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
        assert "Requires-Dist: h11" in fields and "Requires-Dist: pygit2" in fields
        # the web console's page: every file of ahpd/web that the listener serves
        served = sorted(n.removeprefix("ahpd/web/") for n in names if n.startswith("ahpd/web/") and "." in n)
        assert served == sorted(
            p.name for p in (ROOT / "ahpd" / "web").iterdir() if p.suffix in (".html", ".js", ".css", ".py")
        )
