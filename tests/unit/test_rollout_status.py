"""The pure status mutations of `orchestrator.api.rollout_status`: end results, safe to re-apply."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api import rollout_status as rs
from orchestrator.api.models import (
    REASON_MAX_CHARS,
    STATUS_LIST_CAP,
    ConditionStatus,
    MoreClusters,
    ProgressiveSyncStatus,
    RolloutPhase,
    RolloutStatus,
    StageCounts,
    StagePhase,
)
from orchestrator.api.stage_records import summarize
from tests.support.builders import T0, at, make_stage_outcomes, make_stage_status

RUNNING = summarize(
    make_stage_outcomes(
        targets=("a", "b", "c"),
        completed=("a",),
        syncing=("c",),
        failed={"b": "Degraded"},
        notes={"c": "held"},
    )
)

Mutation = Callable[[ProgressiveSyncStatus], ProgressiveSyncStatus]


def status_with(*stages, rollout_id: str = "r1", progress: str | None = None) -> ProgressiveSyncStatus:
    return ProgressiveSyncStatus(
        phase=RolloutPhase.PROGRESSING,
        rollout=RolloutStatus(id=rollout_id, started_at=T0),
        stages=list(stages),
        progress=progress,
    )


MUTATIONS: list[tuple[str, Mutation]] = [
    (
        "start-rollout",
        lambda s: rs.start_rollout(s, rollout_id="r1", stage_names=["canary", "rest"], now=at(1)),
    ),
    ("start-stage", lambda s: rs.start_stage(s, stage="canary", summary=RUNNING, message="m", now=at(1))),
    ("skip-stage", lambda s: rs.skip_stage(s, stage="rest", reason="nothing", now=at(1))),
    ("summary", lambda s: rs.apply_summary(s, "canary", RUNNING)),
    (
        "close",
        lambda s: rs.close_stage(s, stage="canary", phase=StagePhase.SUCCEEDED, message="ok", now=at(2)),
    ),
    ("finalize", lambda s: rs.finalize_rollout(s, phase=RolloutPhase.FAILED, reason="x", now=at(3))),
    ("step-error", lambda s: rs.note_step_error(s, stage="canary", message="forbidden", final=True)),
]


@pytest.mark.parametrize("mutation", [m for _, m in MUTATIONS], ids=[n for n, _ in MUTATIONS])
def test_every_mutation_is_idempotent(mutation: Mutation) -> None:
    """A conflict makes the writer apply the same mutation again: the second time changes nothing."""
    once = mutation(
        status_with(make_stage_status(targets=("a", "b"), syncing=("a", "b"), phase=StagePhase.PROGRESSING))
    )
    twice = mutation(once.model_copy(deep=True))
    assert twice.to_api() == once.to_api()


def test_start_rollout_replaces_another_rollout_and_lists_stages() -> None:
    old = status_with(make_stage_status(phase=StagePhase.SUCCEEDED, completed=("a",)), rollout_id="r0")
    new = rs.start_rollout(old, rollout_id="r1", stage_names=["canary", "rest"], now=at(5), revision="abc")
    assert new.rollout == RolloutStatus(id="r1", revision="abc", started_at=at(5))
    assert [(s.name, s.phase) for s in new.stages or []] == [
        ("canary", StagePhase.PENDING),
        ("rest", StagePhase.PENDING),
    ]
    conditions = {c.type: c.status for c in new.conditions or []}
    assert conditions == {"Ready": ConditionStatus.FALSE, "Progressing": ConditionStatus.TRUE}


def test_a_summary_puts_counts_lists_and_records_into_the_stage() -> None:
    status = status_with(make_stage_status(phase=StagePhase.PROGRESSING), progress="0/5")
    status = rs.apply_summary(status, "canary", RUNNING)
    stage = rs.find_stage(status, "canary")
    assert stage is not None
    assert stage.counts == StageCounts(targets=3, syncing=1, completed=1, failed=1)
    assert (stage.syncing, [(f.name, f.reason) for f in stage.failed]) == (["c"], [("b", "Degraded")])
    assert [(n.name, n.note) for n in stage.notes] == [("c", "held")]
    assert stage.more is None
    assert (status.counts, status.progress) == (stage.counts, "1/5")
    assert stage.phase == StagePhase.PROGRESSING  # the steps own the phase and the message


def test_a_summary_keeps_the_first_few_and_counts_the_rest() -> None:
    names = [f"c{i:03d}" for i in range(STATUS_LIST_CAP + 7)]
    long = "x" * 500
    summary = summarize(make_stage_outcomes(targets=names, failed=dict.fromkeys(names, long)))
    status = rs.apply_summary(status_with(), "canary", summary)
    (stage,) = status.stages or []
    assert [f.name for f in stage.failed] == names[:STATUS_LIST_CAP]
    assert all(len(f.reason) == REASON_MAX_CHARS for f in stage.failed)
    assert stage.more == MoreClusters(failed=7)


def test_close_failed_stage_fails_the_rollout() -> None:
    status = rs.close_stage(
        status_with(make_stage_status(phase=StagePhase.PROGRESSING)),
        stage="canary",
        phase=StagePhase.FAILED,
        message="m",
        now=T0,
    )
    assert (status.phase, status.message) == (RolloutPhase.FAILED, "stage 'canary' failed: m")


@pytest.mark.parametrize(
    ("phase", "progressing_to", "pending_to"),
    [
        pytest.param(RolloutPhase.CANCELLED, StagePhase.CANCELLED, StagePhase.CANCELLED, id="cancelled"),
        pytest.param(RolloutPhase.FAILED, StagePhase.FAILED, StagePhase.CANCELLED, id="failed"),
    ],
)
def test_finalize_marks_unfinished_stages(
    phase: RolloutPhase, progressing_to: StagePhase, pending_to: StagePhase
) -> None:
    status = status_with(
        make_stage_status(
            "canary", phase=StagePhase.SUCCEEDED, completed=("a",), targets=("a",), finished_at=at(1)
        ),
        make_stage_status("wave", targets=("b", "c"), completed=("b",), phase=StagePhase.PROGRESSING),
        make_stage_status("rest", phase=StagePhase.PENDING),
    )
    status = rs.finalize_rollout(status, phase=phase, reason="why", now=at(9))
    by_name = {s.name: s for s in status.stages or []}
    assert by_name["canary"].phase == StagePhase.SUCCEEDED
    assert by_name["canary"].finished_at == at(1)
    assert by_name["wave"].phase == progressing_to
    assert "did not finish (1 of 2 clusters updated, 0 failed)" in by_name["wave"].message
    assert by_name["rest"].phase == pending_to
    assert by_name["rest"].message.startswith("not started")
    assert status.rollout is not None and status.rollout.finished_at == at(9)
    conditions = {c.type: (c.status, c.reason) for c in status.conditions or []}
    assert conditions == {
        "Ready": (ConditionStatus.FALSE, f"Rollout{phase.value}"),
        "Progressing": (ConditionStatus.FALSE, f"Rollout{phase.value}"),
    }


def test_condition_transition_time_moves_only_on_change() -> None:
    status = ProgressiveSyncStatus()
    rs.set_condition(status, "Ready", value=ConditionStatus.FALSE, reason="A", message="", now=at(1))
    rs.set_condition(status, "Ready", value=ConditionStatus.FALSE, reason="B", message="", now=at(2))
    assert status.conditions is not None and status.conditions[0].last_transition_time == at(1)
    rs.set_condition(status, "Ready", value=ConditionStatus.TRUE, reason="C", message="", now=at(3))
    assert status.conditions[0].last_transition_time == at(3)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(None, RolloutPhase.PROGRESSING, id="no-phase-yet"),
        pytest.param(RolloutPhase.PENDING, RolloutPhase.PROGRESSING, id="pending-rollout-starts"),
        pytest.param(RolloutPhase.PAUSED, RolloutPhase.PAUSED, id="paused-stays-paused"),
    ],
)
def test_starting_a_stage_makes_a_pending_rollout_progressing(
    before: RolloutPhase | None, after: RolloutPhase
) -> None:
    status = status_with(make_stage_status(phase=StagePhase.PENDING))
    status.phase = before
    status = rs.start_stage(status, stage="canary", summary=RUNNING, message="m", now=T0)
    assert status.phase == after


@pytest.mark.parametrize(
    ("stage_phase", "final", "kept"),
    [
        pytest.param(StagePhase.PENDING, True, True, id="select-could-not-run"),
        pytest.param(StagePhase.PROGRESSING, False, True, id="temporary-error-retries-ran-out"),
        pytest.param(StagePhase.SUCCEEDED, True, False, id="a-closed-stage-keeps-its-verdict"),
    ],
)
def test_a_steps_own_words_reach_the_stage_and_survive_finalize(
    stage_phase: StagePhase, final: bool, kept: bool
) -> None:
    status = status_with(make_stage_status(phase=stage_phase, message="selected 2"))
    status = rs.note_step_error(status, stage="canary", message="select step: forbidden", final=final)
    status = rs.finalize_rollout(
        status, phase=RolloutPhase.FAILED, reason="Workflow w ended Failed", now=at(9)
    )
    (stage,) = status.stages or []
    assert ("select step: forbidden" in stage.message) is kept, stage.message
    if kept:
        assert stage.phase == StagePhase.FAILED and stage.message.startswith("did not finish")


_names = st.lists(st.sampled_from([f"c{index}" for index in range(12)]), max_size=16, unique=True)


@given(targets=_names, completed=_names, failed=_names)
def test_the_status_counts_are_the_records_counts_added_up(
    targets: list[str], completed: list[str], failed: list[str]
) -> None:
    # Each stage's counts are its records'; the rollout's are the stages' added up.
    one = summarize(make_stage_outcomes("one", targets=targets, completed=completed))
    two = summarize(make_stage_outcomes("two", targets=targets, failed=dict.fromkeys(failed, "x")))
    status = rs.apply_summary(rs.apply_summary(status_with(), "one", one), "two", two)
    expected = StageCounts(targets=2 * len(targets), completed=len(completed), failed=len(failed))
    assert status.counts == (expected if expected != StageCounts() else None)
