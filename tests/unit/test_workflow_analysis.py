"""Analysis gates in the rollout Workflow: where the `analyze` node runs, what it is named, the
approval an Inconclusive run waits for, the bake that is an analysis, and the budget it adds.

Pure: Workflows built by workflow_templates.builder, every reference checked by `validate.problems`;
the local executor running them is tested in tests/unit/test_workflow_engine.py and e2e.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.models import ProgressiveSync
from orchestrator.engine.expressions import check_when_expression, when_holds
from orchestrator.engine.interface import UnsupportedFeature
from orchestrator.engine.supported import check_supported
from orchestrator.planning.contract import parse_contract
from tests.support.builders import NEW_REVISION, make_ps_model, make_release, make_stage
from workflow_templates import names, pieces, validate
from workflow_templates.builder import (
    StageSize,
    active_deadline_seconds,
    build_workflow,
    contract_for,
    estimate_nodes,
)
from workflow_templates.settings import WorkflowSettings

SETTINGS = WorkflowSettings()
GATE = {"templates": [{"name": "error-rate"}, {"name": "latency", "clusterScope": True}]}


def make_ps(*stages: dict[str, Any], **spec: Any) -> ProgressiveSync:
    return make_ps_model("myservice", stages=stages, app_set="myservice", uid="uid-1", **spec)


def build(ps: ProgressiveSync, sizes: dict[str, StageSize]) -> dict[str, Any]:
    obj: dict[str, Any] = build_workflow(
        ps, release=make_release("0123456789", revisions=((NEW_REVISION,),)), plan=sizes, settings=SETTINGS
    ).to_dict()
    library = validate.library_of(t.to_dict() for t in pieces.workflow_templates(SETTINGS))
    assert validate.problems(obj, library=library) == []
    check_supported(obj)  # the local executor runs it too
    return obj


def templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in obj["spec"]["templates"]}


def tasks(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in template["dag"]["tasks"]}


def arguments(task: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in task["arguments"]["parameters"]}


def test_a_stage_gate_runs_after_the_clusters_and_before_record_named_by_its_templates() -> None:
    ps = make_ps({**make_stage("canary"), "analysis": GATE}, make_stage("rest"))
    obj = build(ps, {"canary": StageSize(1, 1), "rest": StageSize(3, 3)})
    stage = tasks(templates(obj)["stage-canary"])
    gate = stage["analysis-error-rate-latency"]
    assert gate["template"] == names.ANALYZE_TEMPLATE
    assert gate["dependencies"] == ["clusters"]
    assert gate["continueOn"] == {"failed": True, "error": True}
    assert arguments(gate) == {"stage": "{{inputs.parameters.stage}}", "cluster": "", "when": "afterHealthy"}
    assert stage["record-and-select"]["dependencies"] == ["analysis-error-rate-latency"]
    assert "analysis-error-rate-latency" not in tasks(templates(obj)["stage-rest"])
    step = templates(obj)["analyze"]
    assert step["container"]["args"][:2] == ["analyze", "--stage"]
    assert step["outputs"]["parameters"][0]["name"] == "verdict"
    contract = parse_contract(arguments({"arguments": obj["spec"]["arguments"]})["contract"])
    assert contract.stages[0].analysis is not None and contract.stages[1].analysis is None
    assert (
        "analysis error-rate+latency afterHealthy"
        in obj["metadata"]["annotations"][names.DESCRIPTION_ANNOTATION]
    )


def test_without_analysis_the_workflow_has_no_analyze_step() -> None:
    obj = build(make_ps(make_stage("canary")), {"canary": StageSize(1, 1)})
    assert "analyze" not in templates(obj)


def test_approve_on_inconclusive_is_an_approval_gate_that_runs_only_on_that_verdict() -> None:
    ps = make_ps({**make_stage("canary"), "analysis": {**GATE, "onInconclusive": "Approve"}})
    stage = tasks(templates(build(ps, {"canary": StageSize(1, 1)}))["stage-canary"])
    gate = stage[names.APPROVE_ANALYSIS_TASK]
    assert gate["template"] == names.APPROVAL_TEMPLATE
    assert gate["when"] == "{{tasks.analysis-error-rate-latency.outputs.parameters.verdict}} == Inconclusive"
    assert stage["record"]["dependencies"] == [names.APPROVE_ANALYSIS_TASK]


def test_per_cluster_analysis_runs_after_each_cluster_in_its_own_dag() -> None:
    ps = make_ps({**make_stage("canary", max_parallel=2), "analysis": {**GATE, "perCluster": True}})
    obj = build(ps, {"canary": StageSize(4, 2)})
    loop = templates(obj)["fanout-canary"]["dag"]["tasks"][0]
    assert loop["template"] == "analyzed-canary"
    per_cluster = tasks(templates(obj)["analyzed-canary"])
    assert per_cluster["cluster"]["template"] == names.CLUSTER_TEMPLATE
    gate = per_cluster["analysis-error-rate-latency"]
    assert gate["dependencies"] == ["cluster"]
    assert "continueOn" not in gate  # a failed analysis fails the cluster's node; record counts it
    assert arguments(gate)["cluster"] == "{{inputs.parameters.cluster}}"
    assert tasks(templates(obj)["stage-canary"])["record"]["dependencies"] == ["clusters"]


def test_per_cluster_analysis_of_a_stage_in_batches_runs_from_one_node_after_the_batches() -> None:
    ps = make_ps({**make_stage("everything"), "analysis": {**GATE, "perCluster": True}})
    obj = build(ps, {"everything": StageSize(10_000, 2_500)})
    assert templates(obj)["fanout-everything"]["dag"]["tasks"][0]["template"] == "batch"
    assert tasks(templates(obj)["stage-everything"])["analysis-error-rate-latency"]["dependencies"] == [
        "clusters"
    ]


def test_during_bake_the_bake_is_the_analysis() -> None:
    ps = make_ps(
        {**make_stage("canary", bake_seconds=600), "analysis": {**GATE, "when": ["duringBake"]}},
        make_stage("rest"),
    )
    obj = build(ps, {"canary": StageSize(1, 1), "rest": StageSize(2, 2)})
    stage = tasks(templates(obj)["stage-canary"])
    assert stage["bake"]["template"] == names.ANALYZE_TEMPLATE
    assert arguments(stage["bake"])["when"] == "duringBake"
    assert stage["bake"]["dependencies"] == ["record"]
    assert "analysis-error-rate-latency" not in stage  # no gate after healthy: only during bake
    assert "bake-600s" not in templates(obj)


def test_the_budget_and_the_node_count_grow_with_the_analysis() -> None:
    plain = make_ps(make_stage("s"))
    gated = make_ps({**make_stage("s"), "analysis": {**GATE, "timeoutSeconds": 300}})
    per_cluster = make_ps(
        {**make_stage("s"), "analysis": {**GATE, "timeoutSeconds": 300, "perCluster": True}}
    )
    sizes = {"s": StageSize(4, 2)}

    def contract(ps: ProgressiveSync) -> Any:
        return contract_for(
            ps, release=make_release("r1", revisions=(("x",),)), plan=sizes, settings=SETTINGS
        )

    step, factor = SETTINGS.step_budget_seconds, SETTINGS.deadline_factor
    base = active_deadline_seconds(plain, contract(plain), SETTINGS)
    assert active_deadline_seconds(gated, contract(gated), SETTINGS) == pytest.approx(
        base + (step + 300) * factor, abs=1
    )
    assert active_deadline_seconds(per_cluster, contract(per_cluster), SETTINGS) == pytest.approx(
        base + 2 * (step + 300) * factor, abs=1
    )
    assert estimate_nodes(gated, contract(gated)) == estimate_nodes(plain, contract(plain)) + 2
    assert (
        # 3 nodes per analyzed cluster, and no follower pod (it leaves per-cluster analysis to the pods)
        estimate_nodes(per_cluster, contract(per_cluster))
        == estimate_nodes(plain, contract(plain)) + 4 * 3 - 1
    )


@pytest.mark.parametrize(
    ("expression", "holds"),
    [
        pytest.param("Inconclusive == Inconclusive", True, id="equal"),
        pytest.param("Passed == Inconclusive", False, id="not-equal"),
        pytest.param("'Passed' != Inconclusive", True, id="quoted"),
    ],
)
def test_the_local_executor_reads_when(expression: str, holds: bool) -> None:
    check_when_expression(expression)
    assert when_holds(expression) is holds


def test_the_local_executor_refuses_other_when_forms() -> None:
    with pytest.raises(UnsupportedFeature, match="when"):
        check_when_expression("{{a}} > 2 && {{b}}")
