"""The man page documents every subcommand and option the parser has."""

from __future__ import annotations

import argparse
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
        env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin", "MAN_KEEP_STDERR": "1"},
    )
    assert run.returncode == 0
    assert "ahpd ready:" in run.stdout
