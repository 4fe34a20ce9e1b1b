"""`progressive-sync rollback` against the real API server with the fleet simulator (issue 32): after a
Succeeded rollout (no spec.rollback), `--dry-run` names the canary's Application and "RollBack" and
writes nothing; the rollback then puts the canary back at the revision it ran before and records
the rollout RolledBack (trigger Manual); a second run writes nothing; a running rollout is refused.

The CLI runs in-process (click's runner) with the steps' kubeconfig, so the audit log shows its
writes under the steps' user. The world (seeded fleet, steps' runner, simulator) is
tests/support/steps_rig.py.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from orchestrator.api.models import ProgressiveSyncStatus, StagePhase
from orchestrator.api.rollout_status import close_stage
from orchestrator.cli.main import main
from orchestrator.kube.stage_records import read_outcomes
from orchestrator.kube.status_writer import update_status
from orchestrator.simulator.seed import PREVIOUS_REVISION
from tests.support.builders import at
from tests.support.steps_harness import make_progressive_sync, read_progressive_sync, writes_by
from tests.support.steps_rig import Rig, assert_ok, select_canary

pytestmark = pytest.mark.integration


def rollback(rig: Rig, *args: str) -> Result:
    """`progressive-sync rollback myservice ARGS` as the steps' user."""
    argv = ["rollback", "myservice", "-n", rig.namespace, "--kubeconfig", str(rig.runner.kubeconfig), *args]
    return CliRunner().invoke(main, argv, catch_exceptions=False)


def canary_done(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
    status = close_stage(status, stage="canary", phase=StagePhase.SUCCEEDED, message="1 of 1", now=at(20))
    return close_stage(status, stage="rest", phase=StagePhase.SKIPPED, message="nothing to do", now=at(21))


def succeeded_rollout(rig: Rig) -> str:
    """A ProgressiveSync without spec.rollback whose rollout r1 synced the canary and Succeeded."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.simulate()
    assert_ok(rig.runner.run("cluster", "--stage", "canary", "--cluster", cluster))
    update_status(rig.kube, rig.namespace, "myservice", canary_done, what="test: the canary succeeded")
    assert_ok(rig.runner.run("finalize", "--workflow-name", "wf", "--workflow-status", "Succeeded"))
    status = read_progressive_sync(rig.kube, rig.namespace).status
    assert status is not None and status.phase == "Succeeded", status
    return cluster


def test_a_succeeded_rollout_is_rolled_back_by_hand_once(rig: Rig) -> None:
    cluster = succeeded_rollout(rig)
    app = rig.app(cluster)["metadata"]["name"]

    mark = rig.control_plane.audit_mark()
    dry = rollback(rig, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "dry run, nothing written" in dry.output
    row = next(line for line in dry.output.splitlines() if app in line)
    assert "canary" in row and cluster in row and "RollBack" in row, dry.output
    as_json = json.loads(rollback(rig, "--dry-run", "-o", "json").output)
    assert (as_json["scope"], as_json["stages"]) == ("FailedStage", ["canary"])
    assert [(a["application"], a["action"]) for a in as_json["applications"]] == [(app, "RollBack")]
    assert writes_by(rig.control_plane, mark) == []

    done = rollback(rig)
    assert done.exit_code == 0, done.output
    assert f"rollback: cluster {cluster} RolledBack" in done.output
    assert "RolledBack: rolled back by hand from stage 'canary' (progressive-sync rollback" in done.output
    restored = rig.app(cluster)
    assert restored["status"]["operationState"]["syncResult"]["revision"] == PREVIOUS_REVISION
    assert restored["status"]["health"]["status"] == "Healthy"
    stored = read_progressive_sync(rig.kube, rig.namespace).status
    assert stored is not None and stored.phase == "RolledBack", stored.message if stored else None
    assert stored.rollback is not None
    assert (stored.rollback.trigger, stored.rollback.scope, stored.rollback.stages) == (
        "Manual",
        "FailedStage",
        ["canary"],
    )
    assert (stored.rollback.rolled_back, stored.rollback.failed) == (1, 0)
    record = read_outcomes(rig.kube, rig.namespace, "myservice", "r1")[0].clusters[cluster].rollback
    assert record is not None and (record.state, record.revisions) == ("RolledBack", [PREVIOUS_REVISION])

    mark = rig.control_plane.audit_mark()
    again = rollback(rig)
    assert again.exit_code == 0, again.output
    assert "nothing to roll back" in again.output
    assert writes_by(rig.control_plane, mark) == []


def test_a_running_rollout_is_refused(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    select_canary(rig.runner)
    mark = rig.control_plane.audit_mark()
    refused = rollback(rig)
    assert refused.exit_code == 1, refused.output
    assert "cancel it first" in refused.output
    assert writes_by(rig.control_plane, mark) == []


def test_a_cluster_not_restored_fails_the_rollback_and_exits_1(rig: Rig) -> None:
    make_progressive_sync(
        rig.kube,
        rig.namespace,
        rollback={"on": ["Cancelled"], "scope": "Reached", "progressDeadlineSeconds": 6},
    )
    cluster = select_canary(rig.runner)
    rig.simulate()
    assert_ok(rig.runner.run("cluster", "--stage", "canary", "--cluster", cluster))
    update_status(rig.kube, rig.namespace, "myservice", canary_done, what="test: the canary succeeded")
    assert_ok(rig.runner.run("finalize", "--workflow-name", "wf", "--workflow-status", "Succeeded"))
    rig.update_app(
        cluster,
        lambda app: (
            app["metadata"]
            .setdefault("annotations", {})
            .update({"simulator.progressivesync.io/fail": "true"})
        ),
    )

    failed = rollback(rig, "-o", "json")
    assert failed.exit_code == 1, failed.output
    data = json.loads(failed.output)
    assert (data["scope"], data["phase"]) == ("Reached", "Failed")
    assert [(c["cluster"], c["state"]) for c in data["clusters"]] == [(cluster, "Failed")]
    stored = read_progressive_sync(rig.kube, rig.namespace).status
    assert stored is not None and stored.phase == "Failed"
    assert stored.rollback is not None and stored.rollback.trigger == "Manual"
    assert [c.name for c in stored.rollback.not_restored] == [cluster]
    ready = next(c for c in stored.conditions or [] if c.type == "Ready")
    assert ready.reason == "RollbackFailed"
