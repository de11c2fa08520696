"""Sessions in a worktree of their own, end to end: a real daemon, a real
repository, the ``git`` command to look at what happened."""

from __future__ import annotations

import uuid
from pathlib import Path

import trio

from ..gitrepo import git, make_repo
from .helpers import rpc, running_daemon
from .test_changesets import _env
from .test_sessions import fits


def _repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "proj", {".gitignore": ".env\nnode_modules/\n", "app.py": "print(1)\n"})
    (repo / ".env").write_text("SECRET=1\n")
    (repo / "node_modules/lib").mkdir(parents=True)
    (repo / "node_modules/lib/index.js").write_text("x\n")
    git(repo, "branch", "older")
    git(repo, "checkout", "-q", "-b", "feature/login")
    (repo / "login.py").write_text("login\n")
    git(repo, "add", "login.py")
    git(repo, "commit", "-qm", "login")
    git(repo, "checkout", "-q", "main")
    return repo


async def test_resolve_session_config_and_branch_completions(tmp_path) -> None:
    repo = _repo(tmp_path)
    plain = tmp_path / "plain"
    plain.mkdir()
    async with running_daemon(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("dora")
            reply = await client.call("resolveSessionConfig", {
                "channel": "ahp-root://", "workingDirectory": repo.as_uri(), "config": {"isolation": "worktree"}})
            fits("/commands/resolveSessionConfig/result", reply["result"])
            props = reply["result"]["schema"]["properties"]
            assert {"isolation", "branch", "worktreeIncludeFiles", "worktreeSymlinkFolders"} <= set(props)
            assert props["branch"]["enum"][0] == "feature/login" and props["branch"]["default"] == "main"
            assert reply["result"]["values"] == {"isolation": "worktree"}  # what was answered stays answered
            outside = await client.call("resolveSessionConfig", {"channel": "ahp-root://",
                                                                 "workingDirectory": plain.as_uri()})
            assert "isolation" not in outside["result"]["schema"]["properties"]
            found = await client.call("sessionConfigCompletions", {
                "channel": "ahp-root://", "workingDirectory": repo.as_uri(), "property": "branch", "query": "LOG"})
            assert [i["value"] for i in found["result"]["items"]] == ["feature/login"]
            every = await client.call("sessionConfigCompletions", {
                "channel": "ahp-root://", "workingDirectory": repo.as_uri(), "property": "branch"})
            assert [i["value"] for i in every["result"]["items"]][0] == "feature/login"
            assert set(i["value"] for i in every["result"]["items"]) == {"feature/login", "main", "older"}
        daemon.terminate()
        await daemon.wait()


async def test_a_worktree_session_end_to_end(tmp_path) -> None:
    repo = _repo(tmp_path)
    async with running_daemon(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("erin")
            trees = []
            for n in range(2):
                uri = f"ahp-session:/{uuid.uuid4()}"
                reply = await client.call("createSession", {
                    "channel": uri, "workingDirectories": [repo.as_uri()],
                    "config": {"isolation": "worktree", "branch": "main", "worktreeIncludeFiles": ".env, *.missing",
                               "worktreeSymlinkFolders": ["node_modules"]}}, timeout=60)
                assert reply.get("result", "missing") is None, reply
                state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                [folder] = state["workingDirectories"]
                tree = Path(folder.removeprefix("file://"))
                assert tree.parent == repo.parent / "proj.worktrees" and tree.is_dir()
                assert (tree / "app.py").read_text() == "print(1)\n" and not (tree / "login.py").exists()
                assert (tree / ".env").read_text() == "SECRET=1\n"  # copied
                assert (tree / "node_modules").is_symlink()  # linked
                branch = git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip()
                assert branch.startswith("ahpd/")
                with trio.fail_after(30):
                    while not (state.get("_meta") or {}).get("git"):
                        await trio.sleep(0.1)
                        state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                assert state["_meta"]["git"]["baseBranchName"] == "main"
                assert state["_meta"]["git"]["branchName"] == branch
                trees.append((uri, tree, branch))
            assert git(repo, "status", "--porcelain") == ""  # the repository's own tree is untouched

            (clean_uri, clean, clean_branch), (dirty_uri, dirty, dirty_branch) = trees
            (dirty / "work.txt").write_text("somebody's work\n")
            assert (await client.call("disposeSession", {"channel": clean_uri}))["result"] is None
            assert not clean.exists() and clean_branch in git(repo, "branch", "--list", clean_branch)
            assert (await client.call("disposeSession", {"channel": dirty_uri}))["result"] is None
            assert (dirty / "work.txt").read_text() == "somebody's work\n"  # kept, with the work in it
            assert str(dirty) in git(repo, "worktree", "list")

            bad = await client.call("createSession", {
                "channel": f"ahp-session:/{uuid.uuid4()}", "workingDirectories": [(tmp_path / "d").as_uri()],
                "config": {"isolation": "worktree"}}, timeout=60)
            assert bad["error"]["code"] == -32602 and "worktree" in bad["error"]["message"]
        daemon.terminate()
        await daemon.wait()
