"""The dev stack's release repository: commits without a work tree, branches, deletions, clones.

Real: the `git` program (Debian's package); each test has its own bare repository in tmp_path.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.devenv import starter_app
from orchestrator.devenv.argocd_requests import commit_next_release
from orchestrator.devenv.gitrepo import GitError, ReleaseRepo


@pytest.fixture
def repo(tmp_path: Path) -> ReleaseRepo:
    return ReleaseRepo.create(tmp_path / "releases.git", {"app/configmap.yaml": "release: 1\n"})


def test_a_commit_changes_and_deletes_files_and_moves_the_branch(repo: ReleaseRepo) -> None:
    first = repo.head()
    second = repo.commit({"app/configmap.yaml": "release: 2\n", "app/extra.yaml": "x: 1\n"}, "two")
    third = repo.commit({"app/extra.yaml": None}, "three")

    assert len({first, second, third}) == 3 and all(len(sha) == 40 for sha in (first, second, third))
    assert repo.head() == third
    assert repo.files(second) == ["app/configmap.yaml", "app/extra.yaml"]
    assert repo.files() == ["app/configmap.yaml"]
    assert repo.show("app/configmap.yaml", first) == "release: 1\n"
    assert repo.show("app/configmap.yaml") == "release: 2\n"


def test_a_new_branch_starts_from_its_base_and_leaves_main_alone(repo: ReleaseRepo) -> None:
    main = repo.head()
    stable = repo.commit({"app/configmap.yaml": "release: stable\n"}, "stable", branch="stable", base=main)

    assert repo.head("stable") == stable and repo.head() == main
    assert repo.show("app/configmap.yaml", "stable") == "release: stable\n"
    assert repo.show("app/configmap.yaml") == "release: 1\n"


def test_what_a_person_clones_is_the_last_commit_and_a_push_is_accepted(
    repo: ReleaseRepo, tmp_path: Path
) -> None:
    repo.commit({"app/configmap.yaml": "release: 2\n"}, "two")
    work = tmp_path / "work"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run([*git, "clone", "-q", repo.url, str(work)], check=True, timeout=30)
    assert (work / "app" / "configmap.yaml").read_text() == "release: 2\n"

    (work / "app" / "configmap.yaml").write_text("release: 3\n")
    subprocess.run([*git, "-C", str(work), "commit", "-qam", "three"], check=True, timeout=30)
    subprocess.run([*git, "-C", str(work), "push", "-q", "origin", "main"], check=True, timeout=30)
    assert repo.show("app/configmap.yaml") == "release: 3\n"


def test_the_next_release_of_the_starter_app_bumps_its_number(tmp_path: Path) -> None:
    repo = ReleaseRepo.create(tmp_path / "r.git", starter_app.release_files(1))
    number, sha = commit_next_release(repo, starter_app.APP_SET)

    assert (number, sha) == (2, repo.head())
    assert starter_app.release_number(repo.show(f"{starter_app.APP_PATH}/configmap.yaml")) == 2


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/etc/passwd", id="absolute"),
        pytest.param("../outside.yaml", id="parent"),
        pytest.param(".git/config", id="git-dir"),
        pytest.param("", id="empty"),
    ],
)
def test_paths_outside_the_repository_are_refused(repo: ReleaseRepo, path: str) -> None:
    with pytest.raises(GitError, match="not a relative path"):
        repo.commit({path: "x"}, "bad")


def test_opening_a_folder_that_is_no_repository_says_so(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="not a bare Git repository"):
        ReleaseRepo.open(tmp_path)
