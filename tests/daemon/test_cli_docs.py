"""The man page documents every subcommand and option the parser has."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess

import pytest

from ahpd.cli import build_parser

from ..conftest import ROOT


def _walk(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield "command", f"{prefix}{name}"
                yield from _walk(sub, f"{prefix}{name} ")
        else:
            for option in action.option_strings:
                yield "option", option


PAGE = ROOT / "man" / "ahpd.1"
#: Options every command takes, shown once at the top of the SYNOPSIS.
COMMON = {"-h", "--help", "-V", "--version", "--debug"}
#: ``run`` and ``stdio``'s shared options, which the SYNOPSIS names as ``HOST-OPTIONS``.
HOST_OPTIONS = {"--data-dir", "--sessions", "--config", "--agent", "--max-frame-bytes", "--log-level", "--wire"}


def _synopsis() -> dict[str, str]:
    """Each command's lines of the SYNOPSIS (``.br`` separates them), by its name."""
    text = PAGE.read_text().replace("\\-", "-")
    section = text.split(".SH SYNOPSIS\n", 1)[1].split(".SH ", 1)[0]
    by_command: dict[str, str] = {}
    for block in section.replace(".PP\n", ".br\n").split(".br\n"):
        first = block.strip().splitlines()[0]
        if first.startswith(".B ahpd "):
            name = first.split()[2]
            by_command[name] = by_command.get(name, "") + block
    return by_command


def _options(parser: argparse.ArgumentParser) -> set[str]:
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
        else:
            found.update(action.option_strings)
    return found


def test_the_synopsis_names_every_command_with_its_options() -> None:
    """A reader of the SYNOPSIS sees each command and what it takes, not only the page's body."""
    synopsis = _synopsis()
    [commands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    missing = []
    for name, sub in commands.choices.items():
        if name not in synopsis:
            missing.append(name)
            continue
        block = synopsis[name]
        wanted = _options(sub) - COMMON
        if "HOST-OPTIONS" in block:
            wanted -= HOST_OPTIONS
        missing += [f"{name} {option}" for option in sorted(wanted) if not re.search(rf"{option}\b", block)]
    assert missing == []


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_groff_reads_every_escape() -> None:
    """No escape groff cannot read (``\\(u241B`` is the two-letter glyph ``u2`` and "41B")."""
    run = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", "-z", str(PAGE)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr


def test_every_command_and_option_is_in_the_man_page() -> None:
    page = (ROOT / "man" / "ahpd.1").read_text().replace("\\-", "-")
    missing = [f"{kind} {name}" for kind, name in _walk(build_parser()) if name.split()[-1] not in page]
    assert missing == []


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_man_renders_without_warnings() -> None:
    run = subprocess.run(
        ["man", "-l", str(ROOT / "man" / "ahpd.1")],
        capture_output=True,
        text=True,
        env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin", "MAN_KEEP_STDERR": "1", "LANG": "C.UTF-8"},
    )
    assert run.returncode == 0
    assert "ahpd ready:" in run.stdout
    assert "(ESC as \u241b)" in " ".join(run.stdout.split())
