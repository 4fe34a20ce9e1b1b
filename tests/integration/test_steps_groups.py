"""Independent groups (`spec.groupBy`, docs/groups.md) in the steps: `select` of a group's stage
("<group>/<stage>", as the rollout contract names it) takes only that group's clusters, lists every
group stage in the status, keeps its records under its own name, and a second group's select does
not touch the first's; a stage name without its group is refused as no stage of the rollout; with
spec.rollback, rollback-plan and finalize roll back only the group that failed. Real
kube-apiserver, the steps through their entrypoint (tests/support/steps_rig.py: three clusters, one
per region).
"""

from __future__ import annotations

import json

import pytest

from orchestrator.api.models import ProgressiveSyncStatus
from orchestrator.api.phases import StagePhase
from orchestrator.api.rollout_status import close_stage
from orchestrator.kube.status_writer import update_status
from tests.support.builders import at, make_contract
from tests.support.outcomes import stage_outcomes
from tests.support.steps_harness import make_progressive_sync, read_progressive_sync
from tests.support.steps_rig import REGIONS, Rig, assert_ok

pytestmark = pytest.mark.integration

GROUPED_STAGES = [
    {"name": "canary", "targets": {"clusters": {"selector": {}}}, "maxTargets": 1},
    {"name": "rest", "targets": {"clusters": {"selector": {}}}},
]
# The groups in the planner's order (sorted label values), each group's stages in spec order.
GROUP_STAGE_NAMES = [f"{region}/{stage}" for region in sorted(REGIONS) for stage in ("canary", "rest")]


def test_select_of_a_group_stage_takes_only_its_groups_clusters(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=GROUPED_STAGES, groupBy="region")
    contract = make_contract(GROUP_STAGE_NAMES).to_json()
    by_region = {c.region: c.name for c in rig.fleet.clusters}

    eu = rig.runner.run("select", "--stage", "eu-west-1/canary", PROGRESSIVE_SYNC_CONTRACT=contract)
    assert_ok(eu)
    assert json.loads(rig.runner.targets()) == [by_region["eu-west-1"]]
    us = rig.runner.run("select", "--stage", "us-east-1/canary", PROGRESSIVE_SYNC_CONTRACT=contract)
    assert_ok(us)
    assert json.loads(rig.runner.targets()) == [by_region["us-east-1"]]

    status = read_progressive_sync(rig.kube, rig.namespace).status
    assert status is not None and status.stages is not None
    phases = {stage.name: stage.phase for stage in status.stages}
    assert list(phases) == GROUP_STAGE_NAMES, "every group stage is listed, in the contract's order"
    assert phases["eu-west-1/canary"] is StagePhase.PROGRESSING
    assert phases["us-east-1/canary"] is StagePhase.PROGRESSING
    assert phases["ap-south-1/canary"] is StagePhase.PENDING
    outcomes = stage_outcomes(rig.kube, "myservice", rig.namespace)
    assert outcomes["eu-west-1/canary"].targets == (by_region["eu-west-1"],)
    assert outcomes["us-east-1/canary"].targets == (by_region["us-east-1"],)

    # Run again, the group's select answers what it recorded and selects nothing new.
    again = rig.runner.run("select", "--stage", "eu-west-1/canary", PROGRESSIVE_SYNC_CONTRACT=contract)
    assert_ok(again)
    assert json.loads(rig.runner.targets()) == [by_region["eu-west-1"]]


def test_a_stage_without_its_group_is_no_stage_of_a_grouped_rollout(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=GROUPED_STAGES, groupBy="region")
    contract = make_contract(GROUP_STAGE_NAMES).to_json()
    result = rig.runner.run("select", "--stage", "canary", PROGRESSIVE_SYNC_CONTRACT=contract)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--stage 'canary' is not a stage of" in result.stdout
    assert "eu-west-1/canary" in result.stdout


# --- groups and rollback (docs/groups.md, "Groups and rollback") -------------------------------------

GROUP_ROLLBACK = {"on": ["StageFailed"], "scope": "Reached", "progress_deadline_seconds": 60}


def test_rollback_plan_rolls_back_only_the_failed_group_and_finalize_names_the_groups(rig: Rig) -> None:
    """eu-west-1's canary fails, us-east-1's succeeds (ap-south-1 has nothing left to do): rollback-plan
    gives only eu-west-1's stage clusters, records which groups roll back and which are left, the
    rollback restores eu-west-1's canary, and us-east-1's keeps the release."""
    make_progressive_sync(
        rig.kube, rig.namespace, stages=GROUPED_STAGES, groupBy="region", rollback={"on": ["StageFailed"]}
    )
    env = {"PROGRESSIVE_SYNC_CONTRACT": make_contract(GROUP_STAGE_NAMES, rollback=GROUP_ROLLBACK).to_json()}
    by_region = {c.region: c.name for c in rig.fleet.clusters}
    for region in ("eu-west-1", "us-east-1"):
        assert_ok(rig.runner.run("select", "--stage", f"{region}/canary", **env))
    rig.simulate()
    for region in ("eu-west-1", "us-east-1"):
        cluster = by_region[region]
        assert_ok(rig.runner.run("cluster", "--stage", f"{region}/canary", "--cluster", cluster, **env))

    def ends(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        ended = {
            "eu-west-1/canary": StagePhase.FAILED,
            "us-east-1/canary": StagePhase.SUCCEEDED,
            "us-east-1/rest": StagePhase.SKIPPED,
            "ap-south-1/canary": StagePhase.SKIPPED,
            "ap-south-1/rest": StagePhase.SKIPPED,
        }
        for stage, phase in ended.items():
            status = close_stage(status, stage=stage, phase=phase, message=phase.value, now=at(30))
        return status

    update_status(rig.kube, rig.namespace, "myservice", ends, what="test: the groups ended")

    plan = rig.runner.run("rollback-plan", "--workflow-name", "wf", "--workflow-status", "Failed", **env)
    assert_ok(plan)
    outputs = {
        i: json.loads(p.read_text())
        for i in range(6)
        if (p := rig.runner.outputs_dir / f"rollback-{i}").exists()
    }
    eu_canary = GROUP_STAGE_NAMES.index("eu-west-1/canary")
    assert {i: v for i, v in outputs.items() if v} == {eu_canary: [by_region["eu-west-1"]]}
    stored = read_progressive_sync(rig.kube, rig.namespace).status
    assert stored is not None and stored.phase == "RollingBack"
    assert stored.rollback is not None and stored.rollback.groups is not None
    assert [(g.name, g.rolled_back, g.trigger) for g in stored.rollback.groups] == [
        ("ap-south-1", False, ""),
        ("eu-west-1", True, "StageFailed"),
        ("us-east-1", False, ""),
    ]
    assert "eu-west-1 rolling back" in (stored.message or "")
    assert "us-east-1 left (it succeeded: it keeps the release)" in (stored.message or "")

    eu = by_region["eu-west-1"]
    assert_ok(rig.runner.run("rollback", "--stage", "eu-west-1/canary", "--cluster", eu, **env))
    assert_ok(rig.runner.run("finalize", "--workflow-name", "wf", "--workflow-status", "Failed", **env))
    ended = read_progressive_sync(rig.kube, rig.namespace).status
    assert ended is not None and ended.phase == "RolledBack", ended.message if ended else None
    assert "groups rolled back: eu-west-1; groups left: ap-south-1, us-east-1" in (ended.message or "")
    outcomes = stage_outcomes(rig.kube, "myservice", rig.namespace)
    assert outcomes["eu-west-1/canary"].clusters[eu].rollback is not None
    assert outcomes["eu-west-1/canary"].clusters[eu].rollback.state == "RolledBack"
    assert outcomes["us-east-1/canary"].clusters[by_region["us-east-1"]].rollback is None
