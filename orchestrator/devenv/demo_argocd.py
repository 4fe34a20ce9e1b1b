"""The demo's fleet on the real Argo CD (`progressive-sync demo --argocd real`).

Instead of the fleet simulator, `start_real_fleet` starts the real Argo CD dev stack
(`orchestrator.devenv.argocd`) on the demo's control plane: six clusters in the demo's three
regions on three destination kube-apiservers (two cluster names per server), the starter
ApplicationSet `myservice` with release 1 deployed everywhere. It then commits release 2 to the
stack's Git repository and asks Argo CD to refresh (what a Git webhook does), so every Application
is OutOfSync at the new commit before the ProgressiveSync is applied.

`--fail-cluster NAME` makes that cluster's API server refuse the release (a ValidatingAdmissionPolicy
on its namespace), so its sync really fails in Argo CD.

`SyncLog` follows the Applications (list → watch) and records, in the API server's order, when a
sync operation of progressive-sync first appeared on each and how many operations Argo CD started
for it: the demo's summary ("synced in stage order, each exactly once") comes from there.

Callers: `orchestrator.devenv.demo.run_demo`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.argocd import appwatch
from orchestrator.devenv import starter_app
from orchestrator.devenv.argocd import ArgoCDStack
from orchestrator.devenv.argocd_settings import ArgoCDSettings, ArgoCDTools, ClusterSpec
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import Kube

INITIATOR = "progressive-sync"
SERVERS = 3
CLUSTERS_PER_REGION = 2


def real_clusters(regions: tuple[str, ...], canary: str | None = None) -> tuple[ClusterSpec, ...]:
    """Two clusters per region (`<region>-a`, `<region>-b`), labelled region; `canary` labelled too."""
    specs = []
    for suffix in "ab"[:CLUSTERS_PER_REGION]:
        for region in regions:
            name = f"{region}-{suffix}"
            labels = {"region": region, "env": "demo"}
            if name == canary:
                labels["canary"] = "true"
            specs.append(ClusterSpec(name, labels))
    return tuple(specs)


def real_cluster_names(regions: tuple[str, ...]) -> list[str]:
    """The names of the real demo's clusters."""
    return [spec.name for spec in real_clusters(regions)]


@dataclass
class SyncLog:
    """Records, per Application, the order our syncs were requested and how many Argo CD started."""

    kube: Kube
    namespace: str
    names: list[str]
    requested: list[str] = field(default_factory=list)
    _starts: dict[str, set[str]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SyncLog:
        """Follow the Applications on a thread until `stop()`."""
        self._thread = threading.Thread(target=self._run, name="demo-sync-log", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following (within a watch window, a second)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def starts(self) -> dict[str, int]:
        """Application -> how many sync operations of ours Argo CD started."""
        return {name: len(started) for name, started in self._starts.items()}

    def _run(self) -> None:
        follow = appwatch.follow_applications(self.kube, self.namespace, self.names, window_seconds=lambda: 1)
        with contextlib.closing(follow):
            for snapshot in follow:
                if self._stop.is_set():
                    return
                for name, app in snapshot.objects.items():
                    if app is not None:
                        self._observe(name, app)

    def _observe(self, name: str, app: dict[str, object]) -> None:
        operation = app.get("operation") or {}
        if isinstance(operation, dict) and _initiator(operation) == INITIATOR and name not in self.requested:
            self.requested.append(name)
        status = app.get("status") or {}
        state = status.get("operationState") if isinstance(status, dict) else None
        if isinstance(state, dict) and _initiator(state.get("operation") or {}) == INITIATOR:
            self._starts.setdefault(name, set()).add(str(state.get("startedAt", "")))


def _initiator(operation: object) -> str:
    if not isinstance(operation, dict):
        return ""
    return str((operation.get("initiatedBy") or {}).get("username", ""))


@dataclass
class RealFleet:
    """The demo's fleet on the real Argo CD."""

    stack: ArgoCDStack
    revision: str
    sync_log: SyncLog

    def cluster_of(self, app: str) -> str:
        """The cluster an Application of the starter ApplicationSet deploys to."""
        prefix = f"{self.stack.settings.app_set}-"
        return app[len(prefix) :] if app.startswith(prefix) else app


def start_real_fleet(
    running: contextlib.ExitStack,
    cluster: DevCluster,
    *,
    app_set: str,
    namespace: str,
    regions: tuple[str, ...],
    canary: str,
    fail_cluster: str | None,
    workdir: Path | None,
    write: Callable[[str], None],
) -> RealFleet:
    """Start Argo CD and its fleet, deploy release 1, commit release 2; stopped by `running`."""
    tools = ArgoCDTools.find()
    clusters = real_clusters(regions, canary)
    write(
        f"Starting the real Argo CD (repo-server, application controller, ApplicationSet controller), "
        f"redis and {SERVERS} destination kube-apiservers for {len(clusters)} clusters...\n"
    )
    started = time.monotonic()
    stack = ArgoCDStack.start(
        cluster,
        tools,
        ArgoCDSettings(
            namespace=namespace,
            clusters=clusters,
            servers=SERVERS,
            reconciliation_seconds=10,
            app_set=app_set,
        ),
        workdir=(workdir / "argocd") if workdir else None,
    )
    running.callback(stack.stop)
    write(
        f"Argo CD is up ({time.monotonic() - started:.0f}s): ApplicationSet {app_set} generated "
        f"{len(clusters)} Applications from the cluster Secrets and release 1 "
        f"({stack.repo.head()[:12]}) is deployed on every cluster.\n"
    )
    names = [starter_app.app_name(app_set, spec.name) for spec in clusters]
    if fail_cluster:
        stack.refuse_changes(fail_cluster)
    revision = stack.release("Release 2")
    stack.refresh(names)
    stack.wait_out_of_sync(names, revision)
    write(
        f"Committed release 2 ({revision[:12]}) to {stack.repo.url}; Argo CD compared (refresh "
        f"requested, as a Git webhook would) and every Application is OutOfSync.\n"
    )
    sync_log = SyncLog(stack.kube, namespace, names).start()
    running.callback(sync_log.stop)
    return RealFleet(stack, revision, sync_log)
