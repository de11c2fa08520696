"""The ``ahpd`` command line.

Each subcommand is a small function here; the work itself lives in the
package, so the command line stays a thin, readable table of what a user can
ask for.
"""

from __future__ import annotations

import argparse
import sys

from ahpd import __version__


def _cmd_schema(args: argparse.Namespace) -> int:
    from ahpd.protocol import strict_schema

    text = strict_schema.render()
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ahpd",
        description=(
            "Host AI coding agents behind the Agent Host Protocol (AHP), so that "
            "VS Code's agent sessions view and any other AHP client can drive them."
        ),
    )
    parser.add_argument("--version", action="version", version=f"ahpd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    schema = sub.add_parser(
        "schema",
        help="print the strict JSON Schema of every AHP shape ahpd speaks",
        description=(
            "Print a JSON Schema (draft 2020-12) generated from ahpd's own protocol "
            "model, in which every object is closed: an undeclared key fails. "
            "Actions are selectable under /actions/<type>, commands under "
            "/commands/<method>/params|result, notifications under "
            "/notifications/<method>."
        ),
    )
    schema.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    schema.set_defaults(func=_cmd_schema)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
