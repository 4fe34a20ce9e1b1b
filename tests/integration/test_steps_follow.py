"""The rollout follower (steps/follow.py, issue 33) on a real kube-apiserver: with no `cluster` pod
running, it records each cluster done the moment its Applications are, hands its slot to the next
cluster and closes the stage when it was the last, with one sync write per Application; the pods
that run afterwards find everything recorded and write nothing; a failing cluster is left to its
pod; it stops at once for a Workflow being stopped, and when its rollout is superseded.

The world (seeded fleet of three clusters, the steps' runner, the simulator) is
tests/support/steps_rig.py.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from orchestrator.kube.client import PROGRESSIVE_SYNCS
from orchestrator.simulator.config import SimulatorConfig
from tests.integration.test_steps_chain import create_workflow, sync_writes
from tests.support.steps_harness import describe, make_progressive_sync, writes_by
from tests.support.steps_rig import CANARY, FAST, REST, Rig, assert_ok, requested

pytestmark = pytest.mark.integration

FOLLOW_SECONDS = 90


def follow_args(rig: Rig) -> tuple[str, ...]:
    """`--contract`: a canary of one whose closing step selects `rest`, then `rest`'s two clusters
    one at a time (its first wave one cluster)."""
    sizing = {
        "canary": {"targets": 1, "max_parallel": 1, "start_syncs": 1, "selects_next": "rest"},
        "rest": {"targets": 2, "max_parallel": 1, "start_syncs": 1},
    }
    return ("--contract", rig.runner.contract(sizing).to_json())


def no_sync_retries(app: dict[str, Any]) -> None:
    """The Application's sync policy allows no retry (our sync request pins it)."""
    app["spec"].setdefault("syncPolicy", {})["retry"] = {"limit": 0}


def canary_selected(rig: Rig) -> str:
    make_progressive_sync(rig.kube, rig.namespace, stages=[CANARY, REST])
    create_workflow(rig)
    assert_ok(rig.runner.run("select", "--stage", "canary", *follow_args(rig)))
    (canary,) = rig.stage("canary").targets
    assert requested(rig, canary)
    return canary


def test_the_follower_runs_every_hand_off_and_boundary_before_any_cluster_pod(rig: Rig) -> None:
    canary = canary_selected(rig)
    mark = rig.control_plane.audit_mark()
    rig.simulate(FAST)
    result = rig.runner.run("follow", *follow_args(rig), timeout=FOLLOW_SECONDS)
    assert_ok(result)
    done = "recorded 3 cluster(s) done, handed off 1, closed 1 stage(s) early"
    assert done in result.stdout, result.stdout
    assert "every cluster of the last stage 'rest' has an outcome" in result.stdout
    # The canary closed and `rest` selected by the follower; both of rest's clusters done.
    assert rig.stage("canary").entry.phase == "Succeeded"
    rest = rig.stage("rest")
    assert rest.entry.phase == "Progressing"  # its own closing step (`record`) closes it
    assert sorted(rest.completed) == sorted(rest.targets) and len(rest.targets) == 2
    # One sync write per Application: the canary's came from select, before the mark.
    app = f"{rig.fleet.app_set}-"
    assert sorted(sync_writes(rig, mark)) == sorted(app + c for c in rest.targets), describe(
        writes_by(rig.control_plane, mark)
    )

    # The Workflow's pods then run as they would have: each finds its cluster recorded and writes
    # nothing; the stage's closing steps find their work done, but for the last `record`.
    mark = rig.control_plane.audit_mark()
    for stage, cluster in [("canary", canary), *(("rest", c) for c in rest.targets)]:
        ran = rig.runner.run("cluster", "--stage", stage, "--cluster", cluster, *follow_args(rig))
        assert_ok(ran)
        assert "recorded as completed already" in ran.stdout, ran.stdout
    assert_ok(
        rig.runner.run("record-and-select", "--stage", "canary", "--next-stage", "rest", *follow_args(rig))
    )
    assert writes_by(rig.control_plane, mark) == [], describe(writes_by(rig.control_plane, mark))
    assert_ok(rig.runner.run("record", "--stage", "rest", *follow_args(rig)))
    assert rig.stage("rest").entry.phase == "Succeeded"


def test_a_failing_cluster_is_left_to_its_pod(rig: Rig) -> None:
    # No Argo CD retries: the first failed attempt is the cluster's failure (with the default
    # five retries its pod would wait out the 60 s progress deadline, which is not what this tests).
    for cluster in rig.fleet.clusters:
        rig.update_app(cluster.name, no_sync_retries)
    canary = canary_selected(rig)
    rig.simulate(SimulatorConfig.from_yaml("defaults: {syncSeconds: 0.3, healthSeconds: 0.3, fail: true}"))
    follower = subprocess.Popen(
        rig.runner.command("follow", *follow_args(rig)),
        env=rig.runner.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The canary's pod decides its failure; the follower sees the stage failed and stops.
        ran = rig.runner.run("cluster", "--stage", "canary", "--cluster", canary, *follow_args(rig))
        assert_ok(ran, 1)
        assert_ok(
            rig.runner.run(
                "record-and-select", "--stage", "canary", "--next-stage", "rest", *follow_args(rig)
            ),
            1,
        )
        out, err = follower.communicate(timeout=FOLLOW_SECONDS)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert "recorded 0 cluster(s) done" in out, out + err
    # The closing step records the stage and the rollout Failed: the follower stops on either.
    assert "the rollout ended Failed" in out or "stage 'canary' failed" in out, out + err
    assert [f.name for f in rig.stage("canary").failed] == [canary]
    assert rig.stage("rest").entry.phase == "Pending"


def test_a_workflow_being_stopped_is_not_followed(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=[CANARY, REST])
    create_workflow(rig, shutdown="Stop")
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("follow", *follow_args(rig), timeout=FOLLOW_SECONDS)
    assert_ok(result)
    assert "is being shut down (Stop)" in result.stdout, result.stdout
    assert writes_by(rig.control_plane, mark) == []


def test_a_superseded_rollout_is_not_followed(rig: Rig) -> None:
    canary_selected(rig)
    rig.kube.patch(
        PROGRESSIVE_SYNCS,
        rig.namespace,
        "myservice",
        {"status": {"rollout": {"id": "r2"}}},
        subresource="status",
    )
    mark = rig.control_plane.audit_mark()
    rig.simulate(FAST)
    result = rig.runner.run("follow", *follow_args(rig), timeout=FOLLOW_SECONDS)
    assert_ok(result)
    assert "superseded" in result.stdout, result.stdout
    assert writes_by(rig.control_plane, mark) == []
