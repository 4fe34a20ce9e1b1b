"""The stage boundary (steps/chain.py `close_early`, issue 33) on a real kube-apiserver: the
`cluster` step of a stage's last cluster closes the stage and selects the next one itself, with its
first wave, when the contract says the stage's closing step selects the next (`selectsNext`); the
`record-and-select` step that follows then writes nothing and hands on the same targets; the last
stage's last cluster records the rollout Succeeded (`endsRollout`), after which the Workflow's
`record` and exit handler write nothing and a stop in its last seconds rolls nothing back; of two last
clusters finishing at once only one closes the stage; nothing is closed early while paused, with the
Workflow suspended or stopped, for a stage whose next one opens itself, or before every target has
an outcome.

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from orchestrator.api.metadata import workflow_name
from orchestrator.api.stage_records import CLOSED_BY_ANNOTATION
from orchestrator.kube.client import PROGRESSIVE_SYNC_STAGES, WORKFLOWS
from orchestrator.kube.stage_records import claim_boundary
from tests.integration.test_steps_chain import create_workflow, sync_writes
from tests.support.steps_harness import describe, make_progressive_sync, read_progressive_sync, writes_by
from tests.support.steps_rig import CANARY, REST, Rig, assert_ok, requested, set_paused

pytestmark = pytest.mark.integration

# The rig's three clusters: a canary of one, then the rest (two) side by side.
CANARY_SIZE = {"targets": 1, "max_parallel": 1, "start_syncs": 1}
REST_SIZE = {"targets": 2, "max_parallel": 2, "start_syncs": 2}


def boundary_args(
    rig: Rig, *, selects_next: bool = True, rest: dict[str, Any] | None = None
) -> tuple[str, ...]:
    """`--contract` of stages canary and rest, the canary's closing step selecting the rest."""
    canary = {**CANARY_SIZE, **({"selects_next": "rest"} if selects_next else {})}
    sizing = {"canary": canary, "rest": rest or REST_SIZE}
    return ("--contract", rig.runner.contract(sizing).to_json())


def canary_selected(rig: Rig, **workflow: Any) -> str:
    """The ProgressiveSync of canary and rest, its Workflow, the canary selected (its sync started)."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[CANARY, REST])
    create_workflow(rig, **workflow)
    assert_ok(rig.runner.run("select", "--stage", "canary", *boundary_args(rig)))
    (canary,) = rig.stage("canary").targets
    assert requested(rig, canary)
    return canary


def run_cluster(rig: Rig, stage: str, cluster: str, *args: str) -> subprocess.CompletedProcess[str]:
    return rig.runner.run("cluster", "--stage", stage, "--cluster", cluster, *args)


def test_the_last_cluster_closes_its_stage_and_starts_the_next_stage_and_record_and_select_writes_nothing(
    rig: Rig,
) -> None:
    canary = canary_selected(rig)
    rig.simulate()
    mark = rig.control_plane.audit_mark()
    result = run_cluster(rig, "canary", canary, *boundary_args(rig))
    assert_ok(result)
    assert "closed the stage (the last cluster)" in result.stdout
    assert rig.stage("canary").entry.phase == "Succeeded"
    rest = rig.stage("rest")
    assert rest.entry.phase == "Progressing" and len(rest.targets) == 2
    assert all(requested(rig, cluster) for cluster in rest.targets)  # the rest's first wave
    (part,) = rig.stage("canary").entry.records or []
    stored = rig.kube.get(PROGRESSIVE_SYNC_STAGES, rig.namespace, part)
    assert stored["metadata"]["annotations"][CLOSED_BY_ANNOTATION] == canary
    app = f"{rig.fleet.app_set}-"
    assert sorted(sync_writes(rig, mark)) == sorted(app + c for c in rest.targets), describe(
        writes_by(rig.control_plane, mark)
    )

    # The Workflow's record-and-select then runs: the same targets handed on, nothing written.
    mark = rig.control_plane.audit_mark()
    closing = rig.runner.run(
        "record-and-select", "--stage", "canary", "--next-stage", "rest", *boundary_args(rig)
    )
    assert_ok(closing)
    assert json.loads(rig.runner.targets()) == rest.targets
    assert writes_by(rig.control_plane, mark) == [], describe(writes_by(rig.control_plane, mark))


def ended_by_the_last_cluster(rig: Rig, **sizing: Any) -> tuple[str, ...]:
    """Canary, then the rest (the last stage, `endsRollout`), each closed by its last cluster's step:
    the rollout recorded Succeeded before the Workflow's `record` and exit handler run. The
    contract's arguments (`sizing`: more of `rig.runner.contract`'s, e.g. a rollback)."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[CANARY, REST])
    create_workflow(rig)
    stages = {"canary": {**CANARY_SIZE, "selects_next": "rest"}, "rest": {**REST_SIZE, "ends_rollout": True}}
    args = ("--contract", rig.runner.contract(stages, **sizing).to_json())
    assert_ok(rig.runner.run("select", "--stage", "canary", *args))
    rig.simulate()
    (canary,) = rig.stage("canary").targets
    assert_ok(run_cluster(rig, "canary", canary, *args))
    first, last = rig.stage("rest").targets
    left = run_cluster(rig, "rest", first, *args)
    assert_ok(left)
    assert "1 cluster(s) of the stage have no outcome yet" in left.stderr
    assert read_progressive_sync(rig.kube, rig.namespace).status.phase == "Progressing"  # type: ignore[union-attr]
    ending = run_cluster(rig, "rest", last, *args)
    assert_ok(ending)
    assert "closed the last stage (the last cluster)" in ending.stdout
    assert "finalize: rollout r1 Succeeded: 2 stage(s) finished; 3 cluster(s) updated" in ending.stdout
    return args


def test_the_last_cluster_of_the_rollout_records_it_succeeded_and_the_workflow_s_last_steps_write_nothing(
    rig: Rig,
) -> None:
    args = ended_by_the_last_cluster(rig)
    status = read_progressive_sync(rig.kube, rig.namespace).status
    assert status is not None and status.phase == "Succeeded" and status.rollout is not None
    assert status.rollout.finished_at is not None
    assert [stage.phase for stage in status.stages or []] == ["Succeeded", "Succeeded"]
    assert status.message == "2 stage(s) finished; 3 cluster(s) updated"

    # The Workflow's `record` of the last stage and its exit handler then run: nothing is written.
    mark = rig.control_plane.audit_mark()
    assert_ok(rig.runner.run("record", "--stage", "rest", *args))
    workflow = ("--workflow-name", workflow_name("myservice", "r1"), "--workflow-status", "Succeeded")
    assert_ok(rig.runner.run("finalize", *workflow, *args))
    assert writes_by(rig.control_plane, mark) == [], describe(writes_by(rig.control_plane, mark))
    assert read_progressive_sync(rig.kube, rig.namespace).status == status


def test_a_rollout_recorded_succeeded_is_not_rolled_back_when_its_workflow_is_stopped_in_its_last_seconds(
    rig: Rig,
) -> None:
    """`argo stop` between the end recorded by the last cluster and the Workflow's end runs the exit
    handler with the Workflow stopped: a rollback on Cancelled would undo a release every cluster
    runs, under a status that says Succeeded. The end stands and nothing is rolled back."""
    rollback = {"on": ["StageFailed", "Cancelled"], "scope": "Reached", "progress_deadline_seconds": 60}
    args = ended_by_the_last_cluster(rig, rollback=rollback)
    rig.kube.patch(WORKFLOWS, rig.namespace, workflow_name("myservice", "r1"), {"spec": {"shutdown": "Stop"}})
    mark = rig.control_plane.audit_mark()
    workflow = ("--workflow-name", workflow_name("myservice", "r1"), "--workflow-status", "Failed")
    plan = rig.runner.run("rollback-plan", *workflow, *args)
    assert_ok(plan)
    assert "no rollback: the rollout's end was recorded Succeeded already" in plan.stdout
    outputs = rig.runner.outputs_dir
    assert [json.loads((outputs / f"rollback-{index}").read_text()) for index in (0, 1)] == [[], []]
    assert_ok(rig.runner.run("finalize", *workflow, *args))
    assert writes_by(rig.control_plane, mark) == [], describe(writes_by(rig.control_plane, mark))
    status = read_progressive_sync(rig.kube, rig.namespace).status
    assert status is not None and status.phase == "Succeeded" and status.rollback is None


# Two clusters side by side, then the third on its own.
PAIR = {"name": "pair", "targets": {"clusters": {"selector": {}}}, "maxTargets": 2, "maxParallel": 2}


def test_of_two_last_clusters_finishing_at_once_one_closes_the_stage(rig: Rig) -> None:
    """Both steps run at once. Whichever reads both clusters done first claims the records object
    (with its resourceVersion) and closes the stage; the other finds a cluster without an outcome,
    the mark, or a Conflict. Whatever the interleaving: one close, the next stage's sync written once."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[PAIR, REST])
    create_workflow(rig)
    sizing = {
        "pair": {"targets": 2, "max_parallel": 2, "start_syncs": 2, "selects_next": "rest"},
        "rest": {"targets": 1, "max_parallel": 1, "start_syncs": 1},
    }
    args = ("--contract", rig.runner.contract(sizing).to_json())
    assert_ok(rig.runner.run("select", "--stage", "pair", *args))
    pair = rig.stage("pair").targets
    rig.simulate()
    mark = rig.control_plane.audit_mark()
    steps = [
        subprocess.Popen(
            rig.runner.command("cluster", "--stage", "pair", "--cluster", cluster, *args),
            env=rig.runner.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cluster in pair
    ]
    outputs = [step.communicate(timeout=120) for step in steps]
    assert [step.returncode for step in steps] == [0, 0], outputs
    closed = [out for out, _ in outputs if "closed the stage (the last cluster)" in out]
    assert len(closed) == 1, outputs
    assert rig.stage("pair").entry.phase == "Succeeded"
    (third,) = rig.stage("rest").targets
    assert rig.stage("rest").entry.phase == "Progressing" and requested(rig, third)
    assert sync_writes(rig, mark) == [f"{rig.fleet.app_set}-{third}"], describe(
        writes_by(rig.control_plane, mark)
    )


def test_a_stale_claim_on_the_records_is_refused(rig: Rig) -> None:
    canary = canary_selected(rig)
    (part,) = rig.stage("canary").entry.records or []
    stored = rig.kube.get(PROGRESSIVE_SYNC_STAGES, rig.namespace, part)
    version = stored["metadata"]["resourceVersion"]
    assert claim_boundary(rig.kube, rig.namespace, part, resource_version=version, cluster=canary)
    assert not claim_boundary(rig.kube, rig.namespace, part, resource_version=version, cluster="other")
    again = rig.kube.get(PROGRESSIVE_SYNC_STAGES, rig.namespace, part)
    assert again["metadata"]["annotations"][CLOSED_BY_ANNOTATION] == canary


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        pytest.param("paused", "paused", id="paused"),
        pytest.param("suspended", "is suspended", id="workflow-suspended"),
        pytest.param("stopped", "being shut down (Stop)", id="workflow-stopped"),
        pytest.param("opens-itself", "the stage's own closing step runs next", id="next-stage-opens-itself"),
    ],
)
def test_no_early_close(rig: Rig, case: str, expected: str) -> None:
    workflow = {"suspend": True} if case == "suspended" else {"shutdown": "Stop"} if case == "stopped" else {}
    canary = canary_selected(rig, **workflow)
    rig.simulate()
    if case == "paused":
        set_paused(rig, True)
    result = run_cluster(rig, "canary", canary, *boundary_args(rig, selects_next=case != "opens-itself"))
    assert_ok(result)
    assert "closed the stage" not in result.stdout
    assert expected in result.stdout + result.stderr
    assert rig.stage("canary").entry.phase == "Progressing"
    assert rig.stage("rest").entry.phase == "Pending"
