"""The rollback branch of the rollout Workflow (workflow_templates/rollback.py, builder.py).

Pure tests: contracts with a rollback are made by hand (tests/support/rollback_contracts.py) until
the API's `spec.rollback` reaches the contract; nothing talks to a cluster. `validate.problems` runs
on every Workflow built here. How the engines run the branch: tests/unit/test_workflow_engine_rollback.py
and tests/integration/test_local_executor_rollback.py; Argo's own lint: tests/integration/test_argo_lint.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from orchestrator.api.models import ProgressiveSync
from orchestrator.engine.supported import exit_handler_templates
from orchestrator.planning.contract import parse_contract
from tests.support.builders import make_ps_model, make_release, make_stage
from tests.support.rollback_contracts import rollback_workflow, with_rollback
from workflow_templates import names, pieces, render, rollback, validate
from workflow_templates.builder import (
    NODES_FIXED,
    StageSize,
    active_deadline_seconds,
    build_workflow,
    build_workflow_of_contract,
    contract_for,
    estimate_nodes,
)
from workflow_templates.settings import WorkflowSettings

SETTINGS = WorkflowSettings()
RELEASE = make_release("0123456789", revisions=(("4f1c2e9",),))
ONE_STAGE = (make_stage("prod", max_parallel=2),)
THREE_STAGES = (
    make_stage("canary", max_targets=1, max_parallel=1),
    make_stage("eu-west-1.wave", max_parallel=3),
    make_stage("everything else", max_parallel="25%"),
)
SIZES = {
    "prod": StageSize(4, 2),
    "canary": StageSize(1, 1),
    "eu-west-1.wave": StageSize(6, 3),
    "everything else": StageSize(20, 5),
    **{name: StageSize(2, 1) for name in ("eu-west-1.canary", "canary in eu", "plan")},
}


def make_ps(*stages: dict[str, Any]) -> ProgressiveSync:
    return make_ps_model("myservice", namespace="argocd", uid="uid-1", stages=stages)


def sizes_of(ps: ProgressiveSync) -> dict[str, StageSize]:
    return {stage.name: SIZES[stage.name] for stage in ps.spec.stages}


def build(ps: ProgressiveSync, **rollback_fields: Any) -> dict[str, Any]:
    """The Workflow object of `ps` with a rollback; every reference in it resolves."""
    obj: dict[str, Any] = rollback_workflow(
        ps, release=RELEASE, sizes=sizes_of(ps), settings=SETTINGS, **rollback_fields
    ).to_dict()
    library = validate.library_of(t.to_dict() for t in pieces.workflow_templates(SETTINGS))
    assert validate.problems(obj, library=library) == []
    return obj


def templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in obj["spec"]["templates"]}


def exit_tasks(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(templates(obj)[names.EXIT_TEMPLATE]["dag"]["tasks"])


@pytest.mark.parametrize(
    ("stages", "expected"),
    [
        pytest.param(ONE_STAGE, ["rollback-plan", "rollback-prod", "finalize"], id="one-stage"),
        pytest.param(
            THREE_STAGES,
            [
                "rollback-plan",
                "rollback-everything-else",
                "rollback-eu-west-1-wave",
                "rollback-canary",
                "finalize",
            ],
            id="three-stages-last-first",
        ),
    ],
)
def test_the_exit_handler_is_plan_then_each_stage_last_first_then_finalize(
    stages: tuple[dict[str, Any], ...], expected: list[str]
) -> None:
    obj = build(make_ps(*stages))
    assert obj["spec"]["onExit"] == names.EXIT_TEMPLATE
    tasks = exit_tasks(obj)
    assert [task["name"] for task in tasks] == expected
    # A chain: each task after the one before it, rollback-plan first.
    assert "dependencies" not in tasks[0]
    assert [task["dependencies"] for task in tasks[1:]] == [[before] for before in expected[:-1]]
    assert tasks[-1]["template"] == names.FINALIZE_TEMPLATE
    stage_names = [stage["name"] for stage in stages]
    for offset, task in enumerate(tasks[1:-1]):
        index = len(stages) - 1 - offset
        arguments = {p["name"]: p["value"] for p in task["arguments"]["parameters"]}
        assert arguments == {
            "stage": stage_names[index],  # the exact stage name, spaces and all
            "targets": "{{tasks.rollback-plan.outputs.parameters." + f"rollback-{index}" + "}}",
            "batches": "{{tasks.rollback-plan.outputs.parameters." + f"rollback-batches-{index}" + "}}",
        }
        assert task["template"] == task["name"]


def test_finalize_is_reached_whatever_rollback_plan_and_the_rollbacks_did() -> None:
    """Argo omits a task after a Failed or Errored one unless that one continues on it, and then
    everything after it: every task before finalize continues on failed and error. A rollback runs
    only when rollback-plan Succeeded (a false `when` is a Skipped node, which lets the next run)."""
    tasks = exit_tasks(build(make_ps(*THREE_STAGES)))
    for task in tasks[:-1]:
        assert task["continueOn"] == {"failed": True, "error": True}, task["name"]
    for task in tasks[1:-1]:
        assert task["when"] == "{{tasks.rollback-plan.status}} == Succeeded"
    assert "continueOn" not in tasks[-1]
    # Only on a Workflow that did not succeed (its last record recorded a success: exit_handler.py).
    assert tasks[0]["when"] == tasks[-1]["when"] == "{{workflow.status}} != Succeeded"


@pytest.mark.parametrize(
    "parallel",
    [
        pytest.param({}, id="each-stage-max-parallel"),
        pytest.param({"canary": 1, "eu-west-1.wave": 1, "everything else": 10}, id="rollback-max-parallel"),
    ],
)
def test_each_stage_rollback_fans_out_a_pod_per_cluster_or_per_batch_with_no_parallelism(
    parallel: dict[str, int],
) -> None:
    """A stage of one pod per cluster has two loops, a `rollback` pod per cluster and a
    `rollback-batch` pod per batch (rollback-plan fills one of them, never with more items than may
    run at once); no fan-out has Argo `parallelism`, which crashes the controller in an exit handler."""
    obj = build(make_ps(*THREE_STAGES), parallel=parallel)
    for task in exit_tasks(obj)[1:-1]:
        fanout = templates(obj)[task["template"]]
        assert "parallelism" not in fanout
        loops = {loop["name"]: loop for loop in fanout["dag"]["tasks"]}
        assert [(n, t["template"], t["withParam"]) for n, t in loops.items()] == [
            ("rollback", names.ROLLBACK_TEMPLATE, "{{inputs.parameters.targets}}"),
            ("rollback-batch", names.ROLLBACK_BATCH_TEMPLATE, "{{inputs.parameters.batches}}"),
        ]
        assert {p["name"]: p["value"] for p in loops["rollback"]["arguments"]["parameters"]} == {
            "stage": "{{inputs.parameters.stage}}",
            "cluster": "{{item}}",
        }
        assert {p["name"]: p["value"] for p in loops["rollback-batch"]["arguments"]["parameters"]} == {
            "stage": "{{inputs.parameters.stage}}",
            "batch": "{{item}}",
        }


def test_rollback_plan_has_two_outputs_per_stage_defaulting_to_an_empty_list() -> None:
    obj = build(make_ps(*THREE_STAGES))
    plan = templates(obj)[names.ROLLBACK_PLAN_TEMPLATE]
    assert plan["container"]["args"] == [
        "rollback-plan",
        "--workflow-name",
        "{{workflow.name}}",
        "--workflow-status",
        "{{workflow.status}}",
    ]
    assert plan["outputs"]["parameters"] == [
        {"name": name, "valueFrom": {"path": f"/tmp/outputs/{name}", "default": "[]"}}
        for index in range(3)
        for name in (f"rollback-{index}", f"rollback-batches-{index}")
    ]
    finalize = templates(obj)[names.FINALIZE_TEMPLATE]
    # The same image, environment, hardening and retries as every step.
    for key in ("image", "command", "env", "securityContext", "resources", "volumeMounts"):
        assert plan["container"][key] == finalize["container"][key], key
    assert plan["retryStrategy"] == finalize["retryStrategy"]


def test_one_rollback_pod_per_cluster_shows_the_cluster() -> None:
    step = templates(build(make_ps(*ONE_STAGE)))[names.ROLLBACK_TEMPLATE]
    assert step["container"]["args"] == [
        "rollback",
        "--stage",
        "{{inputs.parameters.stage}}",
        "--cluster",
        "{{inputs.parameters.cluster}}",
    ]
    assert step["annotations"] == {names.DISPLAY_NAME_ANNOTATION: names.display_name_of_input("cluster")}
    assert step["retryStrategy"]["expression"] == pieces.RETRY_EXPRESSION


@pytest.mark.parametrize(
    ("stage", "task", "display"),
    [
        pytest.param("prod", "rollback-prod", None, id="task-name-is-the-stage"),
        pytest.param("eu-west-1.canary", "rollback-eu-west-1-canary", "rollback-eu-west-1.canary", id="dots"),
        pytest.param("canary in eu", "rollback-canary-in-eu", None, id="spaces-argo-refuses"),
        pytest.param("plan", "rollback-plan-2", None, id="a-stage-named-plan"),
    ],
)
def test_rollback_nodes_are_named_after_their_stage(stage: str, task: str, display: str | None) -> None:
    obj = build(make_ps(make_stage(stage)), parallel={})
    [_, rollback_task, _] = exit_tasks(obj)
    assert rollback_task["name"] == task
    annotations = templates(obj)[task].get("annotations") or {}
    assert annotations.get(names.DISPLAY_NAME_ANNOTATION) == display


@pytest.mark.parametrize(
    "stages",
    [pytest.param(ONE_STAGE, id="one-stage"), pytest.param(THREE_STAGES, id="three-stages")],
)
def test_without_rollback_the_workflow_is_what_it_was(stages: tuple[dict[str, Any], ...]) -> None:
    """A contract without rollback builds the Workflow `build_workflow` always built; with it, the
    Workflow differs only in its exit handler, its templates, its description and its contract."""
    ps = make_ps(*stages)
    plain = build_workflow(ps, release=RELEASE, plan=sizes_of(ps), settings=SETTINGS)
    contract = contract_for(ps, release=RELEASE, plan=sizes_of(ps), settings=SETTINGS)
    assert contract.rollback is None and '"rollback' not in contract.to_json()
    of_contract = build_workflow_of_contract(ps, release=RELEASE, contract=contract, settings=SETTINGS)
    assert render.to_yaml(of_contract) == render.to_yaml(plain)
    # The last record ends the rollout: the exit DAG skips finalize on a success (exit_handler.py).
    assert plain.to_dict()["spec"]["onExit"] == names.EXIT_TEMPLATE

    with_it = build(ps)
    added = {
        names.ROLLBACK_PLAN_TEMPLATE,
        names.ROLLBACK_TEMPLATE,
        names.ROLLBACK_BATCH_TEMPLATE,
    }
    added |= {task["template"] for task in exit_tasks(with_it)[1:-1]}
    with_it["spec"]["templates"] = [t for t in with_it["spec"]["templates"] if t["name"] not in added]
    [exit_dag] = [t for t in with_it["spec"]["templates"] if t["name"] == names.EXIT_TEMPLATE]
    exit_dag["dag"]["tasks"] = [t for t in exit_dag["dag"]["tasks"] if t["name"] == names.FINALIZE_TASK]
    del exit_dag["dag"]["tasks"][0]["dependencies"]
    description = with_it["metadata"]["annotations"].pop(names.DESCRIPTION_ANNOTATION)
    expected = plain.to_dict()
    assert description == expected["metadata"]["annotations"].pop(names.DESCRIPTION_ANNOTATION) + (
        " Rollback on StageFailed (FailedStage)."
    )
    [with_contract] = [p for p in with_it["spec"]["arguments"]["parameters"] if p["name"] == "contract"]
    [plain_contract] = [p for p in expected["spec"]["arguments"]["parameters"] if p["name"] == "contract"]
    assert parse_contract(with_contract.pop("value")).rollback is not None
    plain_contract.pop("value")
    assert with_it == expected


def test_the_contract_argument_carries_the_rollback() -> None:
    obj = build(make_ps(*THREE_STAGES), parallel={"everything else": 8}, on=("StageFailed", "Cancelled"))
    [argument] = [p for p in obj["spec"]["arguments"]["parameters"] if p["name"] == names.PARAM_CONTRACT]
    contract = parse_contract(argument["value"])
    assert contract.rollback is not None and contract.rollback.on == ("StageFailed", "Cancelled")
    assert [stage.rollback_parallel for stage in contract.stages] == [1, 3, 8]


def test_the_node_estimate_counts_two_nodes_per_planned_cluster_and_nothing_else_grows() -> None:
    ps = make_ps(*THREE_STAGES)
    contract = contract_for(ps, release=RELEASE, plan=sizes_of(ps), settings=SETTINGS)
    with_it = with_rollback(contract)
    clusters = sum(size.targets for size in contract.stages)  # 1 + 6 + 20
    # The exit DAG, rollback-plan (Retry + pod); per stage a fan-out and its two loop nodes; per
    # cluster a Retry node and a pod. finalize is counted in NODES_FIXED either way, and so is the
    # exit DAG here: without rollback it is there too, as the last record ends the rollout
    # (workflow_templates/exit_handler.py).
    assert estimate_nodes(ps, with_it) - estimate_nodes(ps, contract) == 3 - 1 + 3 * 3 + 2 * clusters
    assert rollback.rollback_nodes(contract) == 0 and NODES_FIXED == 3
    # Exit-handler pods run past the Workflow's deadline (Argo v3.7.18 workflowpod.go): no budget.
    assert active_deadline_seconds(ps, with_it, SETTINGS) == active_deadline_seconds(ps, contract, SETTINGS)
    obj = build(ps)
    assert obj["spec"]["activeDeadlineSeconds"] == active_deadline_seconds(ps, contract, SETTINGS)


def test_a_stage_in_batches_rolls_back_in_batches() -> None:
    """A stage too big for a pod per cluster runs in batches, and so does its rollback: one
    `rollback-batch` pod per batch (never more than rollbackParallel), all at once, each bounding
    its own share; the rollback adds a few nodes, not two per cluster."""
    ps = make_ps(make_stage("prod", max_parallel=10))
    sizes = {"prod": StageSize(2500, 10)}
    contract = with_rollback(contract_for(ps, release=RELEASE, plan=sizes, settings=SETTINGS))
    [stage] = contract.stages
    assert stage.batches > 0
    workflow = build_workflow_of_contract(ps, release=RELEASE, contract=contract, settings=SETTINGS).to_dict()
    [fanout] = [t for t in workflow["spec"]["templates"] if t["name"] == exit_tasks(workflow)[1]["template"]]
    [loop] = fanout["dag"]["tasks"]
    assert loop["template"] == names.ROLLBACK_BATCH_TEMPLATE
    assert loop["withParam"] == "{{inputs.parameters.batches}}"
    assert [p["name"] for p in loop["arguments"]["parameters"]] == [pieces.STAGE_INPUT, pieces.BATCH_INPUT]
    batches = min(stage.batches, stage.rollback_parallel or stage.max_parallel)
    assert "parallelism" not in fanout
    assert rollback.rollback_nodes(contract) == rollback.NODES_ROLLBACK_FIXED + 3 + 2 * batches


STAGE_NAME = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9 ._-]{0,20}[A-Za-z0-9])?", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(STAGE_NAME, min_size=1, max_size=5, unique=True))
@example(["plan", "Plan", "finalize", "rollback plan", "exit"])
def test_any_stages_get_one_valid_rollback_node_each_last_first(stage_names: list[str]) -> None:
    """Whatever the stage names (alike once sanitized, named like the exit handler's own tasks):
    every reference resolves and every template name is used once (`build` checks both), one
    rollback task per stage, last stage first, none named as rollback-plan or finalize."""
    ps = make_ps(*(make_stage(name) for name in stage_names))
    sizes = {name: StageSize(3, 2) for name in stage_names}
    obj: dict[str, Any] = rollback_workflow(ps, release=RELEASE, sizes=sizes, settings=SETTINGS).to_dict()
    library = validate.library_of(t.to_dict() for t in pieces.workflow_templates(SETTINGS))
    assert validate.problems(obj, library=library) == []
    tasks = exit_tasks(obj)
    assert (tasks[0]["name"], tasks[-1]["name"]) == ("rollback-plan", "finalize")
    staged = [
        next(p["value"] for p in t["arguments"]["parameters"] if p["name"] == "stage") for t in tasks[1:-1]
    ]
    assert staged == stage_names[::-1]
    assert len({t["name"].lower() for t in tasks}) == len(tasks)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=3000), min_size=1, max_size=4),
    st.integers(min_value=1, max_value=12),
    st.none() | st.integers(min_value=1, max_value=40),
)
def test_no_template_the_exit_handler_runs_has_argo_parallelism(
    targets: list[int], max_parallel: int, rollback_parallel: int | None
) -> None:
    """Argo v3.7.18's controller exits (`level=fatal`, and again after every restart) when template
    `parallelism` holds back a task of an exit handler: whatever the stages' sizes (some in batches),
    nothing the exit handler runs has it (docs/design/workflow.md, "No parallelism in the exit handler")."""
    stages = [make_stage(f"s{i}", max_parallel=max_parallel) for i in range(len(targets))]
    ps = make_ps(*stages)
    sizes = {f"s{i}": StageSize(n, min(max_parallel, n)) for i, n in enumerate(targets)}
    parallel = {f"s{i}": rollback_parallel for i in range(len(targets))} if rollback_parallel else None
    obj: dict[str, Any] = rollback_workflow(
        ps, release=RELEASE, sizes=sizes, settings=SETTINGS, parallel=parallel
    ).to_dict()
    reached = exit_handler_templates(obj["spec"])
    assert {names.ROLLBACK_PLAN_TEMPLATE, names.FINALIZE_TEMPLATE} <= {t["name"] for t in reached}
    assert [t["name"] for t in reached if "parallelism" in t] == []
