"""The git port against real repositories made with the ``git`` command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ahpd.ports import git as gitport
from tests.gitrepo import git, make_repo, mixed_repo, porcelain


@pytest.fixture(autouse=True)
def _own_home(tmp_path, monkeypatch):
    home = tmp_path / "git-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def _letters(rows):
    return {r.path: (r.index + r.worktree, r.old_path) for r in rows}


def test_status_matches_git_status_porcelain(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "r")
    rows = gitport.Repo(repo).status()
    assert _letters(rows) == {
        "both.txt": ("MM", None),
        "fresh.txt": ("??", None),
        "gone.txt": (" D", None),
        "new.txt": ("R ", "old.txt"),
        "src/pkg/added.py": ("??", None),
        "src/pkg/mod.py": (" M", None),
    }
    # The same two letters git prints for each path.
    expected = {line[3:].split(" -> ")[-1]: line[:2] for line in porcelain(repo)}
    assert {p: v[0] for p, v in _letters(rows).items()} == expected
    both = next(r for r in rows if r.path == "both.txt")
    assert both.staged and both.unstaged
    assert gitport.Repo(repo).blob(both.before) == b"one\n"


def test_status_under_a_nested_folder_only_lists_that_folder(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "r")
    rows = gitport.Repo(repo / "src").status()
    assert sorted(r.path for r in rows) == ["src/pkg/added.py", "src/pkg/mod.py"]


def test_not_a_repository_and_bare(tmp_path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(gitport.NotARepository):
        gitport.Repo(tmp_path / "plain")
    bare = tmp_path / "bare.git"
    bare.mkdir()
    git(bare, "init", "-q", "--bare")
    with pytest.raises(gitport.NotARepository, match="bare"):
        gitport.Repo(bare)


def test_a_snapshot_leaves_the_index_and_stash_alone(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "r")
    index_before = (repo / ".git/index").read_bytes()
    staged_before = git(repo, "ls-files", "--stage")
    port = gitport.Repo(repo)
    start = port.snapshot()
    assert (repo / ".git/index").read_bytes() == index_before
    assert git(repo, "stash", "list") == ""
    (repo / "keep.txt").write_text("changed by the agent\n")
    (repo / "fresh.txt").unlink()
    (repo / "src/pkg/third.py").write_text("z\n")
    end = gitport.Repo(repo).snapshot()
    changes = {c.path: c.index for c in gitport.Repo(repo).diff_trees(start, end)}
    assert changes == {"keep.txt": "M", "fresh.txt": "D", "src/pkg/third.py": "A"}
    assert git(repo, "ls-files", "--stage") == staged_before


def test_stage_unstage_and_commit_one_file(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "r")
    port = gitport.Repo(repo)
    port.stage(["src"])
    assert "A  src/pkg/added.py" in porcelain(repo) and "M  src/pkg/mod.py" in porcelain(repo)
    gitport.Repo(repo).unstage(["src/pkg/mod.py"])
    assert " M src/pkg/mod.py" in porcelain(repo)
    gitport.Repo(repo).commit("only mod", ["src/pkg/mod.py"])
    assert git(repo, "log", "-1", "--format=%s").strip() == "only mod"
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["src/pkg/mod.py"]
    lines = porcelain(repo)
    assert "A  src/pkg/added.py" in lines and "R  old.txt -> new.txt" in lines  # still staged
    assert not any(line.endswith("src/pkg/mod.py") for line in lines)


def test_commit_a_renamed_row_records_one_rename(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "r")
    gitport.Repo(repo).commit("move", ["new.txt"])
    shown = git(repo, "show", "-M", "--name-status", "--format=", "HEAD").split("\n")
    assert shown[0].startswith("R") and shown[0].split("\t")[1:] == ["old.txt", "new.txt"]


def test_commit_the_whole_changeset_takes_the_index_or_everything(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "r")
    gitport.Repo(repo).commit("the index")
    assert sorted(git(repo, "show", "--no-renames", "--name-only", "--format=", "HEAD").split()) == [
        "both.txt",
        "new.txt",
        "old.txt",
    ]
    assert "both.txt" in git(repo, "status", "--porcelain")  # the re-modified part stays
    gitport.Repo(repo).commit("the rest")
    assert porcelain(repo) == []
    with pytest.raises(gitport.Refused, match="nothing to commit"):
        gitport.Repo(repo).commit("again")


def test_discard_and_restore(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "r")
    start = gitport.Repo(repo).snapshot()
    gitport.Repo(repo).discard(["both.txt", "fresh.txt"])
    assert (repo / "both.txt").read_text() == "one\n" and not (repo / "fresh.txt").exists()
    (repo / "keep.txt").write_text("agent\n")
    gitport.Repo(repo).restore(start, "keep.txt")
    gitport.Repo(repo).restore(start, "src/pkg/added.py")
    assert (repo / "keep.txt").read_text() == "kept\n"
    gitport.Repo(repo).discard(None)
    assert porcelain(repo) == []
    assert git(repo, "stash", "list") == ""


def test_a_snapshot_pruned_away_is_a_git_error(tmp_path) -> None:
    """Nothing refers to a snapshot tree, so ``git gc`` may prune it: saying so beats an AttributeError."""
    repo = mixed_repo(tmp_path / "r")
    port = gitport.Repo(repo)
    gone = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(gitport.GitError, match="no longer in the repository"):
        port.diff_trees(gone, port.snapshot())
    with pytest.raises(gitport.GitError, match="no longer in the repository"):
        port.restore(gone, "keep.txt")


def test_refusals(tmp_path) -> None:
    empty = make_repo(tmp_path / "empty")
    (empty / "a.txt").write_text("a\n")
    with pytest.raises(gitport.Refused, match="no commit"):
        gitport.Repo(empty).discard(None)
    assert (empty / "a.txt").exists()
    gitport.Repo(empty).commit("first")  # a first commit works
    assert git(empty, "log", "--format=%s").strip() == "first"

    repo = make_repo(tmp_path / "m", {"f.txt": "base\n"})
    git(repo, "checkout", "-q", "-b", "other")
    (repo / "f.txt").write_text("other\n")
    git(repo, "commit", "-qam", "other")
    git(repo, "checkout", "-q", "main")
    (repo / "f.txt").write_text("main\n")
    git(repo, "commit", "-qam", "main")
    with pytest.raises(subprocess.CalledProcessError):  # the merge conflicts
        git(repo, "merge", "other")
    with pytest.raises(gitport.Refused, match="middle of a merge"):
        gitport.Repo(repo).commit("x")
    with pytest.raises(gitport.Refused, match="middle of a merge"):
        gitport.Repo(repo).stage(None)


def test_facts_and_branches(tmp_path) -> None:
    upstream = make_repo(tmp_path / "up", {"a.txt": "a\n"})
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(upstream), str(clone))
    (clone / "b.txt").write_text("b\n")
    git(clone, "add", "b.txt")
    git(clone, "commit", "-qm", "b")
    (clone / "c.txt").write_text("c\n")
    facts = gitport.Repo(clone).facts()
    assert facts == {
        "branchName": "main",
        "upstreamBranchName": "origin/main",
        "ahead": 1,
        "behind": 0,
        "uncommittedChanges": 1,
    }
    git(clone, "branch", "older", "HEAD~1")
    assert gitport.Repo(clone).branches() == ["main", "older"]


def test_a_plain_folder_is_no_repository_without_loading_libgit2(tmp_path) -> None:
    # libgit2 is ~8 MB of the daemon: a session in a folder outside any repository does not load it.
    plain = tmp_path / "plain" / "deeper"
    plain.mkdir(parents=True)
    code = (
        "import sys\nfrom ahpd.ports import git\n"
        f"try:\n    git.Repo({str(plain)!r})\nexcept git.NotARepository as exc:\n    print('refused:', exc)\n"
        "print('pygit2' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert run.stdout.splitlines() == [f"refused: {plain} is not in a git repository", "False"]
    # A .git anywhere above is libgit2's to judge: a repository around the folder is found.
    make_repo(tmp_path / "plain")
    assert gitport.Repo(plain).root == (tmp_path / "plain").resolve()
