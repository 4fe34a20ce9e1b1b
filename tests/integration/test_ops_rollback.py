"""`progressive-sync rollback` against the real API server with the fleet simulator (issue 32): after a
Succeeded rollout (no spec.rollback), `--dry-run` names the canary's Application and "RollBack" and
writes nothing; the rollback then puts the canary back at the revision it ran before and records
the rollout RolledBack (trigger Manual); a second run writes nothing; a running rollout is refused;
a grouped rollout is rolled back per group (by default the groups that did not succeed, `--group`
picks others, an unknown group is refused naming the groups).

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
from tests.support.builders import at, make_contract
from tests.support.steps_harness import make_progressive_sync, read_progressive_sync, writes_by
from tests.support.steps_rig import REGIONS, Rig, assert_ok, select_canary

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


# --- groups (docs/groups.md, "Groups and rollback") ----------------------------------------------

GROUPED_STAGES = [
    {"name": "canary", "targets": {"clusters": {"selector": {}}}, "maxTargets": 1},
    {"name": "rest", "targets": {"clusters": {"selector": {}}}},
]
GROUP_STAGE_NAMES = [f"{region}/{stage}" for region in sorted(REGIONS) for stage in ("canary", "rest")]


def grouped_rollout(rig: Rig) -> dict[str, str]:
    """A grouped rollout r1 (groupBy region, no spec.rollback) that ended Failed: eu-west-1's canary
    failed, us-east-1's canary Succeeded, ap-south-1 had nothing to do. The clusters by region."""
    make_progressive_sync(rig.kube, rig.namespace, stages=GROUPED_STAGES, groupBy="region")
    env = {"PROGRESSIVE_SYNC_CONTRACT": make_contract(GROUP_STAGE_NAMES).to_json()}
    by_region = {c.region: c.name for c in rig.fleet.clusters}
    for region in ("eu-west-1", "us-east-1"):
        assert_ok(rig.runner.run("select", "--stage", f"{region}/canary", **env))
    rig.simulate()
    for region in ("eu-west-1", "us-east-1"):
        stage = f"{region}/canary"
        assert_ok(rig.runner.run("cluster", "--stage", stage, "--cluster", by_region[region], **env))

    def ends(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        for stage, phase in {
            "eu-west-1/canary": StagePhase.FAILED,
            "us-east-1/canary": StagePhase.SUCCEEDED,
            "us-east-1/rest": StagePhase.SKIPPED,
            "ap-south-1/canary": StagePhase.SKIPPED,
            "ap-south-1/rest": StagePhase.SKIPPED,
        }.items():
            status = close_stage(status, stage=stage, phase=phase, message=phase.value, now=at(30))
        return status

    update_status(rig.kube, rig.namespace, "myservice", ends, what="test: the groups ended")
    assert_ok(rig.runner.run("finalize", "--workflow-name", "wf", "--workflow-status", "Failed", **env))
    return by_region


def test_a_grouped_rollout_is_rolled_back_by_hand_per_group(rig: Rig) -> None:
    by_region = grouped_rollout(rig)
    eu, us = by_region["eu-west-1"], by_region["us-east-1"]

    mark = rig.control_plane.audit_mark()
    unknown = rollback(rig, "--group", "ap-east-1")
    assert unknown.exit_code == 2, unknown.output
    assert "has no group ap-east-1 (its groups: ap-south-1, eu-west-1, us-east-1)" in unknown.output
    dry = json.loads(rollback(rig, "--dry-run", "-o", "json").output)
    assert dry["stages"] == ["eu-west-1/canary"], "by default the groups that did not succeed"
    assert [(g["name"], g["rolledBack"]) for g in dry["groups"]] == [
        ("ap-south-1", False),
        ("eu-west-1", True),
        ("us-east-1", False),
    ]
    assert [a["cluster"] for a in dry["applications"]] == [eu]
    assert writes_by(rig.control_plane, mark) == []

    done = rollback(rig)
    assert done.exit_code == 0, done.output
    assert f"rollback: cluster {eu} RolledBack" in done.output
    assert "groups rolled back: eu-west-1; groups left: ap-south-1, us-east-1" in done.output
    assert rig.app(eu)["status"]["operationState"]["syncResult"]["revision"] == PREVIOUS_REVISION
    assert rig.app(us)["status"]["operationState"]["syncResult"]["revision"] != PREVIOUS_REVISION
    stored = read_progressive_sync(rig.kube, rig.namespace).status
    assert stored is not None and stored.phase == "RolledBack", stored.message if stored else None
    assert stored.rollback is not None and stored.rollback.groups is not None
    assert [g.name for g in stored.rollback.groups if g.rolled_back] == ["eu-west-1"]

    picked = rollback(rig, "--group", "us-east-1")
    assert picked.exit_code == 0, picked.output
    assert f"rollback: cluster {us} RolledBack" in picked.output
    assert rig.app(us)["status"]["operationState"]["syncResult"]["revision"] == PREVIOUS_REVISION
