"""Sessions in a worktree of their own, end to end: a real daemon, a real
repository, the ``git`` command to look at what happened."""

from __future__ import annotations

import uuid

import pytest
from pathlib import Path


from ..gitrepo import git, make_repo
from .helpers import daemon_in_process, fits, rpc, snapshot_until
from .test_changesets import _env


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
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("dora")
            reply = await client.call(
                "resolveSessionConfig",
                {"channel": "ahp-root://", "workingDirectory": repo.as_uri(), "config": {"isolation": "worktree"}},
            )
            fits("/commands/resolveSessionConfig/result", reply["result"])
            props = reply["result"]["schema"]["properties"]
            tree = {
                "isolation",
                "branch",
                "worktreeIncludeFiles",
                "worktreeSymlinkFolders",
                "worktreeBranchPrefix",
                "worktreeCreateNewBranch",
                "worktreeBranchTrack",
            }
            assert set(props) == tree | {"model", "effortLevel", "mode"}  # the agent's own beside the tree's
            assert {k: props[k].get("default") for k in tree} == {
                "isolation": "folder",
                "branch": "main",
                "worktreeIncludeFiles": [],
                "worktreeSymlinkFolders": [],
                "worktreeBranchPrefix": "",
                "worktreeCreateNewBranch": "true",
                "worktreeBranchTrack": "false",
            }
            assert props["worktreeCreateNewBranch"]["enum"] == props["worktreeBranchTrack"]["enum"] == ["true", "false"]
            assert props["branch"]["enum"][0] == "feature/login" and props["branch"]["default"] == "main"
            # What was answered stays answered; the agent's own keys come with its defaults.
            assert reply["result"]["values"] == {
                "isolation": "worktree",
                "model": "demo-swift",
                "effortLevel": "medium",
                "mode": "default",
            }
            # A value the schema cannot take is refused naming its property, not answered with a schema.
            for key, value in (
                ("worktreeBranchPrefix", 7),
                ("worktreeBranchPrefix", "bad..prefix"),
                ("worktreeCreateNewBranch", "maybe"),
                ("branch", ["main"]),
            ):
                refused = await client.call(
                    "resolveSessionConfig",
                    {"channel": "ahp-root://", "workingDirectory": repo.as_uri(), "config": {key: value}},
                )
                assert refused["error"]["code"] == -32602, refused
                assert refused["error"]["message"].startswith(key) and repr(value) in refused["error"]["message"]
                assert refused["error"]["data"] == {"path": f"$.config.{key}"}
            outside = await client.call(
                "resolveSessionConfig",
                {"channel": "ahp-root://", "workingDirectory": plain.as_uri(), "config": {"worktreeBranchPrefix": 7}},
            )
            assert "isolation" not in outside["result"]["schema"]["properties"]
            found = await client.call(
                "sessionConfigCompletions",
                {"channel": "ahp-root://", "workingDirectory": repo.as_uri(), "property": "branch", "query": "LOG"},
            )
            assert [i["value"] for i in found["result"]["items"]] == ["feature/login"]
            every = await client.call(
                "sessionConfigCompletions",
                {"channel": "ahp-root://", "workingDirectory": repo.as_uri(), "property": "branch"},
            )
            assert [i["value"] for i in every["result"]["items"]][0] == "feature/login"
            assert set(i["value"] for i in every["result"]["items"]) == {"feature/login", "main", "older"}
        daemon.terminate()
        await daemon.wait()


async def test_a_worktree_session_end_to_end(tmp_path) -> None:
    repo = _repo(tmp_path)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("erin")
            trees = []
            for _ in range(2):
                uri = f"ahp-session:/{uuid.uuid4()}"
                reply = await client.call(
                    "createSession",
                    {
                        "channel": uri,
                        "workingDirectories": [repo.as_uri()],
                        "config": {
                            "isolation": "worktree",
                            "branch": "main",
                            "worktreeIncludeFiles": ".env, *.missing",
                            "worktreeSymlinkFolders": ["node_modules"],
                        },
                    },
                    timeout=60,
                )
                assert reply.get("result", "missing") is None, reply
                state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                [folder] = state["workingDirectories"]
                tree = Path(folder.removeprefix("file://"))
                assert tree.parent == repo.parent / "proj.worktrees" and tree.is_dir()  # noqa: ASYNC240 - a test's look at a local path
                assert (tree / "app.py").read_text() == "print(1)\n" and not (tree / "login.py").exists()
                assert (tree / ".env").read_text() == "SECRET=1\n"  # copied
                assert (tree / "node_modules").is_symlink()  # linked
                branch = git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip()
                assert branch.startswith("ahpd/")
                state = await snapshot_until(client, uri, lambda state: (state.get("_meta") or {}).get("git"))
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

            bad = await client.call(
                "createSession",
                {
                    "channel": f"ahp-session:/{uuid.uuid4()}",
                    "workingDirectories": [(tmp_path / "d").as_uri()],
                    "config": {"isolation": "worktree"},
                },
                timeout=60,
            )
            assert bad["error"]["code"] == -32602 and "worktree" in bad["error"]["message"]
        daemon.terminate()
        await daemon.wait()


async def _tree_of(client, config: dict) -> tuple[str, dict]:
    uri = f"ahp-session:/{uuid.uuid4()}"
    reply = await client.call(
        "createSession", {"channel": uri, "workingDirectories": [config.pop("_repo")], "config": config}, timeout=60
    )
    return uri, reply


async def _folder(client, uri: str) -> Path:
    state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
    [folder] = state["workingDirectories"]
    return Path(folder.removeprefix("file://"))


async def test_branch_prefix_track_and_the_base_branch_itself(tmp_path) -> None:
    repo = _repo(tmp_path)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("fay")
            # a prefixed new branch that tracks its base
            uri, reply = await _tree_of(
                client,
                {
                    "_repo": repo.as_uri(),
                    "isolation": "worktree",
                    "branch": "feature/login",
                    "worktreeBranchPrefix": "fay/",
                    "worktreeBranchTrack": "true",
                },
            )
            assert reply.get("result", "missing") is None, reply
            tree = await _folder(client, uri)
            branch = git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip()
            assert branch.startswith("fay/") and branch != "feature/login"
            assert git(repo, "rev-parse", "--abbrev-ref", f"{branch}@{{upstream}}").strip() == "feature/login"
            assert (tree / "login.py").exists()  # started from the base
            # without track, no upstream (the default)
            uri2, reply = await _tree_of(client, {"_repo": repo.as_uri(), "isolation": "worktree", "branch": "main"})
            assert reply.get("result", "missing") is None, reply
            plain = git(await _folder(client, uri2), "rev-parse", "--abbrev-ref", "HEAD").strip()
            assert plain.startswith("ahpd/")
            assert git(repo, "config", "--get-regexp", r"^branch\.").count(plain) == 0

            # createNewBranch 'false': the tree is on the base branch itself; disposal keeps the branch
            before = set(git(repo, "branch", "--format=%(refname:short)").split())
            uri3, reply = await _tree_of(
                client,
                {
                    "_repo": repo.as_uri(),
                    "isolation": "worktree",
                    "branch": "older",
                    "worktreeCreateNewBranch": "false",
                },
            )
            assert reply.get("result", "missing") is None, reply
            own = await _folder(client, uri3)
            assert git(own, "rev-parse", "--abbrev-ref", "HEAD").strip() == "older"
            assert set(git(repo, "branch", "--format=%(refname:short)").split()) == before  # no branch made
            # ...and nobody else can have it checked out at the same time
            _, taken = await _tree_of(
                client,
                {
                    "_repo": repo.as_uri(),
                    "isolation": "worktree",
                    "branch": "older",
                    "worktreeCreateNewBranch": "false",
                },
            )
            assert taken["error"]["code"] == -32602 and "checked out" in taken["error"]["message"]
            assert taken["error"]["data"]["path"] == "$.config.worktreeCreateNewBranch"
            _, main = await _tree_of(
                client,
                {"_repo": repo.as_uri(), "isolation": "worktree", "branch": "main", "worktreeCreateNewBranch": "false"},
            )
            assert main["error"]["code"] == -32602 and "main" in main["error"]["message"]
            assert (await client.call("disposeSession", {"channel": uri3}))["result"] is None
            assert not own.exists()
            assert "older" in git(repo, "branch", "--list", "older")  # the user's branch stays

            for key, value in [
                ("worktreeCreateNewBranch", "yes"),
                ("worktreeBranchTrack", 1),
                ("worktreeBranchPrefix", 7),
                ("worktreeBranchPrefix", "bad..name/"),
            ]:
                _, bad = await _tree_of(client, {"_repo": repo.as_uri(), "isolation": "worktree", key: value})
                assert bad["error"]["code"] == -32602, (key, value, bad)
                assert key in bad["error"]["message"] and bad["error"]["data"]["path"] == f"$.config.{key}"
            assert set(git(repo, "branch", "--format=%(refname:short)").split()) >= before
        daemon.terminate()
        await daemon.wait()


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("branch", "--lock"),
        ("branch", "--no-checkout"),
        ("branch", "-b"),
        ("worktreeBranchName", "--detach"),
        ("worktreeBranchName", "bad..name"),
    ],
)
async def test_a_branch_that_reads_as_an_option_is_refused_by_name(tmp_path, key, name) -> None:
    """Issue 25, attack 10: a branch name from a client never reaches git as an option."""
    repo = _repo(tmp_path)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("eve")
            _, reply = await _tree_of(client, {"_repo": repo.as_uri(), "isolation": "worktree", key: name})
            assert reply.get("error", {}).get("code") == -32602, reply
            assert repr(name) in reply["error"]["message"] and key in reply["error"]["message"]
            assert reply["error"]["data"] == {"path": f"$.config.{key}"}
            assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1  # none was made
            assert "locked" not in git(repo, "worktree", "list", "--porcelain")
        daemon.terminate()
        await daemon.wait()
