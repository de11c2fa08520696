"""The git facts read with the ``git`` command say what libgit2's ``Repo`` says,
on real repositories, and leave libgit2 unloaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ahpd.ports import git as gitport
from ahpd.ports import git_facts
from tests.gitrepo import git, git_env, make_repo, mixed_repo


@pytest.fixture(autouse=True)
def _own_home(tmp_path, monkeypatch):
    home = tmp_path / "git-home"
    home.mkdir()
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def _same(folder) -> dict[str, object]:
    said = git_facts.facts(folder)
    assert said == gitport.Repo(folder).facts()
    return said


def test_branch_upstream_distance_and_count_as_libgit2_says(tmp_path) -> None:
    upstream = make_repo(tmp_path / "up", {"a.txt": "a\n", "z.txt": "z\n"})
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(upstream), str(clone))
    git(clone, "config", "user.name", "T")
    git(clone, "config", "user.email", "t@example.invalid")
    (clone / "b.txt").write_text("b\n")
    git(clone, "add", "b.txt")
    git(clone, "commit", "-qm", "b")
    (upstream / "u.txt").write_text("u\n")
    git(upstream, "add", "u.txt")
    git(upstream, "commit", "-qm", "u")
    git(clone, "fetch", "-q")
    (clone / "c.txt").write_text("c\n")
    (clone / "deep" / "er").mkdir(parents=True)
    (clone / "deep" / "er" / "d.txt").write_text("d\n")  # untracked files are counted one by one
    assert _same(clone) == {
        "branchName": "main",
        "upstreamBranchName": "origin/main",
        "ahead": 1,
        "behind": 1,
        "uncommittedChanges": 2,
    }
    assert _same(clone / "deep") == {
        "branchName": "main",
        "upstreamBranchName": "origin/main",
        "ahead": 1,
        "behind": 1,
        "uncommittedChanges": 1,
    }
    git(clone, "checkout", "-q", "-b", "topic", "--track", "origin/main")
    assert _same(clone)["upstreamBranchName"] == "origin/main"
    # An upstream that is gone: libgit2 names none, and neither does the git command's reading.
    git(clone, "checkout", "-q", "-b", "orphaned", "--track", "origin/main")
    git(clone, "branch", "-q", "-dr", "origin/main")
    assert "upstreamBranchName" not in _same(clone)
    git(clone, "checkout", "-q", "--detach")
    assert _same(clone)["branchName"] == "HEAD"


def test_renames_deletes_and_a_subfolder_count_as_libgit2_counts(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "r")
    assert _same(repo)["uncommittedChanges"] == 6
    _same(repo / "src")
    _same(repo / "src" / "pkg")
    # A rename out of the folder is one row under it, as libgit2's status keeps it.
    git(repo, "mv", "src/pkg/mod.py", "moved.py")
    assert _same(repo / "src")["uncommittedChanges"] == 2
    assert _same(repo)["uncommittedChanges"] == 6


def test_unborn_branch_and_what_is_no_repository(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "trunk")
    (empty / "f.txt").write_text("f\n")
    assert _same(empty) == {"branchName": "trunk", "uncommittedChanges": 1}
    (tmp_path / "plain").mkdir()
    with pytest.raises(gitport.NotARepository):
        git_facts.facts(tmp_path / "plain")
    bare = tmp_path / "bare.git"
    bare.mkdir()
    git(bare, "init", "-q", "--bare")
    with pytest.raises(gitport.NotARepository, match="bare"):
        git_facts.check(bare)


def test_the_github_remote_and_branch_as_libgit2_reads_them(tmp_path) -> None:
    repo = make_repo(tmp_path / "r", {"a.txt": "a\n"})
    assert git_facts.github_place(repo) is None
    git(repo, "remote", "add", "mirror", "https://example.invalid/x.git")
    git(repo, "remote", "add", "upstream", "git@github.com:someone/thing.git")
    assert git_facts.github_place(repo) == ("upstream", "someone", "thing", "main")
    git(repo, "remote", "add", "origin", "https://github.com/me/thing")
    assert git_facts.github_place(repo) == ("origin", "me", "thing", "main")
    git(repo, "checkout", "-q", "--detach")
    assert git_facts.github_place(repo) == ("origin", "me", "thing", None)


def test_the_facts_leave_libgit2_unloaded_and_the_index_unwritten(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "r")
    index = repo / ".git" / "index"
    (repo / "README.md").touch()  # a stat change a status would write back into the index
    before = index.read_bytes()
    code = (
        "import sys\nfrom ahpd.ports import git_facts\n"
        f"print(git_facts.facts({str(repo)!r})['uncommittedChanges'])\n"
        f"print(git_facts.github_place({str(repo)!r}))\n"
        "print('pygit2' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert run.stdout.splitlines() == ["6", "None", "False"]
    assert index.read_bytes() == before


def test_branches_and_the_current_one_as_libgit2_lists_them(tmp_path) -> None:
    repo = make_repo(tmp_path / "r", {"a.txt": "a\n"})
    git(repo, "branch", "zeta")
    git(repo, "branch", "alpha")  # the same commit as main's: by name, as Repo orders them
    git(repo, "checkout", "-q", "-b", "newest")
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "b.txt")
    env = {**git_env(tmp_path / "git-home"), "GIT_COMMITTER_DATE": "2030-01-01T00:00:00Z"}
    subprocess.run(["git", "commit", "-qm", "b"], cwd=repo, env=env, check=True)
    assert git_facts.branches(repo) == gitport.Repo(repo).branches() == ["newest", "alpha", "main", "zeta"]
    assert git_facts.current_branch(repo) == "newest"
    git(repo, "checkout", "-q", "--detach")
    assert git_facts.current_branch(repo) is None


def test_a_folder_gone_is_a_git_error_not_a_crash(tmp_path) -> None:
    repo = make_repo(tmp_path / "r", {"a.txt": "a\n"})
    gone = repo / "removed"
    with pytest.raises(gitport.NotARepository, match="could not run"):
        git_facts.facts(gone)
    with pytest.raises(gitport.NotARepository, match="could not run"):
        git_facts.check(gone)
