"""The pull request beside a session's branch, end to end: a real daemon, a
real WebSocket client, a repository whose ``origin`` is GitHub's by its URL
and pushes to a local bare repository (``pushurl``), a fake GitHub REST API
on 127.0.0.1 (``AHPD_GITHUB_API_URL``) and a fake ``gh`` that answers a token.
Driven by the reference window's ids and request ``_meta``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ..fake_github import FakeGitHub
from ..gitrepo import git, make_repo, porcelain
from .helpers import (
    action_of,
    daemon_in_process,
    dispatch,
    is_action,
    rpc,
    snapshot_until,
    start_turn,
    until,
    wire_clean,
)
from .test_changesets import Watched, _env, _ready, _session

RESOURCE = "https://api.github.com/repos"
NAME = "acme/widgets"


def _ops(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["id"]: o for o in state.get("operations") or []}


def _github(state: dict[str, Any]) -> dict[str, Any]:
    return (state.get("_meta") or {}).get("github") or {}


def _setup(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    remote = tmp_path / "remote.git"
    remote.mkdir()
    git(remote, "init", "-q", "--bare")
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    git(repo, "remote", "add", "origin", f"https://github.com/{NAME}.git")
    git(repo, "remote", "set-url", "--push", "origin", str(remote))
    tools = tmp_path / "bin"
    tools.mkdir()
    gh = tools / "gh"
    gh.write_text('#!/bin/sh\nif [ "$1 $2" = "auth token" ]; then echo gh-token; exit 0; fi\nexit 1\n')
    gh.chmod(0o755)
    env = {**_env(tmp_path), "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    return repo, remote, env


async def test_the_pull_request_pair_opens_a_request_and_the_branch_shows_it(tmp_path) -> None:
    repo, remote, env = _setup(tmp_path)
    repos = {NAME: {"default_branch": "main", "allow_squash_merge": True, "allow_merge_commit": False}}
    with FakeGitHub({"gh-token", "lent-token"}, repos) as fake:
        env["AHPD_GITHUB_API_URL"] = fake.url
        capture = tmp_path / "pulls.jsonl"
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--wire", str(capture), env=env) as daemon:
            async with rpc(daemon.url) as client:
                hello = await client.initialize("jo")
                for agent in hello["snapshots"][0]["state"]["agents"]:
                    assert RESOURCE in [r["resource"] for r in agent.get("protectedResources") or []], agent
                uri, chat, _ = await _session(client, repo)
                key = repo.resolve().as_uri()

                # Nobody lent a token: gh's is used, and the branch has no request yet.
                state = await snapshot_until(client, uri, lambda s: _github(s) == {"owner": "acme", "repo": "widgets"})
                assert state["_meta"]["githubData"] == {key: {"owner": "acme", "repo": "widgets"}}
                assert state["_meta"]["workingDirectoryKeys"] == {state["workingDirectories"][0]: key}
                assert ("GET", "/repos/acme/widgets/pulls", "gh-token") in [
                    (m, p.split("?")[0], t) for m, p, t in fake.seen
                ]
                cs = await Watched(client, f"{uri}/changeset/uncommitted").subscribe()
                await cs.until(lambda s: _ready(s) and {"create-pr", "prepare-pull-request"} <= set(_ops(s)))

                # A lent token is the one spent from now on.
                lent = await client.call(
                    "authenticate", {"channel": "ahp-root://", "resource": RESOURCE, "token": "lent-token"}
                )
                assert lent["result"] == {}, lent
                (repo / "README.md").write_text("hello, widgets\n")
                (repo / "widget.py").write_text("WIDGETS = 3\n")
                git(repo, "add", "widget.py")  # the index moves: the changeset re-reads
                await cs.until(lambda s: len(s["files"]) == 2)

                async def invoke(op: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
                    params: dict[str, Any] = {"channel": cs.uri, "operationId": op}
                    if meta is not None:
                        params["_meta"] = meta
                    return await client.call("invokeChangesetOperation", params)

                # prepare-pull-request fills the window's form and changes nothing.
                prepared = await invoke("prepare-pull-request")
                content = prepared["result"]["followUp"]["content"]
                assert content["contentType"] == "application/json"
                details = json.loads(unquote(content["uri"].removeprefix("data:application/json,")))
                title = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]["title"]
                # The session's title, as a commit takes it (a new session has none yet).
                assert details["title"] == (title.strip().splitlines() or ["Changes from an agent session"])[0]
                assert "2 uncommitted files" in details["description"]
                assert (details["branchName"], details["baseBranchName"], details["repository"]) == (
                    "main",
                    "main",
                    NAME,
                )
                assert details["mergeMethods"] == ["SQUASH"] and details["agentMergeAvailable"] is False
                assert porcelain(repo) == [" M README.md", "A  widget.py"]
                assert fake.seen[-1][2] == "lent-token"

                # A form that is wrong is refused by name, and nothing moves.
                for form, named in (
                    ({"title": " ", "description": "", "draft": False, "agentMerge": False}, "title"),
                    ({"title": "x", "description": "", "draft": "yes", "agentMerge": False}, "draft"),
                    (
                        {
                            "title": "x",
                            "description": "",
                            "draft": False,
                            "agentMerge": False,
                            "autoMergeMethod": "SQUASH",
                        },
                        "auto-merge",
                    ),
                ):
                    refused = await invoke("create-pr", {"vscode.pullRequest": form})
                    assert refused["error"]["code"] == -32602 and named in refused["error"]["message"], refused
                assert porcelain(repo) == [" M README.md", "A  widget.py"]

                # create-pr: on the base branch, so a branch of its own; committed, pushed, opened.
                form = {"title": "Add widgets", "description": "Three of them.", "draft": True, "agentMerge": False}
                made = await invoke("create-pr", {"vscode.pullRequest": form})
                assert "result" in made, made
                url = f"https://github.com/{NAME}/pull/1"
                assert made["result"]["followUp"] == {"content": {"uri": url}, "external": True}
                branch = git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()
                assert branch == "ahpd/add-widgets" and porcelain(repo) == []
                assert git(repo, "log", "-1", "--format=%s").strip() == "Add widgets"
                assert git(remote, "rev-parse", branch) == git(repo, "rev-parse", "HEAD")
                [pull] = fake.pulls[NAME]
                assert (pull["head"]["ref"], pull["base"]["ref"], pull["draft"], pull["body"]) == (
                    branch,
                    "main",
                    True,
                    "Three of them.",
                )
                assert [t for m, _, t in fake.seen if m == "POST"] == ["lent-token"]

                # The branch now shows its request, on the session and its row, and the pair goes.
                expected = {
                    "owner": "acme",
                    "repo": "widgets",
                    "pullRequestUrls": [url],
                    "pullRequestBranchName": branch,
                    "pullRequestState": "open",
                    "pullRequestStateUrl": url,
                }
                state = await snapshot_until(client, uri, lambda s: _github(s) == expected)
                assert state["_meta"]["githubData"] == {key: expected}
                [row] = (await client.call("listSessions", {"channel": "ahp-root://"}))["result"]["items"]
                assert row["_meta"]["github"] == expected and row["_meta"]["githubData"] == {key: expected}
                await cs.until(lambda s: "create-pr" not in _ops(s) and "prepare-pull-request" not in _ops(s))
                again = await invoke("create-pr", {"vscode.pullRequest": form})
                assert (
                    again["error"]["code"] == -32602 and "'create-pr' is not an operation" in again["error"]["message"]
                )

                # Asked again when a turn ends: the request was merged meanwhile.
                fake.merge(NAME, 1)
                turn = start_turn("hello there")
                await dispatch(client, chat, turn, 1)
                notes = await until(
                    client, lambda n: is_action("chat/turnComplete", chat)(n) or is_action("chat/error", chat)(n)
                )
                assert action_of(notes[-1])["type"] == "chat/turnComplete"
                await snapshot_until(client, uri, lambda s: _github(s).get("pullRequestState") == "merged")
            daemon.terminate()
            await daemon.wait()
        wire_clean(capture)


async def test_without_gh_nobody_is_asked_until_a_client_lends_a_token(tmp_path) -> None:
    repo, _, env = _setup(tmp_path)
    (tmp_path / "bin" / "gh").unlink()  # gh is not installed
    with FakeGitHub({"lent-token"}, {NAME: {"default_branch": "main"}}) as fake:
        env["AHPD_GITHUB_API_URL"] = fake.url
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("kim")
                uri, _, _ = await _session(client, repo)
                await snapshot_until(client, uri, lambda s: _github(s) == {"owner": "acme", "repo": "widgets"})
                (repo / "x.txt").write_text("x\n")
                cs = await Watched(client, f"{uri}/changeset/uncommitted").subscribe()
                await cs.until(lambda s: _ready(s) and len(s["files"]) == 1)
                assert "create-pr" not in _ops(cs.state) and fake.seen == []

                # A token lent: the branch is asked about at once, and the pair is offered.
                lent = await client.call(
                    "authenticate", {"channel": "ahp-root://", "resource": RESOURCE, "token": "lent-token"}
                )
                assert lent["result"] == {}, lent
                await cs.until(lambda s: "create-pr" in _ops(s) and "prepare-pull-request" in _ops(s))
                assert [(m, p.split("?")[0], t) for m, p, t in fake.seen] == [
                    ("GET", "/repos/acme/widgets/pulls", "lent-token")
                ]
            daemon.terminate()
            await daemon.wait()


async def test_a_github_that_fails_to_open_the_request_is_said_and_the_next_try_opens_it(tmp_path) -> None:
    repo, remote, env = _setup(tmp_path)
    with FakeGitHub({"gh-token"}, {NAME: {"default_branch": "main"}}) as fake:
        env["AHPD_GITHUB_API_URL"] = fake.url
        fake.failing = True
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=env) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("lee")
                uri, _, _ = await _session(client, repo)
                (repo / "fix.txt").write_text("fixed\n")
                cs = await Watched(client, f"{uri}/changeset/uncommitted").subscribe()
                await cs.until(lambda s: _ready(s) and "create-pr" in _ops(s) and len(s["files"]) == 1)
                call = {"channel": cs.uri, "operationId": "create-pr"}

                # The window checks a prepared form is still true before it submits it.
                context = {"workingDirectory": repo.as_uri(), "repository": NAME, "branchName": "main"}
                for base in ("trunk", "main"):
                    check = {"validateOnly": True, "expectedContext": {**context, "baseBranchName": base}}
                    said = await client.call(
                        "invokeChangesetOperation",
                        {
                            "channel": cs.uri,
                            "operationId": "prepare-pull-request",
                            "_meta": {"vscode.pullRequest": check},
                        },
                    )
                    if base == "trunk":
                        assert said["error"]["code"] == -32602 and "prepare it again" in said["error"]["message"]
                    else:
                        assert said["result"] == {}, said

                failed = await client.call("invokeChangesetOperation", call)
                assert failed["error"]["code"] == -32602, failed
                assert "GitHub did not open the request" in failed["error"]["message"]
                assert "502" in failed["error"]["message"]
                state = await cs.until(lambda s: _ops(s).get("create-pr", {}).get("status") == "error")
                assert "Server Error" in _ops(state)["create-pr"]["error"]["message"]
                # The work is not lost: committed on a branch of its own and pushed.
                branch = git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()
                assert branch.startswith("ahpd/") and porcelain(repo) == []
                assert git(remote, "rev-parse", branch) == git(repo, "rev-parse", "HEAD")
                assert "result" in await client.call("ping", {"channel": "ahp-root://"})

                # GitHub is back: the same operation opens the request for that branch.
                fake.failing = False
                made = await client.call("invokeChangesetOperation", call)
                assert "result" in made, made
                [pull] = fake.pulls[NAME]
                assert pull["head"]["ref"] == branch and pull["base"]["ref"] == "main"
                await snapshot_until(client, uri, lambda s: _github(s).get("pullRequestUrls") == [pull["html_url"]])
            daemon.terminate()
            await daemon.wait()
