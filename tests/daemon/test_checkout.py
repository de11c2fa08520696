"""``checkout`` on a session nobody has spoken in, end to end: a real daemon,
a real WebSocket client, a real repository with two branches. Driven by the
reference window's request ``_meta`` (``treeish``, ``preCheckoutAction``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..gitrepo import git, make_repo, porcelain
from .helpers import daemon_in_process, dispatch, rpc, snapshot_until, start_turn, wire_clean
from .test_changesets import Watched, _env, _ready, _session


def _ops(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["id"]: o for o in state.get("operations") or []}


def _branch(repo: Path) -> str:
    return git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()


async def test_checkout_moves_a_new_session_s_tree_and_asks_about_changes(tmp_path) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "feature.txt").write_text("on the feature branch\n")
    git(repo, "add", "feature.txt")
    git(repo, "commit", "-qm", "feature")
    git(repo, "checkout", "-q", "main")
    capture = tmp_path / "checkout.jsonl"
    async with daemon_in_process(
        tmp_path / "d", "--sessions", "memory", "--wire", str(capture), env=_env(tmp_path)
    ) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ivy")
            uri, chat, _ = await _session(client, repo)
            cs = await Watched(client, f"{uri}/changeset/uncommitted").subscribe()
            await cs.until(lambda s: _ready(s) and "checkout" in _ops(s))
            offered = _ops(cs.state)["checkout"]
            assert offered["scopes"] == ["changeset"] and offered["status"] == "idle"

            async def checkout(meta: dict[str, Any]) -> dict[str, Any]:
                return await client.call(
                    "invokeChangesetOperation", {"channel": cs.uri, "operationId": "checkout", "_meta": meta}
                )

            # Bad input is refused by name, and nothing moves.
            for meta, named in (
                ({}, "_meta.treeish"),
                ({"treeish": "feature", "preCheckoutAction": "burn"}, "preCheckoutAction"),
                ({"treeish": "no-such-branch"}, "not a local branch"),
                ({"treeish": "--force"}, "not a local branch"),
            ):
                refused = await checkout(meta)
                assert refused["error"]["code"] == -32602 and named in refused["error"]["message"], refused
            assert _branch(repo) == "main"

            # A tree with changes is refused with the reason the window reads to offer stash or commit.
            (repo / "README.md").write_text("edited\n")
            (repo / "scratch.txt").write_text("untracked\n")
            dirty = await checkout({"treeish": "feature"})
            assert dirty["error"]["code"] == -32602, dirty
            assert dirty["error"]["data"] == {"reason": "dirtyWorkingTree"}
            assert _branch(repo) == "main" and porcelain(repo) == [" M README.md", "?? scratch.txt"]

            # stash: the changes are put aside, untracked ones too, and the tree moves.
            stashed = await checkout({"treeish": "feature", "preCheckoutAction": "stash"})
            assert "result" in stashed, stashed
            assert "Checked out feature" in stashed["result"]["message"]
            assert _branch(repo) == "feature" and porcelain(repo) == []
            assert (repo / "feature.txt").exists() and not (repo / "scratch.txt").exists()
            assert len(git(repo, "stash", "list").splitlines()) == 1
            await snapshot_until(
                client, uri, lambda s: ((s.get("_meta") or {}).get("git") or {}).get("branchName") == "feature"
            )

            # commit: the changes go into a commit on the branch being left.
            (repo / "feature.txt").write_text("more feature work\n")
            (repo / "README.md").unlink()
            committed = await checkout({"treeish": "main", "preCheckoutAction": "commit"})
            assert "result" in committed, committed
            assert _branch(repo) == "main" and porcelain(repo) == []
            assert git(repo, "show", "feature:feature.txt") == "more feature work\n"
            assert "README.md" not in git(repo, "ls-tree", "--name-only", "feature").split()
            assert "checking out main" in git(repo, "log", "-1", "--format=%s", "feature")

            # Once somebody speaks in the session, the tree is the agent's ground: no checkout.
            await dispatch(client, chat, start_turn("hello"), 1)
            await cs.until(lambda s: "checkout" not in _ops(s))
            late = await checkout({"treeish": "feature"})
            assert late["error"]["code"] == -32602 and "'checkout' is not an operation" in late["error"]["message"]
            assert _branch(repo) == "main"
        daemon.terminate()
        await daemon.wait()
    wire_clean(capture)
