"""The replay buffer: what a client that dropped can be handed back.

Bounded twice, by count (the last 1000 envelopes) and by weight (the length
of the text each went out as, against ``replayBytes``), whichever bites
first. The newest envelope is always kept, whatever it weighs: one action
larger than the whole budget is still state the host holds. The byte limit
is a callable read on every append, so a config change applies to the next
action buffered.

A host that restarted holds nothing of before its start, and what the
restart changed (its terminals gone, its turns ended) was never an action:
a client that last heard a number from before the start (``floor``, the
number the host started at) is answered with snapshots, even when nothing
was numbered since, since a replay of nothing would leave it holding the
state from before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import NamedTuple


MAX_ENVELOPES = 1000


class Entry(NamedTuple):
    """One buffered envelope (a tuple: one is made per action)."""

    server_seq: int
    channel: str
    envelope: dict  # the ActionEnvelope as sent
    weight: int  # length of the frame text it went out as


class ReplayBuffer:
    def __init__(self, max_bytes: Callable[[], int], max_count: int = MAX_ENVELOPES, floor: int | None = None) -> None:
        #: The serverSeq this host started at after a restart (None for a first start).
        self.floor = floor
        self._entries: deque[Entry] = deque()
        self._bytes = 0
        self._max_bytes = max_bytes
        self._max_count = max_count

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def weight(self) -> int:
        return self._bytes

    @property
    def oldest_seq(self) -> int | None:
        return self._entries[0].server_seq if self._entries else None

    def append(self, entry: Entry) -> None:
        self._entries.append(entry)
        self._bytes += entry.weight
        limit = self._max_bytes()
        while len(self._entries) > 1 and (len(self._entries) > self._max_count or self._bytes > limit):
            self._bytes -= self._entries.popleft().weight

    def since(self, last_seen: int, current: int, channels: Iterable[str]) -> list[dict] | None:
        """Envelopes after ``last_seen`` on ``channels``; None if the gap is
        longer than the buffer (the caller then answers with snapshots)."""
        if last_seen > current:
            return None  # a sequence this host never reached
        if self.floor is not None and last_seen <= self.floor:
            return None  # heard before this host started: the restart moved state without actions
        if last_seen == current:
            return []
        oldest = self.oldest_seq
        if oldest is None or oldest > last_seen + 1:
            return None
        wanted = set(channels)
        return [e.envelope for e in self._entries if e.server_seq > last_seen and e.channel in wanted]
