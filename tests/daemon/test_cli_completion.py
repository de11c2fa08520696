"""``ahpd completion SHELL``: the printed script, loaded in the real shell,
completes ahpd's subcommands and options (issue 27, item 12).

Each shell runs the script as a user's rc file would and then asks for the
completions of a command line the way the shell does on Tab, which runs the
real ``ahpd`` on PATH; a shell that is not installed is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent  # where the ahpd being tested is installed


def _shell(tmp_path: Path, *argv: str) -> str:
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(tmp_path)}
    env.pop("_ARGCOMPLETE", None)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


BASH = """
eval "$(ahpd completion bash)"
ask() {  # what bash does on Tab for the line "$1"
    COMP_LINE="$1"; COMP_POINT=${#1}; COMPREPLY=()
    _python_argcomplete ahpd "${1##* }" ahpd
    printf '%s\\n' "${COMPREPLY[@]}"; echo --
}
ask "ahpd ch"
ask "ahpd chat --js"
ask "ahpd completion "
ask "ahpd run --sessions "
"""


def test_bash_completes_commands_options_and_choices(tmp_path: Path) -> None:
    chat, json_flag, shells, sessions, _ = [
        [word.strip() for word in block.splitlines() if word.strip()]
        for block in _shell(tmp_path, "bash", "-c", BASH).split("--\n")
    ]
    assert chat == ["chat"]
    assert json_flag == ["--json"]
    assert {"bash", "zsh", "fish"} <= set(shells)
    assert sessions == ["file", "memory"]


def test_fish_completes_commands_and_options(tmp_path: Path) -> None:
    out = _shell(
        tmp_path,
        "fish",
        "--no-config",
        "-c",
        'ahpd completion fish | source; complete -C "ahpd ch"; echo ==; complete -C "ahpd chat --js"',
    )
    commands, options = out.split("==\n")
    assert [line.split("\t")[0] for line in commands.splitlines()] == ["chat"]
    assert [line.split("\t")[0] for line in options.splitlines()] == ["--json"]


ZSH = """
autoload -U compinit && compinit -u
eval "$(ahpd completion zsh)"
print -r -- "registered: $_comps[ahpd]"
_describe() { print -rl -- ${(P)2} }  # zsh's own shows them in the menu; here, printed
BUFFER="ahpd ch"; CURSOR=${#BUFFER}; words=(ahpd ch)
_python_argcomplete
"""


def test_zsh_registers_and_completes(tmp_path: Path) -> None:
    out = _shell(tmp_path, "zsh", "-f", "-c", ZSH).splitlines()
    assert out[0] == "registered: _python_argcomplete"
    assert [line.split(":")[0] for line in out[1:]] == ["chat"]


def test_the_script_is_printed_for_a_named_shell_only(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ahpd", "completion", "tcsh"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2 and "invalid choice: 'tcsh'" in done.stderr
