"""The ACP agent's file access over more than one folder: the working
directory and the folders granted beside it, each its own fence."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from acp.exceptions import RequestError

from ahpd.backends.acp.files import confine, read_text, write_text


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    made = []
    for name in ("work", "extra", "elsewhere"):
        (tmp_path / name).mkdir()
        made.append(Path(os.path.realpath(tmp_path / name)))
    return made[0], made[1], made[2]


def test_each_granted_folder_serves_what_lies_in_it(folders: tuple[Path, Path, Path]) -> None:
    work, extra, elsewhere = folders
    (work / "a.txt").write_text("in work\n")
    (extra / "b.txt").write_text("in extra\n")
    roots = [work, extra]
    assert read_text(roots, str(work / "a.txt")) == "in work\n"
    assert read_text(roots, str(extra / "b.txt")) == "in extra\n"
    write_text(roots, str(extra / "new" / "c.txt"), "written\n")
    assert (extra / "new" / "c.txt").read_text() == "written\n"
    assert confine(roots, str(extra / "new")) == extra / "new"
    # A link in the working directory into a granted folder leads somewhere granted.
    (work / "to-extra").symlink_to(extra / "b.txt")
    assert read_text(roots, str(work / "to-extra")) == "in extra\n"


def test_what_no_folder_holds_is_refused_naming_them_all(folders: tuple[Path, Path, Path]) -> None:
    work, extra, elsewhere = folders
    (elsewhere / "secret.txt").write_text("no\n")
    (extra / "out").symlink_to(elsewhere / "secret.txt")
    roots = [work, extra]
    for bad in (str(elsewhere / "secret.txt"), str(extra / "out"), str(extra / ".." / "elsewhere" / "secret.txt")):
        with pytest.raises(RequestError) as caught:
            read_text(roots, bad)
        assert f"outside the conversation's working directories {work} and {extra}" in str(caught.value)
        assert caught.value.data["roots"] == [str(work), str(extra)]
    with pytest.raises(RequestError, match="outside"):
        write_text(roots, str(elsewhere / "planted.txt"), "no")
    assert not (elsewhere / "planted.txt").exists()


def test_a_granted_folder_that_is_gone_serves_nothing_and_breaks_nothing(folders: tuple[Path, Path, Path]) -> None:
    work, extra, _ = folders
    (work / "a.txt").write_text("still here\n")
    extra.rmdir()
    roots = [work, extra]
    assert read_text(roots, str(work / "a.txt")) == "still here\n"
    with pytest.raises(RequestError, match="outside"):
        read_text(roots, str(extra / "b.txt"))
