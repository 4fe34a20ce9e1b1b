"""A rollout end to end on either engine: fleet, simulator, ProgressiveSync, Workflow, and what happened.

`RolloutRig(engine)` seeds a simulated fleet (cluster Secrets, an ApplicationSet, one Application per
cluster) in the engine's namespace and starts the fleet simulator when asked (`simulate`, with
behaviours per cluster: it plays Argo CD and logs every sync start, finish and health settle with a
time). A test then either creates the rollout's Workflow itself, exactly as the watcher would
(`start_rollout`: plan over the live fleet, `build_workflow`), or runs the watcher
(`watcher()`/`watcher_process()`) and lets it do so. The engine (tests/support/engines.py) runs the
Workflow: the local executor, or the real Argo Workflows controller.

Readers return what the scenarios compare across engines: the Applications the simulator synced
(`sync_starts`, from its events log), the steps' writes (the API server's audit log), the stage
phases and the ProgressiveSync's status, the Workflow and its nodes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.api.metadata import NAME_LABEL, label_value
from orchestrator.api.models import ProgressiveSync, StagePhase
from orchestrator.api.release import Release, spec_hash
from orchestrator.argocd.fleet import app_set_view_from_object, app_view_from_object, cluster_from_secret
from orchestrator.kube.client import APPLICATION_SETS, APPLICATIONS, PROGRESSIVE_SYNCS, SECRETS, WORKFLOWS
from orchestrator.planning.contract import parse_contract
from orchestrator.planning.planner import RolloutPlan, plan_rollout
from orchestrator.planning.sizing import clusters_of_batch
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import ANNOTATION_PREFIX, Behaviour, SimulatorConfig
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import SeedResult, seed_fleet
from orchestrator.watcher.loop import Watcher
from tests.support.engines import RolloutEngine
from tests.support.outcomes import stage_outcomes, status_with_outcomes
from tests.support.simulator_events import max_in_flight
from tests.support.steps_harness import make_progressive_sync, publish_inventory
from tests.support.wait import wait_for
from tests.support.watcher_harness import Fleet, WatcherProcess, in_process_watcher, release
from workflow_templates import names
from workflow_templates.builder import build_workflow, workflow_object

REVISION = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"
REVISION_2 = "5a2d3f0c8b4e6d9f2a1b3c5d7e9f1a2b4c6d8e0f"
REGIONS = ("eu-west-1", "us-east-1", "ap-south-1")
FINISHED = ("Succeeded", "Failed", "Error")
PS_NAME = "myservice"
# Short retries, so a failure that is not retried does not wait long (Argo waits the backoff first).
RETRIES = {"retry_backoff": "1s", "retry_backoff_cap": "2s"}


@dataclass
class RolloutRig:
    """Everything one end-to-end rollout needs; `close()` stops what it started."""

    engine: RolloutEngine
    clusters: int = 12
    behaviour: Behaviour = field(default_factory=lambda: Behaviour(sync_seconds=0.3, health_seconds=0.3))
    # The ApplicationSet template's metadata beyond its name (labels the simulator's ApplicationSet
    # controller writes onto the Applications, with `appSetController: true`).
    template_metadata: Mapping[str, Any] | None = None
    fleet: SeedResult | None = None
    simulator: FleetSimulator | None = None
    ps: ProgressiveSync | None = None
    workflow_name: str = ""
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def kube(self) -> Any:
        return self.engine.kube

    @property
    def namespace(self) -> str:
        return self.engine.namespace

    @property
    def events_path(self) -> Path:
        return self.engine.workdir / "simulator-events.jsonl"

    # -- the world -------------------------------------------------------------------------

    def seed(self) -> SeedResult:
        self.fleet = seed_fleet(
            self.kube,
            self.namespace,
            clusters=self.clusters,
            regions=REGIONS,
            revision=REVISION,
            app_set_template_metadata=self.template_metadata,
        )
        publish_inventory(self.kube, self.namespace)  # what the watcher does; tests without one need it
        return self.fleet

    def simulate(self, per_cluster: Mapping[str, Mapping[str, Any]] | None = None) -> FleetSimulator:
        """Start the simulator; `per_cluster` maps cluster names (fnmatch patterns) to behaviours in
        the simulator's YAML keys (`syncSeconds`, `healthSeconds`, `fail`, `degrade`, `hang`)."""
        config = SimulatorConfig.from_yaml(
            yaml.safe_dump(
                {
                    "defaults": {
                        "syncSeconds": self.behaviour.sync_seconds,
                        "healthSeconds": self.behaviour.health_seconds,
                    },
                    "clusters": dict(per_cluster or {}),
                }
            )
        )
        self.simulator = FleetSimulator(
            self.kube, self.namespace, config, events_log=self.events_path
        ).start()
        self._stack.callback(self.simulator.stop)
        return self.simulator

    def run_engine(self) -> None:
        """The engine runs Workflows from now until `close()`."""
        self._stack.enter_context(self.engine.running())

    def watcher(self, **changes: Any) -> Watcher:
        """The watcher in this process, building Workflows for this engine, until `close()`."""
        changes.setdefault("workflow", self.engine.workflow_settings(**RETRIES))
        return self._stack.enter_context(in_process_watcher(self.kube, self.namespace, **changes))

    def watcher_process(self) -> WatcherProcess:
        """`progressive-sync watch` as a child process (not started; stopped at `close()`)."""
        process = self.engine.watcher_process(self.engine.workdir / "watcher.log")
        self._stack.callback(process.stop)
        return process

    def release(self, revision: str) -> None:
        """A new commit: every Application turns OutOfSync at `revision` (what Argo CD would report)."""
        assert self.fleet is not None
        fleet = Fleet(
            self.namespace,
            self.fleet.app_set,
            tuple(c.name for c in self.fleet.clusters),
            tuple(self.fleet.applications),
        )
        release(self.kube, fleet, revision)

    def set_behaviour(self, cluster: str, **behaviour: str) -> None:
        """Change how the simulator treats a cluster from now on (annotations on its Secret)."""
        secret = next(s for s in self.kube.list_cluster_secrets(self.namespace) if s.name == cluster)
        annotations = {f"{ANNOTATION_PREFIX}{key}": value for key, value in behaviour.items()}
        patch = {"metadata": {"annotations": annotations}}
        self.kube.patch(SECRETS, self.namespace, secret.secret_name, patch)

    def set_app_behaviour(self, cluster: str, **behaviour: str) -> None:
        """Change how the simulator treats the cluster's synced Applications from now on (annotations
        on the Applications themselves: the simulator looks at an Application again at once when it
        changes, so this takes effect now, even while it waits out a long `healthSeconds`)."""
        apps = {event["app"] for event in self.events() if event["cluster"] == cluster}
        assert apps, f"no Application of cluster {cluster} was synced yet"
        annotations = {f"{ANNOTATION_PREFIX}{key}": value for key, value in behaviour.items()}
        for app in sorted(apps):
            self.kube.patch(APPLICATIONS, self.namespace, app, {"metadata": {"annotations": annotations}})

    def progressive_sync_model(self, stages: list[dict[str, Any]], **spec: Any) -> ProgressiveSync:
        """The ProgressiveSync these stages make, without creating it (to plan before it exists)."""
        return ProgressiveSync.model_validate(
            {
                "metadata": {"name": PS_NAME, "namespace": self.namespace},
                "spec": {"appSetRef": {"name": PS_NAME}, "stages": stages, **spec},
            }
        )

    def create_ps(self, stages: list[dict[str, Any]], *, deadline_seconds: int = 60, **ps: Any) -> None:
        """Create the ProgressiveSync; a Degraded cluster fails at once unless a test says otherwise."""
        ps.setdefault("degraded_grace_seconds", 0)
        self.ps = make_progressive_sync(
            self.kube, self.namespace, stages=stages, deadline_seconds=deadline_seconds, **ps
        )

    def plan(self, ps: ProgressiveSync | None = None) -> RolloutPlan:
        """The planner over the live fleet, as the watcher and `select` run it."""
        ps = ps or self.ps
        assert ps is not None
        secrets = self.kube.list_cluster_secrets(self.namespace)
        apps, _ = self.kube.list(APPLICATIONS, self.namespace)
        app_set = self.kube.get(APPLICATION_SETS, self.namespace, ps.spec.app_set_ref.name)
        return plan_rollout(
            ps.spec,
            ps_name=ps.metadata.name,
            appset=app_set_view_from_object(app_set),
            clusters=[cluster_from_secret(secret) for secret in secrets],
            apps=[app_view_from_object(app) for app in apps],
        )

    def planned_targets(self, stages: list[dict[str, Any]], stage: str) -> list[str]:
        """The clusters `stage` will take, in rollout order (before the ProgressiveSync exists)."""
        return list(self.plan(self.progressive_sync_model(stages)).stage(stage).targets)

    def start_rollout(
        self,
        stages: list[dict[str, Any]] | None = None,
        *,
        deadline_seconds: int = 60,
        rollout_id: str | None = None,
        **ps: Any,
    ) -> str:
        """Create the ProgressiveSync (once) and a rollout Workflow as the watcher would; its name."""
        if self.ps is None:
            assert stages is not None
            self.create_ps(stages, deadline_seconds=deadline_seconds, **ps)
        assert self.ps is not None
        plan = self.plan()
        assert not plan.errors, plan.errors
        workflow = build_workflow(
            self.ps,
            release=_with_id(
                Release.of(
                    generation=self.ps.metadata.generation or 1,
                    spec_hash=spec_hash(self.ps.spec),
                    revisions=plan.revisions,
                ),
                rollout_id,
            ),
            plan=plan,
            settings=self.engine.workflow_settings(**RETRIES),
        )
        created = self.kube.create(WORKFLOWS, self.namespace, workflow_object(workflow))
        self.workflow_name = str(created["metadata"]["name"])
        return self.workflow_name

    # -- reading ---------------------------------------------------------------------------

    def workflows(self) -> list[dict[str, Any]]:
        items, _ = self.kube.list(
            WORKFLOWS, self.namespace, label_selector=f"{NAME_LABEL}={label_value(PS_NAME)}"
        )
        return sorted(items, key=lambda w: str(w["metadata"]["creationTimestamp"]))

    def workflow(self, workflow: str = "") -> dict[str, Any]:
        return self.kube.get(WORKFLOWS, self.namespace, workflow or self.workflow_name)

    def phase(self, workflow: str = "") -> str:
        return str((self.workflow(workflow).get("status") or {}).get("phase", ""))

    def state(self, workflow: str = "") -> dict[str, Any]:
        """What a failed wait on the Workflow reports: phase, message, shutdown, lock and nodes."""
        found = self.workflow(workflow)
        status = found.get("status") or {}
        return {
            "phase": status.get("phase"),
            "message": status.get("message"),
            "shutdown": (found.get("spec") or {}).get("shutdown"),
            "synchronization": status.get("synchronization"),
            "nodes": {n.get("displayName"): n.get("phase") for n in (status.get("nodes") or {}).values()},
            "resourceVersion": found["metadata"].get("resourceVersion"),
        }

    def wait_finished(self, workflow: str = "", timeout: float = 300.0) -> dict[str, Any]:
        wait_for(
            lambda: self.phase(workflow) in FINISHED,
            timeout=timeout,
            interval=0.5,
            what=f"Workflow {workflow or self.workflow_name} to finish",
            describe=lambda: self.state(workflow),
        )
        return self.workflow(workflow)

    def nodes(self, workflow: str = "", **match: str) -> list[dict[str, Any]]:
        """Status nodes of the Workflow whose fields equal every keyword given (e.g. type="Pod")."""
        nodes = (self.workflow(workflow).get("status") or {}).get("nodes") or {}
        return [n for n in nodes.values() if all(n.get(k) == v for k, v in match.items())]

    @property
    def batched(self) -> bool:
        """The engine runs the stages in batches (tests/support/engines.py, `*-batch`)."""
        return self.engine.batch_threshold is not None

    def cluster_pods(self) -> list[dict[str, Any]]:
        """The Pod nodes that ran clusters: one per cluster, or one per batch in batch mode."""
        return self.nodes(templateName="batch" if self.batched else "cluster", type="Pod")

    def cluster_nodes(self, stage_task: str, index: int, cluster: str) -> list[dict[str, Any]]:
        """The node that shows how `cluster` (item `index` of the stage) ended: its own Retry node,
        or in batch mode the Retry node of the batch that ran it (the one
        orchestrator.planning.sizing.clusters_of_batch deals item `index` to, from the stage's batch
        count and maxParallel in the Workflow's rollout contract)."""
        loop = f"{self.workflow_name}.{stage_task}.clusters"
        if not self.batched:
            return self.nodes(name=f"{loop}.cluster({index}:{cluster})")
        arguments = self.workflow()["spec"]["arguments"]["parameters"]
        contract = parse_contract(next(p["value"] for p in arguments if p["name"] == names.PARAM_CONTRACT))
        task_names = names.stage_task_names(stage.name for stage in contract.stages)
        sized = contract.stages[task_names.index(stage_task)]
        positions = [str(position) for position in range(index + 1)]
        [batch] = [
            b
            for b in range(sized.batches)
            if str(index) in clusters_of_batch(positions, sized.batches, b, sized.max_parallel)
        ]
        return self.nodes(name=f"{loop}.batch({batch}:{batch})")

    def progressive_sync(self) -> ProgressiveSync:
        return ProgressiveSync.model_validate(self.kube.get(PROGRESSIVE_SYNCS, self.namespace, PS_NAME))

    def status(self) -> dict[str, Any]:
        return status_with_outcomes(self.kube, self.namespace, PS_NAME)

    def wait_phase(self, phase: str, timeout: float = 300.0) -> dict[str, Any]:
        wait_for(
            lambda: self.status().get("phase") == phase,
            timeout=timeout,
            interval=0.5,
            what=f"the ProgressiveSync {phase} (status: {self.status()})",
        )
        return self.status()

    def stage_phases(self) -> dict[str, StagePhase | None]:
        status = self.progressive_sync().status
        return {stage.name: stage.phase for stage in (status.stages if status and status.stages else [])}

    def stage_targets(self) -> dict[str, list[str]]:
        """Each stage's targets, from its records (a stage without any took none)."""
        status = self.progressive_sync().status
        outcomes = stage_outcomes(self.kube, PS_NAME, self.namespace)
        return {
            stage.name: list(outcomes[stage.name].targets) if stage.name in outcomes else []
            for stage in (status.stages if status and status.stages else [])
        }

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.events_path) if self.events_path.exists() else []

    def sync_starts(self) -> dict[str, int]:
        """Cluster name -> how many sync operations the simulator picked up there."""
        counts: dict[str, int] = {}
        for event in self.events():
            if event["event"] == "sync-start":
                counts[event["cluster"]] = counts.get(event["cluster"], 0) + 1
        return counts

    def all_clusters(self) -> list[str]:
        assert self.fleet is not None
        return sorted(cluster.name for cluster in self.fleet.clusters)

    def in_flight(self, clusters: list[str]) -> int:
        return max_in_flight(e for e in self.events() if e["cluster"] in clusters)

    def window(self, clusters: list[str]) -> tuple[float, float]:
        """(first sync start, last settle) of these clusters, from the simulator's clock."""
        times = [e["time"] for e in self.events() if e["cluster"] in clusters]
        starts = [e["time"] for e in self.events() if e["cluster"] in clusters and e["event"] == "sync-start"]
        return (min(starts), max(times))

    def app_writes_by_steps(self, mark: int) -> dict[str, int]:
        """Application name -> updates the steps' user made since `mark` (the API server's audit log)."""
        counts: dict[str, int] = {}
        for event in self.engine.cluster.audit_events_since(mark):
            if (
                event.user == self.engine.steps_user
                and event.resource == "applications"
                and event.verb == "update"
                and event.code == 200
            ):
                counts[event.name] = counts.get(event.name, 0) + 1
        return counts

    def close(self) -> None:
        self._stack.close()


@contextlib.contextmanager
def rollout_rig(engine: RolloutEngine, **kwargs: Any) -> Iterator[RolloutRig]:
    """A seeded fleet on `engine` (the test starts the simulator, the engine and the rollout)."""
    rig = RolloutRig(engine, **kwargs)
    try:
        rig.seed()
        yield rig
    finally:
        rig.close()


def _with_id(release: Release, rollout_id: str | None) -> Release:
    """The release, run as `rollout_id` when a test names it (a second rollout of the same release)."""
    return dataclasses.replace(release, id=rollout_id) if rollout_id else release
