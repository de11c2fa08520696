"""A channel's frames, queued once for every subscriber (``Feed``).

A fan-out used to queue each frame on each subscriber's connection: at a
hundred subscribers that bookkeeping (the queue limit, the shared budget,
two appends) cost more than the rest of the action. A ``Feed`` keeps the
frames of one channel (under one of its names) once; a connection whose
queue ends with that channel's frames *follows* the feed, and what it has
still to write of them is its view: from its position to the feed's end.
A frame pushed while every subscriber follows, and while no limit can
bite, is one append and a few sums, whatever the number of subscribers.

What a follower holds is still its own: its view's bytes count in its
queue (``Connection.queued_bytes``) and in the shared budget from the
moment the frame is pushed, and a frame queued for it any other way (an
answer, another channel's action) first turns its view into frames of its
own queue (it stops following), so a connection's frames go out in the
order they were queued. When a push could take a follower past its queue
limit or the followers past the shared budget (``may_bite``), the bus
turns every view into frames of their own queues and sends the frame to
each subscriber as before (``Connection.send``): who falls behind, who is
closed to make room and with what are decided exactly as without a feed.

The frames everyone has taken are let go of at once (``pending`` counts
the followers with something left to take), so a feed holds what its
slowest follower has not written yet, which that follower's limit bounds.
The followers are transport connections; this module knows of them only
the attributes named in ``Follower``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from itertools import accumulate
from typing import Any, Protocol


class Follower(Protocol):
    """What a feed reads and keeps on a connection that follows it."""

    #: The feed it follows, its position there (an index counted from the
    #: feed's first frame ever) and the feed's byte count at that position.
    feed: Feed | None
    feed_pos: int
    feed_cum: int

    def queued_outside_feed(self) -> int:
        """Bytes queued (or being written) other than its view."""
        ...

    def wake_writer(self) -> None:
        """Something was pushed: wake its writer if it sleeps."""
        ...

    def unfollow(self, feed: Feed) -> None:
        """Stop following ``feed``: its view becomes frames of its own queue."""
        ...


class Feed:
    """One stream of frames (a channel under one name) and who follows it."""

    __slots__ = (
        "frames",
        "sizes",
        "base",
        "end",
        "cum",
        "followers",
        "pending",
        "sleepers",
        "floor",
        "budget",
        "limit",
        "mixed",
    )

    def __init__(self) -> None:
        #: Frames not yet taken by every follower; ``frames[i]`` is frame ``base + i``.
        self.frames: list[Any] = []
        self.sizes: list[int] = []
        self.base = 0
        #: The index the next frame pushed will have (``base + len(frames)``).
        self.end = 0
        #: Bytes pushed since the feed was made.
        self.cum = 0
        self.followers: set[Follower] = set()
        #: How many followers have something left to take.
        self.pending = 0
        #: Followers whose writers parked with nothing to write.
        self.sleepers: list[Follower] = []
        #: No follower has more than ``cum - floor`` bytes queued in all.
        self.floor = 0
        #: The shared budget and the queue limit of the followers, when
        #: they all have the same (``mixed`` otherwise: every push is sent
        #: one by one).
        self.budget: Any = None
        self.limit: Callable[[], int] | None = None
        self.mixed = False

    # -- the bus's side ----------------------------------------------------------

    def join(self, follower: Follower, budget: Any, limit: Callable[[], int] | None) -> None:
        """``follower`` follows from the feed's end (its view empty)."""
        follower.feed, follower.feed_pos, follower.feed_cum = self, self.end, self.cum
        anchor = self.cum - follower.queued_outside_feed()
        if not self.followers:
            self.budget, self.limit, self.mixed, self.floor = budget, limit, False, anchor
        else:
            self.floor = min(self.floor, anchor)
            if budget is not self.budget or limit != self.limit:
                self.mixed = True
        self.followers.add(follower)

    def may_bite(self, size: int) -> bool:
        """Whether a frame of ``size`` bytes pushed to every follower could
        take one past its queue limit or all of them past the budget."""
        if self.mixed:
            return True
        budget = self.budget
        if budget is not None and budget.total + size * len(self.followers) > budget.limit:
            return True
        if self.limit is None:
            return False
        limit = self.limit()
        if self.cum - self.floor + size <= limit:
            return False
        # The bound is stale (followers wrote since): made exact, once in a while.
        self.floor = min((f.feed_cum - f.queued_outside_feed() for f in self.followers), default=self.cum)
        return self.cum - self.floor + size > limit

    def push(self, frame: Any, size: int) -> None:
        """Queue ``frame`` for every follower (``may_bite`` said it fits)."""
        self.frames.append(frame)
        self.sizes.append(size)
        self.end += 1
        self.cum += size
        self.pending = len(self.followers)
        if self.budget is not None:
            self.budget.total += size * self.pending
        if self.sleepers:
            sleepers, self.sleepers = self.sleepers, []
            for follower in sleepers:
                if follower.feed is self:
                    follower.wake_writer()

    # -- the follower's side -------------------------------------------------------

    def take_all(self, follower: Follower) -> tuple[list[Any], int]:
        """The frames of ``follower``'s whole view and their bytes (the
        writer's common case, when they fit in its batch); its position
        moves past them."""
        frames = self.frames[follower.feed_pos - self.base :]
        total = self.cum - follower.feed_cum
        if frames:
            follower.feed_pos = self.end
            follower.feed_cum = self.cum
            self._drained()
        return frames, total

    def take(self, follower: Follower, cap: int | None) -> tuple[list[Any], list[int]]:
        """The frames of ``follower``'s view, from its position, up to the
        one that brings them to ``cap`` bytes (all with None); its position
        moves past them."""
        start = follower.feed_pos - self.base
        frames, sizes = self.frames[start:], self.sizes[start:]
        total = self.cum - follower.feed_cum
        if cap is not None and total > cap and len(frames) > 1:
            ends = list(accumulate(sizes))  # a backlog past a batch is cut without a Python loop per frame
            n = bisect_left(ends, cap) + 1  # the frame that reaches the cap goes too
            frames, sizes, total = frames[:n], sizes[:n], ends[n - 1]
        if frames:
            follower.feed_pos += len(frames)
            follower.feed_cum += total
            if follower.feed_pos == self.end:
                self._drained()
        return frames, sizes

    def leave(self, follower: Follower) -> tuple[list[Any], list[int]]:
        """``follower`` stops following; what was left of its view."""
        frames, sizes = self.take(follower, None)
        self.followers.discard(follower)
        follower.feed = None
        return frames, sizes

    def sleep(self, follower: Follower) -> None:
        """``follower``'s writer parks with nothing to write: the next push wakes it."""
        self.sleepers.append(follower)

    def view_bytes(self, follower: Follower) -> int:
        return self.cum - follower.feed_cum

    def _drained(self) -> None:
        self.pending -= 1
        if self.pending <= 0:  # every follower took everything: nothing is kept
            self.pending = 0
            self.base = self.end
            self.frames = []
            self.sizes = []
