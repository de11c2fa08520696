"""A channel's frames queued once for all its subscribers (``ahpd.host.kernel.feed``)
decide exactly what queuing them on each subscriber decided.

Two worlds run the same seeded sequence side by side: in one the bus queues
a channel's frames on its feed (``ActionBus._broadcast``), in the other on
each subscriber's connection one by one (``ActionBus._fan_out``, what every
frame went through before feeds). Between the channels' frames come answers
to one client, subscriptions and unsubscriptions, and writes that a test
lets through one at a time (the peers read only when told). After every
step both worlds must agree on everything a client or the log could see:
which connections are closed, with what code and reason, how many bytes
each has queued, the shared budget's total and members, and every frame
each connection has written, in order.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, MutableSet
from typing import Any

import pytest
import trio
import trio.testing

from ahpd.host.kernel.bus import ActionBus
from ahpd.host.kernel.host import Peer
from ahpd.host.kernel.seqstore import MemorySeqStore, Sequencer
from ahpd.transport import base
from ahpd.transport.base import Connection, QueueBudget

from .conftest import LIMIT

CHANNELS = ("ahp-root://", "demo:/a", "demo:/b")


class Reader(Connection):
    """A transport whose peer reads one batch each time it is allowed to."""

    def __init__(self, name: str, limit: Callable[[], int], budget: QueueBudget) -> None:
        super().__init__(name, queue_limit=limit, budget=budget)
        self.written: list[str] = []
        self.credits = 0
        self._credit = trio.lowlevel.ParkingLot()

    async def _read_frame(self) -> str | None:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def _write_frames(self, frames: list[str]) -> None:
        while not self.credits:
            await self._credit.park()
        self.credits -= 1
        self.written.extend(str(f) for f in frames)

    def allow(self) -> None:
        self.credits += 1
        self._credit.unpark_all()


class InOrder(MutableSet):
    """A set that iterates in the order things were added, so that both
    worlds offer each frame to the subscribers, and pick among connections
    with as much queued, in the same order (a set of peers or connections
    iterates in an order of their addresses)."""

    def __init__(self) -> None:
        self._items: dict[Any, None] = {}

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: Any) -> None:
        self._items[item] = None

    def discard(self, item: Any) -> None:
        self._items.pop(item, None)


class World:
    def __init__(self, feeds: bool, clients: int, limit: int, budget: int) -> None:
        self.feeds = feeds
        self.budget = QueueBudget(budget)
        self.budget.members = InOrder()  # type: ignore[assignment]  # the largest queues tie: the first one is closed
        self.bus = ActionBus(Sequencer(MemorySeqStore()), lambda: 2**20)
        for uri in CHANNELS[1:]:
            self.bus.open(uri, "chat", {}).subscribers = InOrder()  # type: ignore[assignment]
        limit_of_all = lambda: limit  # noqa: E731 - one limit for every client, as a server has
        self.conns = [Reader(f"c{n}", limit_of_all, self.budget) for n in range(clients)]
        self.peers = [Peer(conn, n) for n, conn in enumerate(self.conns)]

    def broadcast(self, uri: str, text: str) -> None:
        channel = self.bus.channels[uri]
        if self.feeds:
            self.bus._broadcast(channel.feed, channel.subscribers, text)
        else:
            self.bus._fan_out(channel.subscribers, text)

    def seen(self) -> Any:
        return (
            [(c.closed, c.close_code, c.close_reason, c.queued_bytes, list(c.written)) for c in self.conns],
            self.budget.total,
            sorted(c.name for c in self.budget.members),
        )


async def run_steps(worlds: list[World], rng: random.Random, clients: int) -> None:
    for step in range(600):
        op = rng.random()
        who = rng.randrange(clients)
        if op < 0.5:
            uri = CHANNELS[1] if rng.random() < 0.75 else CHANNELS[2]
            text = f"{step}:{uri}:" + "x" * rng.choice((10, 40, 150, 400, 2_500))
            for world in worlds:
                world.broadcast(uri, text)
        elif op < 0.58:
            text = f"{step}:answer:" + "y" * rng.randrange(5, 300)
            assert len({world.peers[who].send(text) for world in worlds}) == 1
        elif op < 0.62:
            uri = rng.choice(CHANNELS[1:])
            for world in worlds:
                if world.peers[who] in world.bus.channels[uri].subscribers:
                    world.bus.unsubscribe(uri, world.peers[who])
                else:
                    world.bus.subscribe(uri, world.peers[who])
        else:
            for world in worlds:
                world.conns[who].allow()
        await trio.testing.wait_all_tasks_blocked()
        for world in worlds:  # a closed connection's peer leaves (``Host.serve_connection``)
            for peer in world.peers:
                if peer.conn.closed:
                    for uri in CHANNELS[1:]:
                        world.bus.unsubscribe(uri, peer)
        assert worlds[0].seen() == worlds[1].seen(), f"step {step}"


@pytest.mark.parametrize("seed", range(6))
async def test_a_feed_queues_what_sending_to_each_subscriber_queued(monkeypatch, seed):
    monkeypatch.setattr(base, "CLOSE_TIMEOUT", 0.1)
    rng = random.Random(seed)
    clients = 8
    worlds = [World(feeds, clients, limit=12_000, budget=28_000) for feeds in (True, False)]
    with trio.fail_after(LIMIT * 4):
        async with trio.open_nursery() as nursery:
            for world in worlds:
                for conn in world.conns:
                    assert await nursery.start(conn._run_io)
                for peer in world.peers[: clients - 2]:  # two join later
                    world.bus.subscribe(CHANNELS[1], peer)
                for peer in world.peers[::2]:
                    world.bus.subscribe(CHANNELS[2], peer)
            try:
                await run_steps(worlds, rng, clients)
            finally:
                for world in worlds:
                    for conn in world.conns:
                        conn.close()
                        conn.credits = 10**6
                        conn.allow()
    feeds_world, plain_world = worlds
    assert feeds_world.seen() == plain_world.seen()
    # Not a test of nothing: limits did bite, frames did go out, and through feeds.
    assert any(c.close_code == 1008 for c in plain_world.conns)
    assert any("server send queue full" == c.close_reason for c in plain_world.conns)
    assert any(c.written for c in plain_world.conns)
    assert feeds_world.bus.channels[CHANNELS[1]].feed.cum > 0  # the feed's own path was taken


async def test_a_frame_pushed_to_followers_is_queued_once_and_written_to_each():
    world = World(True, clients=5, limit=10**6, budget=10**7)
    uri = CHANNELS[1]
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            for conn in world.conns:
                assert await nursery.start(conn._run_io)
            try:
                await one_push_each(world, uri)
            finally:
                for conn in world.conns:
                    conn.close()
                    conn.credits = 10**6
                    conn.allow()


async def one_push_each(world: World, uri: str) -> None:
    for peer in world.peers:
        world.bus.subscribe(uri, peer)
    feed = world.bus.channels[uri].feed
    texts = [f"frame {n}" for n in range(50)]
    for text in texts:
        world.broadcast(uri, text)
    # Held once by the feed; no connection holds a copy of its own.
    assert feed.frames == texts and all(not c._queue for c in world.conns)
    assert [c.queued_bytes for c in world.conns] == [sum(map(len, texts))] * 5
    assert world.budget.total == 5 * sum(map(len, texts))
    world.peers[2].send("an answer")  # queued after the frames it follows
    world.broadcast(uri, "after")
    for conn in world.conns:
        conn.credits = 10**6
        conn.allow()
    await trio.testing.wait_all_tasks_blocked()
    for n, conn in enumerate(world.conns):
        assert conn.written == texts + (["an answer"] if n == 2 else []) + ["after"]
        assert conn.queued_bytes == 0
    assert world.budget.total == 0
    assert feed.frames == []  # everyone took everything: nothing is kept
