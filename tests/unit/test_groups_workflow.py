"""Independent groups (`spec.groupBy`, docs/groups.md) in the Workflow and the status: the builder's
shape (one DAG per group under a `failFast: false` entrypoint bounded by maxParallelGroups), the
local executor running it (a failed group stops only its own later stages; at most
maxParallelGroups groups at once), and the pure status helpers (group names, each group's phase, a
failed group stage while others run, the end's reason). Pure: builders' plans, the in-memory drive.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.api.groups import (
    describe_groups,
    group_phases,
    spec_stage,
    split_stage_name,
    unfinished_groups,
)
from orchestrator.api.metadata import workflow_name
from orchestrator.api.models import (
    ProgressiveSync,
    ProgressiveSyncStatus,
    RolloutPhase,
    StagePhase,
    StageStatus,
)
from orchestrator.api.rollout_status import close_stage
from orchestrator.argocd.assess import WorkflowOutcome, assess_rollout
from orchestrator.engine.interface import PodLaunch, PodResult, UnsupportedFeature
from orchestrator.engine.supported import check_supported
from orchestrator.ops.actions import groups_touched
from orchestrator.ops.decisions import decide_approve, decide_manual_rollback
from orchestrator.ops.view import OpsRefused, RolloutView, header_rows, render_data, rollout_view
from orchestrator.planning.groups import run_stages, with_run_stages
from orchestrator.planning.planner import StagePlan, StageState, plan_rollout
from orchestrator.watcher.decide import decide
from orchestrator.watcher.decision import CreateWorkflow, UpdateStatus
from tests.support import builders, decide_inputs
from tests.support.builders import (
    make_app,
    make_app_set,
    make_cluster,
    make_gate_node,
    make_ps,
    make_ps_model,
    make_release,
    make_stage,
    make_stage_status,
    make_workflow,
)
from tests.support.engine_driver import Drive, arg, argv_step
from workflow_templates import pieces, validate
from workflow_templates.builder import WorkflowBuildError, assumed_sizes, build_workflow
from workflow_templates.settings import WorkflowSettings

SETTINGS = WorkflowSettings(retry_limit=2, retry_backoff="10s", retry_factor=2, retry_backoff_cap="15s")
STAGES = (make_stage("canary", max_targets=1), make_stage("rest", max_parallel=2))
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _ps(*stages: dict[str, Any], **spec: Any) -> ProgressiveSync:
    return make_ps_model(
        "svc", namespace="ns", uid="u1", app_set="myservice", stages=stages or STAGES, **spec
    )


def _fleet(teams: dict[str, int]) -> list[Any]:
    return [
        make_cluster(f"{team}-{i}", labels={"team": team})
        for team, count in teams.items()
        for i in range(1, count + 1)
    ]


def _workflow(ps: ProgressiveSync, teams: dict[str, int]) -> dict[str, Any]:
    clusters = _fleet(teams)
    plan = plan_rollout(
        ps.spec,
        ps_name=ps.metadata.name,
        appset=make_app_set(),
        clusters=clusters,
        apps=[make_app(cluster=c.name) for c in clusters],
    )
    obj: dict[str, Any] = build_workflow(
        ps, release=make_release("r1", revisions=(("abc",),)), plan=plan, settings=SETTINGS
    ).to_dict()
    library = validate.library_of(t.to_dict() for t in pieces.workflow_templates(SETTINGS))
    assert validate.problems(obj, library=library) == []
    obj["metadata"]["uid"] = "wf-uid"
    return obj


def _templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in obj["spec"]["templates"]}


# --- the builder ------------------------------------------------------------------------------


def test_the_entrypoint_runs_one_dag_per_group_without_fail_fast_bounded_by_max_parallel_groups() -> None:
    obj = _workflow(_ps(groupBy="team", maxParallelGroups=2), {"a": 3, "b": 2, "c": 1})
    templates = _templates(obj)
    entry = templates["rollout"]
    assert entry["parallelism"] == 2
    assert entry["dag"]["failFast"] is False
    assert [(t["name"], t["template"]) for t in entry["dag"]["tasks"]] == [
        ("a", "group-a"),
        ("b", "group-b"),
        ("c", "group-c"),
    ]
    assert all("dependencies" not in t for t in entry["dag"]["tasks"])
    group_a = templates["group-a"]["dag"]["tasks"]
    assert [(t["name"], t.get("dependencies")) for t in group_a] == [
        ("a-canary", None),
        ("a-rest", ["a-canary"]),
    ]
    assert group_a[0]["arguments"]["parameters"] == [{"name": "stage", "value": "a/canary"}]
    # Each group's first stage selects itself; its next one is handed its targets.
    assert next(t["name"] for t in templates["stage-a-canary"]["dag"]["tasks"]) == "select"
    assert templates["fanout-a-rest"]["parallelism"] == 2
    # c has 1 cluster: its rest takes none, and a stage without targets keeps its integer maxParallel.
    assert templates["fanout-c-rest"]["parallelism"] == 2


def test_every_group_stage_is_in_the_contract() -> None:
    obj = _workflow(_ps(groupBy="team"), {"a": 2, "b": 2})
    contract = json.loads(
        next(p["value"] for p in obj["spec"]["arguments"]["parameters"] if p["name"] == "contract")
    )
    assert [(s["name"], s["targets"]) for s in contract["stages"]] == [
        ("a/canary", 1),
        ("a/rest", 1),
        ("b/canary", 1),
        ("b/rest", 1),
    ]
    assert "parallelism" not in _templates(obj)["rollout"]  # no maxParallelGroups: every group at once


def test_group_by_needs_the_fleet_to_render() -> None:
    ps = _ps(groupBy="team")
    with pytest.raises(WorkflowBuildError, match=r"spec.groupBy: .*\(render with --fleet\)"):
        build_workflow(
            ps,
            release=make_release("r1", revisions=(("abc",),)),
            plan=assumed_sizes(ps, 4),
            settings=SETTINGS,
        )


def test_the_local_executor_accepts_only_fail_fast_false() -> None:
    obj = _workflow(_ps(groupBy="team"), {"a": 1, "b": 1})
    check_supported(obj)
    _templates(obj)["rollout"]["dag"]["failFast"] = True
    with pytest.raises(UnsupportedFeature, match="failFast"):
        check_supported(obj)


# --- the local executor -----------------------------------------------------------------------


def _steps(
    targets: dict[str, list[str]], fail: set[str], calls: list[tuple[str, ...]]
) -> Callable[[PodLaunch], PodResult]:
    """select hands out `targets[stage]`; a cluster in `fail` fails, and its stage's closing step then
    exits 1 (no tolerance); record-and-select selects the next stage of the same group."""
    failed: set[str] = set()

    def run(launch: PodLaunch) -> PodResult:
        step = argv_step(launch)
        stage = arg(launch, "--stage") if "--stage" in launch.argv else ""
        if step == "select":
            calls.append(("select", stage))
            return PodResult(0, outputs={"targets": json.dumps(targets[stage])})
        if step == "cluster":
            cluster = arg(launch, "--cluster")
            calls.append(("sync", stage, cluster))
            if cluster in fail:
                failed.add(stage)
                return PodResult(1, summary="cluster Degraded")
            return PodResult(0)
        if step in ("record", "record-and-select"):
            calls.append(("record", stage))
            if stage in failed:
                return PodResult(1, summary="stage failed", outputs={"targets": "[]"})
            if step == "record-and-select":
                following = arg(launch, "--next-stage")
                calls.append(("select", following))
                return PodResult(0, outputs={"targets": json.dumps(targets[following])})
            return PodResult(0)
        if step == "finalize":
            calls.append(("finalize", arg(launch, "--workflow-status")))
        return PodResult(0)

    return run


def _targets(obj: dict[str, Any]) -> dict[str, list[str]]:
    contract = json.loads(
        next(p["value"] for p in obj["spec"]["arguments"]["parameters"] if p["name"] == "contract")
    )
    targets = {}
    for stage in (s["name"] for s in contract["stages"]):
        group, name = split_stage_name(stage)
        targets[stage] = [f"{group}-1"] if name == "canary" else [f"{group}-2", f"{group}-3"]
    return targets


def test_a_failed_group_stops_its_own_later_stages_and_the_others_finish() -> None:
    obj = _workflow(_ps(groupBy="team"), {"a": 3, "b": 3})
    calls: list[tuple[str, ...]] = []
    drive = Drive(obj).step(_steps(_targets(obj), fail={"a-1"}, calls=calls), ticks=2)

    assert drive.status["phase"] == "Failed"
    synced = sorted(c[2] for c in calls if c[0] == "sync")
    assert synced == ["a-1", "b-1", "b-2", "b-3"], "a stops after its canary; b runs every stage"
    [a_rest] = drive.nodes(name="svc-r1.a.a-rest")
    assert (a_rest["type"], a_rest["phase"]) == ("Skipped", "Omitted")
    [group_a] = drive.nodes(name="svc-r1.a")
    [group_b] = drive.nodes(name="svc-r1.b")
    assert (group_a["phase"], group_b["phase"]) == ("Failed", "Succeeded")
    assert calls[-1] == ("finalize", "Failed")


def test_max_parallel_groups_bounds_the_groups_in_flight() -> None:
    obj = _workflow(_ps(groupBy="team", maxParallelGroups=1), {"a": 3, "b": 3})
    calls: list[tuple[str, ...]] = []
    drive = Drive(obj)
    most = 0

    def watch(launch: PodLaunch) -> PodResult:
        nonlocal most
        running = [
            n
            for n in drive.nodes(type="DAG", phase="Running")
            if str(n.get("templateName")).startswith("group-")
        ]
        most = max(most, len(running))
        return step(launch)

    step = _steps(_targets(obj), fail=set(), calls=calls)
    drive.step(watch, ticks=2)
    assert drive.status["phase"] == "Succeeded"
    assert most == 1
    order = [c[2] for c in calls if c[0] == "sync"]
    assert order[:3] == ["a-1", "a-2", "a-3"] or order[:3] == ["a-1", "a-3", "a-2"], order
    assert set(order[3:]) == {"b-1", "b-2", "b-3"}


# --- status -----------------------------------------------------------------------------------


def _stages(**phases: StagePhase) -> list[StageStatus]:
    return [StageStatus(name=name.replace("__", "/"), phase=phase) for name, phase in phases.items()]


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        pytest.param(
            {"a__canary": StagePhase.FAILED, "a__rest": StagePhase.CANCELLED}, StagePhase.FAILED, id="failed"
        ),
        pytest.param(
            {"a__canary": StagePhase.SUCCEEDED, "a__rest": StagePhase.SKIPPED},
            StagePhase.SUCCEEDED,
            id="passed",
        ),
        pytest.param(
            {"a__canary": StagePhase.SUCCEEDED, "a__rest": StagePhase.PENDING},
            StagePhase.PROGRESSING,
            id="on-its-way",
        ),
        pytest.param(
            {"a__canary": StagePhase.PENDING, "a__rest": StagePhase.PENDING}, StagePhase.PENDING, id="pending"
        ),
        pytest.param(
            {"a__canary": StagePhase.SUCCEEDED, "a__rest": StagePhase.CANCELLED},
            StagePhase.CANCELLED,
            id="cancelled",
        ),
    ],
)
def test_a_groups_phase_comes_from_its_stages(phases: dict[str, StagePhase], expected: StagePhase) -> None:
    assert group_phases(_stages(**phases)) == {"a": expected}


def test_stages_of_no_group_have_no_group_phase() -> None:
    assert group_phases(_stages(canary=StagePhase.FAILED)) == {}
    assert describe_groups(_stages(canary=StagePhase.FAILED)) == ""


def test_a_failed_group_stage_leaves_the_rollout_progressing_while_another_group_runs() -> None:
    status = ProgressiveSyncStatus(
        phase=RolloutPhase.PROGRESSING,
        stages=_stages(
            a__canary=StagePhase.PROGRESSING, a__rest=StagePhase.PENDING, b__canary=StagePhase.PROGRESSING
        ),
    )
    close_stage(status, stage="a/canary", phase=StagePhase.FAILED, message="1 of 1 failed", now=NOW)
    assert status.phase is RolloutPhase.PROGRESSING
    assert status.message == "stage 'a/canary' failed: 1 of 1 failed; group a stopped, groups b go on"
    # The last group to fail, with no other group running, fails the rollout as any stage does.
    status.stages[2].phase = StagePhase.SUCCEEDED  # type: ignore[index]
    status.stages[1].phase = StagePhase.CANCELLED  # type: ignore[index]
    close_stage(status, stage="a/canary", phase=StagePhase.FAILED, message="1 of 1 failed", now=NOW)
    assert status.phase is RolloutPhase.FAILED


def test_the_rollouts_failed_end_says_which_group_ended_how() -> None:
    stages = _stages(
        a__canary=StagePhase.FAILED,
        a__rest=StagePhase.CANCELLED,
        b__canary=StagePhase.SUCCEEDED,
        b__rest=StagePhase.SUCCEEDED,
    )
    stages[0].message = "1 of 1 clusters failed"
    phase, reason = assess_rollout("wf", WorkflowOutcome.FAILED, shutdown=None, stages=stages)
    assert phase is RolloutPhase.FAILED
    assert reason == "stage 'a/canary' failed: 1 of 1 clusters failed; groups: a Failed, b Succeeded"


# --- stage names ------------------------------------------------------------------------------


def test_a_group_stage_finds_its_spec_stage_and_only_with_group_by() -> None:
    grouped, plain = _ps(groupBy="team").spec, _ps().spec
    assert spec_stage(grouped, "a/canary") is grouped.stages[0]
    assert spec_stage(grouped, "canary") is None
    assert spec_stage(plain, "a/canary") is None
    assert spec_stage(plain, "rest") is plain.stages[1]
    assert [s.name for s in run_stages(grouped, ["a/canary", "a/rest"])] == ["a/canary", "a/rest"]
    assert split_stage_name("a/rest") == ("a", "rest")


def test_the_run_view_lists_the_group_stages_and_keeps_a_plain_spec_as_it_is() -> None:
    ps = _ps(groupBy="team")
    view = with_run_stages(ps, ["b/canary", "b/rest"])
    assert [s.name for s in view.spec.stages] == ["b/canary", "b/rest"]
    assert view.spec.stages[1].max_parallel == 2
    assert [s.name for s in ps.spec.stages] == ["canary", "rest"]  # the original is left alone
    plain = _ps()
    assert with_run_stages(plain, ["anything"]) is plain


# --- `progressive-sync status` ----------------------------------------------------------------


def _grouped_view() -> RolloutView:
    stages = [
        make_stage_status("a/canary", phase=StagePhase.FAILED, targets=("a-1",), failed={"a-1": "Degraded"}),
        make_stage_status("a/rest", phase=StagePhase.CANCELLED),
        make_stage_status("b/canary", phase=StagePhase.SUCCEEDED, targets=("b-1",), completed=("b-1",)),
        make_stage_status("b/rest", phase=StagePhase.PROGRESSING, targets=("b-2",), syncing=("b-2",)),
    ]
    body = make_ps(stages=list(STAGES), phase="Progressing", stage_status=stages, groupBy="team")
    return rollout_view(ProgressiveSync.model_validate(body))


def test_status_shows_each_groups_phase() -> None:
    view = _grouped_view()
    assert ("groups:", "a Failed, b Progressing") in header_rows(view, NOW)
    data = render_data(view, NOW)
    assert data["groups"] == [
        {"name": "a", "phase": "Failed", "stages": ["a/canary", "a/rest"]},
        {"name": "b", "phase": "Progressing", "stages": ["b/canary", "b/rest"]},
    ]
    assert [s["name"] for s in data["stages"]] == ["a/canary", "a/rest", "b/canary", "b/rest"]


def test_status_without_groups_has_no_groups_line() -> None:
    body = make_ps(stages=list(STAGES), phase="Succeeded", stage_status=[make_stage_status("canary")])
    view = rollout_view(ProgressiveSync.model_validate(body))
    assert all(label != "groups:" for label, _ in header_rows(view, NOW))
    assert "groups" not in render_data(view, NOW)


# --- the watcher ------------------------------------------------------------------------------


def test_the_watcher_lists_every_group_stage_when_it_starts_a_grouped_rollout() -> None:
    spec = builders.make_spec(*STAGES, groupBy="team")
    plan = decide_inputs.make_plan()
    plan = dataclasses.replace(
        plan,
        stages=tuple(
            StagePlan(
                name=f"{group}/{stage}",
                state=StageState.PLANNED,
                reason="",
                targets=(f"{group}-1",),
                group=group,
            )
            for group in ("a", "b")
            for stage in ("canary", "rest")
        ),
        group_by="team",
        groups={"a": ("a-1",), "b": ("b-1",)},
    )
    decision = decide(decide_inputs.observed(spec=spec, plan=plan), decide_inputs.POLICY)
    [update] = decide_inputs.actions_of(decision, UpdateStatus)
    assert update.patch.stage_names == ("a/canary", "a/rest", "b/canary", "b/rest")
    [create] = decide_inputs.actions_of(decision, CreateWorkflow)
    assert create.ps.spec.group_by == "team"


# --- approve ----------------------------------------------------------------------------------

WF = workflow_name(builders.PS_NAME, builders.ROLLOUT_ID)
GATED = (make_stage("canary", max_targets=1), make_stage("prod", approval="Manual"))


def _gated_ps() -> ProgressiveSync:
    return ProgressiveSync.model_validate(make_ps(stages=list(GATED), phase="Progressing", groupBy="team"))


def test_each_group_has_its_own_gate_and_approve_opens_the_one_named() -> None:
    workflow = make_workflow(nodes=[make_gate_node(WF, "a/prod"), make_gate_node(WF, "b/prod")])
    assert decide_approve(_gated_ps(), workflow, "b/prod").stage == "b/prod"
    with pytest.raises(OpsRefused, match=r"several approval gates .*'a/prod', 'b/prod'.*--stage"):
        decide_approve(_gated_ps(), workflow, None)


@pytest.mark.parametrize(
    ("stage", "says"),
    [
        pytest.param("prod", "has no stage 'prod'", id="a-stage-without-its-group"),
        pytest.param("a/canary", "has no manual approval gate", id="a-group-stage-without-a-gate"),
        pytest.param("c/prod", "no approval gate of stage 'c/prod'", id="a-group-whose-gate-does-not-wait"),
    ],
)
def test_approve_refuses_a_group_stage_it_cannot_open(stage: str, says: str) -> None:
    workflow = make_workflow(nodes=[make_gate_node(WF, "a/prod")])
    with pytest.raises(OpsRefused, match=says):
        decide_approve(_gated_ps(), workflow, stage)


def test_a_rollback_by_hand_is_allowed_for_a_grouped_rollout() -> None:
    """Groups and rollback work together (docs/groups.md, "Groups and rollback")."""
    ps = ProgressiveSync.model_validate(make_ps(stages=list(GATED), phase="Failed", groupBy="team"))
    assert decide_manual_rollback(ps, None).id == builders.ROLLOUT_ID


def test_cancel_and_pause_touch_the_groups_not_ended_yet() -> None:
    stages = [
        make_stage_status("a/canary", phase=StagePhase.FAILED),
        make_stage_status("a/rest", phase=StagePhase.PENDING),
        make_stage_status("b/canary", phase=StagePhase.PROGRESSING),
        make_stage_status("b/rest", phase=StagePhase.PENDING),
        make_stage_status("c/canary", phase=StagePhase.PENDING),
        make_stage_status("c/rest", phase=StagePhase.PENDING),
    ]
    assert unfinished_groups(stages) == ["b", "c"]
    grouped = ProgressiveSync.model_validate(
        make_ps(stages=list(STAGES), phase="Progressing", stage_status=stages, groupBy="team")
    )
    assert groups_touched(grouped) == ["b", "c"]
    plain = ProgressiveSync.model_validate(make_ps(stages=list(STAGES), phase="Progressing"))
    assert groups_touched(plain) is None


# --- groups and dependencies (docs/groups.md, docs/depends-on.md) ------------------------------


def _contract(obj: dict[str, Any]) -> dict[str, Any]:
    value = next(p["value"] for p in obj["spec"]["arguments"]["parameters"] if p["name"] == "contract")
    contract: dict[str, Any] = json.loads(value)
    return contract


def _task_names(obj: dict[str, Any], template: str) -> list[str]:
    return [t["name"] for t in _templates(obj)[template]["dag"]["tasks"]]


@pytest.mark.parametrize(
    ("before_stage", "waiting"),
    [
        pytest.param(None, ["a/canary", "b/canary"], id="each-groups-first-stage-waits"),
        pytest.param("rest", ["a/rest", "b/rest"], id="each-groups-before-stage-waits"),
    ],
)
def test_each_group_stage_that_waits_has_its_own_wait_node(
    before_stage: str | None, waiting: list[str]
) -> None:
    dependency = {"name": "payments", "stage": "canary", "timeoutSeconds": 900}
    if before_stage:
        dependency["beforeStage"] = before_stage
    obj = _workflow(_ps(groupBy="team", dependsOn=[dependency]), {"a": 3, "b": 3})
    assert _contract(obj)["dependsOn"] == [
        {"name": "payments", "stage": "canary", "beforeStage": stage, "timeoutSeconds": 900}
        for stage in waiting
    ]
    for stage in ("a/canary", "a/rest", "b/canary", "b/rest"):
        tasks = _task_names(obj, "stage-" + stage.replace("/", "-"))
        if stage in waiting:
            # the wait first, then the stage selects its own clusters once the dependency passed
            assert tasks[:2] == ["wait-for-dependencies", "select"], stage
        else:
            assert "wait-for-dependencies" not in tasks, stage
    described = obj["metadata"]["annotations"]["workflows.argoproj.io/description"]
    assert described.count("waits until payments passes canary.") == 1
    assert f"{before_stage or 'canary'} of each group waits until payments passes canary." in described


def test_each_group_budgets_its_own_wait_in_the_deadline_and_the_node_count() -> None:
    clusters = {"a": 3, "b": 3}
    plain = _workflow(_ps(groupBy="team"), clusters)
    waiting = _workflow(
        _ps(groupBy="team", dependsOn=[{"name": "payments", "timeoutSeconds": 900}]), clusters
    )
    step = SETTINGS.step_budget_seconds
    added = waiting["spec"]["activeDeadlineSeconds"] - plain["spec"]["activeDeadlineSeconds"]
    assert added == pytest.approx(2 * (step + 900) * SETTINGS.deadline_factor, abs=2)


def test_without_group_by_the_contract_has_one_entry_per_dependency() -> None:
    obj = _workflow(_ps(dependsOn=[{"name": "payments", "stage": "canary"}]), {"a": 3})
    assert _contract(obj)["dependsOn"] == [
        {"name": "payments", "stage": "canary", "beforeStage": "canary", "timeoutSeconds": 3600}
    ]
    assert (
        "canary waits until payments passes canary."
        in (obj["metadata"]["annotations"]["workflows.argoproj.io/description"])
    )
