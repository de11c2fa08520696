"""The GitHub port: what the pull-request operations of a changeset need.

Only the interface ships. ``prepare-pull-request`` and ``create-pr`` are
offered on a changeset only where the host was given an implementation of
this port, the remote is GitHub's and the branch has no request yet; a host
given none (every host today) leaves both unadvertised, so a client never
sees a button that cannot work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class PullRequest:
    url: str
    branch: str
    state: str  # open, closed, merged


class PullRequests(Protocol):
    """A GitHub client for one repository's pull requests (blocking calls;
    the host runs them in a thread)."""

    def remote(self, folder: str) -> tuple[str, str] | None:
        """``(owner, repo)`` when the folder's remote is GitHub's, else None."""
        ...

    def newest(self, owner: str, repo: str, branch: str) -> PullRequest | None:
        """The branch's newest pull request, if it has one."""
        ...

    def open(self, owner: str, repo: str, branch: str, base: str, title: str, body: str) -> PullRequest:
        """Open a pull request of ``branch`` into ``base`` (the branch is pushed already)."""
        ...
