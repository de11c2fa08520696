"""The action bus: the one place where state moves.

Every channel's state is held here and changed only by reducing an action
through the pure reducers, the same way every client changes its copy. An
action that changes the state is numbered (serverSeq), serialized once,
buffered for replay and handed to each subscriber's writer queue; an action
that changes nothing is not a change and goes nowhere. An action that has no
JSON form (a NaN, a lone surrogate: a bug somewhere upstream) is logged and
dropped before anything moves, so the state and serverSeq every client
reduces never hold what no client was told. Nothing here awaits:
a subscriber's queue is a memory channel, so a slow client never holds up
the bus, and a snapshot and the actions after it can never interleave.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ahpd import state as reducers
from ahpd.host.kernel.alias import Alias
from ahpd.host.kernel.feed import Feed
from ahpd.host.kernel.frame import SharedFrame
from ahpd.host.kernel.jsonrpc import NotJson, notification_frame, notification_frame_of_read
from ahpd.host.kernel.seqstore import Sequencer

if TYPE_CHECKING:
    from collections.abc import Iterable

log = logging.getLogger("ahpd.host")

ROOT = "ahp-root://"


class Subscriber(Protocol):
    """Whoever receives a channel's actions: a connection's writer queue."""

    def send(self, text: str, size: int | None = None) -> bool: ...


class Channel:
    """A subscribable, state-bearing resource, reduced by ``kind``'s reducer."""

    __slots__ = ("uri", "kind", "state", "subscribers", "aliased", "feed", "alias_feeds")

    def __init__(self, uri: str, kind: str, state: dict[str, Any]) -> None:
        self.uri = uri
        self.kind = kind
        self.state = state
        self.subscribers: set[Subscriber] = set()
        #: Who watches it under another name (``ahpd.host.kernel.alias``): alias URI -> subscribers.
        self.aliased: dict[str, set[Subscriber]] = {}
        #: Its actions as queued once for the subscribers (``ahpd.host.kernel.feed``),
        #: under its own name and under each alias watched.
        self.feed = Feed()
        self.alias_feeds: dict[str, Feed] = {}

    def snapshot(self, server_seq: int) -> dict[str, Any]:
        return {"resource": self.uri, "state": self.state, "fromSeq": server_seq}


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- the replay buffer ------------------------------------------------------------

MAX_ENVELOPES = 1000


class Entry(NamedTuple):
    """One buffered envelope (a tuple: one is made per action)."""

    server_seq: int
    channel: str
    envelope: dict  # the ActionEnvelope as sent
    weight: int  # length of the frame text it went out as


class ReplayBuffer:
    """What a client that dropped can be handed back.

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


class ActionBus:
    def __init__(self, sequencer: Sequencer, replay_bytes: Callable[[], int]) -> None:
        self.sequencer = sequencer
        # a restarted host (a serverSeq kept from before) answers older clients with snapshots
        self.replay = ReplayBuffer(replay_bytes, floor=sequencer.current or None)
        self.channels: dict[str, Channel] = {}
        #: Second names of open channels, by the name (``Host.ensure_channel`` adds them).
        self.aliases: dict[str, Alias] = {}
        #: Told ``(channel, action)`` after each action that moved state (telemetry).
        self.observers: list[Callable[[str, dict[str, Any]], None]] = []

    @property
    def server_seq(self) -> int:
        return self.sequencer.current

    # -- channels ------------------------------------------------------------

    def open(self, uri: str, kind: str, state: dict[str, Any]) -> Channel:
        if uri in self.channels:
            raise ValueError(f"channel {uri} already exists")
        channel = self.channels[uri] = Channel(uri, kind, state)
        return channel

    def close(self, uri: str) -> None:
        """The channel is gone; its subscribers stop hearing about it."""
        channel = self.channels.pop(uri, None)
        for name in channel.aliased if channel is not None else ():
            self.aliases.pop(name, None)

    def has(self, uri: str) -> bool:
        """Whether ``uri`` names an open channel, by its own name or an alias."""
        return uri in self.channels or (uri in self.aliases and self.aliases[uri].target in self.channels)

    def subscribe(self, uri: str, subscriber: Subscriber) -> dict[str, Any] | None:
        """Watch ``uri`` and return its snapshot, or None if there is no such
        channel. Atomic: no action can fall between the two. Under an alias,
        the snapshot is spelled from it."""
        channel = self.channels.get(uri)
        if channel is None:
            alias = self.aliases.get(uri)
            channel = self.channels.get(alias.target) if alias is not None else None
            if alias is None or channel is None:
                return None
            channel.aliased.setdefault(uri, set()).add(subscriber)
            return {"resource": uri, "state": alias.out(channel.state), "fromSeq": self.server_seq}
        channel.subscribers.add(subscriber)
        return channel.snapshot(self.server_seq)

    def unsubscribe(self, uri: str, subscriber: Subscriber) -> None:
        channel = self.channels.get(uri)
        if channel is not None:
            channel.subscribers.discard(subscriber)
            _unfollow(subscriber, channel.feed)
            return
        alias = self.aliases.get(uri)
        channel = self.channels.get(alias.target) if alias is not None else None
        if channel is not None and uri in channel.aliased:
            channel.aliased[uri].discard(subscriber)
            feed = channel.alias_feeds.get(uri)
            if feed is not None:
                _unfollow(subscriber, feed)
            if not channel.aliased[uri]:
                del channel.aliased[uri]
                del self.aliases[uri]
                channel.alias_feeds.pop(uri, None)

    # -- actions -------------------------------------------------------------

    def reduce(self, uri: str, action: dict[str, Any]) -> dict[str, Any]:
        """What ``action`` would make of the channel's state (nothing applied)."""
        channel = self.channels[uri]
        return reducers.reduce(channel.kind, channel.state, action)

    def emit(
        self,
        uri: str,
        action: dict[str, Any],
        origin: dict[str, Any] | None = None,
        *,
        new_state: dict[str, Any] | None = None,
        read: bool = False,
    ) -> int | None:
        """Apply ``action`` to channel ``uri`` and tell its subscribers.

        Returns the serverSeq it was given, or None when it changed nothing
        or cannot be encoded, or its channel is gone, or no serverSeq can be
        handed out (the reservation on disk is spent; then nobody is told,
        nothing moves and no number is spent). ``new_state`` is the already reduced state, when
        the caller had to look at it first. ``read``: the action and origin are
        what a client's frame was read as (``jsonrpc.notification_frame_of_read``).
        """
        channel = self.channels.get(uri)
        if channel is None:
            # Said by a task that outlived its channel (a turn ending after
            # its chat was disposed): there is nobody left to tell.
            log.debug("%s is closed; %s dropped", uri, action.get("type"))
            return None
        if new_state is None:
            new_state = reducers.reduce(channel.kind, channel.state, action)
        if new_state is channel.state:
            return None
        if self.sequencer.unavailable() is not None:  # no number it could not repeat: logged there
            log.debug("%s on %s dropped: no serverSeq can be handed out", action.get("type"), uri)
            return None
        seq = self.sequencer.current + 1  # framed before anything moves
        envelope: dict[str, Any] = {"channel": uri, "action": action, "serverSeq": seq}
        if origin is not None:
            envelope["origin"] = origin
        # Framed only for whoever reads it: under its own name when someone
        # watches it so or nobody watches it under another (the frame is
        # still what says whether it has a JSON form), and once per alias
        # watched. The same values renamed, so one frame made is all made.
        frames: list[tuple[set[Subscriber], str, Feed]] = []
        frame = notification_frame_of_read if read else notification_frame
        try:
            if channel.subscribers or not channel.aliased:
                frames.append((channel.subscribers, frame("action", envelope), channel.feed))
            for name, watching in channel.aliased.items():  # the same action, spelled from each alias
                alias = self.aliases[name]
                renamed = {**envelope, "channel": name, "action": alias.out(action)}
                feed = channel.alias_feeds.get(name)
                if feed is None:
                    feed = channel.alias_feeds[name] = Feed()
                frames.append((watching, frame("action", renamed), feed))
        except NotJson as err:
            log.error("%s on %s has no JSON form (%s); dropped, nothing moved", action.get("type"), uri, err)
            return None
        channel.state = new_state
        taken = self.sequencer.next()
        assert taken == seq
        # Weighed by the first frame it went out as.
        self.replay.append(Entry(seq, uri, envelope, len(frames[0][1])))
        for watching, text, feed in frames:
            if watching:
                self._broadcast(feed, watching, text)
        for observe in self.observers:
            observe(uri, action)
        return seq

    def answer(
        self,
        subscriber: Subscriber,
        uri: str,
        action: dict[str, Any],
        origin: dict[str, Any],
        rejection: str | None = None,
    ) -> None:
        """Tell one dispatcher what became of its action without moving any
        state: a refusal (with ``rejection``) or an action that changed
        nothing. Sent at the current serverSeq and never buffered."""
        envelope: dict[str, Any] = {
            "channel": uri,
            "action": action,
            "serverSeq": self.server_seq,
            "origin": origin,
        }
        if rejection is not None:
            envelope["rejectionReason"] = rejection
        try:
            subscriber.send(notification_frame("action", envelope))
        except NotJson as err:
            log.error("the answer to %s on %s has no JSON form (%s); not sent", action.get("type"), uri, err)

    def notify(self, subscribers: Iterable[Subscriber], method: str, params: dict[str, Any]) -> None:
        """A protocol notification: carries no serverSeq, is never replayed."""
        try:
            text = notification_frame(method, params)
        except NotJson as err:
            log.error("%s has no JSON form (%s); not sent", method, err)
            return
        self._fan_out(subscribers, text)

    @staticmethod
    def _broadcast(feed: Feed, subscribers: set[Subscriber], text: str) -> None:
        """Queue a channel's frame for its subscribers: once, on its feed,
        when they all follow it and no limit can bite; otherwise to each
        of them as it is done for any frame (``_fan_out``), which decides who
        is behind and who is closed to make room exactly as it always has."""
        if not subscribers:
            return
        frame = SharedFrame(text)
        size = frame.size
        followers = feed.followers
        if len(followers) != len(subscribers):  # someone new, or queued something else meanwhile
            for subscriber in list(subscribers):
                follow = getattr(subscriber, "follow", None)
                if follow is None or not follow(feed):
                    break
        if len(followers) == len(subscribers) and not feed.may_bite(size):
            feed.push(frame, size)
            return
        for follower in list(followers):  # what they follow is theirs now, in order
            follower.unfollow(feed)
        for subscriber in list(subscribers):
            subscriber.send(frame, size)

    @staticmethod
    def _fan_out(subscribers: Iterable[Subscriber], text: str) -> None:
        frame = SharedFrame(text)  # measured once, each transport's bytes built once
        size = frame.size
        for subscriber in list(subscribers):
            subscriber.send(frame, size)


def _unfollow(subscriber: Subscriber, feed: Feed) -> None:
    """``subscriber`` stops watching: it stops following the feed (what is queued still goes out)."""
    unfollow = getattr(subscriber, "unfollow", None)
    if unfollow is not None:
        unfollow(feed)
