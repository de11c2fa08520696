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


def _rename(value: Any, pairs: tuple[tuple[str, str], ...], olds: tuple[str, ...]) -> Any:
    """``value`` with each URI under an ``old`` prefix spelled under its
    ``new`` one. ``olds`` (every ``old``) lets most strings be passed over
    with one ``startswith``; a container in which nothing was renamed is
    returned as it was, not copied."""
    kind = type(value)
    if kind is str or (kind is not dict and kind is not list and isinstance(value, str)):
        if not value.startswith(olds):
            return value
        for old, new in pairs:
            if value.startswith(old) and (len(value) == len(old) or value[len(old)] == "/"):
                return new + value[len(old) :]
        return value
    if kind is dict or isinstance(value, dict):
        out = None
        for key, item in value.items():
            renamed = _rename(item, pairs, olds)
            if renamed is not item:
                if out is None:
                    out = dict(value)
                out[key] = renamed
        return value if out is None else out
    if kind is list or isinstance(value, list):
        items = [_rename(v, pairs, olds) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


class Alias:
    """``uri``, a second name of channel ``target``; ``pairs`` are
    (the target's spelling, the alias's spelling) of each URI prefix that differs."""

    __slots__ = ("uri", "target", "_out", "_into", "_out_olds", "_into_olds")

    def __init__(self, uri: str, pairs: tuple[tuple[str, str], ...]) -> None:
        self.uri = uri
        self._out = pairs
        self._into = tuple((new, old) for old, new in pairs)
        self._out_olds = tuple(old for old, _ in self._out)
        self._into_olds = tuple(old for old, _ in self._into)
        self.target: str = _rename(uri, self._into, self._into_olds)

    def out(self, value: Any) -> Any:
        """``value`` (wire JSON) spelled under the alias."""
        return _rename(value, self._out, self._out_olds)

    def into(self, value: Any) -> Any:
        """``value`` (wire JSON) spelled as the target's own."""
        return _rename(value, self._into, self._into_olds)
