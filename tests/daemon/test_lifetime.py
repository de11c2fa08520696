"""No task outlives the thing it belongs to.

The host runs inside the test's own trio run, over a real WebSocket on
127.0.0.1; the trio task tree is walked to count what is left after a client
leaves and after the host is shut down.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import trio

from ahpd.host import Host
from ahpd.transport.websocket import serve_websocket

from .helpers import rpc


def all_tasks() -> list[trio.lowlevel.Task]:
    found = []

    def walk(task: trio.lowlevel.Task) -> None:
        found.append(task)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return found


def child_processes() -> list[int]:
    pids = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        text = (task / "children").read_text().split()
        pids += [int(p) for p in text]
    return pids


async def settle(predicate, timeout: float = 10) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def test_nothing_is_left_after_a_client_leaves_or_the_host_stops() -> None:
    baseline = len(all_tasks())
    children_before = child_processes()
    host = Host()
    async with trio.open_nursery() as nursery:
        listening = await nursery.start(partial(
            serve_websocket, host.serve_connection, host="127.0.0.1", port=0, token=None,
        ))
        serving = len(all_tasks())
        url = f"ws://127.0.0.1:{listening.port}/"
        async with rpc(url) as client:
            await client.initialize()
            assert len(host.peers) == 1
            assert len(all_tasks()) > serving
        await settle(lambda: not host.peers and len(all_tasks()) == serving)
        # A client that is still connected when the host stops.
        async with rpc(url) as client:
            await client.initialize()
            nursery.cancel_scope.cancel()
    assert len(all_tasks()) == baseline
    assert not host.peers
    assert child_processes() == children_before
