"""The rollout Workflow as built by workflow_templates.builder: names, shape, sizes, deadline.

Pure tests: the builder gets specs built here and plans made by the real planner over fleets built
with tests/support/builders; nothing talks to a cluster. `validate.problems` (every reference
resolves) runs on every Workflow built here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.api.metadata import NAME_LABEL, ROLLOUT_ID_LABEL, label_value, workflow_name
from orchestrator.api.models import ProgressiveSync
from orchestrator.engine.expressions import input_display_name
from orchestrator.planning.contract import RolloutContract, parse_contract
from orchestrator.planning.planner import plan_rollout
from tests.support.builders import (
    NEW_REVISION,
    OLD_REVISION,
    make_app,
    make_app_set,
    make_ps_model,
    make_release,
    make_stage,
    regional_fleet,
)
from workflow_templates import names, pieces, validate
from workflow_templates.builder import (
    StageSize,
    WorkflowBuildError,
    active_deadline_seconds,
    assumed_sizes,
    build_workflow,
    contract_for,
    estimate_nodes,
    workflow_object,
)
from workflow_templates.settings import WorkflowSettings

SETTINGS = WorkflowSettings()


def make_ps(
    *stages: dict[str, Any], name: str = "myservice", uid: str | None = "uid-1", **spec: Any
) -> ProgressiveSync:
    """A ProgressiveSync with these stages (default one stage over every cluster)."""
    return make_ps_model(name, stages=stages, app_set="myservice", uid=uid, **spec)


def contract_of(
    ps: ProgressiveSync, sizes: dict[str, StageSize], settings: WorkflowSettings = SETTINGS
) -> RolloutContract:
    """The rollout contract the builder makes for `ps` with these sizes."""
    return contract_for(ps, release=make_release("r1", revisions=(("x",),)), plan=sizes, settings=settings)


def build(ps: ProgressiveSync, sizes: dict[str, StageSize] | None = None, **settings: Any) -> dict[str, Any]:
    workflow = build_workflow(
        ps,
        release=make_release("0123456789", revisions=((NEW_REVISION,),)),
        plan=sizes if sizes is not None else assumed_sizes(ps, 12),
        settings=WorkflowSettings(**settings),
    )
    obj: dict[str, Any] = workflow.to_dict()
    library = validate.library_of(t.to_dict() for t in pieces.workflow_templates(SETTINGS))
    assert validate.problems(obj, library=library) == []
    return obj


def templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in obj["spec"]["templates"]}


def tasks(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in template["dag"]["tasks"]}


# --- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ps_name", "rollout_id", "expected"),
    [
        pytest.param("myservice", "7f3c2a1b9e", "myservice-7f3c2a1b9e", id="short-name-as-is"),
        pytest.param("a" * 52, "7f3c2a1b9e", "a" * 52 + "-7f3c2a1b9e", id="exactly-63"),
    ],
)
def test_workflow_name_is_ps_name_and_rollout_id(ps_name: str, rollout_id: str, expected: str) -> None:
    assert workflow_name(ps_name, rollout_id) == expected


def test_long_workflow_names_are_capped_deterministically_and_stay_distinct() -> None:
    first = workflow_name("a" * 60 + "-one", "7f3c2a1b9e")
    second = workflow_name("a" * 60 + "-two", "7f3c2a1b9e")
    assert len(first) == len(second) == 63
    assert first != second
    assert first == workflow_name("a" * 60 + "-one", "7f3c2a1b9e")
    assert first.endswith("-7f3c2a1b9e")


@pytest.mark.parametrize(
    ("stage_names", "expected"),
    [
        pytest.param(["canary in eu-west-1"], ["canary-in-eu-west-1"], id="spaces-become-dashes"),
        pytest.param(["eu.west_1 -- b"], ["eu-west-1-b"], id="runs-collapse"),
        pytest.param(["1st wave"], ["s-1st-wave"], id="leading-digit-prefixed"),
        pytest.param(
            ["eu west", "eu-west", "eu.west"], ["eu-west", "eu-west-2", "eu-west-3"], id="collisions-numbered"
        ),
        pytest.param(["Canary", "canary"], ["Canary", "canary-2"], id="case-only-difference-is-a-collision"),
    ],
)
def test_stage_task_names_are_valid_and_unique(stage_names: list[str], expected: list[str]) -> None:
    result = names.stage_task_names(stage_names)
    assert result == expected
    assert all(names.FIELD_NAME_RE.fullmatch(name) for name in result)


@pytest.mark.parametrize(
    ("stage_name", "expected"),
    [
        pytest.param("eu-west-1.canary", "eu-west-1.canary", id="dots-shown-exactly"),
        pytest.param("canary in eu-west-1", None, id="spaces-fail-argo-rule"),
        pytest.param("canary", None, id="same-as-task-name"),
    ],
)
def test_display_name_annotation_only_where_argo_accepts_it(stage_name: str, expected: str | None) -> None:
    assert names.display_name_for(stage_name, names.sanitize_task_name(stage_name)) == expected


@pytest.mark.parametrize(
    ("cluster", "shown"),
    [
        pytest.param("cells-1-eu-west-1a", "cells-1-eu-west-1a", id="a-dns-like-name-is-shown"),
        pytest.param("prod.eu-west-1", "prod.eu-west-1", id="dots-are-allowed"),
        pytest.param("arn:aws:eks:eu-west-1:12345:cluster/prod", None, id="an-eks-arn-keeps-the-default"),
        pytest.param("gke_project_europe-west1_prod", None, id="underscores-keep-the-default"),
        pytest.param("a", None, id="one-character-fails-argo-rule"),
        pytest.param("-edge", None, id="a-leading-dash-fails-argo-rule"),
        pytest.param("c" * 63, "c" * 63, id="63-characters-are-shown"),
        pytest.param("c" * 64, None, id="64-characters-keep-the-default"),
    ],
)
def test_the_cluster_node_shows_its_name_only_where_argo_accepts_it(cluster: str, shown: str | None) -> None:
    """What Argo makes of the cluster step's display-name expression (the local executor reads it the
    same way); None: the node keeps Argo's default name `cluster(<i>:<name>)`. An invalid display
    name would make Argo mark the cluster's node Error, so the expression must never yield one."""
    [template] = [t for t in pieces.step_templates(SETTINGS) if t.name == names.CLUSTER_TEMPLATE]
    built = template._build_template().model_dump(by_alias=True, exclude_none=True)
    assert built["annotations"] == {names.DISPLAY_NAME_ANNOTATION: names.display_name_of_input("cluster")}
    assert input_display_name(built, {"stage": "canary", "cluster": cluster}) == shown
    if shown is not None:
        assert names.DISPLAY_NAME_RE.fullmatch(shown)


@pytest.mark.parametrize(
    ("revisions", "attempt", "title"),
    [
        pytest.param(((NEW_REVISION,),), 1, "myservice: 4f1c2e9", id="a-commit-as-7-digits"),
        pytest.param(((NEW_REVISION, OLD_REVISION),), 1, "myservice: 4f1c2e9,9d2b7e4", id="two-sources"),
        pytest.param(((NEW_REVISION,), (OLD_REVISION,)), 1, "myservice: 4f1c2e9 +1", id="two-revision-sets"),
        pytest.param((("1.4.2",),), 1, "myservice: 1.4.2", id="a-chart-version-as-it-is"),
        pytest.param(((NEW_REVISION,),), 2, "myservice: 4f1c2e9 (attempt 2)", id="a-retry-says-its-attempt"),
    ],
)
def test_the_title_the_argo_ui_lists_is_what_rolls_out(
    revisions: tuple[tuple[str, ...], ...], attempt: int, title: str
) -> None:
    release = make_release("0123456789", revisions=revisions, attempt=attempt)
    workflow = build_workflow(make_ps(), release=release, plan=assumed_sizes(make_ps(), 4), settings=SETTINGS)
    assert workflow_object(workflow)["metadata"]["annotations"][names.TITLE_ANNOTATION] == title


def test_the_description_lists_the_stages_first_then_the_release() -> None:
    ps = make_ps(
        make_stage("canary", max_targets=1),
        make_stage("the rest", max_parallel=2, approval="Manual", bake_seconds=60),
    )
    release = make_release("0123456789")
    workflow = build_workflow(ps, release=release, plan=assumed_sizes(ps, 4), settings=SETTINGS)
    assert workflow_object(workflow)["metadata"]["annotations"][names.DESCRIPTION_ANNOTATION] == (
        "canary (1 cluster) -> the rest (4 clusters, 2 at a time, manual approval, bake 60s). "
        f"Revision {NEW_REVISION}, rollout 0123456789."
    )


def test_label_value_of_long_names_fits_a_label() -> None:
    value = label_value("x" * 100)
    assert len(value) <= 63
    assert names.LABEL_VALUE_RE.fullmatch(value)


# --- the object ------------------------------------------------------------------------------


def test_metadata_names_labels_owner_and_annotations() -> None:
    obj = build(make_ps(make_stage("canary in eu-west-1", max_targets=1)))
    meta = obj["metadata"]
    assert meta["name"] == "myservice-0123456789"
    assert meta["namespace"] == "argocd"
    assert meta["labels"] == {NAME_LABEL: "myservice", ROLLOUT_ID_LABEL: "0123456789"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "progressivesync.io/v1alpha1",
            "kind": "ProgressiveSync",
            "name": "myservice",
            "uid": "uid-1",
            "controller": True,
        }
    ]
    assert meta["annotations"][names.TITLE_ANNOTATION] == f"myservice: {NEW_REVISION[:7]}"
    assert meta["annotations"][names.DESCRIPTION_ANNOTATION].startswith("canary in eu-west-1 (1 cluster). ")


def test_without_a_uid_there_is_no_owner_reference() -> None:
    assert "ownerReferences" not in build(make_ps(uid=None))["metadata"]


def test_spec_mutex_exit_handler_arguments() -> None:
    spec = build(make_ps(), service_account="steps-sa", argocd_namespace="argo-cd")["spec"]
    assert spec["entrypoint"] == names.ENTRYPOINT
    # The last stage's record records the end: the exit DAG skips finalize on a success
    # (workflow_templates/exit_handler.py; tests/unit/test_exit_handler.py).
    assert spec["onExit"] == names.EXIT_TEMPLATE
    assert spec["serviceAccountName"] == "steps-sa"
    assert spec["synchronization"] == {"mutexes": [{"name": "progressivesync-myservice"}]}
    arguments = {p["name"]: p["value"] for p in spec["arguments"]["parameters"]}
    assert arguments == {
        "progressive-sync": "myservice",
        "argocd-namespace": "argo-cd",
        "contract": arguments["contract"],
    }
    # The one rollout contract: the rollout id, the release as data, each stage's resolved sizing.
    contract = parse_contract(arguments["contract"])
    assert (contract.rollout_id, contract.release) == ("0123456789", ((NEW_REVISION,),))
    assert [(s.name, s.targets, s.max_parallel, s.batches, s.start_syncs) for s in contract.stages] == [
        ("all", 12, 1, 0, 1)
    ]
    finalize = templates(build(make_ps()))[names.FINALIZE_TEMPLATE]["container"]
    assert finalize["args"] == [
        "finalize",
        "--workflow-name",
        "{{workflow.name}}",
        "--workflow-status",
        "{{workflow.status}}",
    ]


def test_entry_dag_has_one_task_per_stage_in_order_each_after_the_one_before() -> None:
    ps = make_ps(make_stage("canary in eu-west-1"), make_stage("eu.rest"), make_stage("eu rest"))
    entry = templates(build(ps))[names.ENTRYPOINT]
    assert [(t["name"], t.get("dependencies")) for t in entry["dag"]["tasks"]] == [
        ("canary-in-eu-west-1", None),
        ("eu-rest", ["canary-in-eu-west-1"]),
        ("eu-rest-2", ["eu-rest"]),
        (names.FOLLOW_TASK, None),  # the rollout follower, beside the stages (steps/follow.py)
    ]
    stage_params = [t["arguments"]["parameters"] for t in entry["dag"]["tasks"][:-1]]
    assert [p[0]["value"] for p in stage_params] == ["canary in eu-west-1", "eu.rest", "eu rest"]
    assert templates(build(ps))["stage-eu-rest"]["annotations"] == {names.DISPLAY_NAME_ANNOTATION: "eu.rest"}


def test_stage_dag_select_fanout_record_and_one_pod_per_cluster() -> None:
    obj = build(
        make_ps(make_stage("all", max_parallel="25%")), {"all": StageSize(targets=12, max_parallel=3)}
    )
    stage = tasks(templates(obj)["stage-all"])
    assert list(stage) == ["select", "clusters", "record"]
    assert stage["clusters"]["dependencies"] == ["select"]
    assert stage["clusters"]["template"] == "fanout-all"
    # Whatever the fan-out's end, record closes the stage (and fails it when the steps say so).
    assert stage["clusters"]["continueOn"] == {"failed": True, "error": True}
    assert stage["record"]["dependencies"] == ["clusters"]
    assert "{{tasks.select.outputs.parameters.targets}}" in str(stage["clusters"]["arguments"])
    fanout = templates(obj)["fanout-all"]
    assert "parallelism" not in fanout  # its 12 pods start together (steps/turn.py), 3 sync at once
    # The UI's `clusters` node says how many run at once (above "N hidden nodes" in a large stage).
    assert fanout["annotations"] == {names.DISPLAY_NAME_ANNOTATION: "clusters-3-at-a-time"}
    assert names.DISPLAY_NAME_RE.fullmatch(names.fanout_display_name(1000))
    assert "failFast" not in fanout and "failFast" not in fanout["dag"]
    loop = fanout["dag"]["tasks"][0]
    assert loop["withParam"] == "{{inputs.parameters.targets}}"
    assert loop["template"] == names.CLUSTER_TEMPLATE
    cluster = templates(obj)[names.CLUSTER_TEMPLATE]["container"]
    assert cluster["args"][:5] == [
        "cluster",
        "--stage",
        "{{inputs.parameters.stage}}",
        "--cluster",
        "{{inputs.parameters.cluster}}",
    ]


@pytest.mark.parametrize(
    ("second", "first_bakes", "batched", "hands_over"),
    [
        pytest.param({}, False, False, True, id="nothing-between-one-step-closes-and-selects"),
        pytest.param({}, False, True, True, id="next-in-batches-takes-no-targets-output"),
        pytest.param({"approval": "Manual"}, False, False, False, id="gate-selects-after-approval"),
        pytest.param({}, True, False, False, id="bake-between-keeps-its-own-select"),
    ],
)
def test_a_stage_boundary_with_nothing_between_is_one_step(
    second: dict[str, Any], first_bakes: bool, batched: bool, hands_over: bool
) -> None:
    first = {**make_stage("canary"), **({"bakeSeconds": 60} if first_bakes else {})}
    ps = make_ps(first, {**make_stage("rest"), **second})
    sizes = {"canary": StageSize(1, 1), "rest": StageSize(200 if batched else 12, 4)}
    obj = build(ps, sizes)
    sized = contract_of(ps, sizes)
    rest_pods = sized.stages[1].batches or 12
    assert (rest_pods < 12) == batched
    canary, rest = tasks(templates(obj)["stage-canary"]), tasks(templates(obj)["stage-rest"])
    [canary_task, rest_task, _follower] = templates(obj)["rollout"]["dag"]["tasks"]
    rest_arguments = {p["name"]: p["value"] for p in rest_task["arguments"]["parameters"]}
    if not hands_over:
        assert names.RECORD_TASK in canary and names.SELECT_TASK in rest
        select_arguments = {p["name"]: p["value"] for p in rest[names.SELECT_TASK]["arguments"]["parameters"]}
        assert select_arguments == {"stage": "{{inputs.parameters.stage}}"}
        assert rest_arguments == {"stage": "rest"}
        # + bake, follower, the exit DAG (the last record ends the rollout: exit_handler.py)
        assert estimate_nodes(ps, sized) == 3 + 2 * 7 + 2 * (1 + rest_pods) + 1 + 1 + 1
        return
    # canary: select, clusters, then one step that records canary and selects rest.
    assert list(canary) == ["select", "clusters", names.RECORD_AND_SELECT_TASK]
    close = canary[names.RECORD_AND_SELECT_TASK]
    assert close["dependencies"] == ["clusters"]
    # ... and starts the syncs of rest's first wave: its maxParallel (4) first targets, which the
    # contract says (no size of rest travels in canary's template).
    assert {p["name"]: p["value"] for p in close["arguments"]["parameters"]} == {
        "stage": "{{inputs.parameters.stage}}",
        "next-stage": "rest",
    }
    assert sized.stages[1].start_syncs == 4
    # rest: no select of its own; its clusters start at once with what canary handed on.
    assert list(rest) == ["clusters", "record"]
    assert "dependencies" not in rest["clusters"]
    step = templates(obj)[close["template"]]
    assert step["container"]["args"] == [
        "record-and-select",
        "--stage",
        "{{inputs.parameters.stage}}",
        "--next-stage",
        "{{inputs.parameters.next-stage}}",
    ]
    assert step["inputs"]["parameters"] == [{"name": "stage"}, {"name": "next-stage"}]
    if batched:
        # The batch pods read rest's targets from the status, as after select-for-batches.
        assert close["template"] == names.RECORD_AND_SELECT_FOR_BATCHES_TEMPLATE
        assert "outputs" not in step and "outputs" not in templates(obj)["stage-canary"]
        assert rest_arguments == {"stage": "rest"}
    else:
        assert close["template"] == names.RECORD_AND_SELECT_TEMPLATE
        assert templates(obj)["stage-canary"]["outputs"] == {
            "parameters": [
                {
                    "name": "targets",
                    "valueFrom": {"parameter": "{{tasks.record-and-select.outputs.parameters.targets}}"},
                }
            ]
        }
        assert rest_arguments == {
            "stage": "rest",
            "targets": "{{tasks." + canary_task["name"] + ".outputs.parameters.targets}}",
        }
        assert rest["clusters"]["arguments"]["parameters"][1]["value"] == "{{inputs.parameters.targets}}"
    assert (
        estimate_nodes(ps, sized) == 3 + 2 * 7 - 2 + 2 * (1 + rest_pods) + 1 + 1
    )  # no select pod for rest; follower; the exit DAG


def test_no_template_fails_fast_whatever_the_tolerance() -> None:
    for tolerated in (0, 2):
        obj = build(make_ps(failurePolicy={"maxFailedClusters": tolerated}))
        assert not [
            t["name"] for t in obj["spec"]["templates"] if "failFast" in t or "failFast" in t.get("dag", {})
        ]


def test_manual_approval_and_bake_after_record() -> None:
    stage = {**make_stage("all"), "approval": "Manual", "bakeSeconds": 600}
    obj = build(make_ps(stage))
    stage_tasks = tasks(templates(obj)["stage-all"])
    assert list(stage_tasks) == ["approve", "select", "clusters", "record", "bake"]
    assert stage_tasks["select"]["dependencies"] == ["approve"]
    assert stage_tasks["bake"]["dependencies"] == ["record"]
    assert templates(obj)["bake-600s"]["suspend"] == {"duration": "600"}
    assert templates(obj)[names.APPROVAL_TEMPLATE]["suspend"] == {}


def test_no_bake_for_a_stage_the_plan_leaves_empty() -> None:
    stage = {**make_stage("all"), "bakeSeconds": 600}
    obj = build(make_ps(stage), {"all": StageSize(targets=0, max_parallel=1)})
    assert "bake" not in tasks(templates(obj)["stage-all"])
    assert "bake-600s" not in templates(obj)


def test_steps_run_the_contract_commands_with_retries_of_temporary_errors_only() -> None:
    settings = {"image": "registry.example/ps:1", "retry_limit": 3}
    obj = build(make_ps(), **settings)
    by_name = templates(obj)
    assert not {"sync", "wait-healthy"} & set(by_name)  # they run inside `cluster`
    for step in ("select", "cluster", "record", "finalize"):
        container = by_name[step]["container"]
        assert container["command"] == ["python", "-m", "steps"]
        assert container["args"][0] == step
        assert container["image"] == "registry.example/ps:1"
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["PROGRESSIVE_SYNC_CONTRACT"] == "{{workflow.parameters.contract}}"
        assert "PROGRESSIVE_SYNC_ROLLOUT_ID" not in env  # the rollout id is the contract's
        assert env["PROGRESSIVE_SYNC_NAMESPACE"] == "{{workflow.namespace}}"
        retry = by_name[step]["retryStrategy"]
        assert retry["limit"] == 3
        assert "asInt(lastRetry.exitCode) == 75" in retry["expression"]
    assert by_name["select"]["outputs"]["parameters"] == [
        {"name": "targets", "valueFrom": {"path": "/tmp/outputs/targets"}}
    ]


@pytest.mark.parametrize(
    ("instance_id", "expected"),
    [
        pytest.param("", None, id="no-instance-id-no-variable"),
        pytest.param("blue", "blue", id="the-instance-id-in-every-step"),
    ],
)
def test_the_rollouts_instance_id_is_in_the_steps_environment(instance_id: str, expected: str | None) -> None:
    for template in templates(build(make_ps(), rollouts_instance_id=instance_id)).values():
        if "container" in template:
            env = {e["name"]: e["value"] for e in template["container"]["env"]}
            assert env.get(pieces.ROLLOUTS_INSTANCE_ID_ENV) == expected, template["name"]


def test_a_rollouts_instance_id_that_is_no_label_value_is_refused() -> None:
    with pytest.raises(ValueError, match=r"--rollouts-instance-id .* 'blue team' is not a label value"):
        WorkflowSettings(rollouts_instance_id="blue team")


def test_every_step_container_is_hardened_with_its_outputs_on_an_empty_dir() -> None:
    obj = build(make_ps())
    library = [t.to_dict() for t in pieces.workflow_templates(SETTINGS)]
    containers = [
        (source["metadata"].get("name") or source["metadata"].get("generateName"), t)
        for source in (obj, *library)
        for t in source["spec"]["templates"]
        if "container" in t
    ]
    assert len(containers) >= 4
    for where, template in containers:
        container = template["container"]
        assert container["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }, (where, template["name"])
        assert container["volumeMounts"] == [{"name": "outputs", "mountPath": "/tmp/outputs"}]
        assert template["volumes"] == [{"name": "outputs", "emptyDir": {}}], (where, template["name"])


# --- sizes from the planner --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("targets", "max_parallel", "limit", "together"),
    [
        pytest.param(12, 3, 20, True, id="within-the-limit-every-pod-at-once"),
        pytest.param(12, 3, 0, False, id="limit-0-is-off"),
        pytest.param(12, 3, 11, False, id="above-the-limit-maxparallel-at-a-time"),
        pytest.param(3, 3, 20, False, id="every-target-at-once-anyway"),
    ],
)
def test_pods_at_once_drop_the_fanouts_parallelism_and_say_so_in_the_contract(
    targets: int, max_parallel: int, limit: int, together: bool
) -> None:
    obj = build(
        make_ps(make_stage("all", max_parallel=max_parallel)),
        {"all": StageSize(targets=targets, max_parallel=max_parallel)},
        pods_at_once_limit=limit,
    )
    fanout = templates(obj)["fanout-all"]
    assert fanout.get("parallelism") == (None if together else max_parallel)
    arguments = {p["name"]: p["value"] for p in obj["spec"]["arguments"]["parameters"]}
    stage = parse_contract(arguments["contract"]).stages[0]
    assert stage.pods_at_once is (True if together else None)
    assert stage.fanout_parallelism == fanout.get("parallelism")
    if targets > max_parallel:  # the UI still says how many sync at once
        assert fanout["annotations"] == {names.DISPLAY_NAME_ANNOTATION: f"clusters-{max_parallel}-at-a-time"}


def test_percentage_max_parallel_is_resolved_from_the_plan() -> None:
    ps = make_ps(
        make_stage("canary", labels={"region": "eu"}, max_targets=1),
        make_stage("rest", max_parallel="25%"),
    )
    clusters = regional_fleet({"eu": 3, "us": 9})
    apps = [make_app(cluster=c.name) for c in clusters]
    plan = plan_rollout(ps.spec, ps_name="myservice", appset=make_app_set(), clusters=clusters, apps=apps)
    assert not plan.errors
    obj = build_workflow(
        ps, release=make_release("r1", revisions=((NEW_REVISION,),)), plan=plan, settings=SETTINGS
    ).to_dict()
    by_name = templates(obj)
    assert by_name["fanout-canary"]["parallelism"] == 1
    # 25% of the 11 clusters left, rounded down: 2 at a time, its 11 pods started together.
    assert by_name["fanout-rest"]["annotations"][names.DISPLAY_NAME_ANNOTATION] == "clusters-2-at-a-time"
    assert "parallelism" not in by_name["fanout-rest"]


def test_a_plan_for_another_spec_is_refused() -> None:
    ps = make_ps(make_stage("canary"))
    with pytest.raises(WorkflowBuildError, match="no size"):
        build_workflow(
            ps,
            release=make_release("r1", revisions=(("x",),)),
            plan={"other": StageSize(1, 1)},
            settings=SETTINGS,
        )


def test_a_stage_of_thousands_of_clusters_runs_in_batches() -> None:
    ps = make_ps(make_stage("everything"))
    workflow = build_workflow(
        ps,
        release=make_release("r1", revisions=(("x",),)),
        plan={"everything": StageSize(10_000, 2_500)},
        settings=SETTINGS,
    ).to_dict()
    by_name = {t["name"]: t for t in workflow["spec"]["templates"]}
    fanout = by_name["fanout-everything"]
    loop = fanout["dag"]["tasks"][0]
    assert (loop["template"], fanout["parallelism"]) == ("batch", 20)  # 10,000 / 500 per batch
    assert json.loads(loop["withParam"]) == [str(i) for i in range(20)]
    arguments = {p["name"]: p["value"] for p in loop["arguments"]["parameters"]}
    assert arguments == {"stage": "{{inputs.parameters.stage}}", "batch": "{{item}}"}
    arguments = {p["name"]: p["value"] for p in workflow["spec"]["arguments"]["parameters"]}
    everything = parse_contract(arguments["contract"]).stages[0]
    assert (everything.batches, everything.max_parallel) == (20, 2500)  # the batch pods read them here
    select = next(t for t in by_name["stage-everything"]["dag"]["tasks"] if t["name"] == "select")
    assert select["template"] == "select-for-batches"
    assert "outputs" not in by_name["select-for-batches"]  # the targets stay out of the Workflow
    # + the exit DAG (the last record ends the rollout: workflow_templates/exit_handler.py)
    assert estimate_nodes(ps, contract_of(ps, {"everything": StageSize(10_000, 2_500)})) == 3 + 7 + 2 * 20 + 1


def test_too_many_nodes_is_refused_with_advice_that_works() -> None:
    ps = make_ps(*(make_stage(f"s{i}") for i in range(3)))
    plan = {f"s{i}": StageSize(40, 40) for i in range(3)}
    tight = WorkflowSettings(max_nodes=100)
    with pytest.raises(WorkflowBuildError, match="lower the batch threshold") as refused:
        build_workflow(ps, release=make_release("r1", revisions=(("x",),)), plan=plan, settings=tight)
    assert "'s0', 's1', 's2' run in batches" in str(refused.value)
    # The advice, followed, builds: the stages run in batches and the nodes fit.
    followed = WorkflowSettings(max_nodes=100, batch_threshold=10)
    build_workflow(ps, release=make_release("r1", revisions=(("x",),)), plan=plan, settings=followed)
    assert (
        estimate_nodes(ps, contract_of(ps, plan, followed))
        <= 100
        < estimate_nodes(ps, contract_of(ps, plan, tight))
    )


@pytest.mark.parametrize(
    ("stage", "size", "expected"),
    [
        pytest.param({}, StageSize(12, 3), (300 + 2 * 300 + 4 * (300 + 600)) * 3 // 2, id="four-waves"),
        pytest.param(
            {}, StageSize(0, 1), (300 + 2 * 300 + 1 * (300 + 600)) * 3 // 2, id="empty-stage-one-wave"
        ),
        pytest.param(
            {"bakeSeconds": 60, "approval": "Manual"},
            StageSize(1, 1),
            (300 + 2 * 300 + (300 + 600) + 60 + 7 * 24 * 3600) * 3 // 2,
            id="bake-and-approval-window",
        ),
    ],
)
def test_active_deadline_from_waves_bake_and_approval(
    stage: dict[str, Any], size: StageSize, expected: int
) -> None:
    ps = make_ps({**make_stage("s"), **stage})
    assert active_deadline_seconds(ps, contract_of(ps, {"s": size}), SETTINGS) == expected


def test_node_estimate_grows_two_per_cluster() -> None:
    ps = make_ps(make_stage("s"))
    assert (
        estimate_nodes(ps, contract_of(ps, {"s": StageSize(11, 1)}))
        - estimate_nodes(ps, contract_of(ps, {"s": StageSize(10, 1)}))
        == 2
    )


def test_a_stage_that_runs_all_its_clusters_at_once_keeps_the_plain_clusters_node() -> None:
    obj = build(make_ps(make_stage("all")), {"all": StageSize(targets=3, max_parallel=3)})
    assert "annotations" not in templates(obj)["fanout-all"]
