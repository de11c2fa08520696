"""The pull request beside a session's branch, and the two operations that make one.

Where the host was given GitHub (``host.github``, ``ahpd.ports.github``) and
the session's repository has a GitHub remote, the branch's newest pull
request is published under ``_meta.github`` and, keyed by the working
directory's own ``file://`` URI, under ``_meta.githubData[key]`` with
``_meta.workingDirectoryKeys[workingDirectory] = key``: owner and repo from
the remote, and the reference host's ``pullRequestUrls``,
``pullRequestBranchName``, ``pullRequestState`` and ``pullRequestStateUrl``.
GitHub is asked when the session opens, when a turn ends and after
``create-pr``, with the token a client lent for ``RESOURCE`` or, when nobody
lent one, ``gh``'s.

``prepare-pull-request`` and ``create-pr`` are the reference's ids, driven by
its request ``_meta['vscode.pullRequest']``, and offered only while GitHub
answered for the branch and said it has no request yet.
``prepare-pull-request`` changes nothing and answers the form's contents as
a ``data:application/json`` follow-up; ``create-pr`` commits what is
uncommitted (on a branch of its own when the tree is on the base branch),
pushes, and opens the request, or answers the open one the branch has.
"""

from __future__ import annotations

import json
import logging
import re
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ahpd.host.changesets.book import run_off_loop
from ahpd.host.kernel import auth
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.host.sessions.summaries import set_metas
from ahpd.ports import git as gitport
from ahpd.ports import git_branches, git_facts
from ahpd.ports.github import RECORD, RESOURCE, GitHubError, PullRequest

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host
    from ahpd.host.sessions.session import Session

log = logging.getLogger("ahpd.host")

CREATE, PREPARE = "create-pr", "prepare-pull-request"
META = "vscode.pullRequest"


@dataclass
class Facts:
    """What was last heard about the session's branch."""

    remote: str
    owner: str
    repo: str
    branch: str | None
    #: GitHub answered for this branch (so ``pull`` is known, None or not).
    asked: bool = False
    pull: PullRequest | None = None


_facts: weakref.WeakKeyDictionary[Session, Facts] = weakref.WeakKeyDictionary()


def with_remote(host: Host) -> list[Session]:
    """The live sessions of ``host`` whose repository has a GitHub remote."""
    return [s for s in list(_facts) if s.host is host and not s.disposed]


def offered(session: Session) -> bool:
    """Whether the two operations are offered: GitHub answered for the branch, and it has no request."""
    facts = _facts.get(session)
    return (
        session.host.github is not None
        and facts is not None
        and facts.asked
        and facts.pull is None
        and facts.branch is not None
    )


def declared(status: str) -> list[dict[str, Any]]:
    common = {"group": "pull-request", "scopes": ["changeset"], "icon": "git-pull-request-create", "status": status}
    return [
        {
            "id": CREATE,
            "label": "Create PR",
            "description": "Commit what is uncommitted (on a branch of its own when on the base branch), "
            "push, and open a pull request",
            **common,
        },
        {
            "id": PREPARE,
            "label": "Prepare PR",
            "description": "The pull request's title, description and branches, without changing the repository",
            **common,
        },
    ]


def agent_info(host: Host, info: dict[str, Any]) -> dict[str, Any]:
    """Every agent advertises GitHub's resource, so a client may lend the
    host a token for it, whichever backend a session runs on."""
    if host.github is None:
        return info
    held = info.get("protectedResources") or []
    if any(r.get("resource") == RESOURCE for r in held):
        return info
    return {**info, "protectedResources": [*held, RECORD]}


async def token(host: Host) -> str | None:
    """A token a connected client lent for ``RESOURCE``, else ``gh``'s, else None."""
    for peer in list(host.peers):
        lent = auth.token_for(peer, RESOURCE)
        if lent:
            return lent
    return await host.github.gh_token() if host.github is not None else None


def _local(folder: Any) -> tuple[str, str, str, str | None] | None:
    """``(remote, owner, repo, branch)`` of the folder's repository, None without a GitHub remote."""
    return git_facts.github_place(folder)  # read with the git command: libgit2 stays unloaded


def _publish(session: Session, state: dict[str, Any] | None) -> None:
    key = session.cwd.as_uri()
    folders = session.state().get("workingDirectories") or [key]
    set_metas(
        session,
        {
            "github": state,
            "githubData": {key: state} if state is not None else None,
            "workingDirectoryKeys": {folders[0]: key} if state is not None else None,
        },
    )


async def refresh(session: Session) -> None:
    """Ask GitHub about the session's branch again and publish what it said."""
    host = session.host
    port = host.github
    if port is None or session.disposed:
        return
    try:
        local = await run_off_loop(_local, session.cwd)
    except gitport.GitError:
        local = None
    if local is None:
        _facts.pop(session, None)
        _publish(session, None)
        return
    remote, owner, repo, branch = local
    facts = Facts(remote, owner, repo, branch)
    state: dict[str, Any] = {"owner": owner, "repo": repo}
    lent = await token(host) if branch is not None else None
    if lent is not None and branch is not None:
        try:
            facts.pull = await port.newest(owner, repo, branch, lent)
            facts.asked = True
        except GitHubError as exc:
            log.info("%s: the pull request of %s was not found out: %s", session.uri, branch, exc)
    if facts.pull is not None:
        state |= {
            "pullRequestUrls": [facts.pull.url],
            "pullRequestBranchName": branch,
            "pullRequestState": facts.pull.state,
            "pullRequestStateUrl": facts.pull.url,
        }
    _facts[session] = facts
    _publish(session, state)


# -- the operations -------------------------------------------------------------------


@dataclass
class _Context:
    remote: str
    owner: str
    repo: str
    branch: str | None
    base: str
    token: str
    merge_methods: tuple[str, ...]


async def _context(host: Host, session: Session) -> _Context:
    port = host.github
    if port is None:
        raise RpcError(INVALID_PARAMS, "this host was not given GitHub: it opens no pull request")
    local = await run_off_loop(_local, session.cwd)
    if local is None:
        raise RpcError(INVALID_PARAMS, f"the repository at {session.cwd} has no GitHub remote")
    lent = await token(host)
    if lent is None:
        raise RpcError(
            auth.AUTH_REQUIRED,
            f"GitHub needs a token: lend one for {RESOURCE} with authenticate, or sign gh in on the host",
            {"resources": [RECORD]},
        )
    remote, owner, repo, branch = local
    try:
        repository = await port.repository(owner, repo, lent)
    except GitHubError as exc:
        raise RpcError(INVALID_PARAMS, f"GitHub could not be asked about {owner}/{repo}: {exc}") from None
    return _Context(remote, owner, repo, branch, repository.default_branch, lent, repository.merge_methods)


def _form(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """``_meta['vscode.pullRequest']``, checked; None when absent."""
    if not meta or META not in meta:
        return None
    form = meta[META]
    path = f"$._meta['{META}']"
    if not isinstance(form, dict):
        raise RpcError(INVALID_PARAMS, f"{path} is an object", {"path": path})
    if form.get("validateOnly") is True:
        return form
    if not isinstance(form.get("title"), str) or not form["title"].strip():
        raise RpcError(INVALID_PARAMS, f"{path}.title is the pull request's title", {"path": f"{path}.title"})
    if not isinstance(form.get("description", ""), str):
        raise RpcError(INVALID_PARAMS, f"{path}.description is a string", {"path": f"{path}.description"})
    for flag in ("draft", "agentMerge"):
        if not isinstance(form.get(flag, False), bool):
            raise RpcError(INVALID_PARAMS, f"{path}.{flag} is true or false", {"path": f"{path}.{flag}"})
    if form.get("agentMerge") or form.get("autoMergeMethod") is not None:
        raise RpcError(
            INVALID_PARAMS,
            "Agent Merge and GitHub auto-merge are not served by this host yet: open the request without them",
            {"path": path},
        )
    return form


def _check_expected(form: dict[str, Any] | None, details: dict[str, Any]) -> None:
    expected = (form or {}).get("expectedContext")
    if not isinstance(expected, dict):
        return
    for key in ("repository", "branchName", "baseBranchName"):
        if key in expected and expected[key] != details[key]:
            raise RpcError(
                INVALID_PARAMS,
                f"the repository moved since the pull request was prepared ({key} is now {details[key]!r}): "
                "prepare it again",
            )


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].strip("-") or "changes"


def _words(session: Session, subject: str, forced: bool, base: str) -> tuple[str, str]:
    """The title and body when nobody gave them: the session's title and the
    branch's commits, or nothing for a person to fill in where changeWords is forced."""
    if forced:
        return "", ""
    repo = gitport.Repo(session.cwd)
    whole = gitport.Repo(repo.root)
    branch = git_branches.current_branch(whole)
    lines = git_branches.commits_between(whole, base, branch) if branch and branch != base else []
    changed = len(repo.status())
    body = "\n".join(f"- {line}" for line in lines)
    if changed:
        body += (
            "\n\n" if body else ""
        ) + f"Also {changed} uncommitted file{'s' if changed != 1 else ''}, committed with it."
    return subject, body


async def prepare(
    host: Host, session: Session, subject: str, forced: bool, meta: dict[str, Any] | None
) -> dict[str, Any]:
    """``prepare-pull-request``: the form's contents, nothing changed."""
    form = _form(meta)
    ctx = await _context(host, session)
    details_ctx = {
        "workingDirectory": (session.state().get("workingDirectories") or [session.cwd.as_uri()])[0],
        "repository": f"{ctx.owner}/{ctx.repo}",
        "branchName": ctx.branch or "HEAD",
        "baseBranchName": ctx.base,
    }
    if form is not None and form.get("validateOnly") is True:
        _check_expected(form, details_ctx)
        return {}
    title, body = await run_off_loop(_words, session, subject, forced, ctx.base)
    details = {
        "title": title,
        "description": body,
        "branchName": details_ctx["branchName"],
        "baseBranchName": ctx.base,
        "repository": details_ctx["repository"],
        "autoMergeAllowed": False,
        "mergeMethods": list(ctx.merge_methods),
        "agentMergeAvailable": False,
        "context": details_ctx,
    }
    uri = "data:application/json," + quote(json.dumps(details, separators=(",", ":")), safe="")
    return {"followUp": {"content": {"uri": uri, "contentType": "application/json"}}}


def _commit_and_push(session: Session, ctx: _Context, title: str) -> tuple[str, str | None]:
    """Commit what is uncommitted (on a new branch when on the base branch) and
    push; ``(branch, commit or None)``. A thread's work."""
    repo = gitport.Repo(session.cwd)
    whole = gitport.Repo(repo.root)
    branch = git_branches.current_branch(whole)
    dirty = bool(repo.status())
    if branch is None or branch == ctx.base:
        if not dirty:
            raise gitport.Refused(
                f"nothing to propose: the tree is on {branch or 'a detached HEAD'} "
                "with no change under the session's folder"
            )
        branch = git_branches.free_branch_name(whole, f"ahpd/{_slug(title)}")
        git_branches.new_branch(whole, branch)
    if dirty:
        repo.stage(None)  # what is uncommitted, staged or not, goes in whole
    oid = repo.commit(title, None) if dirty else None
    git_branches.push(whole, ctx.remote, branch)
    return branch, oid


async def create(
    host: Host, session: Session, subject: str, forced: bool, meta: dict[str, Any] | None
) -> dict[str, Any]:
    """``create-pr``: commit, push, open (or answer the open request the branch has)."""
    form = _form(meta)
    if form is not None and form.get("validateOnly") is True:
        raise RpcError(INVALID_PARAMS, "validateOnly belongs to prepare-pull-request", {"path": f"$._meta['{META}']"})
    ctx = await _context(host, session)
    _check_expected(
        form,
        {"repository": f"{ctx.owner}/{ctx.repo}", "branchName": ctx.branch or "HEAD", "baseBranchName": ctx.base},
    )
    if form is not None:
        title, body, draft = form["title"].strip(), form.get("description", ""), bool(form.get("draft", False))
    elif forced:
        raise RpcError(
            INVALID_PARAMS,
            f"changeWords is forced: a pull request needs _meta['{META}'].title, the person's own words",
            {"path": f"$._meta['{META}'].title"},
        )
    else:
        title, body = await run_off_loop(_words, session, subject, False, ctx.base)
        draft = False
    branch, oid = await run_off_loop(_commit_and_push, session, ctx, title)
    port = host.github
    try:
        pull = await port.newest(ctx.owner, ctx.repo, branch, ctx.token)
        reused = pull is not None and pull.state == "open"
        if not reused:
            pull = await port.open(ctx.owner, ctx.repo, branch, ctx.base, title, body, draft, ctx.token)
    except GitHubError as exc:
        raise gitport.GitError(f"{branch} was pushed, but GitHub did not open the request: {exc}") from None
    assert pull is not None
    committed = f" after committing {oid[:7]}" if oid else ""
    said = "The branch already has" if reused else f"Opened{committed}"
    return {
        "message": f"{said} pull request #{pull.number} of {branch} into {ctx.base}: {pull.url}",
        "followUp": {"content": {"uri": pull.url}, "external": True},
    }
