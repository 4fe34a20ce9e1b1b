"""A rollout end to end on the real control plane: fleet, simulator, Workflow, local executor.

`RolloutRig` seeds a simulated fleet (cluster Secrets, an ApplicationSet, one Application per
cluster), starts the fleet simulator (it plays Argo CD and logs every sync start, finish and
health settle with a time), creates the ProgressiveSync, plans the rollout over the live fleet and
creates the Workflow exactly as the watcher would (`build_workflow`), and runs it with the local
executor, whose steps use the steps' own restricted user (tests/support/steps_harness). It does not
start the watcher: the tests here are about the Workflow and its executor.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.api.models import ProgressiveSync
from orchestrator.argocd.fleet import app_set_view_from_object, app_view_from_object, cluster_from_secret
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.engine.executor import ExecutorSettings, LocalExecutor
from orchestrator.kube.client import APPLICATION_SETS, APPLICATIONS, PROGRESSIVE_SYNCS, WORKFLOWS, Kube
from orchestrator.planning.planner import RolloutPlan, plan_rollout
from orchestrator.simulator.appcontroller import (
    Behaviour,
    FleetSimulator,
    SeedResult,
    SimulatorConfig,
    max_in_flight,
    read_events,
    seed_fleet,
)
from tests.support.steps_harness import STEPS_USER, make_progressive_sync, steps_kubeconfig
from tests.support.wait import wait_for
from workflow_templates.builder import build_workflow, workflow_object
from workflow_templates.settings import WorkflowSettings

REVISION = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"
REGIONS = ("eu-west-1", "us-east-1", "ap-south-1")
FINISHED = ("Succeeded", "Failed", "Error")


@dataclass
class RolloutRig:
    """Everything one end-to-end rollout test needs; `close()` stops what it started."""

    control_plane: DevCluster
    kube: Kube
    namespace: str
    workdir: Path
    clusters: int = 12
    behaviour: Behaviour = field(default_factory=lambda: Behaviour(sync_seconds=0.3, health_seconds=0.3))
    cluster_behaviour: dict[str, dict[str, Any]] = field(default_factory=dict)
    fleet: SeedResult | None = None
    simulator: FleetSimulator | None = None
    executor: LocalExecutor | None = None
    ps: ProgressiveSync | None = None
    workflow_name: str = ""

    @property
    def events_path(self) -> Path:
        return self.workdir / "simulator-events.jsonl"

    def seed(self) -> SeedResult:
        self.fleet = seed_fleet(
            self.kube, self.namespace, clusters=self.clusters, regions=REGIONS, revision=REVISION
        )
        config = SimulatorConfig(self.behaviour, tuple(self.cluster_behaviour.items()))
        self.simulator = FleetSimulator(
            self.kube, self.namespace, config, events_log=self.events_path
        ).start()
        return self.fleet

    def executor_settings(self) -> ExecutorSettings:
        return ExecutorSettings(
            kubeconfig=steps_kubeconfig(self.control_plane, self.kube),
            namespace=self.namespace,
            workdir=self.workdir / "executor",
            resync_seconds=0.5,
            kill_grace_seconds=3.0,
            step_timeout_seconds=120.0,
            watch_timeout_seconds=20,
        )

    def start_executor(self) -> LocalExecutor:
        self.executor = LocalExecutor(self.kube, self.executor_settings()).start()
        return self.executor

    def stop_executor(self) -> None:
        if self.executor is not None:
            self.executor.stop()
            self.executor = None

    def plan(self) -> RolloutPlan:
        assert self.ps is not None
        secrets = self.kube.list_cluster_secrets(self.namespace)
        apps, _ = self.kube.list(APPLICATIONS, self.namespace)
        app_set = self.kube.get(APPLICATION_SETS, self.namespace, self.ps.spec.app_set_ref.name)
        return plan_rollout(
            self.ps.spec,
            ps_name=self.ps.metadata.name,
            appset=app_set_view_from_object(app_set),
            clusters=[cluster_from_secret(secret) for secret in secrets],
            apps=[app_view_from_object(app) for app in apps],
        )

    def start_rollout(self, stages: list[dict[str, Any]], *, deadline_seconds: int = 60, **ps: Any) -> str:
        """Create the ProgressiveSync and its rollout's Workflow (as the watcher would); its name."""
        self.ps = make_progressive_sync(
            self.kube, self.namespace, stages=stages, deadline_seconds=deadline_seconds, **ps
        )
        plan = self.plan()
        assert not plan.errors, plan.errors
        settings = WorkflowSettings(
            argocd_namespace=self.namespace, retry_backoff="1s", retry_backoff_cap="2s"
        )
        workflow = build_workflow(
            self.ps,
            rollout_id=plan.release_id(self.ps.metadata.generation or 1),
            revision=",".join(plan.revisions),
            plan=plan,
            settings=settings,
        )
        created = self.kube.create(WORKFLOWS, self.namespace, workflow_object(workflow))
        self.workflow_name = str(created["metadata"]["name"])
        return self.workflow_name

    # -- reading ---------------------------------------------------------------------------

    def workflow(self) -> dict[str, Any]:
        return self.kube.get(WORKFLOWS, self.namespace, self.workflow_name)

    def phase(self) -> str:
        return str((self.workflow().get("status") or {}).get("phase", ""))

    def wait_finished(self, timeout: float = 180.0) -> dict[str, Any]:
        wait_for(
            lambda: self.phase() in FINISHED, timeout=timeout, interval=0.2, what="the Workflow to finish"
        )
        return self.workflow()

    def nodes(self, **match: str) -> list[dict[str, Any]]:
        nodes = (self.workflow().get("status") or {}).get("nodes") or {}
        return [n for n in nodes.values() if all(n.get(k) == v for k, v in match.items())]

    def progressive_sync(self) -> ProgressiveSync:
        assert self.ps is not None
        return ProgressiveSync.model_validate(
            self.kube.get(PROGRESSIVE_SYNCS, self.namespace, self.ps.metadata.name)
        )

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.events_path)

    def sync_starts(self) -> dict[str, int]:
        """Application name -> how many sync operations the simulator picked up for it."""
        counts: dict[str, int] = {}
        for event in self.events():
            if event["event"] == "sync-start":
                counts[event["app"]] = counts.get(event["app"], 0) + 1
        return counts

    def stage_targets(self) -> dict[str, list[str]]:
        status = self.progressive_sync().status
        return {
            stage.name: list(stage.targets) for stage in (status.stages if status and status.stages else [])
        }

    def in_flight(self, clusters: list[str]) -> int:
        return max_in_flight(e for e in self.events() if e["cluster"] in clusters)

    def window(self, clusters: list[str]) -> tuple[float, float]:
        """(first sync start, last settle) of these clusters, from the simulator's clock."""
        times = [e["time"] for e in self.events() if e["cluster"] in clusters]
        starts = [e["time"] for e in self.events() if e["cluster"] in clusters and e["event"] == "sync-start"]
        return (min(starts), max(times))

    def steps_writes(self, mark: int) -> list[Any]:
        return [e for e in self.control_plane.audit_events_since(mark) if e.user == STEPS_USER]

    def close(self) -> None:
        self.stop_executor()
        if self.simulator is not None:
            self.simulator.stop()


@contextlib.contextmanager
def rollout_rig(
    control_plane: DevCluster, kube: Kube, namespace: str, workdir: Path, **kwargs: Any
) -> Iterator[RolloutRig]:
    """A seeded fleet with its simulator running; the test starts the rollout and the executor."""
    rig = RolloutRig(control_plane, kube, namespace, workdir, **kwargs)
    try:
        rig.seed()
        yield rig
    finally:
        rig.close()
