"""What the dev stack's Argo CD runs: the programs (`ArgoCDTools`), the settings
(`ArgoCDSettings`: namespace, clusters, servers, reconciliation timing, the starter ApplicationSet),
the clusters of the dev fleet (`ClusterSpec`, `default_clusters`) and, once started, each
destination cluster (`DestinationCluster`), and where its unix sockets can go (`socket_folder`).
`ArgoCDStackError` says what could not start.

Callers: `orchestrator.devenv.argocd` (ArgoCDStack.start), `orchestrator.devenv.stack` and
`demo_argocd` (what they start), `progressive-sync dev-cluster up --argocd`, the real-Argo-CD tests.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.devenv import starter_app, tools
from orchestrator.devenv.controlplane import DevCluster

ARGOCD_CRD_FILES = ("application-crd.yaml", "applicationset-crd.yaml", "appproject-crd.yaml")
# At most this many cluster names point at one destination API server (its serving certificate
# names 127.0.0.1 and localhost).
NAMES_PER_SERVER = 2


# A unix socket's path must fit `sun_path`: 108 bytes on Linux, the terminating NUL included.
UNIX_SOCKET_PATH_MAX = 107


def socket_folder(workdir: Path, longest_name: str) -> Path:
    """`workdir` when a socket named `longest_name` fits in it, else a new short folder in the
    system's temporary folder (the caller removes it). A deep work dir (a test's tmp_path under
    pytest-xdist, a long $TMPDIR) would otherwise make the repo-server fail with `bind: invalid
    argument`."""
    if len(os.fsencode(workdir / longest_name)) <= UNIX_SOCKET_PATH_MAX:
        return workdir
    return Path(tempfile.mkdtemp(prefix="ps-argocd-", dir="/tmp"))


class ArgoCDStackError(RuntimeError):
    """The Argo CD dev stack could not start (tools missing, a component failed); says which."""


@dataclass(frozen=True)
class ArgoCDTools:
    """The programs the stack runs (built or installed by `make tools`)."""

    argocd: Path  # one binary: application controller, ApplicationSet controller, repo-server
    wrappers_dir: Path  # holds git-verify-wrapper.sh and gpg-wrapper.sh (repo-server runs them)
    crds_dir: Path  # Argo CD's own CRDs (manifests/crds of the argo-cd module)
    redis_server: Path
    git: Path

    def check(self) -> None:
        """ArgoCDStackError naming each missing program and how to get it."""
        missing = [
            str(path) for path in (self.argocd, self.redis_server, self.git) if not os.access(path, os.X_OK)
        ]
        missing += [
            str(self.wrappers_dir / name)
            for name in ("git-verify-wrapper.sh", "gpg-wrapper.sh")
            if not (self.wrappers_dir / name).is_file()
        ]
        missing += [
            str(self.crds_dir / name) for name in ARGOCD_CRD_FILES if not (self.crds_dir / name).is_file()
        ]
        if missing:
            raise ArgoCDStackError(
                f"the real Argo CD needs {', '.join(missing)}: run `make tools` (it builds Argo CD and "
                "installs redis-server and git)"
            )

    @classmethod
    def find(cls) -> ArgoCDTools:
        """What `make tools` built (`orchestrator.devenv.tools`), plus Debian's redis-server and
        git from PATH (`make tools` installs both)."""
        try:
            argocd = tools.binary("argocd")
            crds_dir = tools.crd_dir("argocd")
        except tools.ToolsMissing as exc:
            raise ArgoCDStackError(str(exc)) from exc
        found = cls(
            argocd=argocd,
            wrappers_dir=argocd.parent,
            crds_dir=crds_dir,
            redis_server=Path(shutil.which("redis-server") or "/usr/bin/redis-server"),
            git=Path(shutil.which("git") or "/usr/bin/git"),
        )
        found.check()
        return found

    def crd_documents(self) -> list[dict[str, Any]]:
        """Argo CD's Application, ApplicationSet and AppProject CRDs."""
        return [yaml.safe_load((self.crds_dir / name).read_text()) for name in ARGOCD_CRD_FILES]


@dataclass(frozen=True)
class ClusterSpec:
    """One Argo CD cluster of the dev fleet: its name and the labels stage selectors match."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def default_clusters(count: int = 4, regions: Sequence[str] = ("eu", "us")) -> tuple[ClusterSpec, ...]:
    """`count` clusters named `<region>-<n>` round-robin over `regions` (labels region, env)."""
    if count < 1:
        raise ValueError("the dev fleet needs at least one cluster")
    clusters = []
    for index in range(count):
        region = regions[index % len(regions)]
        clusters.append(
            ClusterSpec(f"{region}-{index // len(regions) + 1}", {"region": region, "env": "dev"})
        )
    return tuple(clusters)


@dataclass(frozen=True)
class ArgoCDSettings:
    """What `ArgoCDStack.start` runs."""

    namespace: str = "argocd"
    clusters: tuple[ClusterSpec, ...] = field(default_factory=default_clusters)
    # Distinct destination kube-apiservers; cluster names beyond them reuse them under a second URL.
    servers: int = 2
    # How often the application controller compares each Application with Git, and its jitter.
    reconciliation_seconds: int = 10
    reconciliation_jitter_seconds: int = 0
    # The starter ApplicationSet (None: create none) and whether to deploy release 1 everywhere.
    app_set: str | None = starter_app.APP_SET
    bootstrap: bool = True
    # Extra `resource.customizations...` or other argocd-cm keys.
    extra_argocd_cm: Mapping[str, str] = field(default_factory=dict)
    log_level: str = "info"
    ready_timeout_seconds: float = 120.0
    # Argo CD's own progressive syncs (ApplicationSet `strategy.type: RollingSync`): off by default,
    # as in Argo CD; the ApplicationSet controller's `--enable-progressive-syncs`. Its refresh grace
    # (`--refresh-grace-period-seconds`, 30 by default in v3.6.1): how long after an Application's
    # change it waits for Argo CD's own comparison before it asks for a refresh and moves on.
    progressive_syncs: bool = False
    progressive_sync_refresh_grace_seconds: int = 30

    def __post_init__(self) -> None:
        if self.servers < 1:
            raise ValueError("--argocd-servers must be at least 1")
        if len(self.clusters) > self.servers * NAMES_PER_SERVER:
            raise ValueError(
                f"{len(self.clusters)} clusters need at least {-(-len(self.clusters) // NAMES_PER_SERVER)} "
                f"destination servers ({NAMES_PER_SERVER} cluster names per server); raise --argocd-servers"
            )
        names = [cluster.name for cluster in self.clusters]
        if len(set(names)) != len(names):
            raise ValueError(f"cluster names must be unique: {names}")


@dataclass(frozen=True)
class DestinationCluster:
    """A cluster Secret of the stack: its name, URL, labels and the API server behind it."""

    name: str
    server: str
    labels: Mapping[str, str]
    api: DevCluster

    @property
    def secret_name(self) -> str:
        """The cluster Secret's name."""
        return f"cluster-{self.name}"
