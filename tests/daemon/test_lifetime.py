"""No task outlives the thing it belongs to.

The host runs inside the test's own trio run, over a real WebSocket on
127.0.0.1; the trio task tree is walked to count what is left after a client
leaves and after the host is shut down.
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

from ahpd.host.assembly import Host
from tests.host.live import serve

from .helpers import eventually, rpc, until_tasks_exit


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


async def test_nothing_is_left_after_a_client_leaves_or_the_host_stops() -> None:
    baseline = len(all_tasks())
    children_before = child_processes()
    host = Host()
    async with trio.open_nursery() as nursery:
        listening = await serve(nursery, host)
        serving = len(all_tasks())
        url = f"ws://127.0.0.1:{listening.port}/"
        async with rpc(url) as client:
            await client.initialize()
            assert len(host.peers) == 1
            assert len(all_tasks()) > serving
        await until_tasks_exit(lambda: not host.peers and len(all_tasks()) == serving)
        # A client that is still connected when the host stops.
        async with rpc(url) as client:
            await client.initialize()
            nursery.cancel_scope.cancel()
    assert len(all_tasks()) == baseline
    assert not host.peers
    assert child_processes() == children_before


async def test_disposing_a_session_and_stopping_the_host_end_every_agent(tmp_path) -> None:
    import uuid

    from ahpd.backends.registry import build_backends

    from .helpers import dispatch, is_action, start_turn, until

    children_before = set(child_processes())
    # The demo agent alone: another backend's boot probe would be a child too.
    host = Host(backends={"demo": build_backends({}, [], tmp_path)["demo"]})
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        listening = await serve(nursery, host)
        async with rpc(f"ws://127.0.0.1:{listening.port}/") as client:
            await client.initialize()
            first, second = (f"ahp-session:/{uuid.uuid4()}" for _ in range(2))
            for seq, uri in enumerate((first, second), 1):
                running = set(child_processes())
                reply = await client.call(
                    "createSession", {"channel": uri, "workingDirectories": [tmp_path.as_uri()]}, timeout=60
                )
                assert reply["result"] is None
                assert set(child_processes()) <= running  # no agent before a turn (a boot probe may have ended)
                state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                await client.call("subscribe", {"channel": state["defaultChat"]})
                await dispatch(client, state["defaultChat"], start_turn("hello"), seq)
                await until(client, is_action("chat/turnComplete", state["defaultChat"]))
            assert len(set(child_processes()) - children_before) == 2  # one agent per chat
            await client.call("disposeSession", {"channel": first})
            await eventually(lambda: len(set(child_processes()) - children_before) == 1)
        nursery.cancel_scope.cancel()
    assert set(child_processes()) - children_before == set()


async def test_a_boot_probe_ends_with_the_host(tmp_path) -> None:
    from ahpd.backends.registry import build_backends

    children_before = set(child_processes())
    backends = build_backends({}, [], tmp_path)  # with Claude Code's probe when installed
    host = Host(backends=backends)
    probing = [backend for backend in backends.values() if hasattr(backend, "probe")]
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        host.sessions.probe_soon()  # as the first client's initialize does
        # Each probe has started its process (the ACP probe's, Claude Code's CLI).
        await eventually(lambda: len(set(child_processes()) - children_before) >= len(probing))
        nursery.cancel_scope.cancel()
    assert set(child_processes()) - children_before == set()
