"""The rollout follower's decisions (orchestrator.planning.follow): which stage it follows, when it
waits and when it stops; which Workflows run it (workflow_templates.builder.runs_follower); and the
setting that turns it off."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.api.analysis import AnalysisTemplateRef, StageAnalysis
from orchestrator.api.models import ProgressiveSync
from orchestrator.api.phases import RolloutPhase, StagePhase
from orchestrator.planning.contract import RolloutContract, StageContract
from orchestrator.planning.follow import LookPace, follow_refusal, followed, next_move
from tests.support.builders import make_release, make_stage
from workflow_templates import names
from workflow_templates.builder import assumed_sizes, build_workflow
from workflow_templates.settings import WorkflowSettings

P, G, OK, F, K = (
    StagePhase.PENDING,
    StagePhase.PROGRESSING,
    StagePhase.SUCCEEDED,
    StagePhase.FAILED,
    StagePhase.SKIPPED,
)
GATE = StageAnalysis(templates=(AnalysisTemplateRef(name="success-rate"),))


def contract(*stages: StageContract) -> RolloutContract:
    return RolloutContract(rollout_id="r1", release=(("abc",),), stages=stages)


CANARY = StageContract(name="canary", targets=1, max_parallel=1)
REST = StageContract(name="rest", targets=6, max_parallel=2)
BATCHED = StageContract(name="rest", targets=600, max_parallel=20, batches=4)
PER_CLUSTER = StageContract(
    name="rest", targets=6, max_parallel=2, analysis=GATE.model_copy(update={"per_cluster": True})
)


@pytest.mark.parametrize(
    ("stages", "on_rollout", "phase", "phases", "expected"),
    [
        pytest.param((CANARY, REST), True, None, {}, ("", "", "no stage"), id="nothing-selected-yet-waits"),
        pytest.param(
            (CANARY, REST),
            True,
            RolloutPhase.PROGRESSING,
            {"canary": G},
            ("canary", "", ""),
            id="follows-canary",
        ),
        pytest.param(
            (CANARY, REST),
            True,
            RolloutPhase.PROGRESSING,
            {"canary": OK, "rest": G},
            ("rest", "", ""),
            id="follows-the-next-stage",
        ),
        pytest.param(
            (CANARY, REST),
            True,
            RolloutPhase.PROGRESSING,
            {"canary": OK, "rest": P},
            ("", "", "no stage"),
            id="a-gate-or-bake-between-waits",
        ),
        pytest.param(
            (CANARY, REST),
            True,
            RolloutPhase.PROGRESSING,
            {"canary": OK, "rest": OK},
            ("", "every stage is closed", ""),
            id="every-stage-closed-stops",
        ),
        pytest.param(
            (CANARY, REST),
            True,
            RolloutPhase.PROGRESSING,
            {"canary": OK, "rest": K},
            ("", "every stage is closed", ""),
            id="a-skipped-stage-is-closed",
        ),
        pytest.param(
            (CANARY, REST),
            True,
            RolloutPhase.PROGRESSING,
            {"canary": F},
            ("", "stage 'canary' failed", ""),
            id="a-failed-stage-stops",
        ),
        pytest.param(
            (CANARY, REST),
            True,
            RolloutPhase.CANCELLED,
            {"canary": G},
            ("", "ended Cancelled", ""),
            id="ended",
        ),
        pytest.param(
            (CANARY, REST),
            False,
            RolloutPhase.PROGRESSING,
            {"canary": G},
            ("", "superseded", ""),
            id="superseded",
        ),
        pytest.param(
            (CANARY, BATCHED),
            True,
            RolloutPhase.PROGRESSING,
            {"canary": OK, "rest": G},
            ("", "", "runs in batches"),
            id="a-stage-in-batches-is-left-to-its-pods",
        ),
        pytest.param(
            (CANARY, PER_CLUSTER),
            True,
            RolloutPhase.PROGRESSING,
            {"canary": OK, "rest": G},
            ("", "", "analyzed after it is done"),
            id="per-cluster-analysis-is-left-to-its-pods",
        ),
    ],
)
def test_next_move(
    stages: tuple[StageContract, ...],
    on_rollout: bool,
    phase: RolloutPhase | None,
    phases: dict[str, StagePhase],
    expected: tuple[str, str, str],
) -> None:
    move = next_move(contract(*stages), on_rollout=on_rollout, rollout_phase=phase, stage_phases=phases)
    stage, stop, wait = expected
    assert move.stage == stage
    assert (stop in move.stop) if stop else move.stop == ""
    assert (wait in move.wait) if wait else move.wait == ""


def test_followed_needs_one_stage_it_follows() -> None:
    assert followed(contract(CANARY, BATCHED))
    assert not followed(contract(BATCHED))
    assert not followed(contract(PER_CLUSTER))
    assert follow_refusal(REST) == ""
    # A stage-level gate after the clusters: the follower records and hands off; the close waits for
    # the gate (steps.chain.close_early refuses it).
    assert follow_refusal(StageContract(name="s", targets=5, max_parallel=2, analysis=GATE)) == ""


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("false", False, id="false"),
        pytest.param("False", False, id="any-case"),
        pytest.param("0", False, id="zero"),
        pytest.param("true", True, id="true"),
        pytest.param(" on ", True, id="on-with-spaces"),
    ],
)
def test_the_follower_setting_from_the_environment(raw: str, expected: bool) -> None:
    settings = WorkflowSettings.from_environment({"PROGRESSIVE_SYNC_WORKFLOW_FOLLOWER": raw})
    assert settings.follower is expected


def test_a_follower_setting_that_is_not_a_boolean_names_the_variable() -> None:
    with pytest.raises(
        ValueError, match="PROGRESSIVE_SYNC_WORKFLOW_FOLLOWER='maybe': expected true or false"
    ):
        WorkflowSettings.from_environment({"PROGRESSIVE_SYNC_WORKFLOW_FOLLOWER": "maybe"})


def _entry_tasks(spec: dict[str, object], settings: WorkflowSettings) -> list[str]:
    ps = ProgressiveSync.model_validate(
        {"metadata": {"name": "svc", "namespace": "rollouts"}, "spec": {"appSetRef": {"name": "svc"}, **spec}}
    )
    workflow = build_workflow(
        ps, release=make_release("r1", revisions=(("abc",),)), plan=assumed_sizes(ps, 3), settings=settings
    ).to_dict()
    [entry] = [t for t in workflow["spec"]["templates"] if t["name"] == names.ENTRYPOINT]
    templates = {t["name"] for t in workflow["spec"]["templates"]}
    tasks = [task["name"] for task in entry["dag"]["tasks"]]
    assert (names.FOLLOW_TEMPLATE in templates) == (names.FOLLOW_TASK in tasks)
    return tasks


@pytest.mark.parametrize(
    ("spec", "settings", "runs"),
    [
        pytest.param({"stages": [make_stage("all")]}, WorkflowSettings(), True, id="on-by-default"),
        pytest.param(
            {"stages": [make_stage("all")]}, WorkflowSettings(follower=False), False, id="turned-off"
        ),
        pytest.param(
            {"stages": [make_stage("all")]},
            WorkflowSettings(batch_threshold=0),
            False,
            id="not-when-every-stage-runs-in-batches",
        ),
    ],
)
# With spec.groupBy the entrypoint runs groups, and no follower: tests/unit/test_groups_workflow.py
# asserts its tasks are the groups'.
def test_which_workflows_run_the_follower(
    spec: dict[str, object], settings: WorkflowSettings, runs: bool
) -> None:
    tasks = _entry_tasks(spec, settings)
    assert (names.FOLLOW_TASK in tasks) == runs, tasks


def test_no_stage_task_takes_the_followers_name() -> None:
    tasks = _entry_tasks({"stages": [make_stage("follow"), make_stage("rest")]}, WorkflowSettings())
    assert tasks == ["follow-2", "rest", names.FOLLOW_TASK]


# --- when the follower looks again (LookPace) ---------------------------------------------------

T0 = datetime(2026, 12, 7, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("snapshots", "looks"),
    [
        pytest.param([(1, False, False), (2, False, False), (5, False, False)], [5], id="quiet-every-5s"),
        pytest.param([(0.3, False, True), (1, False, False)], [1], id="a-change-within-1s"),
        pytest.param(
            [(0.3, False, True), (0.6, False, True), (0.9, False, True)], [], id="never-twice-a-second"
        ),
        pytest.param([(0.2, True, False), (0.4, True, False)], [0.2, 0.4], id="after-acting-at-once"),
        pytest.param(
            [(1.5, False, True), (2, False, False), (6.5, False, False)],
            [1.5, 6.5],
            id="pace-counts-from-a-look",
        ),
    ],
)
def test_when_the_follower_looks_again(snapshots: list[tuple[float, bool, bool]], looks: list[float]) -> None:
    pace = LookPace(1.0, 5.0, looked=T0)
    seen = [when for when, acted, changed in snapshots if pace.due(at(when), acted=acted, changed=changed)]
    assert seen == looks


@pytest.mark.parametrize(
    ("changed", "since", "other", "expected"),
    [
        pytest.param(False, 0.0, math.inf, 5, id="quiet-until-the-next-quiet-look"),
        pytest.param(False, 3.2, math.inf, 2, id="quiet-rest-rounded-up"),
        pytest.param(True, 0.2, math.inf, 1, id="changed-until-the-look"),
        pytest.param(False, 0.0, 2.5, 3, id="a-refresh-due-sooner"),
        pytest.param(False, 9.0, math.inf, 1, id="overdue-at-least-one-second"),
    ],
)
def test_the_watch_window_ends_when_the_next_look_is_due(
    changed: bool, since: float, other: float, expected: int
) -> None:
    pace = LookPace(1.0, 5.0, looked=T0, changed=changed)
    assert pace.window(at(since), other_due_seconds=other) == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.05, 3.0), st.booleans(), st.booleans()),
        min_size=1,
        max_size=60,
    )
)
def test_the_follower_looks_within_a_second_of_a_change_and_every_five_seconds_and_never_more_unless_it_acted(
    steps: list[tuple[float, bool, bool]],
) -> None:
    """Snapshots come at most a window apart (the window the pace asks for): then a change is
    looked at within look_seconds of the first snapshot that brought it, plus at most a second (the
    watch's timeoutSeconds is whole seconds), no two looks are less than look_seconds apart unless
    the second followed an action, and no quiet stretch goes past quiet_seconds (plus that second)
    without a look."""
    pace = LookPace(1.0, 5.0, looked=T0)
    now, last_look = 0.0, 0.0
    unseen_since: float | None = None
    for gap, acted, changed in steps:
        now += min(gap, pace.window(at(now)))  # a snapshot never comes later than the window
        was_changed = pace.changed or changed
        if pace.due(at(now), acted=acted, changed=changed):
            assert acted or now - last_look >= 1.0 - 1e-9
            assert now - last_look < 5.0 + 1.0  # the quiet look, late by the window's rounding at most
            if unseen_since is not None:
                assert now - unseen_since < 1.0 + 1.0  # late by the window's rounding at most
            last_look, unseen_since = now, None
        elif was_changed and unseen_since is None:
            unseen_since = now
