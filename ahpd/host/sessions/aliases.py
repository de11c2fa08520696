"""A session's other names: ``<provider>:/<id>`` and ``ahp-session:/<id>`` are one session.

Only the id inside a session URI is read. The reference client addresses a
session as ``<provider>:/<id>`` - what it computes when it creates a session
and when it reopens one it listed - and as ``ahp-session:/<id>``, and which
one it reaches for comes out of its own stored state. So a URI whose scheme
is ``ahp-session`` or a provider's, and whose id is a session's here (open or
stored), is that session under another name: ``KernelHooks.aliases`` is told
the two spellings of the session URI and of its default chat, and the kernel
(``ahpd.host.kernel.alias``) answers the session, its default chat, its
annotations and its changesets under the name the client used, every URI in
them spelled from it.

A session is kept and listed under one name, ``<provider>:/<id>``, whatever
spelling of it a client created it by (:func:`own_name`), so what is stored
for it is found under either. A store written when sessions were kept under
the name they were created by is moved over at start (:func:`upgraded`):
each ``ahp-session:/<id>`` session is written again as ``<provider>:/<id>``,
every URI in it (its chats, annotations, changesets) spelled from that name,
and then removed under the old one.
"""

from __future__ import annotations

import base64
import functools
import itertools
import logging
import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ahpd.host.kernel.alias import Alias
from ahpd.host.sessions.common import SESSION_SCHEME, default_chat_uri, session_id, session_uri

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.store import SessionStore

log = logging.getLogger("ahpd.host")

_DEFAULT_CHAT = "ahp-chat://default/"
#: A subagent's worker chat, ``<this><base64url(session URI)>/<call id>`` (``chats.workers``).
_WORKER = "ahp-chat://subagent/"
#: ``<scheme>:/<id>``, the session part of a URI that may go on (``/annotations``, ``/changeset/...``).
_SESSION_PART = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/([^/?#]+)")


def _session_part(uri: str) -> str | None:
    for prefix in (_DEFAULT_CHAT, _WORKER):
        if uri.startswith(prefix):
            encoded = uri.removeprefix(prefix).split("/", 1)[0]
            try:
                uri = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except (ValueError, UnicodeDecodeError):
                return None
            break
    found = _SESSION_PART.match(uri)
    return found.group(0) if found is not None else None


def aliases(host: Host, uri: str) -> tuple[tuple[str, str], ...] | None:
    """``uri`` as another spelling of a session here: (the session's
    spelling, ``uri``'s) of the session URI and of its default chat."""
    sessions = host.sessions
    named = _session_part(uri)
    if sessions is None or named is None:
        return None
    scheme = named.partition(":/")[0]
    if scheme != SESSION_SCHEME and scheme not in sessions.backends:
        return None
    wanted = session_id(named)
    own = next((u for u in itertools.chain(sessions.sessions, sessions.dormant) if session_id(u) == wanted), None)
    if own is None or own == named:
        return None
    return _pairs(own, named)


def _pairs(own: str, named: str) -> tuple[tuple[str, str], ...]:
    """Each URI prefix a session's name is part of, as (``own``'s, ``named``'s):
    the session's own (its annotations, changesets), its default chat, its workers."""
    chats = (default_chat_uri(own), default_chat_uri(named))
    workers = (_WORKER + chats[0].removeprefix(_DEFAULT_CHAT), _WORKER + chats[1].removeprefix(_DEFAULT_CHAT))
    return ((own, named), chats, workers)


def own_name(uri: str, provider: str, providers: Collection[str]) -> str:
    """The name a session created (or stored) as ``uri`` is kept and listed
    under: ``<provider>:/<id>`` when ``uri`` is ``ahp-session:/<id>`` or a
    provider's spelling, since those are answered as aliases of it. A URI
    under any other scheme is the client's to name, and is kept as it is."""
    found = _SESSION_PART.fullmatch(uri)
    if found is None or (found.group(1) != SESSION_SCHEME and found.group(1) not in providers):
        return uri
    return session_uri(provider, found.group(2))


def respelled(value: Any, old: str, new: str) -> Any:
    """``value`` (JSON) with session URI ``old``, its default chat, its
    workers and every URI under them (``<old>/annotations``,
    ``<old>/changeset/...``) spelled from ``new``."""
    return Alias(new, _pairs(old, new)).out(value)


def upgraded(store: SessionStore, records: list[dict[str, Any]], providers: Collection[str]) -> list[dict[str, Any]]:
    """The stored sessions, each under the name it is listed by: one kept
    under another spelling (by an older ahpd) is renamed in the store first.
    One whose own name another record holds stays as it was, and is said,
    unless that record was its own renaming cut short by a crash, in which
    case the old copy goes."""
    held = {r["uri"]: r for r in records}
    kept = []
    for record in records:
        uri = record["uri"]
        own = own_name(uri, record["provider"], providers)
        if own == uri:
            kept.append(record)
            continue
        if own in held:
            if held[own].get("renamedFrom") == uri:
                store.delete(uri)  # the new one was written whole: this is what a crash left behind
                continue
            log.warning("stored session %s keeps its name: %s is another stored session", uri, own)
            kept.append(record)
            continue
        renamed = store.rename(uri, functools.partial(respelled, old=uri, new=own))
        if renamed is None:
            log.warning("stored session %s could not be renamed %s; it is still answered under both", uri, own)
        else:
            log.info("stored session %s is now kept as %s", uri, own)
        kept.append(renamed or record)
    return kept
