"""Pods at once (steps/turn.py, issue 33) on a real kube-apiserver: in a stage whose cluster pods all
start together, a pod whose cluster has no record waits, watching the stage's records, and writes
nothing; it goes on the moment a done cluster's hand-off claims its cluster, or claims its own slot
when it is its turn; it claims nothing while the ProgressiveSync is paused; a hand-off that cannot
write leaves its claim to the cluster's pod; every Application is synced once.

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from orchestrator.api.metadata import SKIP_ANNOTATION
from tests.integration.test_steps_chain import create_workflow, sync_writes
from tests.support.steps_harness import describe, make_progressive_sync, writes_by
from tests.support.steps_rig import REST, Rig, assert_ok, requested, set_paused
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration


def together_args(rig: Rig) -> tuple[str, ...]:
    """`--contract`: the stage `rest` of the rig's three clusters, one at a time, its pods all at once
    (`podsAtOnce`), no first wave: every cluster is started by a pod's claim or a hand-off."""
    sizing = {"rest": {"targets": 3, "max_parallel": 1, "start_syncs": 0, "pods_at_once": True}}
    return ("--contract", rig.runner.contract(sizing).to_json())


def selected(rig: Rig) -> list[str]:
    """The ProgressiveSync with stage `rest` and its Workflow, selected with no sync started; its targets."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    create_workflow(rig)
    assert_ok(rig.runner.run("select", "--stage", "rest", *together_args(rig)))
    targets = rig.stage("rest").targets
    assert [requested(rig, c) for c in targets] == [False, False, False]
    return targets


def start(rig: Rig, cluster: str) -> tuple[subprocess.Popen[str], Path]:
    log = rig.tmp_path / f"cluster-{cluster}.log"
    return rig.runner.start(
        "cluster", "--stage", "rest", "--cluster", cluster, *together_args(rig), log_path=log
    ), log


def logged(log: Path, text: str, what: str) -> None:
    """Wait until the background step's output says `text`."""
    wait_for(lambda: text in log.read_text(), timeout=60, what=what, describe=log.read_text)


def finished(process: subprocess.Popen[str], log: Path) -> str:
    """The background step's output once it ended with 0."""
    code = process.wait(timeout=120)
    text = log.read_text()
    assert code == 0, text
    return text


def test_a_pod_started_before_its_slot_waits_then_runs_the_cluster_a_hand_off_started(rig: Rig) -> None:
    targets = selected(rig)
    rig.simulate()
    mark = rig.control_plane.audit_mark()
    second, second_log = start(rig, targets[1])
    logged(second_log, "waits for a free slot", "the second cluster's pod to wait")
    assert f"1 target(s) before it have not started (first: {targets[0]})" in second_log.read_text()
    assert not requested(rig, targets[1]) and rig.stage("rest").syncing == []

    # The first cluster's pod takes its own slot (the first target, none in flight), is done, and
    # hands its slot to the second: the waiting pod goes on and only waits for health. The waiting
    # pod is held (SIGSTOP) meanwhile: between the first's Completed record and its hand-off the slot
    # is free for a moment, and a waiting pod that looks then claims its own cluster, which is as
    # right (either claim starts it once) but not the path this test is about.
    second.send_signal(signal.SIGSTOP)
    try:
        first = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[0], *together_args(rig))
    finally:
        second.send_signal(signal.SIGCONT)
    assert_ok(first)
    assert "claimed its own slot" in first.stderr, first.stderr
    assert f"handed off to cluster {targets[1]}" in first.stdout
    text = finished(second, second_log)
    assert f"cluster {targets[1]} done" in text and "its turn after" in text, text
    assert f"handed off to cluster {targets[2]}" in text

    last = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[2], *together_args(rig))
    assert_ok(last)
    assert "waits for a free slot" not in last.stderr  # its record said Syncing: it went on at once
    assert sorted(rig.stage("rest").completed) == sorted(targets)
    app = f"{rig.fleet.app_set}-"
    assert sorted(sync_writes(rig, mark)) == sorted(app + c for c in targets), describe(
        writes_by(rig.control_plane, mark)
    )


def test_a_waiting_pod_claims_nothing_while_paused_and_its_slot_after_the_unpause(rig: Rig) -> None:
    targets = selected(rig)
    rig.simulate()
    set_paused(rig, True)
    first, first_log = start(rig, targets[0])
    logged(first_log, "paused", "the first cluster's pod to wait for the unpause")
    assert rig.stage("rest").syncing == [] and not requested(rig, targets[0])
    set_paused(rig, False)
    text = finished(first, first_log)
    assert "claimed its own slot" in text and f"cluster {targets[0]} done" in text, text
    assert requested(rig, targets[0]) or targets[0] in rig.stage("rest").completed


def test_a_hand_off_that_cannot_write_leaves_its_claim_to_the_clusters_pod(rig: Rig) -> None:
    """A skip mark on the next cluster: the hand-off writes no sync, and its claim stays (the pod of
    that cluster may already have gone on when it saw the claim); that pod records it skipped."""
    targets = selected(rig)
    rig.update_app(
        targets[1],
        lambda app: app["metadata"].setdefault("annotations", {}).update({SKIP_ANNOTATION: "INC-2"}),
    )
    rig.simulate()
    first = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[0], *together_args(rig))
    assert_ok(first)
    assert f"claimed cluster {targets[1]} but a skip mark on it" in first.stderr, first.stderr
    assert "the claim stays" in first.stderr
    assert rig.stage("rest").syncing == [targets[1]] and not requested(rig, targets[1])
    skipped = rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[1], *together_args(rig))
    assert_ok(skipped)
    assert f"cluster {targets[1]} done: skipped: " in skipped.stdout, skipped.stdout
    assert "operation" not in rig.app(targets[1])
    assert rig.stage("rest").syncing == []
