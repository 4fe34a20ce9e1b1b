"""Each step through the entrypoint a container runs (`python -m steps ...` with PROGRESSIVE_SYNC_*
environment and a kubeconfig), against the real API server, with the fleet simulator playing Argo
CD. Each step is run twice: the second run must end the same and write nothing (audit log).

The steps run as their own user with the chart's RBAC for step pods; the test and the simulator
write as admin, so the audit log tells the steps' writes apart.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

import steps.batch
from orchestrator.api.models import RolloutPhase, StagePhase
from orchestrator.argocd import appsync
from orchestrator.argocd.inventory import INVENTORY_NAME, clusters_from_configmap, inventory_configmap
from orchestrator.core.clock import SystemClock, format_time
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import (
    APPLICATIONS,
    CONFIG_MAPS,
    PROGRESSIVE_SYNC_STAGES,
    PROGRESSIVE_SYNCS,
    SECRETS,
    WORKFLOWS,
    Conflict,
    Kube,
    Retryable,
)
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import SimulatorConfig
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import SeedResult, seed_fleet
from steps.batch import BatchResult, run_batch
from steps.cluster import ClusterResult, run_cluster
from steps.common import FleetLookup, RolloutRef, Tuning, load_progressive_sync
from steps.context import StepContext
from steps.select_stage import select_stage
from steps.wait_healthy import wait_healthy
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.builders import OLD_REVISION, foreign_operation, make_contract
from tests.support.clock import ManualClock
from tests.support.outcomes import StageLists, record_failed, seed_progressive_sync, stage_lists
from tests.support.simulator_events import logged_events
from tests.support.steps_harness import (
    CountingKube,
    StepRunner,
    describe,
    make_progressive_sync,
    publish_inventory,
    read_progressive_sync,
    steps_kubeconfig,
    writes_by,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

REGIONS = ["eu-west-1", "us-east-1", "ap-south-1"]
CANARY = {"name": "canary", "targets": {"clusters": {"selector": {}}}, "maxTargets": 1}
REST = {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 3}
FAST = SimulatorConfig.from_yaml("defaults: {syncSeconds: 0.3, healthSeconds: 0.3}")
# What a step returns, for `counted`.
Outcome = TypeVar("Outcome")


@pytest.fixture(scope="module")
def steps_config(control_plane: DevCluster, kube: Kube) -> Path:
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
_UPDATE_ATTEMPTS = 10


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
        for _ in range(_UPDATE_ATTEMPTS):
            app = self.app(cluster)
            change(app)
            try:
                return self.kube.replace(APPLICATIONS, self.namespace, app)
            except Conflict:
                continue
        raise AssertionError(f"Application of {cluster}: still conflicting after {_UPDATE_ATTEMPTS} attempts")

    def stage(self, name: str = "canary") -> StageLists:
        """The stage's status entry with every cluster listed from its records."""
        return stage_lists(self.kube, self.namespace, "myservice", name)


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


# --- select ----------------------------------------------------------------------------------


def test_select_records_targets_and_a_second_run_writes_nothing(
    kube: Kube, namespace: str, fleet: SeedResult, runner: StepRunner, control_plane: DevCluster
) -> None:
    make_progressive_sync(kube, namespace, stages=[CANARY, REST])
    result = runner.run("select", "--stage", "canary")
    assert_ok(result)
    targets = json.loads(runner.targets())
    assert len(targets) == 1 and targets[0] in {c.name for c in fleet.clusters}
    status = read_progressive_sync(kube, namespace).status
    assert status is not None and status.rollout is not None
    assert (status.rollout.id, status.rollout.revision, status.current_stage) == ("r1", REVISION, "canary")
    stages = {s.name: s for s in status.stages or []}
    assert stages["canary"].phase == StagePhase.PROGRESSING
    assert stage_lists(kube, namespace, "myservice", "canary").targets == targets
    assert stages["canary"].started_at is not None
    assert stages["rest"].phase == StagePhase.PENDING
    assert status.progress == "0/3"

    mark = control_plane.audit_mark()
    (runner.outputs_dir / "targets").unlink()
    again = runner.run("select", "--stage", "canary")
    assert_ok(again)
    assert json.loads(runner.targets()) == targets
    assert "already selected" in again.stdout
    assert writes_by(control_plane, mark) == []

    rest = runner.run("select", "--stage", "rest")
    assert_ok(rest)
    assert sorted(json.loads(runner.targets())) == sorted(
        c.name for c in fleet.clusters if c.name not in targets
    )


def test_select_skips_a_stage_that_matches_nothing(
    kube: Kube, namespace: str, fleet: SeedResult, runner: StepRunner
) -> None:
    nowhere = {"name": "mars", "targets": {"clusters": {"selector": {"matchLabels": {"region": "mars-1"}}}}}
    make_progressive_sync(kube, namespace, stages=[nowhere, REST])
    result = runner.run("select", "--stage", "mars")
    assert_ok(result)
    assert json.loads(runner.targets()) == []
    stage = read_progressive_sync(kube, namespace).status.stages[0]  # type: ignore[union-attr,index]
    assert stage.phase == StagePhase.SKIPPED
    assert "matches none" in stage.message and "matches none" in result.stdout


def test_select_of_an_unknown_stage_is_a_usage_error(
    kube: Kube, namespace: str, fleet: SeedResult, runner: StepRunner
) -> None:
    make_progressive_sync(kube, namespace)
    result = runner.run("select", "--stage", "nope")
    assert_ok(result, 2)
    assert "--stage 'nope'" in result.stdout


class WatcherCatchesUp(ManualClock):
    """`select`'s clock: the watcher publishes the cluster inventory while `select` first sleeps
    (the lag of a cluster whose Secret and Application appeared together, made deterministic)."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        super().__init__(datetime.now(UTC))
        self.kube, self.namespace, self.published = kube, namespace, False

    def sleep(self, seconds: float) -> None:
        if not self.published:
            publish_inventory(self.kube, self.namespace)
            self.published = True
        super().sleep(seconds)


def select_with(rig: Rig, stage: str, clock: ManualClock) -> Any:
    """`select_stage` as the step pod runs it (the steps' own user), on a test clock."""
    client = Kube.from_kubeconfig(str(rig.runner.kubeconfig))
    try:
        return select_stage(client, opened(rig, client, stage, clock=clock, taking_over=True))
    finally:
        client.close()


def test_select_waits_for_the_inventory_to_list_a_new_cluster_instead_of_failing_the_stage(
    rig: Rig,
) -> None:
    """Issue 29 point 11: a fourth cluster's Secret and Application appear together; the watcher
    has not published it in the inventory yet when `select` runs. The stage used to fail ("the plan
    has errors: no cluster Secret for the destination of ..."); now it waits for the inventory."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    grown = seed_fleet(rig.kube, rig.namespace, clusters=4, regions=REGIONS, revision=REVISION)
    new = grown.clusters[-1].name
    clock = WatcherCatchesUp(rig.kube, rig.namespace)

    result = select_with(rig, "rest", clock)

    assert result.phase == StagePhase.PROGRESSING, result.reason
    assert sorted(result.targets) == sorted(c.name for c in grown.clusters)
    assert clock.published
    stage = rig.stage("rest")
    assert new in stage.targets
    assert "for the cluster inventory" in stage.message and f"myservice-{new}" in stage.message, stage.message


def test_select_says_what_the_inventory_lacks_when_it_never_lists_the_cluster(rig: Rig) -> None:
    """The same, with the watcher never publishing the new cluster: at the bound the stage fails
    and its message names the Application, its destination, the inventory and what to check."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    grown = seed_fleet(rig.kube, rig.namespace, clusters=4, regions=REGIONS, revision=REVISION)
    new = grown.clusters[-1]
    clock = ManualClock(datetime.now(UTC))

    result = select_with(rig, "rest", clock)

    assert result.phase == StagePhase.FAILED
    message = rig.stage("rest").message
    assert f"MissingClusterSecret: the cluster inventory (ConfigMap {rig.namespace}/{INVENTORY_NAME}" in (
        message
    ), message
    assert f"still lists no cluster for myservice-{new.name} -> {new.name} after 60 s" in message, message
    assert "is the watcher running" in message


# --- sync ------------------------------------------------------------------------------------


def test_sync_writes_one_pinned_update_and_a_second_run_writes_nothing(
    kube: Kube, namespace: str, fleet: SeedResult, runner: StepRunner, control_plane: DevCluster
) -> None:
    make_progressive_sync(kube, namespace)
    cluster = select_canary(runner)
    before = app_of(kube, namespace, fleet, cluster)
    mark = control_plane.audit_mark()
    result = runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(result)
    writes = writes_by(control_plane, mark)
    assert sorted((w.resource, w.subresource, w.verb, w.code) for w in writes) == [
        ("applications", "", "update", 200),
        ("progressivesyncstages", "", "patch", 200),  # its record: Syncing (never the ProgressiveSync)
    ], describe(writes)

    app = app_of(kube, namespace, fleet, cluster)
    assert app["operation"]["sync"]["revision"] == REVISION
    assert app["operation"]["initiatedBy"] == {"username": "progressive-sync", "automated": True}
    assert appsync.info_value(app["operation"], "rollout-id") == "r1"
    assert "operationState" not in app["status"], "the finished operationState is cleared"
    # The ApplicationSet controller owns the annotations: the sync leaves them as they were.
    assert app["metadata"].get("annotations") == before["metadata"].get("annotations")
    assert stage_lists(kube, namespace, "myservice", "canary").syncing == [cluster]

    mark = control_plane.audit_mark()
    again = runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(again)
    assert "already synced by this rollout" in again.stdout
    assert writes_by(control_plane, mark) == []


def contract_with_release(release: object) -> str:
    """A rollout contract for r1's stages whose `release` is `release` (valid or not), as JSON."""
    body = {
        "rolloutId": "r1",
        "release": release,
        "stages": [{"name": name, "targets": 1, "maxParallel": 1} for name in ("canary", "rest")],
    }
    return json.dumps(body)


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        pytest.param(("--contract", ""), {}, "no rollout contract", id="empty-flag"),
        pytest.param((), {"PROGRESSIVE_SYNC_CONTRACT": ""}, "no rollout contract", id="missing"),
        pytest.param(
            ("--contract", contract_with_release(REVISION)),
            {},
            "field release",
            id="a-bare-string-is-not-data",
        ),
        pytest.param(
            ("--contract", contract_with_release([[]])), {}, "field release", id="an-empty-revision-set"
        ),
        pytest.param(("--contract", contract_with_release([])), {}, "field release", id="no-revision-set"),
    ],
)
def test_sync_never_sends_an_empty_or_unfit_revision(
    rig: Rig, args: tuple[str, ...], env: dict[str, str], named: str
) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = rig.fleet.clusters[0].name
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("sync", "--stage", "canary", "--cluster", cluster, *args, **env)
    assert_ok(result, 2)
    assert result.stdout.startswith("--contract: ") and named in result.stdout
    assert writes_by(rig.control_plane, mark) == []
    assert "operation" not in rig.app(cluster)


def test_sync_never_overwrites_someone_elses_operation(
    kube: Kube, namespace: str, fleet: SeedResult, runner: StepRunner, control_plane: DevCluster
) -> None:
    make_progressive_sync(kube, namespace, deadline_seconds=2)
    cluster = select_canary(runner)
    app = app_of(kube, namespace, fleet, cluster)
    app["operation"] = foreign_operation("alice")
    kube.replace(APPLICATIONS, namespace, app)

    mark = control_plane.audit_mark()
    result = runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(result, 1)
    assert "started by alice is in progress" in result.stdout
    assert app_of(kube, namespace, fleet, cluster)["operation"] == foreign_operation("alice")
    writes = writes_by(control_plane, mark)
    assert [(w.resource, w.subresource) for w in writes] == [("progressivesyncstages", "")], describe(writes)
    failed = stage_lists(kube, namespace, "myservice", "canary").failed
    assert [f.name for f in failed] == [cluster] and "alice" in failed[0].reason


def test_sync_waits_for_someone_elses_operation_to_end_then_syncs(
    kube: Kube, namespace: str, fleet: SeedResult, runner: StepRunner, tmp_path: Path
) -> None:
    make_progressive_sync(kube, namespace, deadline_seconds=60)
    cluster = select_canary(runner)
    app = app_of(kube, namespace, fleet, cluster)
    app["operation"] = foreign_operation("alice")
    kube.replace(APPLICATIONS, namespace, app)

    log = tmp_path / "sync.log"
    process = runner.start("sync", "--stage", "canary", "--cluster", cluster, log_path=log)
    try:
        wait_for(
            lambda: "not overwriting it" in log.read_text(), timeout=30, what="sync to see alice's operation"
        )
        assert process.poll() is None
        # Alice's operation ends (what Argo CD does: operationState terminal, .operation removed).
        app = app_of(kube, namespace, fleet, cluster)
        del app["operation"]
        app["status"]["operationState"] = {
            "phase": "Succeeded",
            "operation": foreign_operation("alice"),
            "startedAt": "2030-01-01T11:59:00Z",  # Argo CD's CRD requires it
        }
        kube.replace(APPLICATIONS, namespace, app)
        assert process.wait(timeout=30) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
    app = app_of(kube, namespace, fleet, cluster)
    assert appsync.operation_is_ours(app["operation"], "r1")
    assert app["operation"]["sync"]["revision"] == REVISION


# --- wait-healthy ----------------------------------------------------------------------------


def test_wait_healthy_follows_the_simulated_sync_to_done_and_a_second_run_writes_nothing(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.simulate()
    assert_ok(rig.runner.run("sync", "--stage", "canary", "--cluster", cluster))
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("wait-healthy", "--stage", "canary", "--cluster", cluster)
    assert_ok(result)
    assert f"cluster {cluster} done" in result.stdout
    writes = writes_by(rig.control_plane, mark)
    # Besides its record's write, at most a refresh request: when the simulated Argo CD compared in
    # the second the sync finished, only a new comparison tells whether the health is the new one.
    assert [(w.resource, w.subresource) for w in writes if w.resource != "applications"] == [
        ("progressivesyncstages", "")
    ], describe(writes)
    assert {(w.verb, w.name) for w in writes if w.resource == "applications"} <= {
        ("patch", f"myservice-{cluster}")
    }, describe(writes)
    stage = rig.stage()
    assert (stage.completed, stage.syncing, stage.failed) == ([cluster], [], [])
    assert settle_events(rig, cluster) == ["sync-start", "sync-finish", "healthy"]

    mark = rig.control_plane.audit_mark()
    again = rig.runner.run("wait-healthy", "--stage", "canary", "--cluster", cluster)
    assert_ok(again)
    assert "already recorded" in again.stdout
    assert writes_by(rig.control_plane, mark) == []


# --- cluster: sync then wait-healthy in one process -----------------------------------------


def test_cluster_syncs_then_waits_until_done_and_a_second_run_writes_nothing(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.simulate()
    result = rig.runner.run("cluster", "--stage", "canary", "--cluster", cluster)
    assert_ok(result)
    assert f"cluster {cluster} done" in result.stdout
    stage = rig.stage()
    assert (stage.completed, stage.syncing, stage.failed) == ([cluster], [], [])
    assert settle_events(rig, cluster) == ["sync-start", "sync-finish", "healthy"]

    mark = rig.control_plane.audit_mark()
    again = rig.runner.run("cluster", "--stage", "canary", "--cluster", cluster)
    assert_ok(again)
    assert "recorded as completed already" in again.stdout
    assert writes_by(rig.control_plane, mark) == []


def test_a_cluster_step_stopped_by_sigterm_exits_75_and_its_retry_resumes_without_a_second_sync(
    rig: Rig,
) -> None:
    """Issue 18 (a step pod deleted): SIGTERM is no verdict on the cluster. The step exits 75 (what
    the Workflow retries) at once, and the retry finds the sync it had started: one sync in all."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.simulate(SimulatorConfig.from_yaml("defaults: {syncSeconds: 0.3, healthSeconds: 3600}"))
    log = rig.tmp_path / "cluster.log"
    args = ("--stage", "canary", "--cluster", cluster)
    process = rig.runner.start("cluster", *args, log_path=log)
    try:
        wait_for(lambda: rig.app(cluster)["status"]["health"]["status"] == "Progressing", timeout=30)
        process.send_signal(signal.SIGTERM)
        code, output = finish(process, log, timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 75, output
    assert "cluster: stopped by SIGTERM before it finished" in output.splitlines()[-1]
    assert rig.stage().completed == []

    rig.update_app(
        cluster,
        lambda app: (
            app["metadata"]
            .setdefault("annotations", {})
            .update({"simulator.progressivesync.io/health-seconds": "0"})
        ),
    )
    assert_ok(rig.runner.run("cluster", *args))
    assert rig.stage().completed == [cluster]
    starts = [e for e in read_events(rig.tmp_path / "sim-events.jsonl") if e["event"] == "sync-start"]
    assert [e["cluster"] for e in starts] == [cluster]


def test_a_batch_stopped_by_sigterm_writes_the_completions_it_gathered_before_it_exits(rig: Rig) -> None:
    """Issue 29 point 9: a batch gathers its clusters' status changes between writes. Sent SIGTERM,
    it exited 75 at once and they were lost: clusters done on their Applications stayed "in
    flight" in the status and ended as "did not finish". Now it writes them first (bounded)."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    assert_ok(rig.runner.run("select", "--stage", "rest"))
    targets = rig.stage("rest").targets
    slow, done = targets[-1], targets[:-1]
    rig.update_app(
        slow,
        lambda app: (
            app["metadata"]
            .setdefault("annotations", {})
            .update({"simulator.progressivesync.io/health-seconds": "3600"})
        ),
    )
    rig.simulate()
    log = rig.tmp_path / "batch.log"
    contract = rig.runner.contract({"rest": {"batches": 1, "max_parallel": 3}}).to_json()
    args = ("--stage", "rest", "--batch", "0", "--contract", contract)
    # No periodic write during the test: what the batch gathered is written at its end only.
    process = rig.runner.start(
        "batch",
        *args,
        "--batch-flush-seconds",
        "3600",
        log_path=log,
        PROGRESSIVE_SYNC_LOG_LEVEL="DEBUG",
    )
    try:
        wait_for(
            lambda: all(f"gathered: cluster {cluster} done" in log.read_text() for cluster in done),
            timeout=60,
            what="the batch to gather the completion of every cluster but the slow one",
        )
        process.send_signal(signal.SIGTERM)
        code, output = finish(process, log, timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 75, output
    stage = rig.stage("rest")
    assert sorted(stage.completed) == sorted(done), stage
    assert stage.syncing == [slow], stage
    last = output.splitlines()[-1]
    assert "batch: stopped by SIGTERM before it finished" in last, output
    assert "status change(s) its clusters had gathered" in last, last


def stage_with_a_failure(targets: list[str]) -> dict[str, Any]:
    return {
        "name": "canary",
        "phase": "Progressing",
        "targets": targets,
        "failed": [{"name": targets[0], "reason": "Degraded"}],
        "startedAt": "2030-01-01T12:00:00Z",
    }


def test_a_cluster_of_a_stage_that_failed_already_is_not_started(rig: Rig) -> None:
    targets = sorted(c.name for c in rig.fleet.clusters)
    seed_progressive_sync(rig.kube, rig.namespace, status=rollout_status(stage_with_a_failure(targets)))
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("cluster", "--stage", "canary", "--cluster", targets[1])
    assert_ok(result, 1)
    assert f"cluster {targets[1]} not started: stage 'canary' has failed already" in result.stdout
    assert writes_by(rig.control_plane, mark) == [], "nothing synced, nothing recorded"


@pytest.mark.parametrize(
    "phase", [pytest.param("Cancelled", id="cancelled"), pytest.param("Failed", id="failed")]
)
def test_a_cluster_of_a_rollout_that_ended_already_is_not_started(rig: Rig, phase: str) -> None:
    """The watcher recorded the end (the Workflow was deleted, or ended without its exit handler) while
    this step was still to run: no sync after we said stop."""
    targets = sorted(c.name for c in rig.fleet.clusters)
    status = rollout_status({"name": "canary", "phase": "Progressing", "targets": targets})
    status["phase"] = phase
    status["rollout"]["finishedAt"] = "2030-01-01T12:05:00Z"
    seed_progressive_sync(rig.kube, rig.namespace, status=status)
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("cluster", "--stage", "canary", "--cluster", targets[1])
    assert_ok(result, 1)
    assert f"cluster {targets[1]} not started: rollout r1 ended {phase} already" in result.stdout
    assert writes_by(rig.control_plane, mark) == [], "nothing synced, nothing recorded"


def test_a_cluster_starts_while_the_failures_are_within_the_tolerance(rig: Rig) -> None:
    targets = sorted(c.name for c in rig.fleet.clusters)
    seed_progressive_sync(
        rig.kube, rig.namespace, max_failed_clusters=1, status=rollout_status(stage_with_a_failure(targets))
    )
    rig.simulate()
    result = rig.runner.run("cluster", "--stage", "canary", "--cluster", targets[1])
    assert_ok(result)
    assert targets[1] in rig.stage().completed


# --- wait-healthy: the traps -----------------------------------------------------------------


def sync_and_start_waiting(rig: Rig, cluster: str, **env: str) -> tuple[Any, Path]:
    assert_ok(rig.runner.run("sync", "--stage", "canary", "--cluster", cluster))
    log = rig.tmp_path / "wait-healthy.log"
    process = rig.runner.start(
        "wait-healthy",
        "--stage",
        "canary",
        "--cluster",
        cluster,
        log_path=log,
        **env,
    )
    return process, log


def finish(process: Any, log: Path, timeout: float = 60) -> tuple[int, str]:
    try:
        code = process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
    return code, log.read_text()


def summary_of(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("wait-healthy:"))


def hang(app: dict[str, Any]) -> None:
    """The simulator's controller never finishes this Application's operation."""
    app["metadata"]["annotations"] = {"simulator.progressivesync.io/hang": "true"}


def test_a_healthy_read_before_reconciled_at_passes_finished_at_is_not_done(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    assert_ok(rig.runner.run("sync", "--stage", "canary", "--cluster", cluster))
    # Play the controller by hand: the operation Succeeded just now, but the Healthy on the object
    # was computed a minute before (the previous revision's health).
    finished = datetime.now(UTC)

    def operation_succeeded_with_stale_health(app: dict[str, Any]) -> None:
        op = app.pop("operation")
        app["status"].update(
            operationState={
                "operation": op,
                "phase": "Succeeded",
                "startedAt": format_time(finished - timedelta(seconds=5)),
                "finishedAt": format_time(finished),
                "syncResult": {"revision": REVISION},
            },
            sync={"status": "Synced", "revision": REVISION},
            health={"status": "Healthy"},
            reconciledAt=format_time(finished - timedelta(seconds=60)),
        )

    rig.update_app(cluster, operation_succeeded_with_stale_health)

    log = rig.tmp_path / "wait-healthy.log"
    process = rig.runner.start("wait-healthy", "--stage", "canary", "--cluster", cluster, log_path=log)
    try:
        wait_for(lambda: "health not observed since the sync finished" in log.read_text(), timeout=30)
        assert process.poll() is None, log.read_text()
        assert rig.stage().completed == []
        # wait-healthy asks for a refresh (a patch of the Application) right about now: conflict-safe.
        rig.update_app(
            cluster,
            lambda app: app["status"].update(reconciledAt=format_time(finished + timedelta(seconds=1))),
        )
        code, output = finish(process, log)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, output
    assert rig.stage().completed == [cluster]


def test_deadline_fails_the_cluster_naming_it_and_what_it_waited_for(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, deadline_seconds=3)
    cluster = select_canary(rig.runner)
    rig.update_app(cluster, hang)
    rig.simulate()
    process, log = sync_and_start_waiting(rig, cluster)
    code, output = finish(process, log, timeout=30)
    assert code == 1, output
    reason = f"cluster {cluster}: progress deadline of 3s passed"
    assert reason in summary_of(output)
    assert f"still waiting for myservice-{cluster}: sync operation Running" in summary_of(output)
    failed = rig.stage().failed
    assert [f.name for f in failed] == [cluster] and reason in failed[0].reason
    assert rig.stage().syncing == []


def test_degraded_after_the_sync_fails_the_cluster(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, degraded_grace_seconds=0)
    cluster = select_canary(rig.runner)
    # Behaviour from the cluster Secret's annotation this time.
    secret = rig.kube.get(SECRETS, rig.namespace, f"cluster-{cluster}")
    secret["metadata"]["annotations"] = {"simulator.progressivesync.io/degrade": "true"}
    rig.kube.replace(SECRETS, rig.namespace, secret)
    rig.simulate()
    process, log = sync_and_start_waiting(rig, cluster)
    code, output = finish(process, log)
    assert code == 1, output
    assert (
        "health Degraded after the sync, past the grace of 0s: Deployment has exceeded its progress deadline"
        in (summary_of(output))
    )
    assert "Degraded" in rig.stage().failed[0].reason


def test_an_application_deleted_mid_wait_fails_the_cluster(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.update_app(cluster, hang)
    rig.simulate()
    process, log = sync_and_start_waiting(rig, cluster)
    wait_for(lambda: "sync operation Running" in log.read_text(), timeout=30, what="the sync to be Running")
    rig.kube.delete(APPLICATIONS, rig.namespace, f"myservice-{cluster}")
    code, output = finish(process, log)
    assert code == 1, output
    assert f"Application myservice-{cluster} was deleted" in summary_of(output)
    assert "was deleted" in rig.stage().failed[0].reason


def test_a_cluster_secret_deleted_mid_wait_fails_the_cluster(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.update_app(cluster, hang)
    rig.simulate()
    process, log = sync_and_start_waiting(rig, cluster, PROGRESSIVE_SYNC_WATCH_WINDOW_SECONDS="1")
    wait_for(lambda: "sync operation Running" in log.read_text(), timeout=30, what="the sync to be Running")
    rig.kube.delete(SECRETS, rig.namespace, f"cluster-{cluster}")
    publish_inventory(rig.kube, rig.namespace)  # what the watcher does on the Secret's deletion
    code, output = finish(process, log)
    assert code == 1, output
    assert f"cluster {cluster}: its Argo CD cluster Secret was deleted" in summary_of(output)


# --- record ----------------------------------------------------------------------------------


def rollout_status(*stages: dict[str, Any], rollout_id: str = "r1") -> dict[str, Any]:
    return {
        "phase": "Progressing",
        "rollout": {"id": rollout_id, "revision": REVISION, "startedAt": "2030-01-01T12:00:00Z"},
        "stages": list(stages),
    }


@pytest.mark.parametrize(
    ("max_failed", "code", "phase", "message"),
    [
        pytest.param(
            0,
            1,
            StagePhase.FAILED,
            "1 of 2 clusters failed (at most 0 tolerated): b (Degraded); 1 updated",
            id="failed-beyond-policy",
        ),
        pytest.param(
            1,
            0,
            StagePhase.SUCCEEDED,
            "1 of 2 clusters updated, 1 failed (at most 1 tolerated)",
            id="failure-tolerated",
        ),
    ],
)
def test_record_closes_the_stage_by_failure_policy_and_a_second_run_writes_nothing(
    rig: Rig, max_failed: int, code: int, phase: StagePhase, message: str
) -> None:
    stage = {
        "name": "canary",
        "phase": "Progressing",
        "targets": ["a", "b"],
        "completed": ["a"],
        "failed": [{"name": "b", "reason": "Degraded"}],
        "startedAt": "2030-01-01T12:00:00Z",
    }
    seed_progressive_sync(
        rig.kube, rig.namespace, max_failed_clusters=max_failed, status=rollout_status(stage)
    )
    result = rig.runner.run("record", "--stage", "canary")
    assert_ok(result, code)
    assert message in result.stdout
    recorded = rig.stage()
    assert (recorded.phase, recorded.message) == (phase, message)
    assert recorded.finished_at is not None
    status = read_progressive_sync(rig.kube, rig.namespace).status
    assert status is not None
    assert (status.phase == RolloutPhase.FAILED) == (phase == StagePhase.FAILED)

    mark = rig.control_plane.audit_mark()
    assert_ok(rig.runner.run("record", "--stage", "canary"), code)
    assert writes_by(rig.control_plane, mark) == []


@pytest.mark.parametrize(
    ("max_failed", "code", "closed", "next_phase"),
    [
        pytest.param(0, 1, StagePhase.FAILED, StagePhase.PENDING, id="failed-stage-selects-nothing"),
        pytest.param(1, 0, StagePhase.SUCCEEDED, StagePhase.PROGRESSING, id="closed-stage-selects-the-next"),
    ],
)
def test_record_and_select_closes_the_stage_then_selects_the_next_and_a_second_run_writes_nothing(
    rig: Rig, max_failed: int, code: int, closed: StagePhase, next_phase: StagePhase
) -> None:
    first, second, third = (c.name for c in rig.fleet.clusters)
    canary = {
        "name": "canary",
        "phase": "Progressing",
        "targets": [first, second],
        "completed": [first],
        "failed": [{"name": second, "reason": "Degraded"}],
        "startedAt": "2030-01-01T12:00:00Z",
    }
    seed_progressive_sync(
        rig.kube,
        rig.namespace,
        stages=[CANARY, REST],
        max_failed_clusters=max_failed,
        status=rollout_status(canary, {"name": "rest", "phase": "Pending"}),
    )
    result = rig.runner.run("record-and-select", "--stage", "canary", "--next-stage", "rest")
    assert_ok(result, code)
    assert rig.stage("canary").phase == closed
    assert rig.stage("rest").phase == next_phase
    # A failed stage hands on nothing (and its step exits 1, so Argo runs nothing after it).
    targets = json.loads(rig.runner.targets())
    assert targets == ([] if code else [third])
    assert targets == rig.stage("rest").targets

    mark = rig.control_plane.audit_mark()
    (rig.runner.outputs_dir / "targets").unlink()
    again = rig.runner.run("record-and-select", "--stage", "canary", "--next-stage", "rest")
    assert_ok(again, code)
    assert json.loads(rig.runner.targets()) == targets
    assert writes_by(rig.control_plane, mark) == []


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


def test_record_and_select_leaves_a_next_stage_that_cannot_run_to_its_own_closing_step(rig: Rig) -> None:
    """The canary succeeded, but the rest cannot be planned (an Application of the cluster it would
    take lost its cluster Secret: a plan error). The hand-over exits 0 and hands on no targets,
    the rest is recorded Failed, and the rest's own closing step exits 1: Argo shows the rest
    failed, not the canary."""
    first, _, third = (c.name for c in rig.fleet.clusters)
    canary_done_rest_pending(rig, first)
    rig.kube.delete(SECRETS, rig.namespace, f"cluster-{third}")
    publish_inventory(rig.kube, rig.namespace)  # what the watcher does on the Secret's deletion

    result = rig.runner.run("record-and-select", "--stage", "canary", "--next-stage", "rest")
    assert_ok(result, 0)
    assert rig.stage("canary").phase == StagePhase.SUCCEEDED
    rest = rig.stage("rest")
    assert rest.phase == StagePhase.FAILED
    assert rest.message and third in rest.message, rest.message
    assert json.loads(rig.runner.targets()) == []

    closing = rig.runner.run("record", "--stage", "rest")
    assert_ok(closing, 1)
    assert rig.stage("rest").phase == StagePhase.FAILED
    assert rig.stage("canary").phase == StagePhase.SUCCEEDED


def test_a_step_of_a_superseded_rollout_writes_nothing(rig: Rig) -> None:
    seed_progressive_sync(rig.kube, rig.namespace, status=rollout_status(rollout_id="r2"))
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("record", "--stage", "canary")
    assert_ok(result, 1)
    assert "superseded" in result.stdout
    sync = rig.runner.run("sync", "--stage", "canary", "--cluster", rig.fleet.clusters[0].name)
    assert_ok(sync, 1)
    assert writes_by(rig.control_plane, mark) == []


# --- select never replaces a newer rollout (issue 29, point 10a) -------------------------------


def create_workflow(rig: Rig, name: str) -> datetime:
    """A Workflow named `name` (its steps are not run here); its creationTimestamp."""
    body = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", "suspend": {}}]},
    }
    created = rig.kube.create(WORKFLOWS, rig.namespace, body)["metadata"]["creationTimestamp"]
    return datetime.fromisoformat(created)


def create_workflows_in_order(rig: Rig, *names: str) -> None:
    """Create the Workflows one after the other, each in a later second than the one before
    (creationTimestamp has second precision: the order must show in it)."""
    previous: datetime | None = None
    for name in names:
        if previous is not None:
            wait_for(_after(previous + timedelta(seconds=1)), what="a new second")
        previous = create_workflow(rig, name)


def _after(moment: datetime) -> Callable[[], bool]:
    return lambda: datetime.now(UTC) >= moment


SELECTED_BY_R2 = {"name": "canary", "phase": "Progressing", "targets": ["a"], "syncing": ["a"]}


@pytest.mark.parametrize(
    "workflows",
    [
        pytest.param(("myservice-r1", "myservice-r2"), id="argo-retry-of-the-old-workflow"),
        pytest.param(("myservice-r1",), id="the-newer-rollouts-workflow-is-gone"),
    ],
)
def test_select_of_an_old_workflow_never_replaces_the_newer_rollout(
    rig: Rig, workflows: tuple[str, ...]
) -> None:
    seed_progressive_sync(rig.kube, rig.namespace, status=rollout_status(SELECTED_BY_R2, rollout_id="r2"))
    create_workflows_in_order(rig, *workflows)
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("select", "--stage", "canary", *first_wave_args(rig, 1, stage="canary"))
    assert_ok(result, 1)
    assert "superseded" in result.stdout
    assert writes_by(rig.control_plane, mark) == [], "no status reset, no refresh, no sync"
    status = read_progressive_sync(rig.kube, rig.namespace).status
    assert status is not None and status.rollout is not None and status.rollout.id == "r2"


def test_select_takes_over_from_an_older_rollout_the_watcher_had_not_replaced_yet(rig: Rig) -> None:
    """The watcher created the new rollout's Workflow and died before recording it: select starts it."""
    ended = {"name": "canary", "phase": "Succeeded", "targets": ["a"], "completed": ["a"]}
    status = {**rollout_status(ended, rollout_id="r0"), "phase": "Succeeded"}
    seed_progressive_sync(rig.kube, rig.namespace, status=status)
    create_workflows_in_order(rig, "myservice-r0", "myservice-r1")
    assert_ok(rig.runner.run("select", "--stage", "canary"))
    recorded = read_progressive_sync(rig.kube, rig.namespace).status
    assert recorded is not None and recorded.rollout is not None and recorded.rollout.id == "r1"
    assert rig.stage().phase == StagePhase.PROGRESSING


# --- finalize --------------------------------------------------------------------------------


def make_workflow(rig: Rig, *, shutdown: str | None = None) -> None:
    spec: dict[str, Any] = {"entrypoint": "main", "templates": [{"name": "main", "suspend": {}}]}
    if shutdown:
        spec["shutdown"] = shutdown
    rig.kube.create(
        WORKFLOWS,
        rig.namespace,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": "myservice-r1"},
            "spec": spec,
        },
    )


THREE_STAGES = [
    {
        "name": "canary",
        "phase": "Succeeded",
        "targets": ["a"],
        "completed": ["a"],
        "finishedAt": "2030-01-01T12:01:00Z",
    },
    {"name": "rest", "phase": "Progressing", "targets": ["b", "c"], "completed": ["b"], "syncing": ["c"]},
    {"name": "last", "phase": "Pending"},
]


@pytest.mark.parametrize(
    ("shutdown", "workflow_status", "expected"),
    [
        pytest.param(
            "Stop",
            "Failed",
            (RolloutPhase.CANCELLED, StagePhase.CANCELLED, StagePhase.CANCELLED),
            id="argo-stop-is-cancelled",
        ),
        pytest.param(
            None,
            "Failed",
            (RolloutPhase.FAILED, StagePhase.FAILED, StagePhase.CANCELLED),
            id="workflow-failed",
        ),
        pytest.param(
            None, "Error", (RolloutPhase.FAILED, StagePhase.FAILED, StagePhase.CANCELLED), id="workflow-error"
        ),
    ],
)
def test_finalize_marks_the_rollout_and_unfinished_stages_and_a_second_run_writes_nothing(
    rig: Rig,
    shutdown: str | None,
    workflow_status: str,
    expected: tuple[RolloutPhase, StagePhase, StagePhase],
) -> None:
    phase, rest, last = expected
    seed_progressive_sync(rig.kube, rig.namespace, status=rollout_status(*THREE_STAGES))
    make_workflow(rig, shutdown=shutdown)
    args = ("--workflow-name", "myservice-r1", "--workflow-status", workflow_status)
    result = rig.runner.run("finalize", *args)
    assert_ok(result)
    assert f"rollout r1 {phase.value}" in result.stdout
    status = read_progressive_sync(rig.kube, rig.namespace).status
    assert status is not None and status.rollout is not None
    assert status.phase == phase
    assert status.rollout.finished_at is not None and status.rollout.workflow == "myservice-r1"
    phases = {s.name: s.phase for s in status.stages or []}
    assert phases == {"canary": StagePhase.SUCCEEDED, "rest": rest, "last": last}
    assert "did not finish (1 of 2 clusters updated, 0 failed)" in rig.stage("rest").message
    conditions = {c.type: c.status.value for c in status.conditions or []}
    assert conditions == {"Ready": "False", "Progressing": "False"}

    mark = rig.control_plane.audit_mark()
    assert_ok(rig.runner.run("finalize", *args))
    assert writes_by(rig.control_plane, mark) == []


def test_finalize_of_a_successful_rollout_sets_ready(rig: Rig) -> None:
    done = {"name": "canary", "phase": "Succeeded", "targets": ["a"], "completed": ["a"]}
    seed_progressive_sync(rig.kube, rig.namespace, status=rollout_status(done))
    make_workflow(rig)
    result = rig.runner.run("finalize", "--workflow-name", "myservice-r1", "--workflow-status", "Succeeded")
    assert_ok(result)
    status = read_progressive_sync(rig.kube, rig.namespace).status
    assert status is not None and status.phase == RolloutPhase.SUCCEEDED
    assert {c.type: c.status.value for c in status.conditions or []} == {
        "Ready": "True",
        "Progressing": "False",
    }


def test_finalize_of_a_superseded_rollout_leaves_the_new_one_alone(rig: Rig) -> None:
    seed_progressive_sync(rig.kube, rig.namespace, status=rollout_status(rollout_id="r2"))
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("finalize", "--workflow-name", "myservice-r1", "--workflow-status", "Failed")
    assert_ok(result)
    assert "superseded by rollout r2" in result.stdout
    assert writes_by(rig.control_plane, mark) == []


def test_finalize_rejects_an_unknown_workflow_status(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    result = rig.runner.run("finalize", "--workflow-name", "myservice-r1", "--workflow-status", "Running")
    assert result.returncode == 2
    assert "--workflow-status" in result.stderr


# --- several Applications on one cluster, and time passed in -----------------------------------


def add_second_app(rig: Rig, cluster: str, *, status: dict[str, Any] | None = None) -> str:
    """Another Application of the same ApplicationSet on `cluster`, naming it by destination.name
    (with the first one's status, or `status`)."""
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
    return name


def test_every_application_of_the_cluster_is_synced_and_followed(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    worker = add_second_app(rig, cluster)
    rig.simulate()
    sync = rig.runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(sync)
    assert f"myservice-{cluster}" in sync.stdout and worker in sync.stdout
    result = rig.runner.run("wait-healthy", "--stage", "canary", "--cluster", cluster)
    assert_ok(result)
    assert "2 Applications Synced and Healthy" in result.stdout
    for name in (f"myservice-{cluster}", worker):
        app = rig.kube.get(APPLICATIONS, rig.namespace, name)
        assert app["status"]["operationState"]["syncResult"]["revision"] == REVISION
        assert app["status"]["health"]["status"] == "Healthy"


def test_wait_healthy_reads_the_deadline_from_the_clock_it_is_given(rig: Rig, steps_config: Path) -> None:
    """In process, with a clock an hour ahead: the deadline has passed at the first look."""
    make_progressive_sync(rig.kube, rig.namespace, deadline_seconds=600)
    cluster = select_canary(rig.runner)
    assert_ok(rig.runner.run("sync", "--stage", "canary", "--cluster", cluster))
    client = Kube.from_kubeconfig(str(steps_config))
    try:
        later = ManualClock(datetime.now(UTC) + timedelta(hours=1))
        result = wait_healthy(client, opened(rig, client, "canary", clock=later), cluster)
    finally:
        client.close()
    assert result.failed
    assert f"cluster {cluster}: progress deadline of 600s passed" in result.reason
    assert "sync operation not picked up by Argo CD yet" in result.reason


# --- batch: the fleet read once per batch -----------------------------------------------------


def counted(rig: Rig, step: Callable[[Kube], Outcome]) -> tuple[CountingKube, Outcome]:
    """Run `step` on the rig's Kube behind a CountingKube: (what it called, what it returned)."""
    counting = CountingKube(rig.kube)
    return counting, step(cast(Kube, counting))


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


@pytest.mark.parametrize(
    "max_parallel",
    [pytest.param(1, id="one-after-another"), pytest.param(3, id="all-three-at-once")],
)
def test_a_batch_reads_the_fleet_once_and_syncs_each_application_once(
    rig: Rig, max_parallel: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three clusters in one batch: the inventory, the ApplicationSet and the Applications are read
    once for the batch (before: twice per cluster), each Application is synced exactly once, and the
    batch run again (a retried pod) writes no sync. The clusters of the first wave start on the
    batch's own read of the ProgressiveSync; each later one reads it again right before it starts."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    assert_ok(rig.runner.run("select", "--stage", "rest"))
    targets = rig.stage("rest").targets
    assert len(targets) == 3
    rig.simulate()
    reads: list[str] = []

    def load(kube: Kube, rollout: RolloutRef) -> Any:
        reads.append(rollout.name)
        return load_progressive_sync(kube, rollout)

    monkeypatch.setattr(steps.batch, "load_progressive_sync", load)

    def batch() -> tuple[CountingKube, BatchResult]:
        return counted(
            rig,
            lambda kube: run_batch(
                kube,
                opened(
                    rig,
                    kube,
                    "rest",
                    sizing={"rest": {"batches": 1, "max_parallel": max_parallel}},
                    tuning=Tuning(watch_window_seconds=2),
                    ps=load(kube, rollout_r1(rig)),  # the batch's own read, counted as before
                ),
                0,
            ),
        )

    counting, result = batch()
    assert [r.outcome.value for r in result.results] == ["done", "done", "done"], result.summary
    assert len(reads) == 1 + len(targets) - max_parallel, "one read per cluster after the first wave"
    calls = counting.calls
    assert calls[("list", "applications", False)] == 1, calls
    assert calls[("get", "configmaps", False)] == 1, calls
    assert calls[("get", "applicationsets", False)] == 1, calls
    assert calls[("replace", "applications", False)] == 3, calls  # one sync write per Application
    for cluster in targets:
        assert appsync.sync_started_at(rig.app(cluster), "r1") is not None, cluster

    again, rerun = batch()
    assert [r.reason for r in rerun.results] == ["recorded as completed already"] * 3
    assert again.calls[("replace", "applications", False)] == 0, again.calls


def test_a_cluster_step_reads_the_fleet_once_for_its_sync_and_its_wait(rig: Rig) -> None:
    """A `cluster` pod lists the Applications once (before: once for the sync and again for the
    wait; ~15 MB per list at 10,000 clusters), writes one sync, and run again writes none."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.simulate()

    def one_cluster() -> tuple[CountingKube, ClusterResult]:
        return counted(
            rig,
            lambda kube: run_cluster(
                kube, opened(rig, kube, "canary", tuning=Tuning(watch_window_seconds=2)), cluster
            ),
        )

    counting, result = one_cluster()
    assert result.outcome.value == "done", result.summary
    assert counting.calls[("list", "applications", False)] == 1, counting.calls
    assert counting.calls[("replace", "applications", False)] == 1, counting.calls
    again, rerun = one_cluster()
    assert rerun.reason == "recorded as completed already"
    assert again.calls[("replace", "applications", False)] == 0, again.calls


@pytest.mark.parametrize(
    "cached", [pytest.param(True, id="a-batch"), pytest.param(False, id="a-cluster-pod")]
)
def test_the_check_that_a_waiting_cluster_still_exists_shares_its_read_only_in_a_batch(
    rig: Rig, cached: bool
) -> None:
    """A batch's clusters look at the inventory while they wait: one read serves them for the age
    given, then a removed cluster is seen; a lookup of one cluster pod reads it every time."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    ps = read_progressive_sync(rig.kube, rig.namespace)
    clock = ManualClock(datetime(2026, 12, 1, tzinfo=UTC))
    counting = CountingKube(rig.kube)
    lookup = FleetLookup(
        cast(Kube, counting), rollout_r1(rig), ps, clock=clock, max_age_seconds=3600 if cached else 0
    )

    def reads() -> int:
        return counting.calls[("get", "configmaps", False)]

    assert lookup.still_exists(cluster, max_age_seconds=5)
    assert lookup.still_exists(cluster, max_age_seconds=5)
    assert reads() == (1 if cached else 2)
    inventory = rig.kube.get(CONFIG_MAPS, rig.namespace, INVENTORY_NAME)
    left = [c for c in clusters_from_configmap(inventory) if c.name != cluster]
    rig.kube.replace(
        CONFIG_MAPS,
        rig.namespace,
        inventory_configmap(rig.namespace, left) | {"metadata": inventory["metadata"]},
    )
    assert lookup.still_exists(cluster, max_age_seconds=5) is cached  # the batch's read is 0 s old
    clock.advance(5)
    assert not lookup.still_exists(cluster, max_age_seconds=5)
    assert reads() == (2 if cached else 4)


def test_a_batch_finds_an_application_created_after_it_read_the_fleet(rig: Rig) -> None:
    """The lookup is read once; a cluster it knew without Applications is looked up again before it fails."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    ps = read_progressive_sync(rig.kube, rig.namespace)
    rollout = rollout_r1(rig)
    app = rig.app(cluster)
    rig.kube.delete(APPLICATIONS, rig.namespace, app["metadata"]["name"])
    counting = CountingKube(rig.kube)
    lookup = FleetLookup(cast(Kube, counting), rollout, ps, clock=SystemClock(), max_age_seconds=3600)
    found, clusters = lookup.find(cluster)
    assert found is not None
    assert lookup.apps_of(found, clusters) == []
    kept = ("name", "namespace", "labels", "ownerReferences")
    app["metadata"] = {k: v for k, v in app["metadata"].items() if k in kept}
    app.pop("status", None)
    rig.kube.create(APPLICATIONS, rig.namespace, app)
    assert [a["metadata"]["name"] for a in lookup.apps_of(found, clusters)] == [app["metadata"]["name"]]
    assert lookup.reads == 3  # the first read, then once more for each time the cluster had none


# --- the first wave: started by the step that selected the stage (steps/first_wave.py) -------


def first_wave_args(rig: Rig, count: int, *, stage: str = "rest") -> tuple[str, ...]:
    """`--contract` with the first wave of `stage` `count` clusters (the builder sets maxParallel)."""
    return (
        "--contract",
        rig.runner.contract({stage: {"start_syncs": count, "max_parallel": count}}).to_json(),
    )


def ours(rig: Rig, cluster: str) -> bool:
    """Does the cluster's Application carry a sync of rollout r1?"""
    return appsync.operation_is_ours(appsync.operation(rig.app(cluster)), "r1")


def set_paused(rig: Rig, paused: bool) -> None:
    for _ in range(_UPDATE_ATTEMPTS):
        obj = rig.kube.get(PROGRESSIVE_SYNCS, rig.namespace, "myservice")
        obj["spec"]["paused"] = paused
        try:
            rig.kube.replace(PROGRESSIVE_SYNCS, rig.namespace, obj)
            return
        except Conflict:
            continue
    raise AssertionError("the ProgressiveSync kept conflicting")


def test_select_starts_the_first_wave_and_the_cluster_steps_write_no_second_sync(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 2))
    assert_ok(result)
    assert "started the sync of 2 cluster(s)" in result.stdout
    targets = rig.stage("rest").targets
    writes = writes_by(rig.control_plane, mark)
    # The stage's record and the stage in the status, the first two clusters' syncs, then one write
    # of the record saying them Syncing.
    assert sorted((w.resource, w.verb) for w in writes) == [
        ("applications", "update"),
        ("applications", "update"),
        ("progressivesyncs", "update"),
        ("progressivesyncstages", "create"),
        ("progressivesyncstages", "patch"),
    ], describe(writes)
    assert [ours(rig, cluster) for cluster in targets] == [True, True, False]
    assert rig.stage("rest").syncing == targets[:2]
    assert rig.app(targets[0])["operation"]["sync"]["revision"] == REVISION

    rig.simulate()
    mark = rig.control_plane.audit_mark()
    assert_ok(rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[0]))
    writes = writes_by(rig.control_plane, mark)
    # No second sync write (wait-healthy may still patch a refresh request on the Application).
    assert [w for w in writes if (w.resource, w.verb) == ("applications", "update")] == [], describe(writes)
    assert targets[0] in rig.stage("rest").completed

    mark = rig.control_plane.audit_mark()
    again = rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 2))
    assert_ok(again)
    assert "already selected" in again.stdout and "started the sync" not in again.stdout
    assert writes_by(rig.control_plane, mark) == []


def test_record_and_select_starts_the_next_stages_first_wave(rig: Rig) -> None:
    first, _, third = (c.name for c in rig.fleet.clusters)
    canary_done_rest_pending(rig, first)
    args = ("--stage", "canary", "--next-stage", "rest", *first_wave_args(rig, 3))
    result = rig.runner.run("record-and-select", *args)
    assert_ok(result)
    assert "started the sync of 2 cluster(s)" in result.stdout  # the rest has two clusters
    rest = rig.stage("rest")
    assert sorted(rest.syncing) == sorted(rest.targets) and third in rest.targets
    assert all(ours(rig, cluster) for cluster in rest.targets)
    assert not ours(rig, first)


def test_nothing_starts_while_the_progressive_sync_is_paused(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    set_paused(rig, True)
    mark = rig.control_plane.audit_mark()
    assert_ok(rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 3)))
    writes = writes_by(rig.control_plane, mark)
    assert sorted((w.resource, w.subresource) for w in writes) == [
        ("progressivesyncs", "status"),
        ("progressivesyncstages", ""),
    ], describe(writes)
    assert rig.stage("rest").syncing == []
    assert not any(ours(rig, cluster) for cluster in rig.stage("rest").targets)


def test_a_contract_made_for_another_spec_is_a_usage_error_that_writes_nothing(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    other = make_contract(["canary"], sizing={"canary": {"start_syncs": 2}}).to_json()
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("select", "--stage", "rest", "--contract", other)
    assert_ok(result, 2)
    assert "--stage 'rest' is not in the rollout contract (stages: canary)" in result.stdout
    assert writes_by(rig.control_plane, mark) == []
    assert not any(ours(rig, c.name) for c in rig.fleet.clusters)


class RefusingKube(CountingKube):
    """Behind a CountingKube: the Application `refused`'s replace answers 409, as if someone wrote it."""

    def __init__(self, kube: Kube, refused: str) -> None:
        super().__init__(kube)
        self.refused = refused

    def replace(self, resource: Any, namespace: str | None, body: dict[str, Any], **kwargs: Any) -> Any:
        if resource is APPLICATIONS and body["metadata"]["name"] == self.refused:
            raise Conflict(f"applications {self.refused}: the object has been modified")
        return self._kube.replace(resource, namespace, body, **kwargs)


def test_a_conflict_or_someone_elses_operation_is_left_to_the_cluster_step(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    busy, conflicting, free = (c.name for c in rig.fleet.clusters)
    rig.update_app(busy, lambda app: app.update(operation=foreign_operation("alice")))
    kube = RefusingKube(rig.kube, f"{rig.fleet.app_set}-{conflicting}")
    result = select_rest_in_process(rig, kube, 3)
    assert result.first_wave.started == (free,)
    assert sorted(result.first_wave.left) == sorted([busy, conflicting])
    assert rig.stage("rest").syncing == [free]
    assert rig.app(busy)["operation"] == foreign_operation("alice"), "never overwritten"
    assert [ours(rig, c) for c in (busy, conflicting, free)] == [False, False, True]


def test_a_first_wave_cluster_of_a_stage_that_failed_is_stopped_not_left_syncing(rig: Rig) -> None:
    """Its sync was started by select; a sibling failed the stage before its step ran. The step
    ends what was started (not "not started": it was) and records the cluster failed."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    targets = sorted(c.name for c in rig.fleet.clusters)
    for cluster in targets:
        rig.update_app(cluster, hang)
    assert_ok(rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 2)))
    first, second, third = rig.stage("rest").targets
    assert rig.stage("rest").syncing == [first, second]
    rig.simulate()
    assert_ok(rig.runner.run("sync", "--stage", "rest", "--cluster", third))
    record_failed(rig.kube, rig.namespace, "myservice", stage="rest", cluster=third, reason="Degraded")
    result = rig.runner.run("cluster", "--stage", "rest", "--cluster", first)
    assert_ok(result, 1)
    assert f"cluster {first}: stopped before it finished: stage 'rest' has failed already" in result.stdout
    stage = rig.stage("rest")
    assert first in {f.name for f in stage.failed} and first not in stage.syncing
    assert not appsync.operation_is_ours(appsync.operation(rig.app(first)), "r1") or (
        (rig.app(first)["status"].get("operationState") or {}).get("phase") in {"Terminating", "Failed"}
    ), "what select started is ended"


def test_a_paused_batch_lets_its_first_wave_go_on_and_starts_no_other_cluster(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    assert_ok(rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 2)))
    first, second, third = rig.stage("rest").targets
    set_paused(rig, True)
    rig.simulate()
    with pytest.raises(steps.batch.PausedTooLong):
        run_batch(
            rig.kube,
            opened(
                rig,
                rig.kube,
                "rest",
                sizing={"rest": {"batches": 1, "max_parallel": 2}},
                tuning=Tuning(watch_window_seconds=2, pause_poll_seconds=0.1, pause_hold_seconds=1),
            ),
            0,
        )
    stage = rig.stage("rest")
    assert sorted(stage.completed) == sorted([first, second]), "the syncs select started finish"
    assert not ours(rig, third), "no new cluster starts while paused"


# --- issue 29: several Applications on a cluster, syncs not listed, a pause read late -----------


# What Argo CD reports of an Application it has not compared since the release: Synced and Healthy
# at the commit before it.
COMPARED_BEFORE_THE_RELEASE: dict[str, Any] = {
    "sync": {"status": "Synced", "revision": OLD_REVISION},
    "health": {"status": "Healthy"},
    "reconciledAt": "2030-01-01T11:00:00Z",
}


def update_named_app(rig: Rig, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    """`Rig.update_app` for an Application named `name` (read, change, replace; again on 409)."""
    for _ in range(_UPDATE_ATTEMPTS):
        app = rig.kube.get(APPLICATIONS, rig.namespace, name)
        change(app)
        try:
            rig.kube.replace(APPLICATIONS, rig.namespace, app)
            return
        except Conflict:
            continue
    raise AssertionError(f"Application {name}: still conflicting after {_UPDATE_ATTEMPTS} attempts")


def answer_compare_with_the_release(app: dict[str, Any]) -> None:
    """Play Argo CD answering a refresh: the annotation consumed, compared against the release."""
    app["metadata"].get("annotations", {}).pop(appsync.REFRESH_ANNOTATION, None)
    app["status"]["sync"] = {"status": "OutOfSync", "revision": REVISION}


def test_an_application_compared_before_the_release_is_compared_again_and_synced(rig: Rig) -> None:
    """Issue 29 point 4: the cluster's second Application still reads Synced and Healthy at the commit
    before the release (its refresh went unanswered). It is not left alone (the cluster would count
    done and the Application never be synced once Argo CD compares it): the step asks Argo CD to
    compare it again, and syncs it when the answer is the release."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    worker = add_second_app(rig, cluster, status=COMPARED_BEFORE_THE_RELEASE)
    log = rig.tmp_path / "sync.log"
    process = rig.runner.start("sync", "--stage", "canary", "--cluster", cluster, log_path=log)
    try:
        wait_for(
            lambda: appsync.refresh_requested(rig.kube.get(APPLICATIONS, rig.namespace, worker)),
            timeout=20,
            what=f"the sync step to ask Argo CD to compare {worker} again",
        )
        notes = {n.name: n.note for n in rig.stage().notes}
        assert f"{worker}: Synced and Healthy at {OLD_REVISION}" in notes.get(cluster, ""), notes
        update_named_app(rig, worker, answer_compare_with_the_release)
    finally:
        code, output = finish(process, log)
    assert code == 0, output
    synced = rig.kube.get(APPLICATIONS, rig.namespace, worker)
    assert appsync.requested_by_rollout(synced, "r1"), output
    assert synced["operation"]["sync"]["revision"] == REVISION
    assert appsync.requested_by_rollout(rig.app(cluster), "r1")
    assert cluster not in {n.name for n in rig.stage().notes}, "the note goes once Argo CD answered"


def test_an_application_argo_cd_does_not_compare_again_fails_the_cluster_naming_it(rig: Rig) -> None:
    """Issue 29 point 4: no answer to the comparison by the progress deadline: the cluster is not done
    (it fails), and the reason names the Application and why; what we started there is ended."""
    make_progressive_sync(rig.kube, rig.namespace, deadline_seconds=2)
    cluster = select_canary(rig.runner)
    worker = add_second_app(rig, cluster, status=COMPARED_BEFORE_THE_RELEASE)
    result = rig.runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(result, 1)
    expected = (
        f"{worker}: Synced and Healthy at {OLD_REVISION}, which is not a revision of this release, and "
        "Argo CD did not answer our request to compare it again within the progress deadline"
    )
    assert expected in result.stdout
    failures = {f.name: f.reason for f in rig.stage().failed}
    assert expected in failures[cluster]
    assert not appsync.requested_by_rollout(rig.app(cluster), "r1"), "the request written was withdrawn"


class RefusingKubeOf(CountingKube):
    """Behind a CountingKube: the replace of each Application in `refused` answers 409, and (with
    `fail_record_patches`) every patch of a stage's record answers a temporary error."""

    def __init__(self, kube: Kube, refused: set[str], *, fail_record_patches: bool = False) -> None:
        super().__init__(kube)
        self.refused = refused
        self.fail_record_patches = fail_record_patches

    def replace(self, resource: Any, namespace: str | None, body: dict[str, Any], **kwargs: Any) -> Any:
        if resource is APPLICATIONS and body["metadata"]["name"] in self.refused:
            raise Conflict(f"applications {body['metadata']['name']}: the object has been modified")
        return self._kube.replace(resource, namespace, body, **kwargs)

    def patch(self, resource: Any, namespace: str | None, name: str, *args: Any, **kwargs: Any) -> Any:
        if resource is PROGRESSIVE_SYNC_STAGES and self.fail_record_patches:
            raise Retryable(f"progressivesyncstages/{name}: connection reset by peer")
        return self._kube.patch(resource, namespace, name, *args, **kwargs)


def select_rest_in_process(rig: Rig, kube: Any, start_syncs: int) -> Any:
    ctx = opened(
        rig,
        kube,
        "rest",
        sizing={"rest": {"start_syncs": start_syncs, "max_parallel": max(start_syncs, 1)}},
        tuning=Tuning(compare_wait_seconds=0),
        taking_over=True,
    )
    return select_stage(cast(Kube, kube), ctx)


def fail_a_sibling(rig: Rig, cluster: str) -> None:
    record_failed(rig.kube, rig.namespace, "myservice", stage="rest", cluster=cluster, reason="Degraded")


def test_a_cluster_step_of_a_failed_stage_writes_no_sync_the_first_wave_left(rig: Rig) -> None:
    """Issue 29 point 4: the first wave wrote the cluster's first Application and met a 409 on its
    second, and listed the cluster syncing; then a sibling failed the stage. The cluster's step
    writes no sync for the second (a failed stage writes nothing new) and ends the first."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    workers = {c.name: add_second_app(rig, c.name) for c in rig.fleet.clusters}
    partial = sorted(workers)[0]
    kube = RefusingKubeOf(rig.kube, {workers[partial]})
    result = select_rest_in_process(rig, kube, 3)
    assert partial in result.first_wave.started
    assert partial in rig.stage("rest").syncing
    assert not appsync.requested_by_rollout(rig.kube.get(APPLICATIONS, rig.namespace, workers[partial]), "r1")
    fail_a_sibling(rig, next(c for c in sorted(workers) if c != partial))

    mark = rig.control_plane.audit_mark()
    step = rig.runner.run("cluster", "--stage", "rest", "--cluster", partial)
    assert_ok(step, 1)
    assert f"cluster {partial}: stopped before it finished: stage 'rest' has failed already" in step.stdout
    writes = writes_by(rig.control_plane, mark)
    assert [w for w in writes if w.resource == "applications" and w.name == workers[partial]] == [], describe(
        writes
    )
    assert not appsync.requested_by_rollout(rig.app(partial), "r1"), "the first Application's sync is ended"
    assert partial in {f.name for f in rig.stage("rest").failed}


def test_a_first_wave_sync_whose_listing_was_lost_is_ended_not_reported_not_started(rig: Rig) -> None:
    """Issue 29 point 5: the first wave wrote two syncs, then its one write recording them Syncing
    failed (logged, not raised). A sibling fails the stage: the cluster step finds the sync ours on
    the Application, ends it and records the cluster failed, instead of "not started"."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    kube = RefusingKubeOf(rig.kube, set(), fail_record_patches=True)  # select's own writes go through
    result = select_rest_in_process(rig, kube, 2)
    first, second, third = rig.stage("rest").targets
    assert result.first_wave.started == (first, second)
    assert rig.stage("rest").syncing == [], "the listing was lost"
    assert ours(rig, first)
    fail_a_sibling(rig, third)

    step = rig.runner.run("cluster", "--stage", "rest", "--cluster", first)
    assert_ok(step, 1)
    assert f"cluster {first}: stopped before it finished" in step.stdout, step.stdout
    assert "not started" not in step.stdout
    assert not ours(rig, first), "the sync we wrote is withdrawn"
    assert first in {f.name for f in rig.stage("rest").failed}


class PausingKube(CountingKube):
    """Behind a CountingKube: `select`'s first list of the Applications (after its read of the
    ProgressiveSync, before the first wave) runs `meanwhile` first: someone acts in that window."""

    def __init__(self, kube: Kube, meanwhile: Callable[[], None]) -> None:
        super().__init__(kube)
        self.meanwhile: Callable[[], None] | None = meanwhile

    def list(self, resource: Any, *args: Any, **kwargs: Any) -> Any:
        act = self.meanwhile
        if resource is APPLICATIONS and act is not None:
            self.meanwhile = None
            act()
        return self._kube.list(resource, *args, **kwargs)


def test_a_pause_after_select_read_the_progressive_sync_starts_no_first_wave(rig: Rig) -> None:
    """Issue 29 point 6: paused between select's read of the ProgressiveSync and the first wave's
    writes (listing, planning and the compare wait lie between): no sync starts."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    result = select_rest_in_process(rig, PausingKube(rig.kube, lambda: set_paused(rig, True)), 3)
    assert result.first_wave.started == ()
    assert result.first_wave.reason == "the ProgressiveSync is paused"
    assert rig.stage("rest").syncing == []
    assert not any(ours(rig, cluster) for cluster in rig.stage("rest").targets)
