"""The users directory: who may sign in to this host as a person.

Optional: a host whose data directory holds no ``users.json`` has no
directory, names nobody, and serves every connection as the deployment
itself. ``ahpd users add`` makes the file.

A user's token is shown once, when the user is added, and only its Argon2id
hash (argon2-cffi, the maintained binding of the reference implementation)
is kept. The token spells the user it belongs to (``<id>:<secret>``), so a
sign-in verifies one hash rather than trying every user's, and an unknown
user and a wrong secret can be told apart in the refusal. The file is read
again on every sign-in, so a user added or removed while the daemon runs
counts from the next ``authenticate``. Writes replace the file at once
(:func:`~ahpd.ports.atomic.write_atomic`): a crash leaves the old directory whole.
"""

from __future__ import annotations

import json
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ahpd.ports.atomic import write_atomic

if TYPE_CHECKING:
    import argon2

USERS_FILE = "users.json"
#: What a user may be granted beyond signing in: ``config:write`` pushes the
#: host's own limits in the root config (what it holds for a client, how many
#: agents it runs), ``trust:push`` a connection's ``workspaceTrust``.
SCOPES = ("config:write", "trust:push")
#: The protected resource whose token this host verifies itself.
RESOURCE = "ahpd://users"
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@functools.cache
def _argon2() -> Any:
    """argon2-cffi, imported when a token is first hashed or checked: its cffi
    binding is ~3 MB a daemon without users should not hold."""
    import argon2

    return argon2


@functools.cache
def _hasher() -> argon2.PasswordHasher:
    return _argon2().PasswordHasher()


class UsersError(Exception):
    """A refusal naming what was wrong (an id, a token, the file)."""


def valid_id(user_id: str) -> bool:
    return _ID.fullmatch(user_id) is not None


class UserDirectory:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def configured(cls, data_dir: Path) -> UserDirectory | None:
        """The data directory's users directory, or None when none was made."""
        path = Path(data_dir) / USERS_FILE
        return cls(path) if path.exists() else None

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise UsersError(f"the users directory {self.path} cannot be read: {exc}") from None
        users = data.get("users") if isinstance(data, dict) else None
        if not isinstance(users, dict):
            raise UsersError(f"the users directory {self.path} has no users object")
        return users

    def _save(self, users: dict[str, dict[str, Any]]) -> None:
        write_atomic(self.path, json.dumps({"users": users}, indent=1, sort_keys=True))  # private: 0600

    def list(self) -> list[dict[str, Any]]:
        return [
            {"id": uid, "createdAt": rec.get("createdAt", ""), "scopes": _scopes_of(rec)}
            for uid, rec in sorted(self._load().items())
        ]

    def add(self, user_id: str, scopes: Iterable[str] = ()) -> str:
        """Add ``user_id`` (granted ``scopes``) and return its token (the only time it is shown)."""
        granted = _checked_scopes(scopes)
        if not valid_id(user_id):
            raise UsersError(
                f"{user_id!r} is not a user id: use letters, digits, '.', '_' and '-' "
                "(64 at most, starting with a letter or digit)"
            )
        users = self._load()
        if user_id in users:
            raise UsersError(f"user {user_id} already exists; remove it first to issue a new token")
        token = f"{user_id}:{secrets.token_urlsafe(32)}"
        users[user_id] = {"hash": _hasher().hash(token), "createdAt": datetime.now(UTC).isoformat(timespec="seconds")}
        if granted:
            users[user_id]["scopes"] = granted
        self._save(users)
        return token

    def grant(self, user_id: str, scopes: Iterable[str], *, revoke: bool = False) -> tuple[str, ...]:
        """Give ``user_id`` ``scopes`` (or take them back): its scopes after.
        They count from the user's next sign-in."""
        changed = set(_checked_scopes(scopes))
        users = self._load()
        record = users.get(user_id)
        if record is None:
            raise UsersError(f"no user {user_id} in {self.path}")
        have = set(_scopes_of(record))
        record["scopes"] = sorted(have - changed if revoke else have | changed)
        self._save(users)
        return tuple(record["scopes"])

    def remove(self, user_id: str) -> None:
        users = self._load()
        if users.pop(user_id, None) is None:
            raise UsersError(f"no user {user_id} in {self.path}")
        self._save(users)

    def verify(self, token: str) -> tuple[str, frozenset[str]]:
        """The user ``token`` belongs to and the scopes it was granted;
        ``UsersError`` saying why not."""
        user_id, sep, _ = token.rpartition(":")
        if not sep or not valid_id(user_id):
            raise UsersError("the token is not one this host's users directory issued (expected <user>:<secret>)")
        record = self._load().get(user_id)
        if record is None:
            raise UsersError(f"no user {user_id} in this host's users directory")
        try:
            _hasher().verify(record["hash"], token)
        except (_argon2().exceptions.VerificationError, _argon2().exceptions.InvalidHashError):
            raise UsersError(f"the token is not {user_id}'s") from None
        return user_id, frozenset(_scopes_of(record))


def _scopes_of(record: dict[str, Any]) -> list[str]:
    """A record's scopes: the ones this host knows (a hand-edited file's others are ignored)."""
    scopes = record.get("scopes")
    return sorted(s for s in scopes if s in SCOPES) if isinstance(scopes, list) else []


def _checked_scopes(scopes: Iterable[str]) -> list[str]:
    wanted = sorted(set(scopes))
    for scope in wanted:
        if scope not in SCOPES:
            raise UsersError(f"{scope!r} is not a scope this host grants: it has {', '.join(SCOPES)}")
    return wanted
