"""Independent groups (`spec.groupBy`, docs/groups.md) in the steps: `select` of a group's stage
("<group>/<stage>", as the rollout contract names it) takes only that group's clusters, lists every
group stage in the status, keeps its records under its own name, and a second group's select does
not touch the first's; a stage name without its group is refused as no stage of the rollout. Real
kube-apiserver, the steps through their entrypoint (tests/support/steps_rig.py: three clusters, one
per region).
"""

from __future__ import annotations

import json

import pytest

from orchestrator.api.phases import StagePhase
from tests.support.builders import make_contract
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
