"""A local Git repository that Argo CD's repo-server reads by `file://`: where releases are committed.

`ReleaseRepo.create(path, files)` makes a bare repository whose first commit on `main` holds
`files`; `commit(changes, message)` writes a new commit on a branch without any work tree (a
temporary index: hash-object, update-index, write-tree, commit-tree), and moves the branch with
a compare-and-swap `update-ref`, so a person pushing to the same branch at the same moment makes
one of the two fail instead of losing a commit. A bare repository is what people push to:

    git clone file:///path/to/releases.git work && cd work
    edit ... && git commit -am "release 2" && git push origin main

Every git call runs with the system and global configuration ignored (the identity is passed on
the command line), no terminal prompt and a timeout. Callers: `orchestrator.devenv.argocd` and
`argocd_requests` (the dev stack and its tests), `progressive-sync dev-cluster release`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_BRANCH = "main"
AUTHOR = ("progressive-sync dev-cluster", "dev-cluster@progressivesync.invalid")
GIT_TIMEOUT_SECONDS = 30.0
ZERO_SHA = "0" * 40


class GitError(RuntimeError):
    """A git command failed; the message carries its output."""


def find_git() -> str:
    """The `git` executable on PATH (Debian's `git` package; `make tools` installs it)."""
    git = shutil.which("git")
    if git is None:
        raise GitError("git is not on PATH: install it (`apt-get install git`, or run `make tools`)")
    return git


@dataclass(frozen=True)
class ReleaseRepo:
    """A bare Git repository of manifests; `url` is what Applications name as `repoURL`."""

    path: Path
    git: str

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        files: Mapping[str, str],
        *,
        branch: str = DEFAULT_BRANCH,
        message: str = "Initial release",
    ) -> ReleaseRepo:
        """A new bare repository at `path` whose first commit on `branch` holds `files`."""
        repo = cls(Path(path), find_git())
        repo.path.mkdir(parents=True, exist_ok=True)
        repo._run("init", "--quiet", "--bare", f"--initial-branch={branch}", str(repo.path), git_dir=False)
        repo.commit(files, message, branch=branch)
        return repo

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ReleaseRepo:
        """An existing bare repository at `path`."""
        repo = cls(Path(path), find_git())
        if not (repo.path / "HEAD").is_file():
            raise GitError(f"{repo.path} is not a bare Git repository")
        return repo

    @property
    def url(self) -> str:
        """`file:///...`: the repoURL Argo CD clones from."""
        return self.path.resolve().as_uri()

    # -- reading --------------------------------------------------------------------------

    def head(self, branch: str = DEFAULT_BRANCH) -> str:
        """The full SHA `branch` points at."""
        return self._run("rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}").strip()

    def has_branch(self, branch: str) -> bool:
        """True when `refs/heads/<branch>` exists."""
        try:
            self.head(branch)
        except GitError:
            return False
        return True

    def show(self, path: str, revision: str = DEFAULT_BRANCH) -> str:
        """The content of `path` at `revision` (a branch, tag or SHA)."""
        return self._run("show", f"{revision}:{path}")

    def files(self, revision: str = DEFAULT_BRANCH) -> list[str]:
        """Every file path at `revision`."""
        return self._run("ls-tree", "-r", "--name-only", revision).splitlines()

    # -- writing --------------------------------------------------------------------------

    def commit(
        self,
        changes: Mapping[str, str | None],
        message: str,
        *,
        branch: str = DEFAULT_BRANCH,
        base: str | None = None,
    ) -> str:
        """Commit `changes` (path -> new content, None deletes it) on `branch`; the new SHA.

        The commit's parent is the branch's head, or `base` (a SHA or branch) for a new branch.
        """
        current = self.head(branch) if self.has_branch(branch) else None
        parent = current
        if parent is None and base is not None:
            parent = self._run("rev-parse", "--verify", f"{base}^{{commit}}").strip()
        with tempfile.TemporaryDirectory(prefix="progressive-sync-git-index-") as scratch:
            env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
            if parent is not None:
                self._run("read-tree", parent, env=env)
            for path, content in sorted(changes.items()):
                _check_path(path)
                if content is None:
                    # Mode 0 removes the entry; --force-remove would need a work tree.
                    self._run("update-index", "--index-info", env=env, stdin=f"0 {ZERO_SHA}\t{path}\n")
                    continue
                blob = self._run("hash-object", "-w", "--stdin", stdin=content).strip()
                self._run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            tree = self._run("write-tree", env=env).strip()
        parents: Sequence[str] = ("-p", parent) if parent else ()
        sha = self._run("commit-tree", tree, *parents, "-m", message).strip()
        # Compare-and-swap: fails (instead of dropping a commit) if someone pushed meanwhile.
        self._run("update-ref", f"refs/heads/{branch}", sha, current or ZERO_SHA)
        return sha

    # -- running git ----------------------------------------------------------------------

    def _run(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        git_dir: bool = True,
    ) -> str:
        name, email = AUTHOR
        command = [self.git]
        if git_dir:
            command.append(f"--git-dir={self.path}")
        command += ["-c", f"user.name={name}", "-c", f"user.email={email}", "-c", "commit.gpgsign=false"]
        command += list(args)
        full_env = {
            **os.environ,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
            **(env or {}),
        }
        try:
            done = subprocess.run(
                command,
                input=stdin,
                capture_output=True,
                text=True,
                env=full_env,
                timeout=GIT_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise GitError(f"git {' '.join(args)} did not finish in {GIT_TIMEOUT_SECONDS:g}s") from exc
        if done.returncode != 0:
            raise GitError(f"git {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout


def _check_path(path: str) -> None:
    parts = Path(path).parts
    if not path or path.startswith("/") or ".." in parts or ".git" in parts:
        raise GitError(f"{path!r} is not a relative path inside the repository")
