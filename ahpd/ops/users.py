"""``ahpd users add|remove|list``: the users directory, kept in the data directory.

The directory itself is ``ahpd.ports.users``; this is only its command line.
A token is printed once, by ``add``, and never again: only its hash is kept.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ahpd.cli_errors import EXIT_DATA_DIR, EXIT_USAGE, CliError
from ahpd.ops.commands import _add_data_dir
from ahpd.ops.paths import ensure_private_dir

if TYPE_CHECKING:
    from ahpd.ports.users import UserDirectory


def _directory(args: argparse.Namespace) -> UserDirectory:
    # lazily: every command builds this parser, and argon2 (a C extension, ~5 ms) is for `ahpd users`
    from ahpd.ports.users import USERS_FILE, UserDirectory

    try:
        data_dir = ensure_private_dir(args.data_dir)
    except OSError as exc:
        raise CliError(
            f"cannot use data directory {args.data_dir}: {exc.strerror or exc}; choose another with --data-dir",
            EXIT_DATA_DIR,
        ) from None
    return UserDirectory(data_dir / USERS_FILE)


def cmd_users(args: argparse.Namespace) -> int:
    from ahpd.ports.users import UsersError  # lazily: see _directory

    directory = _directory(args)
    try:
        if args.action == "add":
            print(directory.add(args.user, args.scope or ()))
        elif args.action == "remove":
            directory.remove(args.user)
        elif args.action in ("grant", "revoke"):
            scopes = directory.grant(args.user, args.scopes, revoke=args.action == "revoke")
            print(f"{args.user}\t{' '.join(scopes) or '-'}")
        else:
            listed = directory.list()
            for user in listed:
                print(f"{user['id']}\t{user['createdAt']}\t{' '.join(user['scopes']) or '-'}")
            if not listed:  # said to the person; stdout stays empty for a script counting lines
                where = (
                    f"in {directory.path}"
                    if directory.path.exists()
                    else f"({directory.path} does not exist: the daemon names nobody)"
                )
                print(f"no users {where}; `ahpd users add USER` adds one", file=sys.stderr)
    except UsersError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except OSError as exc:
        raise CliError(f"cannot write {directory.path}: {exc.strerror or exc}", EXIT_DATA_DIR) from None
    return 0


def add_users_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "users",
        help="the users who may sign in to the daemon as themselves (optional)",
        description="Keep the users directory, DATA_DIR/users.json: each user's id and the "
        "Argon2id hash of its token. A daemon started with the file present advertises the "
        "protected resource ahpd://users, verifies a token a client sends for it with "
        "`authenticate`, and names who sent each turn and owns each session "
        "(_meta['ahpd.sender'], _meta['ahpd.owner']). With the file present, pushing the host's "
        "own limits in the root config needs a user granted config:write, and workspaceTrust "
        "one granted trust:push.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add a user and print its token (shown this once)")
    add.add_argument("user", metavar="USER", help="the user's id: letters, digits, '.', '_', '-'")
    add.add_argument(
        "--scope",
        action="append",
        metavar="SCOPE",
        help="grant SCOPE (repeatable): config:write lets the user push the host's own limits "
        "in the root config, trust:push a connection's workspaceTrust",
    )
    remove = actions.add_parser("remove", help="remove a user; its token stops working")
    remove.add_argument("user", metavar="USER")
    grants = []
    for name, verb in (("grant", "grant"), ("revoke", "take back")):
        sub = actions.add_parser(name, help=f"{verb} a user's scopes (from its next sign-in)")
        sub.add_argument("user", metavar="USER")
        sub.add_argument("scopes", metavar="SCOPE", nargs="+", help="config:write or trust:push")
        grants.append(sub)
    listing = actions.add_parser("list", help="print each user's id, when it was added and its scopes")
    for sub in (add, remove, *grants, listing):
        _add_data_dir(sub)
        sub.set_defaults(func=cmd_users)
    return p
