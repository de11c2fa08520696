"""The ``resource*`` family over an in-memory connection to a running Host:
a pending edit's content is served until its call is settled; ``file:`` URIs
reach the machine through the filesystem port; a watch is one task in the
watches' nursery, gone (task and kernel watch) once released, whether by
the last unsubscribe, a disconnect or shutdown. The files are real, in
``tmp_path``; the daemon-level tests are tests/daemon/test_resources.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import trio

from ahpd.host.assembly import Host
from tests.inotify import kernel_watches
from tests.waits import until_tasks_exit

from ..harness import connect

ROOT = "ahp-root://"


async def _until_released(host: Host) -> None:
    """The host's watch tasks have ended, and the kernel holds no watch of theirs."""
    await until_tasks_exit(lambda: not host.watches.tasks)
    assert kernel_watches() == 0  # removed when released, not when the task got round to it


async def test_a_pending_edit_is_served_until_settled_and_files_anywhere(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("alpha\n")
    host = Host()
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        client = await connect(nursery, host)
        await client.initialize()
        # Only what resourceRead reads of the sessions: the edits waiting.
        host.sessions = SimpleNamespace(pending_edits={"ahp-edit://pending/call1": ("call1", str(target), "gamma\n")})
        after = await client.call("resourceRead", {"channel": ROOT, "uri": "ahp-edit://pending/call1"})
        assert after["result"] == {"data": "gamma\n", "encoding": "utf-8", "contentType": "text/plain"}
        before = await client.call("resourceRead", {"channel": ROOT, "uri": target.as_uri()})
        assert before["result"]["data"] == "alpha\n"
        written = await client.call(
            "resourceWrite", {"channel": ROOT, "uri": "ahp-edit://pending/call1", "data": "x", "encoding": "utf-8"}
        )
        assert written["error"]["code"] == -32009 and "ahp-edit://pending/call1" in written["error"]["message"]
        host.sessions.pending_edits.clear()  # the call was settled
        gone = await client.call("resourceRead", {"channel": ROOT, "uri": "ahp-edit://pending/call1"})
        assert gone["error"]["code"] == -32008 and "settled" in gone["error"]["message"]
        host.sessions = None
        nursery.cancel_scope.cancel()


async def test_a_watch_is_one_task_released_by_unsubscribe_disconnect_and_shutdown(tmp_path: Path) -> None:
    host = Host()
    async with trio.open_nursery() as outer:
        await outer.start(host.run)
        first = await connect(outer, host, "first")
        await first.initialize("first")
        second = await connect(outer, host, "second")
        await second.initialize("second")

        async def watch() -> str:
            reply = await first.call("createResourceWatch", {"channel": ROOT, "uri": tmp_path.as_uri()})
            return reply["result"]["channel"]

        # Two subscribers: the first leaving keeps it, the last releases it.
        channel = await watch()
        assert host.watches.tasks == 1 and kernel_watches() == 1
        await first.call("subscribe", {"channel": channel})
        await second.call("subscribe", {"channel": channel})
        first.notify("unsubscribe", {"channel": channel})
        await first.call("ping", {"channel": ROOT})
        assert host.watches.tasks == 1
        second.notify("unsubscribe", {"channel": channel})
        await _until_released(host)
        assert channel not in host.bus.channels
        gone = await second.call("subscribe", {"channel": channel})
        assert gone["error"]["code"] == -32008

        # Created and never subscribed: released when its creator goes.
        await watch()
        assert host.watches.tasks == 1
        first.close()
        await _until_released(host)

        # A subscriber that disconnects releases it too.
        third = await connect(outer, host, "third")
        await third.initialize("third")
        reply = await third.call("createResourceWatch", {"channel": ROOT, "uri": tmp_path.as_uri(), "recursive": True})
        await third.call("subscribe", {"channel": reply["result"]["channel"]})
        third.close()
        await _until_released(host)

        # Shutdown releases whatever is left, promptly.
        await second.call("createResourceWatch", {"channel": ROOT, "uri": tmp_path.as_uri()})
        assert host.watches.tasks == 1
        outer.cancel_scope.cancel()
    assert kernel_watches() == 0


async def test_a_watch_over_what_is_not_there_is_refused(tmp_path: Path) -> None:
    host = Host()
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        client = await connect(nursery, host)
        await client.initialize()
        missing = (tmp_path / "missing").as_uri()
        reply = await client.call("createResourceWatch", {"channel": ROOT, "uri": missing})
        assert reply["error"]["code"] == -32008 and missing in reply["error"]["message"]
        assert host.watches.tasks == 0
        nursery.cancel_scope.cancel()
