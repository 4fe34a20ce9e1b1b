"""The closing steps through their entrypoint, against the real API server: record (a stage closed
by its failure policy), record-and-select (the next stage selected, or left to its own closing step),
a superseded rollout's steps writing nothing, and finalize (the rollout and its unfinished stages
marked from the Workflow's status). Each step is run twice: the second run must write nothing.

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.api.models import RolloutPhase, StagePhase
from orchestrator.kube.client import (
    SECRETS,
    WORKFLOWS,
)
from tests.support.outcomes import seed_progressive_sync
from tests.support.steps_harness import (
    make_progressive_sync,
    publish_inventory,
    read_progressive_sync,
    writes_by,
)
from tests.support.steps_rig import (
    CANARY,
    REST,
    Rig,
    assert_ok,
    canary_done_rest_pending,
    rollout_status,
)

pytestmark = pytest.mark.integration


# --- record ----------------------------------------------------------------------------------

# The canary in progress, one of its two clusters done and the other failed (Degraded).
ONE_OF_TWO_FAILED = {
    "name": "canary",
    "phase": "Progressing",
    "targets": ["a", "b"],
    "completed": ["a"],
    "failed": [{"name": "b", "reason": "Degraded"}],
    "startedAt": "2030-01-01T12:00:00Z",
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
    seed_progressive_sync(
        rig.kube, rig.namespace, max_failed_clusters=max_failed, status=rollout_status(ONE_OF_TWO_FAILED)
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


@pytest.mark.parametrize(
    ("shutdown", "code", "rollout_phase", "said"),
    [
        pytest.param(
            None,
            0,
            RolloutPhase.SUCCEEDED,
            "finalize: rollout r1 Succeeded: 1 stage(s) finished; 1 cluster(s) updated",
            id="records-the-end",
        ),
        pytest.param(
            "Stop",
            1,
            RolloutPhase.PROGRESSING,
            "the Workflow is being shut down (Stop): its exit handler decides",
            id="workflow-stopping-exits-1-for-the-exit-handler",
        ),
    ],
)
def test_the_last_stage_s_record_records_the_rollout_s_end_or_fails_for_the_exit_handler(
    rig: Rig, shutdown: str | None, code: int, rollout_phase: RolloutPhase, said: str
) -> None:
    """A last stage (`endsRollout`) that no cluster step closed early (its last outcome a tolerated
    failure): its `record` records the rollout Succeeded, as the exit handler would, so a Workflow
    that Succeeded may skip it (workflow_templates/exit_handler.py). When it cannot (the Workflow
    is being shut down), it exits 1: the Workflow fails and its exit handler decides."""
    seed_progressive_sync(
        rig.kube,
        rig.namespace,
        stages=[CANARY],
        max_failed_clusters=1,
        status=rollout_status(ONE_OF_TWO_FAILED),
    )
    make_workflow(rig, shutdown=shutdown)
    sizing = {"canary": {"targets": 2, "max_parallel": 1, "ends_rollout": True}}
    args = ("--contract", rig.runner.contract(sizing).to_json())
    result = rig.runner.run("record", "--stage", "canary", *args)
    assert_ok(result, code)
    assert said in result.stdout
    assert rig.stage().phase == StagePhase.SUCCEEDED
    status = read_progressive_sync(rig.kube, rig.namespace).status
    assert status is not None and status.phase == rollout_phase
    assert (status.rollout is not None and status.rollout.finished_at is not None) == (code == 0)

    mark = rig.control_plane.audit_mark()
    assert_ok(rig.runner.run("record", "--stage", "canary", *args), code)
    assert writes_by(rig.control_plane, mark) == []
    if shutdown:
        # The exit handler runs (the Workflow failed) and records the end: Cancelled.
        workflow = ("--workflow-name", "myservice-r1", "--workflow-status", "Failed")
        assert_ok(rig.runner.run("finalize", *workflow, *args))
        ended = read_progressive_sync(rig.kube, rig.namespace).status
        assert ended is not None and ended.phase == RolloutPhase.CANCELLED


def test_record_and_select_leaves_a_next_stage_that_cannot_run_to_its_own_closing_step(rig: Rig) -> None:
    """The canary succeeded, but the rest cannot be planned (a second cluster Secret names the
    cluster it would take: a plan error). The hand-over exits 0 and hands on no targets, the rest
    is recorded Failed, and the rest's own closing step exits 1: Argo shows the rest failed, not
    the canary.

    Not a deleted Secret: its Application would be one whose cluster the inventory does not list,
    which `select` waits for (60 s, `Tuning.inventory_wait_seconds`; the wait and its bound are
    test_steps_select's) before the same plan error."""
    first, _, third = (c.name for c in rig.fleet.clusters)
    canary_done_rest_pending(rig, first)
    secret = rig.kube.get(SECRETS, rig.namespace, f"cluster-{third}")
    copy = {key: secret[key] for key in ("apiVersion", "kind", "type", "data")}
    copy["metadata"] = {"name": f"cluster-{third}-again", "labels": secret["metadata"]["labels"]}
    rig.kube.create(SECRETS, rig.namespace, copy)
    publish_inventory(rig.kube, rig.namespace)  # what the watcher does on the Secret's creation

    result = rig.runner.run("record-and-select", "--stage", "canary", "--next-stage", "rest")
    assert_ok(result, 0)
    assert rig.stage("canary").phase == StagePhase.SUCCEEDED
    rest = rig.stage("rest")
    assert rest.phase == StagePhase.FAILED
    assert rest.message and "the plan has errors" in rest.message and third in rest.message, rest.message
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
