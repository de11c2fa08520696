"""The filesystem port on a real filesystem: what leaves the fence is refused,
whatever is swapped in while we walk; writes are atomic; reads are bounded."""

from __future__ import annotations

import errno
import os
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from ahpd.ports import fs
from ahpd.ports.fs import Fence

SECRET = b"the secret outside\n"


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """``root`` (with ``sub/a.txt``) and, beside it, ``outside`` (with ``secret``)."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_bytes(b"inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    return root, outside


@pytest.fixture
def fence(tree: tuple[Path, Path]) -> Iterator[Fence]:
    with Fence(tree[0]) as opened:
        yield opened


def test_dot_dot_never_climbs_above_the_root(fence: Fence, tree: tuple[Path, Path]) -> None:
    root, _ = tree
    assert fence.read_bytes("sub/../sub/a.txt") == b"inside\n"
    assert fence.read_bytes(str(root / "sub" / "." / "a.txt")) == b"inside\n"
    for bad in (
        "../outside/secret",
        "sub/../../outside/secret",
        "..",
        str(root / ".." / "outside" / "secret"),
        str(root) + "-sibling/x",
        str(root.parent / "outside" / "secret"),
        "/etc/passwd",
    ):
        with pytest.raises(fs.Outside):
            fence.read_bytes(bad)
    with pytest.raises(fs.Outside):
        fence.write_bytes("../outside/new", b"x")
    assert not (root.parent / "outside" / "new").exists()


def test_an_absolute_link_is_followed_only_inside(fence: Fence, tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "in").symlink_to(root / "sub" / "a.txt")
    (root / "out").symlink_to(outside / "secret")
    (root / "outdir").symlink_to(outside)
    assert fence.read_bytes("in") == b"inside\n"
    assert fence.resolve("in") == root / "sub" / "a.txt"
    for bad in ("out", "outdir/secret"):
        with pytest.raises(fs.Outside, match="leads outside"):
            fence.read_bytes(bad)
    # The link itself is inside: it can be listed, deleted and moved, never used to reach out.
    assert fs.Entry("out", "symlink") in fence.list_dir()
    assert fence.stat("out", follow=False).kind == "symlink"
    fence.delete("outdir")
    assert outside.is_dir() and (outside / "secret").read_bytes() == SECRET


def test_a_chain_of_relative_links_that_leads_out_is_refused(fence: Fence, tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "deep").mkdir()
    (root / "deep" / "c").symlink_to("../../outside/secret")
    (root / "b").symlink_to("deep/c")
    (root / "a").symlink_to("b")
    with pytest.raises(fs.Outside):
        fence.read_bytes("a")
    # The same chain ending inside is followed.
    (root / "deep" / "c2").symlink_to("../sub/a.txt")
    (root / "b2").symlink_to("deep/c2")
    (root / "a2").symlink_to("b2")
    assert fence.read_bytes("a2") == b"inside\n"
    # A loop is refused, not followed for ever.
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    with pytest.raises(fs.Refused, match="too many"):
        fence.read_bytes("loop1")
    # Writing through the outward chain creates nothing outside.
    (root / "dangling").symlink_to(outside / "created")
    with pytest.raises(fs.Outside):
        fence.write_bytes("dangling", b"no")
    (root / "outdir-link").symlink_to(outside)
    with pytest.raises(fs.Outside):
        fence.write_bytes("outdir-link/new/file", b"no", parents=True)
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


def test_a_folder_swapped_for_a_link_while_we_read_never_reaches_out(fence: Fence, tree: tuple[Path, Path]) -> None:
    """A thread flips ``sw`` between a real folder and a link to the outside
    folder while ``sw/secret`` is read again and again, so reads meet every
    moment of the swap. The flipper keeps each settled state until the reader
    has seen it once, so both sides are met however the threads are scheduled
    (left free, the GIL can hand one thread whole runs of the other's states)."""
    root, outside = tree
    (root / "sw").mkdir()
    (root / "sw" / "secret").write_bytes(b"harmless\n")
    seen: dict[str, int] = {}
    told = threading.Condition()
    done = threading.Event()
    flips = 0

    def settle(kind: str) -> None:
        with told:
            before = seen.get(kind, 0)
            told.wait_for(lambda: seen.get(kind, 0) > before or done.is_set())

    def flip() -> None:
        nonlocal flips
        try:
            while flips < 100 and not done.is_set():
                settle("harmless\n")
                os.rename(root / "sw", root / "parked")
                os.symlink(outside, root / "sw")
                settle("Outside")
                os.unlink(root / "sw")
                os.rename(root / "parked", root / "sw")
                flips += 1
        finally:
            done.set()

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        while not done.is_set():
            try:
                data = fence.read_bytes("sw/secret")
                assert data != SECRET, "the port read the outside file"
                kind = data.decode()
            except fs.FsError as exc:
                kind = type(exc).__name__
            with told:
                seen[kind] = seen.get(kind, 0) + 1
                told.notify_all()
    finally:
        done.set()
        with told:
            told.notify_all()
        flipper.join()
    assert flips == 100, seen
    assert seen.get("harmless\n", 0) >= 100 and seen.get("Outside", 0) >= 100, seen
    assert set(seen) <= {"harmless\n", "Outside", "NotFound", "NotADirectory"}, seen


def test_odd_names_round_trip(fence: Fence, tree: tuple[Path, Path]) -> None:
    root, _ = tree
    names = [
        "with space",
        "new\nline",
        "ünïcødé ☃",
        "-dash",
        "...",
        "back\\slash",
        ".hidden",
        "tab\tname",
        "\udcff-bytes",
    ]  # the last one is a name that is not UTF-8, as os.fsdecode gives it
    for name in names:
        fence.write_bytes(f"odd/{name}", name.encode("utf-8", "surrogateescape"), parents=True)
        assert fence.read_bytes(f"odd/{name}") == name.encode("utf-8", "surrogateescape")
    assert sorted(e.name for e in fence.list_dir("odd")) == sorted(names)
    assert all(e.kind == "file" for e in fence.list_dir("odd"))
    assert (root / "odd" / "new\nline").read_bytes() == b"new\nline"
    with pytest.raises(fs.Refused):
        fence.read_bytes("nul\0byte")
    with pytest.raises(fs.Refused):
        fence.read_bytes("")


def test_a_write_that_fails_half_way_leaves_the_old_file(
    fence: Fence, tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = tree
    target = root / "sub" / "a.txt"
    target.chmod(0o751)
    real_write = os.write
    calls = 0

    def full_disk(fd: int, data: bytes) -> int:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(fs.os, "write", full_disk)
    with pytest.raises(fs.Failed, match="No space left"):
        fence.write_bytes("sub/a.txt", b"x" * (3 * 1024 * 1024))
    monkeypatch.undo()
    assert calls == 2  # the first megabyte was written, the second failed
    assert target.read_bytes() == b"inside\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.txt"]  # no temporary file left
    fence.write_bytes("sub/a.txt", b"replaced\n")
    assert target.read_bytes() == b"replaced\n"
    assert target.stat().st_mode & 0o777 == 0o751  # the permission bits are kept


def test_reading_by_lines_never_holds_the_file(fence: Fence, tree: tuple[Path, Path]) -> None:
    root, _ = tree
    line = b"%09d " + b"y" * 89 + b"\n"  # 100 bytes a line
    big = root / "big.txt"
    with big.open("wb") as f:
        for block in range(500):  # 500 blocks of 1000 lines: 50 MB
            f.write(b"".join(line % (block * 1000 + i + 1) for i in range(1000)))
    assert big.stat().st_size == 50_000_000
    tracemalloc.start()
    try:
        first = fence.read_lines("big.txt", 1, 2)
        late = fence.read_lines("big.txt", 499_999, 5)
        with pytest.raises(fs.TooLarge):
            fence.read_bytes("big.txt", max_bytes=1024 * 1024)
        with pytest.raises(fs.TooLarge):
            fence.read_lines("big.txt", 10, None, max_bytes=1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first == (line % 1) + (line % 2)
    assert late == (line % 499_999) + (line % 500_000)  # only two lines are left after 499,999
    assert peak < 8 * 1024 * 1024, peak
    assert fence.read_lines("big.txt", 600_000, 3) == b""
    assert fence.read_lines("big.txt", 1, 0) == b""
    with pytest.raises(fs.Refused):
        fence.read_lines("big.txt", 1, -1)


def test_read_refuses_what_is_not_a_file(fence: Fence, tree: tuple[Path, Path]) -> None:
    root, _ = tree
    os.mkfifo(root / "fifo")
    with pytest.raises(fs.Refused, match="not a regular file"):
        fence.read_bytes("fifo")  # and does not hang opening it
    with pytest.raises(fs.IsADirectory):
        fence.read_bytes("sub")
    with pytest.raises(fs.IsADirectory):
        fence.read_bytes(str(root))
    with pytest.raises(fs.NotFound):
        fence.read_bytes("missing")
    with pytest.raises(fs.NotADirectory):
        fence.read_bytes("sub/a.txt/below")
    with pytest.raises(fs.IsADirectory):
        fence.write_bytes("sub", b"x")


def test_folders_delete_move_copy(fence: Fence, tree: tuple[Path, Path]) -> None:
    root, outside = tree
    fence.mkdir("m/n/o")
    assert fence.stat("m/n/o").kind == "directory"
    with pytest.raises(fs.Exists):
        fence.mkdir("m/n/o", exist_ok=False)
    with pytest.raises(fs.NotFound):
        fence.mkdir("p/q", parents=False)
    fence.write_bytes("m/n/o/f", b"deep\n")
    (root / "m" / "n" / "l").symlink_to("o/f")

    fence.copy("m", "m2")
    assert (root / "m2" / "n" / "o" / "f").read_bytes() == b"deep\n"
    assert os.readlink(root / "m2" / "n" / "l") == "o/f"
    with pytest.raises(fs.Exists):
        fence.copy("m", "m2")
    fence.copy("m", "m/inner")  # a folder copied into itself stops at the copy
    assert (root / "m" / "inner" / "n" / "o" / "f").read_bytes() == b"deep\n"
    assert not (root / "m" / "inner" / "inner").exists()
    fence.delete("m/inner", recursive=True)  # below the root, from a folder opened on the way
    assert sorted(p.name for p in (root / "m").iterdir()) == ["n"]

    with pytest.raises(fs.Exists):
        fence.move("m2", "m")
    fence.move("m2", "moved")
    assert (root / "moved" / "n" / "o" / "f").is_file() and not (root / "m2").exists()
    with pytest.raises(fs.NotFound):
        fence.move("m2", "again")

    with pytest.raises(fs.NotEmpty):
        fence.delete("moved")
    fence.delete("moved", recursive=True)
    assert not (root / "moved").exists()
    with pytest.raises(fs.NotFound):
        fence.delete("moved")
    for whole in ("", ".", "sub/.."):
        with pytest.raises(fs.Refused):
            fence.delete(whole or ".", recursive=True)
    with pytest.raises(fs.Outside):
        fence.move("sub/a.txt", "../outside/taken")
    with pytest.raises(fs.Outside):
        fence.copy("../outside/secret", "copied")
    assert (root / "sub" / "a.txt").is_file() and not (root / "copied").exists()
    # A folder reached through a link inside is deleted through the link's own entry only.
    (root / "tolink").symlink_to(outside)
    fence.delete("tolink", recursive=True)
    assert (outside / "secret").read_bytes() == SECRET


def test_place_puts_bytes_where_each_mode_says_and_checks_first(fence: Fence, tree: tuple[Path, Path]) -> None:
    root, outside = tree
    fence.place("p.txt", b"hello", create_only=True)
    fence.place("p.txt", b"!", mode="append")
    fence.place("p.txt", b", world", mode="append", position=1)
    fence.place("p.txt", b">> ", mode="insert")
    assert (root / "p.txt").read_bytes() == b">> hello, world!"
    fence.place("p.txt", b"HELLO", position=3)
    assert (root / "p.txt").read_bytes() == b">> HELLO"
    tag = fence.stat("p.txt").etag
    with pytest.raises(fs.Exists):
        fence.place("p.txt", b"x", create_only=True)
    with pytest.raises(fs.Invalid):
        fence.place("p.txt", b"x", mode="insert", position=99)
    fence.place("p.txt", b"new", if_match=tag)
    assert fence.stat("p.txt").etag != tag
    with pytest.raises(fs.Conflict):
        fence.place("p.txt", b"lost", if_match=tag)
    with pytest.raises(fs.Conflict):
        fence.place("absent.txt", b"x", if_match=tag)
    assert (root / "p.txt").read_bytes() == b"new" and not (root / "absent.txt").exists()
    # Through a link that leads out: refused, and nothing outside changes.
    (root / "out").symlink_to(outside / "secret")
    with pytest.raises(fs.Outside):
        fence.place("out", b"x", mode="append")
    assert (outside / "secret").read_bytes() == SECRET
    assert sorted(p.name for p in root.iterdir()) == ["out", "p.txt", "sub"]  # no temporary file left


def test_concurrent_appenders_lose_nothing(fence: Fence, tree: tuple[Path, Path]) -> None:
    root, _ = tree
    fence.place("log.txt", b"")

    def append(mark: bytes) -> None:
        for _ in range(100):
            fence.place("log.txt", mark, mode="append")

    threads = [threading.Thread(target=append, args=(m,)) for m in (b"a", b"b", b"c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    data = (root / "log.txt").read_bytes()
    assert sorted(data) == sorted(b"a" * 100 + b"b" * 100 + b"c" * 100)
