"""The world of the step tests (tests/integration/test_steps_*.py): a namespace with a seeded fleet of
three clusters and its inventory, the steps' runner (`python -m steps ...` as the steps' own user),
the fleet simulator playing Argo CD, and the helpers several of those files share.

The fixtures (`steps_config`, `fleet`, `runner`, `simulate`, `rig`) are registered for
tests/integration by its conftest.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from orchestrator.argocd import appsync
from orchestrator.core.clock import SystemClock
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import (
    APPLICATIONS,
    PROGRESSIVE_SYNC_STAGES,
    PROGRESSIVE_SYNCS,
    Conflict,
    Kube,
)
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import SimulatorConfig
from orchestrator.simulator.seed import SeedResult, seed_fleet
from steps.common import RolloutRef, Tuning
from steps.context import StepContext
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.outcomes import StageLists, seed_progressive_sync, stage_lists
from tests.support.simulator_events import logged_events
from tests.support.steps_harness import (
    StepRunner,
    publish_inventory,
    steps_kubeconfig,
)

REGIONS = ["eu-west-1", "us-east-1", "ap-south-1"]
CANARY = {"name": "canary", "targets": {"clusters": {"selector": {}}}, "maxTargets": 1}
REST = {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 3}
FAST = SimulatorConfig.from_yaml("defaults: {syncSeconds: 0.3, healthSeconds: 0.3}")


@pytest.fixture(scope="session")
def steps_config(control_plane: DevCluster, kube: Kube) -> Path:
    """The steps' kubeconfig, one per control plane (`steps_kubeconfig` keeps it in its workdir): one
    for all the step test files, as it was one for their single module before the split."""
    return steps_kubeconfig(control_plane, kube)


@pytest.fixture
def fleet(kube: Kube, namespace: str) -> SeedResult:
    seeded = seed_fleet(kube, namespace, clusters=3, regions=REGIONS, revision=REVISION)
    publish_inventory(kube, namespace)
    return seeded


@pytest.fixture
def runner(steps_config: Path, namespace: str, tmp_path: Path) -> StepRunner:
    return StepRunner(kubeconfig=steps_config, namespace=namespace, outputs_dir=tmp_path / "outputs")


# Read-change-replace attempts before a test gives up on a write the steps keep overtaking.
UPDATE_ATTEMPTS = 10


@dataclass
class Rig:
    """One test's world: the API, its namespace with a seeded fleet, the steps' runner, the simulator."""

    kube: Kube
    namespace: str
    fleet: SeedResult
    runner: StepRunner
    control_plane: DevCluster
    simulate: Callable[..., FleetSimulator]
    tmp_path: Path

    def app(self, cluster: str) -> dict[str, Any]:
        return self.kube.get(APPLICATIONS, self.namespace, f"{self.fleet.app_set}-{cluster}")

    def update_app(self, cluster: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Read, change, replace; on 409 again from a fresh read (bounded).

        The steps write these Applications too (select and wait-healthy patch the refresh
        annotation, sync writes the operation): a plain read-then-replace races them.
        """
        for _ in range(UPDATE_ATTEMPTS):
            app = self.app(cluster)
            change(app)
            try:
                return self.kube.replace(APPLICATIONS, self.namespace, app)
            except Conflict:
                continue
        raise AssertionError(f"Application of {cluster}: still conflicting after {UPDATE_ATTEMPTS} attempts")

    def stage(self, name: str = "canary") -> StageLists:
        """The stage's status entry with every cluster listed from its records."""
        return stage_lists(self.kube, self.namespace, "myservice", name)


def ours(rig: Rig, cluster: str) -> bool:
    """Does the cluster's Application carry a sync of rollout r1?"""
    return appsync.operation_is_ours(appsync.operation(rig.app(cluster)), "r1")


def requested(rig: Rig, cluster: str) -> bool:
    """Did rollout r1 request a sync of the cluster's Application, whether it is still in
    `.operation` or the simulator (Argo CD) took it up already (`status.operationState`)? With the
    simulator running, `ours` turns False as soon as the sync is taken up: a race."""
    app = rig.app(cluster)
    return appsync.requested_by_rollout(app, "r1") or appsync.state_is_ours(app, "r1")


def set_paused(rig: Rig, paused: bool) -> None:
    """Set the ProgressiveSync's spec.paused (a replace, read again on a conflict)."""
    for _ in range(UPDATE_ATTEMPTS):
        obj = rig.kube.get(PROGRESSIVE_SYNCS, rig.namespace, "myservice")
        obj["spec"]["paused"] = paused
        try:
            rig.kube.replace(PROGRESSIVE_SYNCS, rig.namespace, obj)
            return
        except Conflict:
            continue
    raise AssertionError("the ProgressiveSync kept conflicting")


@pytest.fixture
def simulate(kube: Kube, namespace: str, tmp_path: Path) -> Iterator[Callable[..., FleetSimulator]]:
    """Start the fleet simulator on the test's namespace (stopped after the test)."""
    running: list[FleetSimulator] = []

    def start(config: SimulatorConfig = FAST) -> FleetSimulator:
        simulator = FleetSimulator(
            kube, namespace, config, events_log=tmp_path / "sim-events.jsonl", watch_window_seconds=1
        )
        running.append(simulator.start())
        return simulator

    yield start
    for simulator in running:
        simulator.stop()
        assert simulator.error is None, simulator.error


@pytest.fixture
def rig(
    kube: Kube,
    namespace: str,
    runner: StepRunner,
    control_plane: DevCluster,
    simulate: Callable[..., FleetSimulator],
) -> Rig:
    fleet = seed_fleet(kube, namespace, clusters=3, regions=REGIONS, revision=REVISION)
    publish_inventory(kube, namespace)
    return Rig(kube, namespace, fleet, runner, control_plane, simulate, runner.outputs_dir.parent)


def app_of(kube: Kube, namespace: str, fleet: SeedResult, cluster: str) -> dict[str, Any]:
    return kube.get(APPLICATIONS, namespace, f"{fleet.app_set}-{cluster}")


def settle_events(rig: Rig, cluster: str) -> list[str]:
    """The cluster's sync and health events, once the simulator has logged it healthy."""
    kinds = ("sync-start", "sync-finish", "healthy")
    events = logged_events(
        rig.tmp_path / "sim-events.jsonl",
        lambda events: any(e["event"] == "healthy" and e["cluster"] == cluster for e in events),
        what=f"the simulator to log {cluster} healthy",
    )
    return [e["event"] for e in events if e["cluster"] == cluster and e["event"] in kinds]


def assert_ok(result: Any, code: int = 0) -> None:
    assert result.returncode == code, (
        f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    assert len(result.stdout.strip().splitlines()) == 1, f"one summary line expected: {result.stdout!r}"


def select_canary(runner: StepRunner) -> str:
    result = runner.run("select", "--stage", "canary")
    assert_ok(result)
    return json.loads(runner.targets())[0]


def finish(process: Any, log: Path, timeout: float = 60) -> tuple[int, str]:
    try:
        code = process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
    return code, log.read_text()


def hang(app: dict[str, Any]) -> None:
    """The simulator's controller never finishes this Application's operation."""
    app["metadata"]["annotations"] = {"simulator.progressivesync.io/hang": "true"}


def rollout_status(*stages: dict[str, Any], rollout_id: str = "r1") -> dict[str, Any]:
    return {
        "phase": "Progressing",
        "rollout": {"id": rollout_id, "revision": REVISION, "startedAt": "2030-01-01T12:00:00Z"},
        "stages": list(stages),
    }


def canary_done_rest_pending(rig: Rig, cluster: str) -> None:
    """The ProgressiveSync of stages canary and rest, its canary (`cluster`) done, the rest pending."""
    canary = {
        "name": "canary",
        "phase": "Progressing",
        "targets": [cluster],
        "completed": [cluster],
        "startedAt": "2030-01-01T12:00:00Z",
    }
    seed_progressive_sync(
        rig.kube,
        rig.namespace,
        stages=[CANARY, REST],
        status=rollout_status(canary, {"name": "rest", "phase": "Pending"}),
    )


def add_second_app(rig: Rig, cluster: str, *, status: dict[str, Any] | None = None) -> str:
    """Another Application of the same ApplicationSet on `cluster`, naming it by destination.name
    (with the first one's status, or `status`). When a stage took the cluster already, its records
    name the new one too (`plan_app`), as `select` would have had it been there when it planned: a
    cluster step acts only on the Applications its stage's records name (`spec.targetApps`)."""
    first = rig.app(cluster)
    name = f"{first['metadata']['name']}-worker"
    rig.kube.create(
        APPLICATIONS,
        rig.namespace,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {"name": name, "ownerReferences": first["metadata"]["ownerReferences"]},
            "spec": {**first["spec"], "destination": {"name": cluster, "namespace": "worker"}},
            "status": status if status is not None else first["status"],
        },
    )
    plan_app(rig, cluster, name)
    return name


def plan_app(rig: Rig, cluster: str, app: str) -> None:
    """Name `app` among `cluster`'s Applications in the records of every stage that took the cluster
    and names its Applications (`spec.targetApps`). The spec is immutable: each such record is
    created again with it, its status kept."""
    items, _ = rig.kube.list(PROGRESSIVE_SYNC_STAGES, rig.namespace)
    for record in items:
        planned = record["spec"].get("targetApps") or {}
        if cluster not in planned or app in planned[cluster]:
            continue
        planned[cluster] = sorted([*planned[cluster], app])
        meta = record["metadata"]
        rig.kube.delete(PROGRESSIVE_SYNC_STAGES, rig.namespace, meta["name"])
        kept = ("name", "namespace", "labels", "annotations", "ownerReferences")
        record["metadata"] = {key: value for key, value in meta.items() if key in kept}
        rig.kube.create(PROGRESSIVE_SYNC_STAGES, rig.namespace, record)


def rollout_r1(rig: Rig) -> RolloutRef:
    """The rollout `r1` of the rig's ProgressiveSync `myservice`, as a step is given it."""
    return RolloutRef(
        namespace=rig.namespace, name="myservice", rollout_id="r1", argocd_namespace=rig.namespace
    )


def opened(
    rig: Rig,
    kube: Any,
    stage: str,
    *,
    sizing: Mapping[str, Mapping[str, int]] | None = None,
    clock: Any = None,
    tuning: Tuning | None = None,
    ps: Any = None,
    taking_over: bool = False,
) -> StepContext:
    """The step's opening as the entrypoint makes it for rollout r1, with the contract the runner
    gives its steps (`sizing` overrides a stage's: `{"rest": {"start_syncs": 3}}`)."""
    return StepContext.open(
        cast(Kube, kube),
        rollout_r1(rig),
        rig.runner.contract(sizing),
        stage=stage,
        clock=clock or SystemClock(),
        tuning=tuning,
        ps=ps,
        taking_over=taking_over,
    )


def first_wave_args(rig: Rig, count: int, *, stage: str = "rest") -> tuple[str, ...]:
    """`--contract` with the first wave of `stage` `count` clusters (the builder sets maxParallel)."""
    return (
        "--contract",
        rig.runner.contract({stage: {"start_syncs": count, "max_parallel": count}}).to_json(),
    )
