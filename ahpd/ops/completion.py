"""``ahpd completion SHELL``: tab completion for bash, zsh and fish.

argcomplete does the work: the script this prints makes the shell run
``ahpd`` itself on each Tab with the command line in the environment
(``_ARGCOMPLETE``), and :func:`complete_if_asked` answers from the very
parser the command line uses, so a new subcommand or option completes
without anyone editing a script. The cost is ``ahpd``'s start (the parser,
no daemon), about a tenth of a second.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

SHELLS = ("bash", "zsh", "fish")

_WHERE = {
    "bash": 'eval "$(ahpd completion bash)"  # in ~/.bashrc',
    "zsh": 'eval "$(ahpd completion zsh)"  # in ~/.zshrc, after compinit',
    "fish": "ahpd completion fish > ~/.config/fish/completions/ahpd.fish",
}


def complete_if_asked(parser: argparse.ArgumentParser) -> None:
    """When the shell runs ``ahpd`` for a Tab, write the completions and exit;
    otherwise return at once (argcomplete is not even imported)."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete  # lazily: only a Tab pays for it

    argcomplete.autocomplete(parser)


def add_completion_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "completion",
        help="print the tab-completion script for bash, zsh or fish",
        description="Print the script that makes SHELL complete ahpd's subcommands and options. "
        + " ".join(f"{shell}: {how}." for shell, how in _WHERE.items()),
    )
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")
    p.set_defaults(func=_cmd_completion)
    return p


def _cmd_completion(args: argparse.Namespace) -> int:
    import argcomplete  # lazily: as above

    sys.stdout.write(argcomplete.shellcode(["ahpd"], shell=args.shell))
    return 0
