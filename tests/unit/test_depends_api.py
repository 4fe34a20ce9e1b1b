"""`spec.dependsOn` at the edges that need no cluster: the model's errors (naming the field and the
fix), `validate` and `plan`, the rollout contract (absent: byte-identical), the Workflow's
`wait-for-dependencies` node (in the stage that waits, which selects itself; its timeout in the
deadline) and the watcher's refusal of a cycle (`Valid=False`, DependencyCycle). Pure.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.api.conditions import ConditionType
from orchestrator.api.models import DEFAULT_DEPENDENCY_TIMEOUT_SECONDS, ConditionStatus, ProgressiveSync
from orchestrator.api.reasons import Reason
from orchestrator.api.validation import validate_object, validate_text
from orchestrator.cli.main import main as cli
from orchestrator.watcher.caches import CachedPS
from orchestrator.watcher.decide import decide
from orchestrator.watcher.observe import dependency_cycle
from tests.support import decide_inputs
from tests.support.builders import NEW_REVISION, make_ps, make_ps_model, make_release, make_stage
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
STAGES = (make_stage("canary"), make_stage("rest"))
ROOT = Path(__file__).resolve().parents[2]


def _manifest(depends_on: Any, *, name: str = "checkout", **spec: Any) -> dict[str, Any]:
    return make_ps(name, stages=STAGES, dependsOn=depends_on, **spec)


# --- the model and validate --------------------------------------------------------------------


@pytest.mark.parametrize(
    "depends_on",
    [
        pytest.param([{"name": "payments"}], id="whole-rollout"),
        pytest.param([{"name": "payments", "stage": "canary"}], id="a-stage"),
        pytest.param(
            [{"name": "payments", "stage": "canary", "beforeStage": "rest", "timeoutSeconds": 60}],
            id="before-a-later-stage",
        ),
        pytest.param([{"name": "payments"}, {"name": "ledger", "stage": "eu west 1"}], id="two"),
        pytest.param([{"name": "payments", "stage": "eu-west-1/canary"}], id="one-groups-stage"),
        pytest.param([{"name": "payments", "stage": "(none)/canary"}], id="the-group-without-the-label"),
    ],
)
def test_valid_dependencies_are_accepted(depends_on: list[dict[str, Any]]) -> None:
    assert validate_object(_manifest(depends_on)) == []
    ps = ProgressiveSync.model_validate(_manifest(depends_on))
    assert ps.spec.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)["dependsOn"] == [
        {k: v for k, v in entry.items() if v != DEFAULT_DEPENDENCY_TIMEOUT_SECONDS} for entry in depends_on
    ]


@pytest.mark.parametrize(
    ("depends_on", "path", "says"),
    [
        pytest.param([{"name": ""}], "spec.dependsOn[0].name", "", id="empty-name"),
        pytest.param([{"stage": "canary"}], "spec.dependsOn[0].name", "", id="no-name"),
        pytest.param([{"name": "Payments!"}], "spec.dependsOn[0].name", "", id="not-an-object-name"),
        pytest.param(
            [{"name": "payments", "stage": "can ary!"}], "spec.dependsOn[0].stage", "", id="not-a-stage-name"
        ),
        pytest.param(
            [{"name": "payments"}, {"name": "payments", "stage": "canary"}],
            "spec.dependsOn",
            "dependsOn[1].name 'payments' is already dependsOn[0]",
            id="duplicate",
        ),
        pytest.param(
            [{"name": "payments", "beforeStage": "blue"}],
            "spec.dependsOn",
            "dependsOn[0].beforeStage 'blue': beforeStage must name one of this ProgressiveSync's stages",
            id="before-an-unknown-stage",
        ),
        pytest.param(
            [{"name": "payments", "timeoutSeconds": 0}], "spec.dependsOn[0].timeoutSeconds", "", id="no-time"
        ),
        pytest.param([], "spec.dependsOn", "", id="empty-list"),
        pytest.param(
            [{"name": "payments", "stage": "eu-west-1/canary/extra"}],
            "spec.dependsOn[0].stage",
            "<group>/<stage> (such as eu-west-1/canary)",
            id="group-stage-with-two-slashes",
        ),
        pytest.param(
            [{"name": "payments", "stage": "/canary"}],
            "spec.dependsOn[0].stage",
            "<group>/<stage>",
            id="group-stage-without-a-group",
        ),
        pytest.param(
            [{"name": "payments", "stage": "eu west/canary"}],
            "spec.dependsOn[0].stage",
            "the group a label value or (none)",
            id="group-not-a-label-value",
        ),
        pytest.param([{"name": "payments", "after": "canary"}], "spec.dependsOn[0]", "", id="unknown-key"),
    ],
)
def test_invalid_dependencies_name_the_field(depends_on: Any, path: str, says: str) -> None:
    errors = validate_object(_manifest(depends_on))
    assert errors, "refused"
    assert any(e.path.startswith(path) and says in f"{e.problem} {e.fix}" for e in errors), [
        str(e) for e in errors
    ]


def test_validate_refuses_a_progressive_sync_that_depends_on_itself() -> None:
    (result,) = validate_text(yaml.safe_dump(_manifest([{"name": "checkout"}])))
    assert result.verdict.value == "invalid"
    assert [str(e) for e in result.errors] == [
        "spec.dependsOn[0].name: 'checkout' is this ProgressiveSync: it would wait for itself "
        "(name another ProgressiveSync, or remove this entry)"
    ]


def test_validate_and_plan_say_who_waits_for_what() -> None:
    runner = CliRunner()
    validated = runner.invoke(cli, ["validate", "-f", str(ROOT / "examples/depends-on.yaml")])
    assert validated.exit_code == 0, validated.output
    line = "stage 'canary' waits for ProgressiveSync payments to pass stage 'canary' (at most 1800s)"
    assert line in validated.output
    fleet = str(ROOT / "examples/fleets/checkout.yaml")
    planned = runner.invoke(cli, ["plan", "-f", str(ROOT / "examples/depends-on.yaml"), "--fleet", fleet])
    assert planned.exit_code == 0, planned.output
    assert f"dependsOn:\n  {line}\n" in planned.output
    as_json = runner.invoke(
        cli, ["plan", "-f", str(ROOT / "examples/depends-on.yaml"), "--fleet", fleet, "-o", "json"]
    )
    assert json.loads(as_json.output)["dependsOn"] == [
        {"name": "payments", "stage": "canary", "beforeStage": "canary", "timeoutSeconds": 1800}
    ]


def test_group_by_and_depends_on_are_accepted_together() -> None:
    manifest = make_ps(
        "checkout",
        stages=STAGES,
        groupBy="region",
        dependsOn=[{"name": "payments", "stage": "canary"}, {"name": "ledger", "beforeStage": "rest"}],
    )
    assert validate_object(manifest) == []
    (result,) = validate_text(yaml.safe_dump(manifest))
    assert result.notes[:2] == (
        "stage 'canary' of each group waits for ProgressiveSync payments to pass stage 'canary'"
        " (in the same group when it is grouped by region too, else in every group) (at most 3600s)",
        "stage 'rest' of each group waits for ProgressiveSync ledger to finish its rollout Succeeded"
        " (at most 3600s)",
    )


def test_plan_shows_each_groups_wait(tmp_path: Path) -> None:
    fleet = str(ROOT / "examples/fleets/checkout.yaml")
    spec = yaml.safe_load((ROOT / "examples/groups.yaml").read_text())
    spec["spec"]["dependsOn"] = [{"name": "payments", "stage": "canary", "timeoutSeconds": 600}]
    manifest = tmp_path / "grouped.yaml"
    manifest.write_text(yaml.safe_dump(spec))
    runner = CliRunner()
    planned = runner.invoke(cli, ["plan", "-f", str(manifest), "--fleet", fleet])
    as_json = runner.invoke(cli, ["plan", "-f", str(manifest), "--fleet", fleet, "-o", "json"])
    assert planned.exit_code == 0, planned.output
    groups = ["ap-southeast-1", "eu-west-1", "us-east-1"]
    section = planned.output.split("dependsOn:\n", 1)[1].splitlines()[: len(groups)]
    assert section == [
        f"  stage '{group}/canary' waits for ProgressiveSync payments to pass stage 'canary'"
        f" (its '{group}/canary' when it is grouped by region too, else in every group) (at most 600s)"
        for group in groups
    ]
    assert json.loads(as_json.output)["dependsOn"] == [
        {
            "name": "payments",
            "stage": "canary",
            "beforeStage": f"{group}/canary",
            "group": group,
            "timeoutSeconds": 600,
        }
        for group in groups
    ]


def test_plan_without_dependencies_has_no_section() -> None:
    fleet = str(ROOT / "examples/fleets/checkout.yaml")
    planned = CliRunner().invoke(
        cli, ["plan", "-f", str(ROOT / "examples/canary-regions-rest.yaml"), "--fleet", fleet, "-o", "json"]
    )
    assert "dependsOn" not in planned.output


# --- the contract and the Workflow -------------------------------------------------------------

SIZES = {"canary": StageSize(1, 1), "rest": StageSize(4, 2)}


def _build(ps: ProgressiveSync) -> dict[str, Any]:
    workflow = build_workflow(
        ps, release=make_release("0123456789", revisions=((NEW_REVISION,),)), plan=SIZES, settings=SETTINGS
    )
    obj: dict[str, Any] = workflow.to_dict()
    library = validate.library_of(t.to_dict() for t in pieces.workflow_templates(SETTINGS))
    assert validate.problems(obj, library=library) == []
    return obj


def _templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in obj["spec"]["templates"]}


def _tasks(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in template["dag"]["tasks"]}


def _ps(**spec: Any) -> ProgressiveSync:
    return make_ps_model("checkout", stages=STAGES, uid="u1", **spec)


def test_without_dependencies_the_contract_and_the_workflow_have_none() -> None:
    obj = _build(_ps())
    contract = next(p["value"] for p in obj["spec"]["arguments"]["parameters"] if p["name"] == "contract")
    assert "dependsOn" not in contract
    assert names.WAIT_FOR_DEPENDENCIES_TEMPLATE not in _templates(obj)


def test_the_first_stage_waits_by_default_and_the_contract_carries_the_dependencies() -> None:
    ps = _ps(dependsOn=[{"name": "payments", "stage": "canary", "timeoutSeconds": 900}])
    obj = _build(ps)
    contract = json.loads(
        next(p["value"] for p in obj["spec"]["arguments"]["parameters"] if p["name"] == "contract")
    )
    assert contract["dependsOn"] == [
        {"name": "payments", "stage": "canary", "beforeStage": "canary", "timeoutSeconds": 900}
    ]
    templates = _templates(obj)
    canary = _tasks(templates["stage-canary"])
    assert canary[names.WAIT_FOR_DEPENDENCIES_TASK]["template"] == names.WAIT_FOR_DEPENDENCIES_TEMPLATE
    assert canary["select"]["dependencies"] == [names.WAIT_FOR_DEPENDENCIES_TASK]
    assert names.WAIT_FOR_DEPENDENCIES_TASK not in _tasks(templates["stage-rest"])
    step = templates[names.WAIT_FOR_DEPENDENCIES_TEMPLATE]["container"]
    assert step["args"][:3] == ["wait-for-dependencies", "--stage", "{{inputs.parameters.stage}}"]
    assert (
        "canary waits until payments passes canary."
        in obj["metadata"]["annotations"][names.DESCRIPTION_ANNOTATION]
    )


def test_a_later_stage_that_waits_selects_itself_after_the_wait_and_behind_its_gate() -> None:
    stages = (make_stage("canary"), make_stage("rest", approval="Manual"))
    plain = make_ps_model("checkout", stages=(make_stage("canary"), make_stage("rest")), uid="u1")
    waiting = make_ps_model(
        "checkout",
        stages=(make_stage("canary"), make_stage("rest")),
        uid="u1",
        dependsOn=[{"name": "payments", "beforeStage": "rest"}],
    )
    assert "select" not in _tasks(_templates(_build(plain))["stage-rest"])  # record-and-select picks it
    rest = _tasks(_templates(_build(waiting))["stage-rest"])
    assert rest["select"]["dependencies"] == [names.WAIT_FOR_DEPENDENCIES_TASK]
    assert names.WAIT_FOR_DEPENDENCIES_TASK not in _tasks(_templates(_build(waiting))["stage-canary"])
    gated = make_ps_model(
        "checkout", stages=stages, uid="u1", dependsOn=[{"name": "payments", "beforeStage": "rest"}]
    )
    rest = _tasks(_templates(_build(gated))["stage-rest"])
    assert rest["approve"]["dependencies"] == [names.WAIT_FOR_DEPENDENCIES_TASK]
    assert rest["select"]["dependencies"] == ["approve"]


def test_the_deadline_and_the_node_count_budget_the_longest_wait_of_each_stage() -> None:
    release = make_release("r1", revisions=(("x",),))
    plain = _ps()
    waiting = _ps(
        dependsOn=[
            {"name": "payments", "timeoutSeconds": 600},
            {"name": "ledger", "timeoutSeconds": 900},
            {"name": "search", "beforeStage": "rest", "timeoutSeconds": 60},
        ]
    )
    base = contract_for(plain, release=release, plan=SIZES, settings=SETTINGS)
    sized = contract_for(waiting, release=release, plan=SIZES, settings=SETTINGS)
    step = SETTINGS.step_budget_seconds
    unscaled = active_deadline_seconds(
        waiting, sized, dataclasses.replace(SETTINGS, deadline_factor=1.0)
    ) - active_deadline_seconds(plain, base, dataclasses.replace(SETTINGS, deadline_factor=1.0))
    # every stage's budget has a select and a record step already: each waiting stage adds a step
    # and its longest timeout
    assert unscaled == (step + 900) + (step + 60)
    # two wait nodes, and rest's own select
    assert estimate_nodes(waiting, sized) - estimate_nodes(plain, base) == 2 + 2 + 2


# --- the watcher ---------------------------------------------------------------------------------


class _Caches:
    """The one method `dependency_cycle` reads."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): CachedPS(o) for o in objects}

    def progressive_sync(self, key: tuple[str, str]) -> CachedPS | None:
        return self.objects.get(key)


@pytest.mark.parametrize(
    ("objects", "cycle"),
    [
        pytest.param([_manifest([{"name": "checkout"}])], ("checkout", "checkout"), id="self"),
        pytest.param(
            [_manifest([{"name": "payments"}]), _manifest([{"name": "checkout"}], name="payments")],
            ("checkout", "payments", "checkout"),
            id="two",
        ),
        pytest.param(
            [_manifest([{"name": "payments"}]), _manifest([{"name": "ledger"}], name="payments")],
            (),
            id="a-chain",
        ),
        pytest.param([_manifest([{"name": "payments"}])], (), id="dependency-not-there-yet"),
        pytest.param(
            [
                _manifest([{"name": "payments", "stage": "canary"}], groupBy="region"),
                _manifest(
                    [{"name": "checkout", "stage": "eu-west-1/canary"}], name="payments", groupBy="region"
                ),
            ],
            ("checkout", "payments", "checkout"),
            id="grouped-both-ways",
        ),
        pytest.param(
            [
                _manifest([{"name": "payments"}]),
                {
                    **_manifest([{"name": "checkout"}], name="payments"),
                    "metadata": {"name": "payments", "namespace": "argocd", "deletionTimestamp": "x"},
                },
            ],
            (),
            id="one-being-deleted-breaks-it",
        ),
    ],
)
def test_the_watcher_finds_a_cycle_over_the_cached_progressive_syncs(
    objects: list[dict[str, Any]], cycle: tuple[str, ...]
) -> None:
    caches = _Caches(*objects)
    assert dependency_cycle(caches.objects[("argocd", "checkout")], caches) == cycle  # type: ignore[arg-type]


def test_a_cycle_is_valid_false_naming_it_and_starts_nothing() -> None:
    decision = decide(
        decide_inputs.observed(dependency_cycle=("web", "payments", "web")), decide_inputs.POLICY
    )
    patch = decide_inputs.patch_of(decision)
    valid = next(c for c in patch.conditions if c.type == ConditionType.VALID)
    assert (valid.status, valid.reason) == (ConditionStatus.FALSE, Reason.DEPENDENCY_CYCLE)
    assert "spec.dependsOn makes a cycle: web -> payments -> web" in valid.message
    assert "CreateWorkflow" not in decide_inputs.kinds(decision)
