"""The notifier port on its own: listeners of one inotify instance over real
folders in ``tmp_path``, the kernel's watches counted in /proc."""

from __future__ import annotations

from pathlib import Path

import trio

from ahpd.ports import notify
from tests.inotify import inotify_instances, kernel_watches


async def _until_heard(listener: notify.Listener, wanted: set[tuple[int, str]]) -> set[tuple[int, str]]:
    heard: set[tuple[int, str]] = set()
    while not wanted <= heard:
        await listener.arrived()
        heard |= listener.take()
    return heard


async def test_listeners_share_a_folders_kernel_watch_until_the_last_lets_go(tmp_path: Path) -> None:
    notifier = notify.Notifier()
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.run)
        assert inotify_instances() == 1 and kernel_watches() == 0
        flat = notify.Listener(str(tmp_path), recursive=False)
        deep = notify.Listener(str(tmp_path), recursive=True)
        (tmp_path / "sub").mkdir()
        await notifier.listen(flat)
        await notifier.listen(deep)
        assert kernel_watches() == 2 == notifier.kernel_watches  # tmp_path (shared) and sub

        (tmp_path / "sub" / "f").write_text("f")
        (tmp_path / "g").write_text("g")
        f, g = str(tmp_path / "sub" / "f"), str(tmp_path / "g")
        await _until_heard(deep, {(notify.ADDED, f), (notify.ADDED, g)})
        # sub/f's event came first, on sub's watch, which flat does not use: not recursive.
        assert f not in {path for _, path in await _until_heard(flat, {(notify.ADDED, g)})}

        notifier.close_listener(deep)
        assert kernel_watches() == 1  # sub was deep's alone; tmp_path is still flat's
        notifier.close_listener(flat)
        assert kernel_watches() == 0
        nursery.cancel_scope.cancel()
    assert inotify_instances() == 0


async def test_a_file_listener_hears_its_file_through_its_folder(tmp_path: Path) -> None:
    target = tmp_path / "notes.md"
    target.write_text("one")
    notifier = notify.Notifier()
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.run)
        listener = notify.Listener(str(target), recursive=True)  # recursive means nothing for a file
        await notifier.listen(listener)
        assert listener.name == "notes.md" and kernel_watches() == 1
        (tmp_path / "other.md").write_text("other")
        target.unlink()
        heard = await _until_heard(listener, {(notify.DELETED, str(target))})
        assert {path for _, path in heard} == {str(target)}
        nursery.cancel_scope.cancel()
