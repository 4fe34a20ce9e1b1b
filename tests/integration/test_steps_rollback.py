"""The rollback steps against the real API server with the fleet simulator (issue 32): a canary
synced to the release is restored to the revision it ran before, with one rollback write, and a
second run writes nothing; an Application someone synced after us is left alone and named; a
rollback sync that fails leaves the cluster not restored (exit 1); `rollback-plan` decides from
the stage's failure and records RollingBack; `finalize` ends the rollout RolledBack or Failed.

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.api.metadata import INFO_PREVIOUS_REVISIONS
from orchestrator.api.models import ProgressiveSyncStatus, StagePhase
from orchestrator.api.rollout_status import close_stage
from orchestrator.argocd import appsync
from orchestrator.kube.stage_records import read_outcomes
from orchestrator.kube.status_writer import update_status
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import PREVIOUS_REVISION
from tests.support.builders import at
from tests.support.steps_harness import make_progressive_sync, read_progressive_sync, writes_by
from tests.support.steps_rig import Rig, assert_ok, select_canary
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

ROLLBACK = {"on": ["StageFailed", "Cancelled"], "scope": "FailedStage", "progress_deadline_seconds": 60}


def rollback_env(rig: Rig, **rollback: Any) -> dict[str, str]:
    """The steps' contract with a rollback (`rollback` overrides the default one's fields)."""
    contract = rig.runner.contract(rollback={**ROLLBACK, **rollback})
    return {"PROGRESSIVE_SYNC_CONTRACT": contract.to_json()}


def synced_canary(rig: Rig) -> str:
    """The canary cluster, synced to the release and done (the forward cluster step)."""
    make_progressive_sync(rig.kube, rig.namespace, rollback={"on": ["StageFailed"]})
    cluster = select_canary(rig.runner)
    rig.simulate()
    assert_ok(rig.runner.run("cluster", "--stage", "canary", "--cluster", cluster))
    return cluster


def fail_canary(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
    return close_stage(status, stage="canary", phase=StagePhase.FAILED, message="1 of 1 failed", now=at(30))


def rollback_record(rig: Rig, cluster: str) -> Any:
    outcomes = read_outcomes(rig.kube, rig.namespace, "myservice", "r1")[0]
    return outcomes.clusters[cluster].rollback


def sync_starts(rig: Rig, cluster: str) -> list[str]:
    """The revisions of the simulator's sync starts on `cluster`, in order."""
    events = read_events(rig.tmp_path / "sim-events.jsonl")
    return [
        str(e.get("revision", "")) for e in events if e["event"] == "sync-start" and e["cluster"] == cluster
    ]


def test_the_forward_sync_records_what_ran_before_and_the_rollback_restores_it_once(rig: Rig) -> None:
    cluster = synced_canary(rig)
    state = rig.app(cluster)["status"]["operationState"]
    assert appsync.info_value(state["operation"], INFO_PREVIOUS_REVISIONS) == json.dumps([PREVIOUS_REVISION])

    env = rollback_env(rig)
    result = rig.runner.run("rollback", "--stage", "canary", "--cluster", cluster, **env)
    assert_ok(result)
    assert f"rollback: cluster {cluster} RolledBack" in result.stdout
    app = rig.app(cluster)
    assert app["status"]["operationState"]["syncResult"]["revision"] == PREVIOUS_REVISION
    assert app["status"]["history"][-1]["revision"] == PREVIOUS_REVISION
    assert app["status"]["health"]["status"] == "Healthy"
    record = rollback_record(rig, cluster)
    assert (record.state, record.revisions) == ("RolledBack", [PREVIOUS_REVISION])
    wait_for(lambda: len(sync_starts(rig, cluster)) >= 2, timeout=10)
    assert len(sync_starts(rig, cluster)) == 2  # the forward sync, then exactly one rollback

    mark = rig.control_plane.audit_mark()
    again = rig.runner.run("rollback", "--stage", "canary", "--cluster", cluster, **env)
    assert_ok(again)
    assert "(already recorded)" in again.stdout
    assert writes_by(rig.control_plane, mark) == []


def test_an_application_someone_synced_after_us_is_left_alone_and_named(rig: Rig) -> None:
    cluster = synced_canary(rig)

    def someone_syncs(app: dict[str, Any]) -> None:
        app["operation"] = {"initiatedBy": {"username": "alice"}, "sync": {"revision": PREVIOUS_REVISION}}

    rig.update_app(cluster, someone_syncs)
    wait_for(lambda: "operation" not in rig.app(cluster), timeout=20)
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("rollback", "--stage", "canary", "--cluster", cluster, **rollback_env(rig))
    assert_ok(result)
    assert "LeftAlone" in result.stdout
    assert "alice synced it after rollout r1 did: left alone" in result.stdout
    assert [w for w in writes_by(rig.control_plane, mark) if w.resource == "applications"] == []
    assert rollback_record(rig, cluster).state == "LeftAlone"


def test_a_rollback_sync_that_fails_leaves_the_cluster_not_restored(rig: Rig) -> None:
    cluster = synced_canary(rig)
    rig.update_app(
        cluster,
        lambda app: (
            app["metadata"]
            .setdefault("annotations", {})
            .update({"simulator.progressivesync.io/fail": "true"})
        ),
    )
    # Argo CD retries a failed attempt (the Application's retry): the rollback's deadline ends it.
    env = rollback_env(rig, progress_deadline_seconds=6)
    result = rig.runner.run("rollback", "--stage", "canary", "--cluster", cluster, **env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"rollback: cluster {cluster} Failed" in result.stdout
    assert "rollback deadline of 6s passed" in result.stdout
    assert "is invalid (simulated)" in result.stdout  # Argo CD's own message on the failed attempt
    assert "running sync of" in result.stdout and "terminated" in result.stdout  # nothing left running
    record = rollback_record(rig, cluster)
    assert record.state == "Failed"
    assert "rollback deadline" in record.reason


def test_rollback_plan_then_finalize_end_the_rollout_rolled_back(rig: Rig) -> None:
    cluster = synced_canary(rig)
    env = rollback_env(rig)
    # The canary failed (as its closing step records it), so the rollout rolls it back.
    update_status(rig.kube, rig.namespace, "myservice", fail_canary, what="test: the canary failed")

    plan = rig.runner.run("rollback-plan", "--workflow-name", "wf", "--workflow-status", "Failed", **env)
    assert_ok(plan)
    outputs = rig.runner.outputs_dir
    assert json.loads((outputs / "rollback-0").read_text()) == [cluster]
    assert json.loads((outputs / "rollback-1").read_text()) == []
    stored = read_progressive_sync(rig.kube, rig.namespace).status
    assert stored is not None and stored.phase == "RollingBack"
    assert stored.rollback is not None and (stored.rollback.trigger, stored.rollback.stages) == (
        "StageFailed",
        ["canary"],
    )

    assert_ok(rig.runner.run("rollback", "--stage", "canary", "--cluster", cluster, **env))
    assert_ok(rig.runner.run("finalize", "--workflow-name", "wf", "--workflow-status", "Failed", **env))
    ended = read_progressive_sync(rig.kube, rig.namespace).status
    assert ended is not None and ended.phase == "RolledBack", ended.message if ended else None
    assert ended.rollback is not None and (ended.rollback.rolled_back, ended.rollback.failed) == (1, 0)
    assert "rolled back (1 cluster(s) restored)" in (ended.message or "")
