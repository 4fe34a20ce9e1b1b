"""The select step through its entrypoint, against the real API server: it records a stage's
targets once, waits for the inventory to list a new cluster, and never replaces a newer rollout
(issue 29, point 10a). Each step is run twice: the second run must end the same and write nothing.

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.api.models import StagePhase
from orchestrator.argocd.inventory import INVENTORY_NAME
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import (
    APPLICATIONS,
    WORKFLOWS,
    Kube,
)
from orchestrator.simulator.seed import SeedResult, seed_fleet
from steps.select_stage import select_stage
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.clock import ManualClock
from tests.support.outcomes import seed_progressive_sync, stage_lists
from tests.support.steps_harness import (
    StepRunner,
    make_progressive_sync,
    publish_inventory,
    read_progressive_sync,
    writes_by,
)
from tests.support.steps_rig import (
    CANARY,
    REGIONS,
    REST,
    Rig,
    assert_ok,
    first_wave_args,
    opened,
    rollout_status,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration


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


def test_select_takes_the_clusters_whose_applications_carry_the_stage_label(
    kube: Kube, namespace: str, fleet: SeedResult, runner: StepRunner
) -> None:
    """`targets.applications.selector` (docs/concepts.md): select reads the Applications' labels as
    they are when the stage starts, and takes the clusters of the matching ones."""
    labelled = sorted(c.name for c in fleet.clusters[:2])
    for cluster in labelled:
        app = f"{fleet.app_set}-{cluster}"
        kube.patch(APPLICATIONS, namespace, app, {"metadata": {"labels": {"wave": "first"}}})
    first = {
        "name": "first wave",
        "targets": {"applications": {"selector": {"matchLabels": {"wave": "first"}}}},
        "maxParallel": 2,
    }
    make_progressive_sync(kube, namespace, stages=[first, REST])
    assert_ok(runner.run("select", "--stage", "first wave"))
    assert sorted(json.loads(runner.targets())) == labelled
    assert sorted(stage_lists(kube, namespace, "myservice", "first wave").targets) == labelled


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
