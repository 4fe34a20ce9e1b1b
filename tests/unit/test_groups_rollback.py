"""spec.groupBy with spec.rollback (docs/groups.md and docs/rollback.md, "Groups and rollback"): which
groups and clusters a rollout's end rolls back for each outcome and scope (`plan_group_rollback`),
which ones `progressive-sync rollback` picks (`manual_group_targets`, `--group`), the exit handler's
shape (one chain per group, side by side, bounded by maxParallelGroups) and what `status` says of
each group. Pure: no cluster."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api.models import ProgressiveSync, RollbackSpec, RollbackStatus, StagePhase
from orchestrator.api.rollback import describe_rollback
from orchestrator.api.stage_records import (
    ClusterRecord,
    ClusterRollback,
    ClusterState,
    RollbackState,
    StageOutcomes,
)
from orchestrator.ops.decisions import decide_rollback_groups
from orchestrator.ops.view import OpsRefused, header_rows, render_data, rollout_view
from orchestrator.planning.planner import plan_rollout
from orchestrator.planning.rollback import (
    ANALYSIS_FAILED,
    CANCELLED,
    DEADLINE_EXCEEDED,
    FAILED_STAGE_SCOPE,
    MANUAL,
    REACHED_SCOPE,
    STAGE_FAILED,
    StageView,
    manual_group_targets,
    plan_group_rollback,
    rollback_end,
)
from tests.support.builders import (
    make_app,
    make_app_set,
    make_cluster,
    make_ps,
    make_ps_model,
    make_release,
    make_stage,
    make_stage_status,
)
from workflow_templates import pieces, validate
from workflow_templates.builder import build_workflow
from workflow_templates.settings import WorkflowSettings

S, F, P, G = StagePhase.SUCCEEDED, StagePhase.FAILED, StagePhase.PROGRESSING, StagePhase.PENDING
ALL = (STAGE_FAILED, ANALYSIS_FAILED, DEADLINE_EXCEEDED, CANCELLED)


def views(**groups: tuple[StagePhase, StagePhase]) -> list[StageView]:
    """Two stages (canary, rest) per group, groups in the order given."""
    return [
        StageView(f"{group}/{stage}", phase)
        for group, phases in groups.items()
        for stage, phase in zip(("canary", "rest"), phases, strict=True)
    ]


def records(stages: list[StageView], **clusters: tuple[str, ...]) -> dict[int, StageOutcomes]:
    """Each stage's records by index: `clusters` by stage name with "/" as "__"."""
    found: dict[int, StageOutcomes] = {}
    for index, stage in enumerate(stages):
        names = clusters.get(stage.name.replace("/", "__"), ())
        if names:
            found[index] = StageOutcomes(
                stage=stage.name,
                targets=names,
                clusters={name: ClusterRecord(state=ClusterState.COMPLETED) for name in names},
            )
    return found


A_FAILED = views(a=(S, F), b=(S, S))
A_FAILED_RECORDS = records(
    A_FAILED, a__canary=("a1",), a__rest=("a2", "a3"), b__canary=("b1",), b__rest=("b2",)
)


@pytest.mark.parametrize(
    ("stages", "kwargs", "scope", "on", "expected"),
    [
        pytest.param(
            A_FAILED,
            {},
            FAILED_STAGE_SCOPE,
            ALL,
            {"a/rest": ("a2", "a3")},
            id="failed-group-its-failed-stage",
        ),
        pytest.param(
            A_FAILED,
            {},
            REACHED_SCOPE,
            ALL,
            {"a/rest": ("a2", "a3"), "a/canary": ("a1",)},
            id="reached-the-failed-group-later-first-the-succeeded-group-keeps-it",
        ),
        pytest.param(A_FAILED, {}, REACHED_SCOPE, (CANCELLED,), {}, id="on-does-not-list-stage-failed"),
        pytest.param(
            views(a=(F, G), b=(S, P)),
            {"stopped": True},
            REACHED_SCOPE,
            ALL,
            {"a/canary": ("a1",), "b/rest": ("b2",), "b/canary": ("b1",)},
            id="cancelled-the-failed-group-by-its-failure-the-running-one-by-the-cancel",
        ),
        pytest.param(
            views(a=(F, G), b=(S, P)),
            {"stopped": True},
            REACHED_SCOPE,
            (CANCELLED,),
            {"b/rest": ("b2",), "b/canary": ("b1",)},
            id="cancelled-only-listed-the-failed-group-is-left",
        ),
        pytest.param(
            views(a=(S, S), b=(S, P)),
            {"deadline_passed": True},
            FAILED_STAGE_SCOPE,
            ALL,
            {"b/rest": ("b2",)},
            id="deadline-the-group-that-succeeded-keeps-it",
        ),
        pytest.param(
            views(a=(S, P), b=(S, P)),
            {"stopped": True, "stopped_by_watcher": "a newer release"},
            REACHED_SCOPE,
            ALL,
            {},
            id="the-watcher-stopped-it-no-group-rolls-back",
        ),
        pytest.param(views(a=(S, P), b=(S, S)), {}, REACHED_SCOPE, ALL, {}, id="a-step-error-is-no-trigger"),
        pytest.param(views(a=(S, S), b=(S, S)), {}, REACHED_SCOPE, ALL, {}, id="every-group-succeeded"),
    ],
)
def test_plan_group_rollback(
    stages: list[StageView],
    kwargs: dict[str, Any],
    scope: str,
    on: tuple[str, ...],
    expected: dict[str, tuple[str, ...]],
) -> None:
    recorded = records(
        stages,
        a__canary=("a1",),
        a__rest=("a2", "a3") if stages[1].phase != G else (),
        b__canary=("b1",),
        b__rest=("b2",),
    )
    targets = plan_group_rollback(
        stages,
        on=on,
        scope=scope,
        outcomes=recorded,
        **{"stopped": False, "deadline_passed": False, **kwargs},
    )
    got = {stages[index].name: targets.clusters[index] for index in targets.stages}
    assert got == expected
    assert list(got) == list(expected)  # group after group, each later stages first
    rolling = {name.split("/")[0] for name in expected}
    assert {g.name for g in targets.groups if g.rolls_back} == rolling
    assert targets.total == sum(len(names) for names in expected.values())


def test_the_why_names_each_group_rolled_back_and_left() -> None:
    targets = plan_group_rollback(
        A_FAILED,
        on=ALL,
        scope=FAILED_STAGE_SCOPE,
        stopped=False,
        deadline_passed=False,
        outcomes=A_FAILED_RECORDS,
    )
    assert targets.trigger.reason == STAGE_FAILED
    assert targets.why == (
        "groups: a rolling back (stage 'a/rest' failed (StageFailed): 2 cluster(s)), "
        "b left (it succeeded: it keeps the release): "
        "rolling back 2 cluster(s) of group(s) a, scope FailedStage"
    )
    [a, b] = [group.to_status() for group in targets.groups]
    assert (a.name, a.trigger, a.rolled_back, a.targets) == ("a", STAGE_FAILED, True, 2)
    assert (b.name, b.trigger, b.rolled_back, b.targets) == ("b", "", False, 0)


def test_two_groups_with_different_outcomes_name_both_triggers() -> None:
    stages = views(a=(F, G), b=(S, P))
    targets = plan_group_rollback(
        stages,
        on=ALL,
        scope=FAILED_STAGE_SCOPE,
        stopped=True,
        deadline_passed=False,
        outcomes=records(stages, a__canary=("a1",), b__canary=("b1",), b__rest=("b2",)),
    )
    assert targets.trigger.reason == "StageFailed, Cancelled"


def test_analysis_failed_is_the_group_s_own_trigger() -> None:
    stages = [
        StageView("a/canary", F, "Failed"),
        StageView("a/rest", G),
        StageView("b/canary", S),
        StageView("b/rest", S),
    ]
    targets = plan_group_rollback(
        stages,
        on=(ANALYSIS_FAILED,),
        scope=FAILED_STAGE_SCOPE,
        stopped=False,
        deadline_passed=False,
        outcomes=records(stages, a__canary=("a1",), b__canary=("b1",)),
    )
    assert [stages[i].name for i in targets.stages] == ["a/canary"]
    assert targets.groups[0].trigger.reason == ANALYSIS_FAILED


@given(
    phases=st.lists(
        st.tuples(st.sampled_from([S, F, P, G]), st.sampled_from([S, F, P, G])), min_size=1, max_size=4
    ),
    stopped=st.booleans(),
    deadline=st.booleans(),
    scope=st.sampled_from([FAILED_STAGE_SCOPE, REACHED_SCOPE]),
)
def test_a_group_that_succeeded_is_never_rolled_back_and_no_cluster_twice(
    phases: list[tuple[StagePhase, StagePhase]], stopped: bool, deadline: bool, scope: str
) -> None:
    groups = {f"g{i}": pair for i, pair in enumerate(phases)}
    stages = views(**groups)
    recorded = records(
        stages, **{f"g{i}__{s}": (f"g{i}-{s}",) for i in range(len(phases)) for s in ("canary", "rest")}
    )
    targets = plan_group_rollback(
        stages, on=ALL, scope=scope, stopped=stopped, deadline_passed=deadline, outcomes=recorded
    )
    clusters = [name for index in targets.stages for name in targets.clusters[index]]
    assert len(clusters) == len(set(clusters))
    for group in targets.groups:
        if group.phase == StagePhase.SUCCEEDED:
            assert not group.rolls_back
    # A group's clusters only come from its own stages.
    for index in targets.stages:
        assert all(
            name.startswith(stages[index].name.split("/")[0] + "-") for name in targets.clusters[index]
        )


# --- by hand -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stages", "groups", "expected"),
    [
        pytest.param(A_FAILED, (), {"a/rest": ("a2", "a3")}, id="default-the-groups-that-did-not-succeed"),
        pytest.param(
            views(a=(S, S), b=(S, S)),
            (),
            {"a/rest": ("a2", "a3"), "b/rest": ("b2",)},
            id="default-every-group-when-all-succeeded",
        ),
        pytest.param(A_FAILED, ("b",), {"b/rest": ("b2",)}, id="group-picks-a-succeeded-group"),
        pytest.param(A_FAILED, ("a", "b"), {"a/rest": ("a2", "a3"), "b/rest": ("b2",)}, id="two-groups"),
    ],
)
def test_manual_group_targets(
    stages: list[StageView], groups: tuple[str, ...], expected: dict[str, tuple[str, ...]]
) -> None:
    recorded = records(stages, a__canary=("a1",), a__rest=("a2", "a3"), b__canary=("b1",), b__rest=("b2",))
    targets = manual_group_targets(stages, scope=FAILED_STAGE_SCOPE, outcomes=recorded, groups=groups)
    assert {stages[index].name: targets.clusters[index] for index in targets.stages} == expected
    assert targets.trigger.reason == MANUAL


def _grouped_ps(**spec: Any) -> ProgressiveSync:
    stages = [
        make_stage_status("eu/canary", phase=F),
        make_stage_status("eu/rest", phase=StagePhase.CANCELLED),
        make_stage_status("us/canary", phase=S),
        make_stage_status("us/rest", phase=S),
    ]
    return ProgressiveSync.model_validate(
        make_ps(
            stages=[make_stage("canary"), make_stage("rest")], phase="Failed", stage_status=stages, **spec
        )
    )


@pytest.mark.parametrize(
    ("spec", "groups", "says"),
    [
        pytest.param(
            {"groupBy": "region"}, ("ap",), r"has no group ap \(its groups: eu, us\)", id="unknown-group"
        ),
        pytest.param(
            {}, ("eu",), r"--group: .* has no groups \(spec.groupBy is not set\)", id="without-group-by"
        ),
    ],
)
def test_rollback_by_hand_refuses_a_group_it_cannot_pick(
    spec: dict[str, Any], groups: tuple[str, ...], says: str
) -> None:
    with pytest.raises(OpsRefused, match=says) as refused:
        decide_rollback_groups(_grouped_ps(**spec), groups)
    assert refused.value.exit_code == 2


def test_rollback_by_hand_takes_the_groups_named_once() -> None:
    assert decide_rollback_groups(_grouped_ps(groupBy="region"), ("us", "eu", "us")) == ["us", "eu"]
    assert decide_rollback_groups(_grouped_ps(groupBy="region"), ()) == []


# --- the status ------------------------------------------------------------------------------------


def _rolled_back(*, finished: bool) -> RollbackStatus:
    targets = plan_group_rollback(
        A_FAILED,
        on=ALL,
        scope=FAILED_STAGE_SCOPE,
        stopped=False,
        deadline_passed=False,
        outcomes=A_FAILED_RECORDS,
    )
    status = RollbackStatus(
        trigger=targets.trigger.reason,
        scope=FAILED_STAGE_SCOPE,
        stages=["a/rest"],
        targets=targets.total,
        groups=[group.to_status() for group in targets.groups],
        started_at=_now(),
    )
    if finished:
        done = ClusterRollback(state=RollbackState.ROLLED_BACK, reason="back")
        outcomes = {
            1: StageOutcomes(
                stage="a/rest",
                targets=("a2", "a3"),
                clusters={
                    n: ClusterRecord(state=ClusterState.COMPLETED, rollback=done) for n in ("a2", "a3")
                },
            )
        }
        _, message, _ = rollback_end(
            status, ["a/canary", "a/rest", "b/canary", "b/rest"], outcomes, reason="r", now=_now()
        )
        assert message == "r; rolled back (2 cluster(s) restored; groups rolled back: a; groups left: b)"
    return status


def _now() -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("finished", "line", "states"),
    [
        pytest.param(
            False, "a Failed (RollingBack), b Succeeded (Left)", ["RollingBack", "Left"], id="running"
        ),
        pytest.param(True, "a Failed (RolledBack), b Succeeded (Left)", ["RolledBack", "Left"], id="ended"),
    ],
)
def test_status_names_the_groups_rolled_back_and_left(finished: bool, line: str, states: list[str]) -> None:
    stages = [
        make_stage_status("a/canary", phase=S),
        make_stage_status("a/rest", phase=F),
        make_stage_status("b/canary", phase=S),
        make_stage_status("b/rest", phase=S),
    ]
    rollback = _rolled_back(finished=finished)
    ps = ProgressiveSync.model_validate(
        make_ps(
            stages=[make_stage("canary"), make_stage("rest")],
            phase="RollingBack",
            stage_status=stages,
            status_extra={"rollback": rollback.model_dump(by_alias=True, exclude_none=True, mode="json")},
            groupBy="team",
        )
    )
    view = rollout_view(ps)
    assert dict(header_rows(view, _now()))["groups:"] == line
    data = render_data(view, _now())
    assert [group["rollback"] for group in data["groups"]] == states


# --- the Workflow ------------------------------------------------------------------------------------

SETTINGS = WorkflowSettings()


def _workflow(**spec: Any) -> dict[str, Any]:
    ps = make_ps_model(
        "svc",
        namespace="ns",
        uid="u1",
        app_set="myservice",
        stages=(make_stage("canary", max_targets=1), make_stage("rest", max_parallel=2)),
        rollback={"on": ["StageFailed"], "scope": "Reached"},
        **spec,
    )
    clusters = [make_cluster(f"{t}-{i}", labels={"team": t}) for t in ("a", "b", "c") for i in (1, 2, 3)]
    plan = plan_rollout(
        ps.spec,
        ps_name="svc",
        appset=make_app_set(),
        clusters=clusters,
        apps=[make_app(cluster=c.name) for c in clusters],
    )
    obj: dict[str, Any] = build_workflow(
        ps, release=make_release("r1", revisions=(("abc",),)), plan=plan, settings=SETTINGS
    ).to_dict()
    library = validate.library_of(t.to_dict() for t in pieces.workflow_templates(SETTINGS))
    assert validate.problems(obj, library=library) == []
    return obj


def test_the_exit_handler_rolls_each_group_back_in_its_own_chain_at_most_max_parallel_groups_at_once() -> (
    None
):
    """Three groups, maxParallelGroups 2: groups a and b start after rollback-plan, c after a (its
    lane), with no Argo `parallelism` in the exit handler (it crashes Argo v3.7's controller)."""
    obj = _workflow(groupBy="team", maxParallelGroups=2)
    templates = {t["name"]: t for t in obj["spec"]["templates"]}
    assert obj["spec"]["onExit"] == "exit"
    exit_dag = templates["exit"]
    assert "parallelism" not in exit_dag
    tasks = [(t["name"], t.get("dependencies")) for t in exit_dag["dag"]["tasks"]]
    assert tasks == [
        ("rollback-plan", None),
        ("rollback-a-rest", ["rollback-plan"]),
        ("rollback-a-canary", ["rollback-a-rest"]),
        ("rollback-b-rest", ["rollback-plan"]),
        ("rollback-b-canary", ["rollback-b-rest"]),
        ("rollback-c-rest", ["rollback-a-canary"]),
        ("rollback-c-canary", ["rollback-c-rest"]),
        ("finalize", ["rollback-c-canary", "rollback-b-canary"]),
    ]
    by_name = {t["name"]: t for t in exit_dag["dag"]["tasks"]}
    assert {p["name"]: p["value"] for p in by_name["rollback-b-rest"]["arguments"]["parameters"]} == {
        "stage": "b/rest",
        "targets": "{{tasks.rollback-plan.outputs.parameters.rollback-3}}",
        "batches": "{{tasks.rollback-plan.outputs.parameters.rollback-batches-3}}",
    }


def test_without_max_parallel_groups_every_group_rolls_back_at_once() -> None:
    exit_dag = next(t for t in _workflow(groupBy="team")["spec"]["templates"] if t["name"] == "exit")
    assert "parallelism" not in exit_dag
    firsts = [t["name"] for t in exit_dag["dag"]["tasks"] if t.get("dependencies") == ["rollback-plan"]]
    assert firsts == ["rollback-a-rest", "rollback-b-rest", "rollback-c-rest"]


@pytest.mark.parametrize(
    ("scope", "says"),
    [
        pytest.param(
            "Reached", "scope Reached per group (each group's later stages first; a group", id="reached"
        ),
        pytest.param(
            "FailedStage", "scope FailedStage per group (each group's failed stage; a group", id="failed"
        ),
    ],
)
def test_validate_says_the_rollback_is_per_group(scope: str, says: str) -> None:
    rollback = RollbackSpec.model_validate({"on": ["StageFailed"], "scope": scope})
    assert says in describe_rollback(rollback, "1 at a time per stage", grouped=True)
    assert "per group" not in describe_rollback(rollback, "1 at a time per stage")
