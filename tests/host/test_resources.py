"""``resourceRead`` serves a pending edit's content and the exact file it
names, read through the filesystem port inside the session's working folder,
and nothing else. The host is reduced to the state ``resource_read`` reads
(pending edits, sessions with their folder and waiting calls); the files are
real, in ``tmp_path``. The daemon-level path is tests/daemon/test_claude_edits.py."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ahpd.host.jsonrpc import RpcError
from ahpd.host.resources import resource_read

SECRET = "the secret outside\n"


def _host(work: Path, edits: dict[str, tuple[str, str, str]], waiting: set[str]) -> Any:
    chat = SimpleNamespace(turn=SimpleNamespace(permissions={call_id: object() for call_id in waiting}))
    session = SimpleNamespace(cwd=work, chats={"ahp-chat://c": chat})
    return SimpleNamespace(sessions=SimpleNamespace(pending_edits=edits, sessions={"ahp-session://s": session}))


async def _read(host: Any, uri: str, encoding: str | None = None) -> dict[str, Any]:
    return await resource_read(host, None, SimpleNamespace(uri=uri, encoding=encoding))  # type: ignore[arg-type]


async def _refused(host: Any, uri: str) -> RpcError:
    with pytest.raises(RpcError) as caught:
        await _read(host, uri)
    assert caught.value.code == -32008
    assert SECRET.strip() not in repr(caught.value.message) + repr(caught.value.data)
    return caught.value


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "work" / "sub").mkdir(parents=True)
    (tmp_path / "work" / "sub" / "notes.txt").write_text("alpha\n")
    (tmp_path / "work" / "other.txt").write_text("not named by any edit\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "notes.txt").write_text(SECRET)
    return Path(os.path.realpath(tmp_path / "work"))


async def test_the_edit_and_the_file_it_names_are_served(work: Path) -> None:
    target = work / "sub" / "notes.txt"
    host = _host(work, {"ahp-edit://pending/call1": ("call1", str(target), "gamma\n")}, {"call1"})
    assert (await _read(host, "ahp-edit://pending/call1"))["data"] == "gamma\n"
    assert (await _read(host, target.as_uri()))["data"] == "alpha\n"
    target.write_bytes(b"\xff\xfe")
    coded = await _read(host, target.as_uri(), "base64")
    assert coded["encoding"] == "base64" and base64.b64decode(coded["data"]) == b"\xff\xfe"
    assert "base64" in (await _refused(host, target.as_uri())).message  # not UTF-8: asked for again
    # A file no edit names is not served, even in the same folder.
    await _refused(host, (work / "other.txt").as_uri())
    await _refused(host, "ahp-edit://pending/call2")


async def test_a_named_file_that_leads_outside_is_refused(work: Path) -> None:
    outside = work.parent / "outside"
    (work / "link.txt").symlink_to(outside / "notes.txt")
    (work / "up.txt").symlink_to("../outside/notes.txt")
    edits = {f"ahp-edit://pending/call{i}": (f"call{i}", str(work / name), "x")
             for i, name in enumerate(["link.txt", "up.txt", "sub/notes.txt"])}
    host = _host(work, edits, {"call0", "call1", "call2"})
    for name in ("link.txt", "up.txt"):
        assert "outside" in (await _refused(host, (work / name).as_uri())).message
    # The folder on the way swapped for a link after the edit was proposed.
    os.rename(work / "sub", work / "parked")
    (work / "sub").symlink_to(outside)
    await _refused(host, (work / "sub" / "notes.txt").as_uri())
    # A path outside the session's folder is not served, even if an edit names it.
    host = _host(work, {"ahp-edit://pending/call9": ("call9", str(outside / "notes.txt"), "x")}, {"call9"})
    await _refused(host, (outside / "notes.txt").as_uri())


async def test_an_edit_no_session_waits_on_serves_no_file(work: Path) -> None:
    target = work / "sub" / "notes.txt"
    host = _host(work, {"ahp-edit://pending/call1": ("call1", str(target), "gamma\n")}, set())
    await _refused(host, target.as_uri())
