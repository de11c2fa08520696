"""Resource watches share one notifier: many watches are no threads, a
folder several watches cover is one kernel watch, released with its last
watch; a recursive watch follows folders made, moved and removed under it.

A real daemon in this process (so /proc/self shows its threads and its
inotify watches), real clients over a real WebSocket, real files in
``tmp_path``.
"""

from __future__ import annotations

import os
import shutil
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from ahpd.ports import notify
from tests.inotify import inotify_instances, kernel_watches, threads_of

from .helpers import Rpc, daemon_in_process, eventually, fits, rpc

ROOT = "ahp-root://"


async def _watch(client: Rpc, folder: Path, recursive: bool = False, **more: Any) -> str:
    reply = await client.call(
        "createResourceWatch", {"channel": ROOT, "uri": folder.as_uri(), "recursive": recursive, **more}
    )
    assert "result" in reply, reply
    return reply["result"]["channel"]


async def _heard(client: Rpc, wanted: dict[str, set[str]]) -> dict[str, list[dict[str, str]]]:
    """Changes per channel until each channel in ``wanted`` has reported each of its URIs."""
    got: dict[str, list[dict[str, str]]] = {channel: [] for channel in wanted}
    while any(not uris <= {i["uri"] for i in got[ch]} for ch, uris in wanted.items()):
        note = await client.next_note()
        if note.get("method") == "action" and note["params"]["channel"] in got:
            action = note["params"]["action"]
            fits("/$defs/ResourceWatchChangedAction", action)
            got[note["params"]["channel"]].extend(action["changes"]["items"])
    return got


async def test_200_watches_share_one_notifier_and_no_thread_and_let_go_of_the_kernel(tmp_path: Path) -> None:
    """Four connections each watch the same 50 folders: 200 watches, one
    inotify instance, 50 kernel watches and no thread of their own (before:
    an instance, a notify thread and a worker thread each, 400 threads, and
    past the kernel's 128 instances a watch could not be made at all). Each
    watch hears its folder, a file read is answered meanwhile, and the
    kernel's watches go with the last watch of their folder."""
    folders = []
    for n in range(50):
        folder = tmp_path / "w" / f"{n:02}"
        folder.mkdir(parents=True)
        folders.append(folder)
    small = tmp_path / "small.txt"
    small.write_text("small")
    async with daemon_in_process(tmp_path / "data", "--sessions", "memory") as daemon:
        threads_before, instances_before = threads_of(), inotify_instances()
        async with AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(rpc(daemon.url)) for _ in range(4)]
            channels: list[list[str]] = []
            for n, client in enumerate(clients):
                await client.initialize(f"watcher-{n}")
                channels.append([await _watch(client, folder) for folder in folders])
            assert len(daemon.host.watches.watches) == 200
            assert inotify_instances() - instances_before == 1
            assert kernel_watches() == 50
            assert threads_of() - threads_before < 20, f"{threads_of() - threads_before} threads for 200 watches"

            # Every watch hears its own folder, through the one notifier.
            listener = clients[3]
            for channel in channels[3]:
                await listener.call("subscribe", {"channel": channel})
            for folder in folders:
                (folder / "new.txt").write_text("x")
            read = await clients[0].call("resourceRead", {"channel": ROOT, "uri": small.as_uri()}, timeout=15)
            assert read["result"]["data"] == "small", read
            heard = await _heard(
                listener, {channel: {(f / "new.txt").as_uri()} for channel, f in zip(channels[3], folders, strict=True)}
            )
            for channel, folder in zip(channels[3], folders, strict=True):
                assert {i["uri"] for i in heard[channel]} == {(folder / "new.txt").as_uri()}, heard[channel]

            # Three connections go: their watches go, the folders stay watched for the fourth.
            for client in clients[:3]:
                await client.ws.aclose()
            await eventually(lambda: len(daemon.host.watches.watches) == 50)
            assert kernel_watches() == 50
            # The last one unsubscribing lets go of every kernel watch.
            for channel in channels[3][:25]:
                await listener.notify("unsubscribe", {"channel": channel})
            await eventually(lambda: len(daemon.host.watches.watches) == 25)
            assert kernel_watches() == 25
        await eventually(lambda: not daemon.host.watches.watches)
        assert kernel_watches() == 0


async def test_a_recursive_watch_follows_folders_made_moved_and_removed(tmp_path: Path) -> None:
    """Folders made in one go under a recursive watch are watched and what
    they held when first seen is reported; a folder moved within the tree is
    heard at its new place, one moved out no longer heard, and neither it
    nor an excluded folder holds a kernel watch."""
    tree = tmp_path / "tree"
    (tree / "node_modules" / "dep").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    async with daemon_in_process(tmp_path / "data", "--sessions", "memory") as daemon, rpc(daemon.url) as c:
        await c.initialize("w")
        channel = await _watch(c, tree, recursive=True, excludes={"items": ["node_modules"]})
        await c.call("subscribe", {"channel": channel})
        assert kernel_watches() == 1  # the tree; node_modules is excluded, so never watched

        # mkdir -p and a write at once: the file lands before its folders' watches exist.
        deep = tree / "a" / "b" / "c"
        deep.mkdir(parents=True)
        (deep / "f.txt").write_text("f")
        await _heard(c, {channel: {(tree / "a").as_uri(), (deep / "f.txt").as_uri()}})
        await eventually(lambda: kernel_watches() == 4)
        (deep / "g.txt").write_text("g")  # now heard through c's own watch
        await _heard(c, {channel: {(deep / "g.txt").as_uri()}})

        # Moved within the tree: heard at its new place.
        os.rename(tree / "a", tree / "moved")
        await _heard(c, {channel: {(tree / "a").as_uri(), (tree / "moved").as_uri()}})
        (tree / "moved" / "b" / "c" / "h.txt").write_text("h")
        await _heard(c, {channel: {(tree / "moved" / "b" / "c" / "h.txt").as_uri()}})
        assert kernel_watches() == 4

        # Moved out: its watches go, nothing in it is heard any more.
        shutil.move(tree / "moved", outside / "moved")
        await _heard(c, {channel: {(tree / "moved").as_uri()}})
        await eventually(lambda: kernel_watches() == 1)
        (outside / "moved" / "b" / "c" / "quiet.txt").write_text("not ours")
        (tree / "node_modules" / "dep" / "skip.js").write_text("excluded")
        (tree / "last.txt").write_text("last")
        got = await _heard(c, {channel: {(tree / "last.txt").as_uri()}})
        assert all("quiet" not in i["uri"] and "node_modules" not in i["uri"] for i in got[channel]), got

        # A watch on a file hears that file only, and an editor's save (a new file renamed over it).
        target = tree / "doc.md"
        target.write_text("one")
        (tree / "other.md").write_text("other")
        single = await _watch(c, target)
        await c.call("subscribe", {"channel": single})
        temp = tree / ".doc.md.swp"
        temp.write_text("two")
        os.replace(temp, target)
        (tree / "other.md").write_text("changed")
        got = await _heard(c, {single: {target.as_uri()}})
        assert {i["uri"] for i in got[single]} == {target.as_uri()}, got
        assert kernel_watches() == 1  # the file's folder is the tree, already watched


async def test_a_notifier_that_fails_releases_its_watches_and_the_next_watch_works(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """The notifier is shared, so its failure ends every watch: each is
    released (its channel gone), the failure logged, the daemon goes on
    serving, and the next createResourceWatch starts a notifier that works."""
    broken = {"once": True}
    read = notify.inotify_simple.INotify.read

    def failing_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        if broken.pop("once", False):
            raise OSError(5, "Input/output error (injected)")
        return read(self, *args, **kwargs)

    monkeypatch.setattr(notify.inotify_simple.INotify, "read", failing_read)
    async with daemon_in_process(tmp_path / "data", "--sessions", "memory") as daemon, rpc(daemon.url) as c:
        await c.initialize("w")
        channel = await _watch(c, tmp_path)
        await c.call("subscribe", {"channel": channel})
        (tmp_path / "wakes-it.txt").write_text("x")
        await eventually(lambda: not daemon.host.watches.watches)
        assert "the file notifier failed" in caplog.text
        gone = await c.call("subscribe", {"channel": channel})
        assert gone["error"]["code"] == -32008, gone
        assert kernel_watches() == 0 and inotify_instances() == 0

        again = await _watch(c, tmp_path)
        await c.call("subscribe", {"channel": again})
        (tmp_path / "heard.txt").write_text("y")
        await _heard(c, {again: {(tmp_path / "heard.txt").as_uri()}})


async def test_a_watch_past_the_kernels_limit_is_refused_naming_it_and_leaves_no_kernel_watch(
    tmp_path: Path, monkeypatch
) -> None:
    """The kernel refuses the third folder of a recursive tree (its
    ``max_user_watches`` reached, injected): the watch is refused with
    -32009 naming the limit, the two folders already watched are let go of,
    and the next watch, once there is room, works."""
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    add_watch = notify.inotify_simple.INotify.add_watch
    room = {"left": 2}

    def limited(self: Any, path: Any, mask: int) -> int:
        if room["left"] <= 0:
            raise OSError(28, "No space left on device")  # ENOSPC: what inotify_add_watch says at the limit
        room["left"] -= 1
        return int(add_watch(self, path, mask))

    monkeypatch.setattr(notify.inotify_simple.INotify, "add_watch", limited)
    async with daemon_in_process(tmp_path / "data", "--sessions", "memory") as daemon, rpc(daemon.url) as c:
        await c.initialize("w")
        reply = await c.call("createResourceWatch", {"channel": ROOT, "uri": tree.as_uri(), "recursive": True})
        assert reply["error"]["code"] == -32009, reply
        assert "fs.inotify.max_user_watches" in reply["error"]["message"] and tree.as_uri() in reply["error"]["message"]
        assert not daemon.host.watches.watches and kernel_watches() == 0
        room["left"] = 10
        channel = await _watch(c, tree, recursive=True)
        await c.call("subscribe", {"channel": channel})
        (tree / "a" / "b" / "f.txt").write_text("f")
        await _heard(c, {channel: {(tree / "a" / "b" / "f.txt").as_uri()}})
