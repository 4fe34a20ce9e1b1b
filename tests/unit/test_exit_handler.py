"""The exit handler's shape (workflow_templates/exit_handler.py): on a Workflow that Succeeded its
steps are skipped when the last stage's `record` records the rollout's end (`endsRollout`), and it
is `finalize` itself, or the rollback DAG as it was, when that stage does not."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.models import ProgressiveSync
from orchestrator.planning.contract import RolloutContract
from tests.support.builders import make_ps_model, make_release, make_stage
from tests.support.rollback_contracts import rollback_workflow, with_rollback
from workflow_templates import exit_handler, names, pieces, validate
from workflow_templates.builder import assumed_sizes, build_workflow, contract_for, estimate_nodes
from workflow_templates.settings import WorkflowSettings

SETTINGS = WorkflowSettings()
RELEASE = make_release("0123456789", revisions=(("4f1c2e9",),))
UNLESS = "{{workflow.status}} != Succeeded"


def make_ps(*stages: dict[str, Any]) -> ProgressiveSync:
    return make_ps_model("myservice", namespace="argocd", uid="uid-1", stages=stages, app_set="myservice")


def checked(obj: dict[str, Any]) -> dict[str, Any]:
    library = validate.library_of(t.to_dict() for t in pieces.workflow_templates(SETTINGS))
    assert validate.problems(obj, library=library) == []
    return obj


def workflow(ps: ProgressiveSync, *, rollback: bool) -> dict[str, Any]:
    sizes = assumed_sizes(ps, 12)
    if rollback:
        return checked(rollback_workflow(ps, release=RELEASE, sizes=sizes, settings=SETTINGS).to_dict())
    return checked(build_workflow(ps, release=RELEASE, plan=sizes, settings=SETTINGS).to_dict())


def exit_tasks(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [exit_dag] = [t for t in obj["spec"]["templates"] if t["name"] == names.EXIT_TEMPLATE]
    return {task["name"]: task for task in exit_dag["dag"]["tasks"]}


TWO_STAGES = (make_stage("canary", max_targets=1), make_stage("rest", max_parallel=2))
BAKED_LAST = (make_stage("canary", max_targets=1), make_stage("rest", bake_seconds=60))


@pytest.mark.parametrize(
    ("stages", "rollback", "on_exit", "skipped"),
    [
        pytest.param(
            TWO_STAGES, False, names.EXIT_TEMPLATE, {"finalize"}, id="last-record-ends-finalize-skipped"
        ),
        pytest.param(
            TWO_STAGES,
            True,
            names.EXIT_TEMPLATE,
            {"rollback-plan", "finalize"},
            id="with-rollback-plan-and-finalize-skipped",
        ),
        pytest.param(
            BAKED_LAST, False, names.FINALIZE_TEMPLATE, set(), id="bake-after-the-last-stage-finalize-alone"
        ),
        pytest.param(
            BAKED_LAST, True, names.EXIT_TEMPLATE, set(), id="bake-after-the-last-stage-rollback-as-it-was"
        ),
    ],
)
def test_the_exit_handler_skips_its_steps_on_success_only_when_the_last_record_ends_the_rollout(
    stages: tuple[dict[str, Any], ...], rollback: bool, on_exit: str, skipped: set[str]
) -> None:
    obj = workflow(make_ps(*stages), rollback=rollback)
    assert obj["spec"]["onExit"] == on_exit
    if on_exit == names.FINALIZE_TEMPLATE:
        return
    whens = {name: task.get("when") for name, task in exit_tasks(obj).items()}
    assert {name for name, when in whens.items() if when == UNLESS} == skipped
    # A rollback fan-out runs only after a plan that Succeeded: Skipped with the plan.
    assert all(
        when == "{{tasks.rollback-plan.status}} == Succeeded"
        for name, when in whens.items()
        if name.startswith("rollback-") and name != "rollback-plan"
    )


@pytest.mark.parametrize(
    ("ends", "rollback", "expected"),
    [
        pytest.param(True, False, names.EXIT_TEMPLATE, id="ends-no-rollback-exit-dag"),
        pytest.param(True, True, names.EXIT_TEMPLATE, id="ends-with-rollback-exit-dag"),
        pytest.param(False, False, names.FINALIZE_TEMPLATE, id="does-not-end-finalize"),
        pytest.param(False, True, names.EXIT_TEMPLATE, id="does-not-end-with-rollback-exit-dag"),
    ],
)
def test_on_exit_names_the_exit_dag_with_rollback_or_when_the_last_record_ends_the_rollout(
    ends: bool, rollback: bool, expected: str
) -> None:
    contract = _contract(TWO_STAGES, ends=ends, rollback=rollback)
    assert exit_handler.skips_on_success(contract) is ends
    assert exit_handler.on_exit(contract) == expected


def test_the_exit_dag_without_rollback_adds_one_node_to_the_estimate() -> None:
    ps = make_ps(*TWO_STAGES)
    ends, plain = _contract(TWO_STAGES, ends=True), _contract(TWO_STAGES, ends=False)
    assert estimate_nodes(ps, ends) == estimate_nodes(ps, plain) + 1


def _contract(stages: tuple[dict[str, Any], ...], *, ends: bool, rollback: bool = False) -> RolloutContract:
    ps = make_ps(*stages)
    contract = contract_for(ps, release=RELEASE, plan=assumed_sizes(ps, 12), settings=SETTINGS)
    last = contract.stages[-1].model_copy(update={"ends_rollout": True if ends else None})
    contract = contract.model_copy(update={"stages": (*contract.stages[:-1], last)})
    return with_rollback(contract) if rollback else contract
