"""A burst of actions against the serverSeq reservation's write.

The host numbers actions inside a block reserved on disk and renews it in a
thread. These tests hold that write the way a slow fsync would (a thread
waiting on a ``threading.Event``), spend the block meanwhile through the
real host path, and check that a healthy disk never makes the host refuse
a client's action or drop its own change for want of a number, that the
reservation grows with the pace, and that a disk that refuses the write
still refuses with the reason.
"""

from __future__ import annotations

import errno
import threading
from typing import Any

import pytest
import trio

from ahpd.host.assembly import Host
from ahpd.host.kernel import seqstore
from ahpd.host.kernel.seqstore import BLOCK, MAX_SEQ, MemorySeqStore, Sequencer

from ...waits import _frames, _tasks, eventually, until_step
from ..harness import connect

ROOT = "ahp-root://"


class HeldStore(MemorySeqStore):
    """A reservation store whose writes wait until the test lets them land,
    or fail the way a full disk does."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        #: Set once a write waits at the closed gate.
        self.held = threading.Event()
        self.full = False
        self.written: list[int] = []

    def reserve(self, upto: int) -> None:
        if not self.gate.is_set():
            self.held.set()
            self.gate.wait()
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().reserve(upto)
        self.written.append(upto)


@pytest.fixture
async def held():
    store = HeldStore()
    host = Host(seq_store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(host.bus.sequencer.run)
        yield host, store, nursery
        store.gate.set()  # no worker thread left waiting
        nursery.cancel_scope.cancel()


def spend(host: Host, count: int) -> None:
    """``count`` changes the host itself says, in one go (no checkpoint)."""
    for _ in range(count):
        assert host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": host.bus.server_seq + 1})


def waiting_in(name: str) -> bool:
    """Whether some task of this run is suspended inside a function ``name``."""
    return any(frame.f_code.co_name == name for task in _tasks() for frame in _frames(task))


async def test_a_client_action_waits_for_the_reservation_write_and_the_block_grows(held) -> None:
    host, store, nursery = held
    sequencer = host.bus.sequencer
    a = await connect(nursery, host, "a")
    b = await connect(nursery, host, "b")
    await a.initialize("a")
    await b.initialize("b", subscriptions=())
    assert sequencer.reserved == BLOCK
    store.gate.clear()
    # Past half the block the renewal starts, and its write is held...
    spend(host, BLOCK // 2 + 10)
    await eventually(store.held.is_set)
    # ...while the rest of the block goes, faster than a quarter block per write.
    spend(host, sequencer.reserved - sequencer.current)
    assert sequencer.current == sequencer.reserved == BLOCK
    assert len(a.pending()) == BLOCK  # every change the host said reached its subscriber
    a.dispatch(ROOT, {"type": "root/configChanged", "config": {"autoReplyEnabled": True}})
    got: list[dict[str, Any]] = []

    def waiting_or_answered() -> bool:
        got.extend(a.pending())
        return bool(got) or waiting_in("numbered")

    await until_step(waiting_or_answered)
    assert got == [], got  # not refused: it waits for the write
    assert "result" in await b.call("ping")  # nobody else waits
    store.gate.set()
    env = (await a.frame())["params"]
    assert "rejectionReason" not in env, env["rejectionReason"]
    assert env["serverSeq"] == BLOCK + 1 and host.config("autoReplyEnabled") is True
    # More than a quarter of the block went while one write ran: the next
    # reservation takes twice as many, at once.
    assert sequencer.block == 2 * BLOCK
    await eventually(lambda: sequencer.reserved >= BLOCK + 2 * BLOCK)
    assert store.written[-1] == sequencer.reserved


async def test_a_host_change_is_not_dropped_when_the_block_runs_out_before_the_renewal(held) -> None:
    host, store, _ = held
    sequencer = host.bus.sequencer
    # All in one go: the renewal task has not run yet when the block is spent.
    spend(host, BLOCK + 10)
    assert sequencer.current == BLOCK + 10 and sequencer.reserved > sequencer.current
    assert sequencer.unavailable() is None
    assert sequencer.block == 2 * BLOCK  # spent before its renewal landed: larger from now on


async def test_a_hung_write_stalls_the_event_loop_briefly_then_the_host_change_is_dropped(
    held, monkeypatch, caplog
) -> None:
    host, store, _ = held
    sequencer = host.bus.sequencer
    monkeypatch.setattr(seqstore, "STALL", 0.05)
    store.gate.clear()
    spend(host, BLOCK // 2 + 10)
    await eventually(store.held.is_set)
    spend(host, sequencer.reserved - sequencer.current)
    # The write never lands while the change is said: not waited for past STALL.
    assert host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 0}) is None
    assert sequencer.current == BLOCK
    # Nor waited for again while it hangs: the next change is dropped at once.
    assert host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 1}) is None
    assert len(caplog.messages) == len(set(caplog.messages))  # each said once
    store.gate.set()
    await until_step(lambda: sequencer.reserved > BLOCK)
    assert host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 0}) == BLOCK + 1


async def test_a_full_disk_still_refuses_with_the_reason_past_the_block(held) -> None:
    host, store, nursery = held
    sequencer = host.bus.sequencer
    a = await connect(nursery, host, "a")
    await a.initialize("a")
    store.full = True
    spend(host, BLOCK)
    await until_step(lambda: sequencer.failing is not None)
    assert sequencer.reserved == BLOCK == sequencer.current
    assert len(a.pending()) == BLOCK
    a.dispatch(ROOT, {"type": "root/configChanged", "config": {"autoReplyEnabled": True}})
    env = (await a.frame())["params"]
    assert "No space left on device" in env["rejectionReason"]
    assert env["serverSeq"] == BLOCK and host.config("autoReplyEnabled") is not True
    # The host's own change is dropped, nothing moves, no number passes the reservation.
    assert host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 5}) is None
    assert sequencer.current == BLOCK and sequencer.block == BLOCK
    store.full = False
    await until_step(lambda: sequencer.failing is None)
    a.dispatch(ROOT, {"type": "root/configChanged", "config": {"autoReplyEnabled": True}})
    env = (await a.frame())["params"]
    assert "rejectionReason" not in env and env["serverSeq"] == BLOCK + 1


def test_the_reservation_never_passes_the_largest_safe_number() -> None:
    sequencer = Sequencer(MemorySeqStore(MAX_SEQ - 10))
    assert sequencer.reserved == MAX_SEQ
