"""The console's changes pane in a real browser: a session another client
made appears live in the list; its uncommitted changeset shows a file's
diff (the before side read through ``resourceRead``, from HEAD); the file is
staged from its row and committed with the person's message after the
confirmation the host asks for."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import trio

from tests.daemon.helpers import rpc
from tests.gitrepo import git, make_repo, porcelain

from .conftest import Daemon, Shots
from .test_console import _expect, _open, _same_as_host


def _create_elsewhere(url: str, folder: Path) -> str:
    """A session created by another client (a Python one), as a colleague's would be,
    named as the host lists it."""
    uri = f"demo:/{uuid.uuid4()}"

    async def create() -> None:
        async with rpc(url) as client:
            await client.initialize("colleague")
            reply = await client.call("createSession", {"channel": uri, "workingDirectories": [folder.as_uri()]})
            assert reply.get("result", "missing") is None, reply

    trio.run(create)
    return uri


def test_stage_and_commit_from_the_changes_pane(browser: Any, daemon: Daemon, tmp_path: Path, shots: Shots) -> None:
    expect = _expect()
    repo = make_repo(tmp_path / "repo", {"story.txt": "once\nupon\na time\n"})
    (repo / "story.txt").write_text("once\nupon\na later time\n")
    daemon.start("--port", "0", "--web-port", "0")
    page = _open(browser, daemon.web_url)
    expect(page.locator("#connection")).to_have_text("connected")
    uri = _create_elsewhere(daemon.url, repo)
    row = page.locator(f"#sessions li.session[data-uri='{uri}']")
    expect(row).to_be_visible()  # live: root/sessionAdded, nobody reloaded anything
    row.click()
    page.click(".tab[data-tab='changes']")
    story = page.locator("#changes-files details.file", has_text="story.txt")
    expect(story).to_be_visible()
    story.locator("summary .path").click()
    expect(story.locator(".diff .del")).to_have_text("- a time")
    expect(story.locator(".diff .add")).to_have_text("+ a later time")
    expect(story.locator(".diff .ctx").first).to_have_text("  once")
    shots(page, "diff")
    changeset = page.evaluate("window.ahpdApp.changes.channel")
    _same_as_host(page, daemon, changeset)
    story.locator("button.op-stage").click()
    expect(page.locator("#changes-message")).to_contain_text("Stage")
    assert porcelain(repo) == ["M  story.txt"]
    page.fill("#commit-message", "A later time, from the web")
    page.click("#changes-ops button.op-commit")
    expect(page.locator("#confirm-text")).to_contain_text("Commit")
    shots(page, "commit-confirmation")
    page.click("#confirm-no")  # asked, and declined: nothing committed
    expect(page.locator("#confirm")).to_be_hidden()
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "1"
    page.click("#changes-ops button.op-commit")
    page.click("#confirm-yes")
    expect(page.locator("#changes-files details.file")).to_have_count(0)
    assert git(repo, "log", "-1", "--format=%s").strip() == "A later time, from the web"
    assert porcelain(repo) == []
    shots(page, "committed")
    _same_as_host(page, daemon, changeset)
    page.context.close()
