"""A session in a git repository shows its git facts without libgit2 in the
daemon: a real ``ahpd run`` process, a real repository with a GitHub remote
(so the pull request's reading runs too), and the daemon's own memory map
read from /proc once the facts are said."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import trio

from ..gitrepo import git, git_env, mixed_repo
from .helpers import rpc, running_daemon, snapshot_until


def _env(tmp_path: Path) -> dict[str, str]:
    env = git_env(tmp_path / "git-home")
    return {k: env[k] for k in ("HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "XDG_CONFIG_HOME")}


def _git_meta(state: dict[str, Any]) -> dict[str, Any]:
    return (state.get("_meta") or {}).get("git") or {}


async def test_a_session_in_a_repository_leaves_libgit2_unloaded(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "r")
    git(repo, "remote", "add", "origin", "https://github.com/someone/thing.git")
    async with running_daemon(tmp_path / "d", "--sessions", "memory", "--no-web", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("alice")
            # The form a client shows first: the repository's branches, read without libgit2 too.
            git(repo, "branch", "older")
            reply = await client.call(
                "resolveSessionConfig", {"channel": "ahp-root://", "workingDirectory": repo.as_uri(), "config": {}}
            )
            assert "older" in str(reply["result"]["schema"]["properties"]), reply
            uri = f"ahp-session:/{uuid.uuid4()}"
            reply = await client.call(
                "createSession", {"channel": uri, "workingDirectories": [(repo / "src").as_uri()]}, timeout=60
            )
            assert reply.get("result", "missing") is None, reply
            state = await snapshot_until(client, uri, lambda s: bool(_git_meta(s)) and bool(s.get("changesets")))
            # Under the session's folder (src/): the modified module and the untracked one.
            assert _git_meta(state) == {"branchName": "main", "uncommittedChanges": 2}
            maps = await trio.Path(f"/proc/{daemon.pid}/maps").read_text()
            assert "libgit2" not in maps and "_pygit2" not in maps
        daemon.terminate()
        await daemon.wait()
