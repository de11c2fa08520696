"""The GitHub port: what a branch's pull request needs of GitHub's REST API.

httpx's async client speaks GitHub's REST shapes (``/repos/{owner}/{repo}``,
its ``pulls`` list and create): an async client runs on trio without a
thread, so a slow GitHub holds no thread of any family. The API's base URL
is GitHub's, or ``AHPD_GITHUB_API_URL`` (or the constructor's), which is how
a test puts a fake GitHub on 127.0.0.1 in its place.

A request is made with a token: the one a client lent for ``RESOURCE``
(the host finds it), or, when nobody lent one, the one ``gh auth token``
answers for the person the daemon runs as. With neither, GitHub is not
asked at all.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any

import trio

log = logging.getLogger("ahpd.ports.github")

API_ENV = "AHPD_GITHUB_API_URL"
API = "https://api.github.com"
#: The resource a client lends a token for (``authenticate``).
RESOURCE = "https://api.github.com/repos"
#: How it is advertised in every agent's ``protectedResources``.
RECORD: dict[str, Any] = {
    "resource": RESOURCE,
    "resource_name": "GitHub repositories: the pull request beside a session's branch",
    "authorization_servers": ["https://github.com/login/oauth"],
    "scopes_supported": ["repo"],
    "required": False,
}
#: Seconds a request to GitHub, or ``gh auth token``, may take.
TIMEOUT = 20.0


class GitHubError(Exception):
    """GitHub could not be asked, or said no, in words for a person."""


@dataclass(frozen=True)
class PullRequest:
    url: str
    number: int
    branch: str
    state: str  # open, closed, merged
    title: str = ""


@dataclass(frozen=True)
class Repository:
    default_branch: str
    #: The merge methods the repository allows, in the reference's spelling.
    merge_methods: tuple[str, ...] = ()
    auto_merge: bool = False


def _pull(raw: dict[str, Any]) -> PullRequest:
    state = "merged" if raw.get("merged_at") else str(raw.get("state") or "open")
    return PullRequest(
        url=str(raw["html_url"]),
        number=int(raw["number"]),
        branch=str((raw.get("head") or {}).get("ref") or ""),
        state=state,
        title=str(raw.get("title") or ""),
    )


class GitHub:
    """GitHub's REST API for pull requests, at ``base_url``."""

    def __init__(self, base_url: str | None = None, gh: str = "gh") -> None:
        self.base_url = (base_url or os.environ.get(API_ENV) or API).rstrip("/")
        self.gh = gh

    async def gh_token(self) -> str | None:
        """The token ``gh auth token`` answers, or None (no gh, not signed in)."""
        found = shutil.which(self.gh)
        if found is None:
            return None
        try:
            with trio.fail_after(TIMEOUT):
                done = await trio.run_process(
                    [found, "auth", "token"], capture_stdout=True, capture_stderr=True, check=False
                )
        except (OSError, trio.TooSlowError) as exc:
            log.info("gh auth token did not answer: %s", exc)
            return None
        token = done.stdout.decode(errors="replace").strip()
        if done.returncode != 0 or not token:
            log.debug("gh auth token: %s", done.stderr.decode(errors="replace").strip())
            return None
        return token

    async def _call(self, method: str, path: str, token: str, **kwargs: Any) -> Any:
        headers = {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {token}",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        import httpx  # when first asked: the HTTP client is start-up only a session with a GitHub remote should pay

        try:
            async with httpx.AsyncClient(base_url=self.base_url, timeout=TIMEOUT, headers=headers) as client:
                answer = await client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise GitHubError(f"GitHub could not be reached at {self.base_url}: {exc}") from None
        if answer.status_code >= 400:
            try:
                said = answer.json()
            except ValueError:
                said = {}
            why = said.get("message") if isinstance(said, dict) else None
            details = [e.get("message") for e in (said.get("errors") or []) if isinstance(e, dict)] if said else []
            words = "; ".join(filter(None, [why, *details])) or answer.reason_phrase
            raise GitHubError(f"GitHub answered {answer.status_code} to {method} {path}: {words}")
        return answer.json()

    async def repository(self, owner: str, repo: str, token: str) -> Repository:
        raw = await self._call("GET", f"/repos/{owner}/{repo}", token)
        methods = tuple(
            name
            for name, key in (
                ("MERGE", "allow_merge_commit"),
                ("SQUASH", "allow_squash_merge"),
                ("REBASE", "allow_rebase_merge"),
            )
            if raw.get(key)
        )
        return Repository(str(raw.get("default_branch") or "main"), methods, bool(raw.get("allow_auto_merge")))

    async def newest(self, owner: str, repo: str, branch: str, token: str) -> PullRequest | None:
        """The branch's newest pull request, in any state, if it has one."""
        raw = await self._call(
            "GET",
            f"/repos/{owner}/{repo}/pulls",
            token,
            params={"head": f"{owner}:{branch}", "state": "all", "sort": "created", "direction": "desc", "per_page": 1},
        )
        if not isinstance(raw, list) or not raw:
            return None
        return _pull(raw[0])

    async def open(
        self, owner: str, repo: str, branch: str, base: str, title: str, body: str, draft: bool, token: str
    ) -> PullRequest:
        """Open a pull request of ``branch`` (pushed already) into ``base``."""
        raw = await self._call(
            "POST",
            f"/repos/{owner}/{repo}/pulls",
            token,
            json={"title": title, "body": body, "head": branch, "base": base, "draft": draft},
        )
        return _pull(raw)
