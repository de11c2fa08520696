"""The reference window's handles on worktrees (``vscode/*DetachedWorktree*``):
a real daemon over real repositories, and the reconcile rule over a clock
this test sets, since nobody waits a day."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import pytest

from ahpd.host.changesets import detached
from ahpd.host.sessions import worktrees

from ..gitrepo import git, git_env
from .helpers import Rpc, daemon_in_process, rpc
from .test_changesets import _env
from .test_worktrees import _repo

CREATE, CLAIM, ARCHIVE, DELETE, RECONCILE = (
    "vscode/createAgentHostDetachedWorktree",
    "vscode/claimAgentHostDetachedWorktree",
    "vscode/setAgentHostDetachedWorktreeArchived",
    "vscode/deleteAgentHostDetachedWorktree",
    "vscode/reconcileAgentHostDetachedWorktrees",
)


async def _session(client: Rpc, repo: Path, worktree: bool = True) -> str:
    uri = f"ahp-session:/{uuid.uuid4()}"
    config = {"isolation": "worktree", "branch": "main"} if worktree else None
    reply = await client.call(
        "createSession",
        {"channel": uri, "workingDirectories": [repo.as_uri()], **({"config": config} if config else {})},
        timeout=60,
    )
    assert reply.get("result", "missing") is None, reply
    return uri


def _refused(reply: dict, code: int, path: str | None = None) -> None:
    assert reply["error"]["code"] == code, reply
    if path is not None:
        assert reply["error"]["data"]["path"] == path, reply


def _branch(tree: Path) -> str:
    return git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip()


async def test_the_window_creates_claims_archives_and_deletes_trees(tmp_path) -> None:
    repo = _repo(tmp_path)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            init = await client.initialize("win")
            assert init["_meta"]["vscode.detachedWorktrees"] is True

            clean_uri, dirty_uri, plain_uri = (
                await _session(client, repo),
                await _session(client, repo),
                await _session(client, repo, worktree=False),
            )
            # create: a handle and the tree; refused for a session with no tree of its own
            _refused(await client.call(CREATE, {"session": plain_uri, "prompt": "p"}), -32602, "$.session")
            _refused(await client.call(CREATE, {"session": "ahp-session:/nobody", "prompt": "p"}), -32602, "$.session")
            _refused(await client.call(CREATE, {"session": 7, "prompt": "p"}), -32602, "$.session")
            _refused(await client.call(CREATE, {"session": clean_uri, "prompt": 3}), -32602, "$.prompt")
            made = (await client.call(CREATE, {"session": clean_uri, "prompt": "fix the login"}))["result"]
            clean = Path(made["resource"].removeprefix("file://"))
            assert clean.parent == repo.parent / "proj.worktrees" and (clean / "app.py").is_file()
            branch = _branch(clean)
            again = (await client.call(CREATE, {"session": clean_uri, "prompt": "again"}))["result"]
            assert again == made  # one handle per session's tree
            dirty_made = (await client.call(CREATE, {"session": dirty_uri, "prompt": "p"}))["result"]
            dirty = Path(dirty_made["resource"].removeprefix("file://"))
            assert dirty_made["handle"] != made["handle"]

            # claim: only a handle this host handed out
            _refused(await client.call(CLAIM, {"handle": "never-made"}), -32602, "$.handle")
            _refused(await client.call(CLAIM, {}), -32602, "$.handle")
            assert (await client.call(CLAIM, {"handle": made["handle"]}))["result"] is None

            # archive while the session is open: the tree stays; delete is refused
            _refused(await client.call(ARCHIVE, {"handle": made["handle"], "archived": "yes"}), -32602, "$.archived")
            assert (await client.call(ARCHIVE, {"handle": made["handle"], "archived": True}))["result"] is None
            assert clean.is_dir()  # noqa: ASYNC240 - a test's look at a local path
            _refused(await client.call(DELETE, {"handle": made["handle"]}), -32004)
            assert clean.is_dir()  # noqa: ASYNC240 - a test's look at a local path

            # once the session is gone: unarchive puts the tree back on its branch, archive takes it off
            assert (await client.call("disposeSession", {"channel": clean_uri}))["result"] is None
            assert not clean.exists()  # a disposed session's clean tree goes, its branch stays  # noqa: ASYNC240 - a test's look at a local path
            assert (await client.call(ARCHIVE, {"handle": made["handle"], "archived": False}))["result"] is None
            assert clean.is_dir() and _branch(clean) == branch and (clean / "app.py").is_file()  # noqa: ASYNC240 - a test's look at a local path
            assert (await client.call(ARCHIVE, {"handle": made["handle"], "archived": True}))["result"] is None
            assert not clean.exists() and branch in git(repo, "branch", "--list", branch)  # noqa: ASYNC240 - a test's look at a local path
            assert str(clean) not in git(repo, "worktree", "list")
            assert (await client.call(ARCHIVE, {"handle": made["handle"], "archived": False}))["result"] is None
            assert _branch(clean) == branch

            # a tree with somebody's work in it stays archived or not; delete takes tree and branch
            dirty_branch = _branch(dirty)
            (dirty / "work.txt").write_text("somebody's work\n")
            assert (await client.call("disposeSession", {"channel": dirty_uri}))["result"] is None
            assert (await client.call(ARCHIVE, {"handle": dirty_made["handle"], "archived": True}))["result"] is None
            assert (dirty / "work.txt").read_text() == "somebody's work\n"
            assert (await client.call(DELETE, {"handle": dirty_made["handle"]}))["result"] is None
            assert not dirty.exists() and git(repo, "branch", "--list", dirty_branch) == ""  # noqa: ASYNC240 - a test's look at a local path
            assert (await client.call(DELETE, {"handle": made["handle"]}))["result"] is None
            assert not clean.exists() and git(repo, "branch", "--list", branch) == ""  # noqa: ASYNC240 - a test's look at a local path
            _refused(await client.call(CLAIM, {"handle": made["handle"]}), -32602, "$.handle")  # let go of
            assert git(repo, "status", "--porcelain") == ""  # the repository's own tree is untouched

            # reconcile: malformed params refused; a fresh tree nobody named is kept
            _refused(await client.call(RECONCILE, {"activeHandles": []}), -32602, "$.scope")
            _refused(await client.call(RECONCILE, {"scope": "w", "activeHandles": "h"}), -32602, "$.activeHandles")
            _refused(await client.call(RECONCILE, {"scope": "w", "activeHandles": [1]}), -32602, "$.activeHandles")
            fresh_uri = await _session(client, repo)
            fresh = (await client.call(CREATE, {"session": fresh_uri, "prompt": "p"}))["result"]
            await client.call("disposeSession", {"channel": fresh_uri})
            assert (await client.call(ARCHIVE, {"handle": fresh["handle"], "archived": False}))["result"] is None
            assert (await client.call(RECONCILE, {"scope": "w", "activeHandles": []}))["result"] is None
            assert Path(fresh["resource"].removeprefix("file://")).is_dir()  # not a day yet  # noqa: ASYNC240 - a test's look at a local path
            assert (await client.call(CLAIM, {"handle": fresh["handle"]}))["result"] is None
        daemon.terminate()
        await daemon.wait()


@pytest.fixture
def git_home(tmp_path, monkeypatch) -> None:
    """The git command the host runs reads a config of the test's own."""
    env = git_env(tmp_path / "git-home")
    for key in ("HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(key, env[key])


def test_reconcile_lets_go_only_of_clean_unnamed_trees_a_day_old(tmp_path, git_home) -> None:
    repo = _repo(tmp_path)
    now = time.time()
    old = now - detached.GRACE_SECONDS - 60
    held: dict[str, detached.Handle] = {}
    for name in ("forgotten", "dirty", "named", "open", "elsewhere", "fresh"):
        record = worktrees.make(repo, name, {"isolation": "worktree", "branch": "main"})
        held[name] = detached.Handle(
            handle=name, session=f"ahp-session:/{name}", worktree=record, seen=now - 60 if name == "fresh" else old
        )
    held["elsewhere"].scope = "another-window"
    (held["dirty"].tree / "work.txt").write_text("work\n")

    gone = detached.reap(held, "w", ["named"], now, {"ahp-session:/open"})

    assert [h.handle for h in gone] == ["forgotten"]
    assert not held.get("forgotten") and not Path(gone[0].worktree["tree"]).exists()
    assert git(repo, "branch", "--list", gone[0].worktree["branch"]).strip()  # the branch stays
    for name in ("dirty", "named", "open", "elsewhere", "fresh"):
        assert held[name].tree.is_dir(), name
    assert held["named"].seen == now and held["named"].scope == "w"
    assert (held["dirty"].tree / "work.txt").read_text() == "work\n"


def test_delete_keeps_a_branch_not_made_for_the_session(tmp_path, git_home) -> None:
    repo = _repo(tmp_path)
    mine = worktrees.make(repo, "mine", {"isolation": "worktree", "branch": "main"})
    theirs = worktrees.make(
        repo, "theirs", {"isolation": "worktree", "branch": "older", "worktreeCreateNewBranch": "false"}
    )
    assert theirs["branch"] == "older" and not theirs["ownBranch"] and mine["ownBranch"]
    detached.delete(mine)
    detached.delete(theirs)
    assert not Path(mine["tree"]).exists() and not Path(theirs["tree"]).exists()
    assert not git(repo, "branch", "--list", mine["branch"]).strip()  # made for the session: gone
    assert git(repo, "branch", "--list", "older").strip()  # the user's: kept


async def test_worktrees_root_keeps_every_tree_in_one_folder(tmp_path) -> None:
    repo = _repo(tmp_path)
    root = tmp_path / "trees"
    async with daemon_in_process(
        tmp_path / "d", "--sessions", "memory", "--worktrees-root", str(root), env=_env(tmp_path)
    ) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("win")
            uri = await _session(client, repo)
            made = (await client.call(CREATE, {"session": uri, "prompt": "p"}))["result"]
            tree = Path(made["resource"].removeprefix("file://"))
            assert tree.parent == root / "proj" and (tree / "app.py").is_file()
            assert not (repo.parent / "proj.worktrees").exists()
            branch = _branch(tree)
            await client.call("disposeSession", {"channel": uri})
            assert not tree.exists()  # noqa: ASYNC240 - a test's look at a local path
            assert (await client.call(ARCHIVE, {"handle": made["handle"], "archived": False}))["result"] is None
            assert _branch(tree) == branch  # put back where it stood, under the root
            shutil.rmtree(tree)  # removed by hand: git still has it registered
            assert (await client.call(ARCHIVE, {"handle": made["handle"], "archived": False}))["result"] is None
            assert _branch(tree) == branch
        daemon.terminate()
        await daemon.wait()
