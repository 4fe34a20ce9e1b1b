"""The cluster step (sync then wait-healthy in one process) and the batch, against the real API
server with the fleet simulator: a run to done, SIGTERM (exit 75, a retry that resumes without a
second sync, a batch writing what it gathered), and the clusters not started because their stage
or rollout ended already or started because the failures are within the tolerance.

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from orchestrator.simulator.config import SimulatorConfig
from orchestrator.simulator.events import read_events
from tests.support.outcomes import seed_progressive_sync
from tests.support.steps_harness import (
    make_progressive_sync,
    writes_by,
)
from tests.support.steps_rig import (
    REST,
    Rig,
    assert_ok,
    finish,
    rollout_status,
    select_canary,
    settle_events,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration


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
