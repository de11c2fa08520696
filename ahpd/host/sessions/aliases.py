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
them spelled from it. The session is kept under the one name it was opened
by, so what is stored for it is found under either.
"""

from __future__ import annotations

import base64
import itertools
import re
from typing import TYPE_CHECKING

from ahpd.host.sessions.common import default_chat_uri, session_id

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host

_DEFAULT_CHAT = "ahp-chat://default/"
#: ``<scheme>:/<id>``, the session part of a URI that may go on (``/annotations``, ``/changeset/...``).
_SESSION_PART = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/([^/?#]+)")


def _session_part(uri: str) -> str | None:
    if uri.startswith(_DEFAULT_CHAT):
        encoded = uri.removeprefix(_DEFAULT_CHAT)
        try:
            uri = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except (ValueError, UnicodeDecodeError):
            return None
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
    if scheme != "ahp-session" and scheme not in sessions.backends:
        return None
    wanted = session_id(named)
    own = next((u for u in itertools.chain(sessions.sessions, sessions.dormant) if session_id(u) == wanted), None)
    if own is None or own == named:
        return None
    return ((own, named), (default_chat_uri(own), default_chat_uri(named)))
