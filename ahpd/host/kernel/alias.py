"""A channel answered under a second name: a session's alias.

A client may name one channel by more than one URI - the reference client
addresses a session as ``<provider>:/<id>`` and as ``ahp-session:/<id>``, and
its default chat, its changesets and its annotations through whichever of the
two it holds. Where a feature says two spellings are one (``KernelHooks.aliases``
gives the pairs of URI prefixes that differ), the kernel serves the channel
under the name the client used: its snapshot, every action on it, and every
answer to what the client dispatches there, with every URI in them spelled
from that name. Told otherwise, a client holds a subscription nothing refers to
and a reference nothing is subscribed to.

Only strings are renamed, and only a whole URI or one that continues it with
``/`` (``<session>/changeset/...``), so text that merely mentions a URI in a
sentence is left as it was.
"""

from __future__ import annotations

from typing import Any


def _rename(value: Any, pairs: tuple[tuple[str, str], ...]) -> Any:
    if isinstance(value, str):
        for old, new in pairs:
            if value == old or value.startswith(old + "/"):
                return new + value[len(old) :]
        return value
    if isinstance(value, dict):
        return {k: _rename(v, pairs) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename(v, pairs) for v in value]
    return value


class Alias:
    """``uri``, a second name of channel ``target``; ``pairs`` are
    (the target's spelling, the alias's spelling) of each URI prefix that differs."""

    __slots__ = ("uri", "target", "_out", "_into")

    def __init__(self, uri: str, pairs: tuple[tuple[str, str], ...]) -> None:
        self.uri = uri
        self._out = pairs
        self._into = tuple((new, old) for old, new in pairs)
        self.target: str = _rename(uri, self._into)

    def out(self, value: Any) -> Any:
        """``value`` (wire JSON) spelled under the alias."""
        return _rename(value, self._out)

    def into(self, value: Any) -> Any:
        """``value`` (wire JSON) spelled as the target's own."""
        return _rename(value, self._into)
