"""The chained hand-off (steps/chain.py, issue 33) on a real kube-apiserver: a `cluster` step whose
cluster is done claims the next target in its stage's records and requests its sync, once per
Application; its own step then writes no sync; no hand-off while paused, with the Workflow being
stopped or absent, past the last target; two claims on one records object never take one cluster.

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.metadata import SKIP_ANNOTATION, workflow_name
from orchestrator.api.stage_records import ClusterRecord, ClusterState
from orchestrator.core.clock import SystemClock
from orchestrator.kube.client import APP_PROJECTS, WORKFLOWS
from orchestrator.kube.stage_records import patch_clusters
from steps.chain import _claim
from steps.common import load_progressive_sync
from steps.status_sink import read_stage_records
from tests.support.steps_harness import describe, make_progressive_sync, writes_by
from tests.support.steps_rig import REST, Rig, assert_ok, ours, requested, rollout_r1, set_paused

pytestmark = pytest.mark.integration


def chain_args(rig: Rig, *, start: int = 1) -> tuple[str, ...]:
    """`--contract`: the stage `rest` of the rig's three clusters, one at a time (the builder's
    sizing for maxParallel 1), its first wave `start` clusters."""
    sizing = {"rest": {"targets": 3, "max_parallel": 1, "start_syncs": start}}
    return ("--contract", rig.runner.contract(sizing).to_json())


def create_workflow(rig: Rig, **spec: Any) -> None:
    """The rollout's Workflow object (its steps are not run here; `spec`: e.g. shutdown)."""
    body = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": workflow_name("myservice", "r1")},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", "suspend": {}}], **spec},
    }
    rig.kube.create(WORKFLOWS, rig.namespace, body)


def selected(rig: Rig, *, workflow: bool = True, **spec: Any) -> list[str]:
    """The ProgressiveSync with stage `rest`, selected with its first cluster's sync started; its targets."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    if workflow:
        create_workflow(rig, **spec)
    assert_ok(rig.runner.run("select", "--stage", "rest", *chain_args(rig)))
    targets = rig.stage("rest").targets
    assert [ours(rig, c) for c in targets] == [True, False, False]
    return targets


def sync_writes(rig: Rig, mark: int) -> list[str]:
    """The Applications the steps wrote a sync to (an update) since `mark`."""
    return [
        w.name
        for w in writes_by(rig.control_plane, mark)
        if (w.resource, w.verb) == ("applications", "update")
    ]


def test_each_done_cluster_starts_the_next_and_every_application_is_synced_once(rig: Rig) -> None:
    targets = selected(rig)
    rig.simulate()
    mark = rig.control_plane.audit_mark()
    first = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[0], *chain_args(rig))
    assert_ok(first)
    assert f"handed off to cluster {targets[1]}" in first.stdout
    # Requested (the simulator may have taken it up already), and nothing past it.
    assert [requested(rig, c) for c in targets[1:]] == [True, False]
    assert rig.stage("rest").syncing == [targets[1]]

    second = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[1], *chain_args(rig))
    assert_ok(second)
    assert f"handed off to cluster {targets[2]}" in second.stdout
    last = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[2], *chain_args(rig))
    assert_ok(last)
    assert "handed off" not in last.stdout  # every target has started
    assert sorted(rig.stage("rest").completed) == sorted(targets)
    # One sync write per Application: the hand-offs wrote the second and third, their steps nothing.
    app = f"{rig.fleet.app_set}-"
    assert sorted(sync_writes(rig, mark)) == [app + targets[1], app + targets[2]], describe(
        writes_by(rig.control_plane, mark)
    )

    mark = rig.control_plane.audit_mark()
    again = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[0], *chain_args(rig))
    assert_ok(again)  # run again: recorded done already, no hand-off, nothing written
    assert "handed off" not in again.stdout
    assert writes_by(rig.control_plane, mark) == []


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        pytest.param("paused", "paused", id="paused"),
        pytest.param("stopped", "being shut down (Stop)", id="workflow-stopped"),
        pytest.param("no-workflow", "not found", id="no-workflow-no-pod-follows"),
    ],
)
def test_no_hand_off(rig: Rig, case: str, expected: str, caplog: pytest.LogCaptureFixture) -> None:
    spec = {"shutdown": "Stop"} if case == "stopped" else {}
    targets = selected(rig, workflow=case != "no-workflow", **spec)
    rig.simulate()
    if case == "paused":
        # Paused after the first cluster's step started: it finishes (running syncs finish), starts nothing.
        set_paused(rig, True)
    result = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[0], *chain_args(rig))
    assert_ok(result)
    assert "handed off" not in result.stdout
    assert expected in result.stdout + result.stderr
    assert [requested(rig, c) for c in targets[1:]] == [False, False]
    assert rig.stage("rest").syncing == []


def test_two_claims_on_one_records_object_never_take_the_same_cluster(rig: Rig) -> None:
    """The second claim is decided on a stale read: its Conflict is read again, and it takes the
    cluster after the one the first claimed, never the same one."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    assert_ok(rig.runner.run("select", "--stage", "rest", *chain_args(rig, start=0)))
    rollout = rollout_r1(rig)
    ps = load_progressive_sync(rig.kube, rollout)
    where = read_stage_records(rig.kube, rollout, ps, "rest")
    first, second, third = where.records[0].spec.targets
    now = SystemClock().now()
    done = {c: ClusterRecord(state=ClusterState.COMPLETED, started_at=now, finished_at=now) for c in (first,)}
    part = patch_clusters(rig.kube, rig.namespace, where.records[0].metadata.name, done)
    proposed = ClusterRecord(state=ClusterState.SYNCING, started_at=now)

    claim, stored = _claim(rig.kube, part, finished=first, max_parallel=2, proposed=proposed)
    assert claim.cluster == second and stored is not None
    # The same stale read again (another step finishing at once): Conflict, read again, next one.
    later = proposed.model_copy(update={"started_at": SystemClock().now()})
    claim, stored = _claim(rig.kube, part, finished=first, max_parallel=2, proposed=later)
    assert claim.cluster == third and stored is not None
    states = {c: r.state for c, r in stored.clusters.items()}
    assert states == {
        first: ClusterState.COMPLETED,
        second: ClusterState.SYNCING,
        third: ClusterState.SYNCING,
    }
    # And a third claim finds the slots full.
    claim, stored = _claim(rig.kube, part, finished=first, max_parallel=2, proposed=later)
    assert not claim.claimed and stored is None


def test_a_skip_mark_on_the_next_cluster_takes_the_claim_back_and_its_step_skips_it(rig: Rig) -> None:
    targets = selected(rig)
    rig.update_app(
        targets[1],
        lambda app: app["metadata"].setdefault("annotations", {}).update({SKIP_ANNOTATION: "INC-1"}),
    )
    rig.simulate()
    first = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[0], *chain_args(rig))
    assert_ok(first)
    assert "handed off" not in first.stdout
    assert f"claimed cluster {targets[1]} but a skip mark on it" in first.stderr
    assert "was taken back" in first.stderr
    assert not requested(rig, targets[1])
    assert rig.stage("rest").syncing == []  # the claim is gone: the cluster has no record
    skipped = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[1], *chain_args(rig))
    assert_ok(skipped)
    assert f"cluster {targets[1]} done: skipped: " in skipped.stdout, skipped.stdout
    assert "operation" not in rig.app(targets[1])


def test_a_closed_window_on_the_next_cluster_takes_the_claim_back_and_writes_nothing(rig: Rig) -> None:
    """An AppProject deny window in force for the next cluster's Application: the hand-off writes no
    sync there (Argo CD would hold it and keep the slot); its own step waits for the window."""
    targets = selected(rig)
    rig.kube.create(
        APP_PROJECTS,
        rig.namespace,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AppProject",
            "metadata": {"name": "default", "namespace": rig.namespace},
            "spec": {
                "sourceRepos": ["*"],
                "destinations": [{"server": "*", "namespace": "*"}],
                "syncWindows": [
                    {
                        "kind": "deny",
                        "schedule": "* * * * *",
                        "duration": "1h",
                        "applications": [f"*{targets[1]}"],
                    }
                ],
            },
        },
    )
    rig.simulate()
    first = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[0], *chain_args(rig))
    assert_ok(first)
    assert "handed off" not in first.stdout
    assert f"claimed cluster {targets[1]} but waiting for window" in first.stderr, first.stderr
    assert "was taken back" in first.stderr
    assert not requested(rig, targets[1])
    assert rig.stage("rest").syncing == []  # the claim is gone: its own step waits for the window
