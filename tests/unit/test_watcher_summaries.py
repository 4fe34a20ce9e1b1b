"""The watcher's live summary (orchestrator/watcher/summaries.py): which summaries it writes, and when.

Pure: statuses and ProgressiveSyncStage objects are built here; the time since the last write is given.
"""

from __future__ import annotations

import pytest

from orchestrator.api.models import ProgressiveSyncStatus, StageCounts, StagePhase
from orchestrator.api.rollout_status import apply_summary
from orchestrator.api.stage_records import (
    RECORD_MAX_CLUSTERS,
    ClusterRecord,
    ClusterState,
    ProgressiveSyncStage,
    new_records,
    outcomes_of,
    summarize,
)
from orchestrator.watcher.summaries import apply_plan, is_behind, plan_summaries

ROLLOUT = "7f3c2a1"
INTERVAL = 5.0


def status(*stages: tuple[str, str], rollout: str | None = ROLLOUT) -> ProgressiveSyncStatus:
    """A status of rollout `rollout` with these (stage, phase) entries and empty summaries."""
    return ProgressiveSyncStatus.model_validate(
        {
            "phase": "Progressing",
            "progress": "0/10",
            **({"rollout": {"id": rollout}} if rollout else {}),
            "stages": [{"name": name, "phase": phase} for name, phase in stages],
        }
    )


def records(
    stage: str,
    targets: list[str],
    states: dict[str, str] | None = None,
    *,
    index: int = 1,
    rollout: str = ROLLOUT,
) -> list[ProgressiveSyncStage]:
    """The stage's records with `states` (cluster → Syncing|Completed|Failed) written."""
    objects = new_records("web", rollout, stage, stage_index=index, targets=targets, namespace="argocd")
    written: dict[str, ClusterRecord] = {
        name: ClusterRecord(state=ClusterState(state), reason="Degraded" if state == "Failed" else "")
        for name, state in (states or {}).items()
    }
    return [
        _with_clusters(record, {n: written[n] for n in record.spec.targets if n in written})
        for record in objects
    ]


def _with_clusters(record: ProgressiveSyncStage, clusters: dict[str, ClusterRecord]) -> ProgressiveSyncStage:
    return ProgressiveSyncStage.model_validate(
        {**record.to_api(), "status": {"clusters": {n: r.to_api() for n, r in clusters.items()}}}
    )


def shown(base: ProgressiveSyncStatus, stage: str, recs: list[ProgressiveSyncStage]) -> ProgressiveSyncStatus:
    """`base` with the summary of `recs` already in it for `stage`."""
    return apply_summary(base.model_copy(deep=True), stage, summarize(outcomes_of(stage, recs)))


TARGETS = ["a", "b", "c", "d"]
RUNNING = status(("canary", "Succeeded"), ("wave", "Progressing"), ("rest", "Pending"))
TWO_DONE = records("wave", TARGETS, {"a": "Completed", "b": "Completed", "c": "Syncing"})
ONE_DONE = records("wave", TARGETS, {"a": "Completed", "b": "Syncing", "c": "Syncing"})


@pytest.mark.parametrize(
    ("base", "recs", "since", "stages", "wait", "reason"),
    [
        pytest.param(status(rollout=None), TWO_DONE, None, [], None, "no rollout", id="no-rollout"),
        pytest.param(
            status(("canary", "Succeeded"), ("wave", "Failed")),
            TWO_DONE,
            None,
            [],
            None,
            "is Progressing",
            id="no-stage-running-converged",
        ),
        pytest.param(RUNNING, [], None, [], None, "are current", id="no-records-cached-yet"),
        pytest.param(
            RUNNING,
            records("wave", TARGETS, {"a": "Completed"}, rollout="0ld1d"),
            None,
            [],
            None,
            "are current",
            id="records-of-another-rollout-ignored",
        ),
        pytest.param(
            shown(RUNNING, "wave", TWO_DONE), TWO_DONE, None, [], None, "are current", id="already-shown"
        ),
        pytest.param(RUNNING, TWO_DONE, None, ["wave"], None, "changed", id="first-summary"),
        pytest.param(
            shown(RUNNING, "wave", ONE_DONE),
            TWO_DONE,
            None,
            ["wave"],
            None,
            "changed",
            id="a-cluster-completed",
        ),
        pytest.param(
            shown(RUNNING, "wave", TWO_DONE),
            ONE_DONE,
            None,
            [],
            None,
            "are current",
            id="cache-behind-status",
        ),
        pytest.param(
            shown(RUNNING, "wave", ONE_DONE),
            TWO_DONE,
            2.0,
            ["wave"],
            3.0,
            "at most one per 5s",
            id="within-the-interval-waits-the-rest",
        ),
        pytest.param(
            shown(RUNNING, "wave", ONE_DONE),
            TWO_DONE,
            5.0,
            ["wave"],
            None,
            "changed",
            id="interval-over",
        ),
        pytest.param(
            shown(RUNNING, "wave", TWO_DONE),
            TWO_DONE,
            1.0,
            [],
            None,
            "are current",
            id="converged-within-the-interval-no-wait",
        ),
        pytest.param(
            status(("wave", "Progressing"), ("rest", "Progressing")),
            records("wave", TARGETS, {"a": "Failed"})
            + records("rest", ["x", "y"], {"x": "Syncing"}, index=2),
            None,
            ["wave", "rest"],
            None,
            "changed",
            id="two-running-stages",
        ),
    ],
)
def test_which_summaries_are_written_and_when(
    base: ProgressiveSyncStatus,
    recs: list[ProgressiveSyncStage],
    since: float | None,
    *,
    stages: list[str],
    wait: float | None,
    reason: str,
) -> None:
    plan = plan_summaries(base, recs, since_last_write=since, interval=INTERVAL)
    assert [name for name, _ in plan.write] == stages
    assert plan.wait_seconds == (pytest.approx(wait) if wait is not None else None)
    assert plan.writes is (bool(stages) and wait is None)
    assert reason in plan.reason


def test_a_stage_with_a_part_not_cached_yet_waits_for_it() -> None:
    targets = [f"c{i:04d}" for i in range(RECORD_MAX_CLUSTERS + 3)]
    both = records("wave", targets, {"c0000": "Completed"})
    assert len(both) == 2
    assert plan_summaries(RUNNING, both[:1], since_last_write=None, interval=INTERVAL).write == ()
    plan = plan_summaries(RUNNING, both, since_last_write=None, interval=INTERVAL)
    ((_, summary),) = plan.write
    assert summary.counts == StageCounts(targets=len(targets), completed=1)


def test_the_plan_applied_changes_the_summary_and_nothing_the_steps_own() -> None:
    base = RUNNING.model_copy(deep=True)
    base.stages[1].message = "2 of 4 clusters in flight"  # type: ignore[index]
    plan = plan_summaries(base, TWO_DONE, since_last_write=None, interval=INTERVAL)
    after = apply_plan(base.model_copy(deep=True), plan.rollout_id, plan.write)
    wave = after.stages[1]  # type: ignore[index]
    assert wave.phase == StagePhase.PROGRESSING
    assert wave.message == "2 of 4 clusters in flight"
    assert wave.tally() == StageCounts(targets=4, syncing=1, completed=2)
    assert wave.syncing == ["c"]
    assert after.stages[0] == base.stages[0]  # type: ignore[index]
    # applied again: nothing more changes, and the plan now says so
    assert apply_plan(after.model_copy(deep=True), plan.rollout_id, plan.write).to_api() == after.to_api()
    assert plan_summaries(after, TWO_DONE, since_last_write=None, interval=INTERVAL).write == ()


@pytest.mark.parametrize(
    ("fresh", "expected_completed"),
    [
        pytest.param(RUNNING, 2, id="still-running-applied"),
        pytest.param(
            status(("canary", "Succeeded"), ("wave", "Succeeded")), None, id="closed-meanwhile-left-alone"
        ),
        pytest.param(
            status(("canary", "Succeeded"), ("wave", "Progressing"), rollout="n3w"),
            None,
            id="new-rollout-left-alone",
        ),
        pytest.param(
            shown(RUNNING, "wave", records("wave", TARGETS, {t: "Completed" for t in TARGETS})),
            4,
            id="status-ahead-of-the-plan-kept",
        ),
    ],
)
def test_the_plan_reapplied_to_a_fresher_status(
    fresh: ProgressiveSyncStatus, expected_completed: int | None
) -> None:
    plan = plan_summaries(RUNNING, TWO_DONE, since_last_write=None, interval=INTERVAL)
    after = apply_plan(fresh.model_copy(deep=True), plan.rollout_id, plan.write)
    wave = after.stages[1]  # type: ignore[index]
    if expected_completed is None:
        assert after.to_api() == fresh.to_api()
    else:
        assert wave.tally().completed == expected_completed


@pytest.mark.parametrize(
    ("new", "shown_counts", "behind"),
    [
        pytest.param(
            StageCounts(targets=4, completed=2), StageCounts(targets=4, completed=2), False, id="same"
        ),
        pytest.param(
            StageCounts(targets=4, syncing=1), StageCounts(targets=4), False, id="one-more-recorded"
        ),
        pytest.param(
            StageCounts(targets=4, failed=1),
            StageCounts(targets=4, completed=1),
            False,
            id="completed-became-failed",
        ),
        pytest.param(
            StageCounts(targets=4, syncing=2),
            StageCounts(targets=4, syncing=1, completed=1),
            True,
            id="fewer-done",
        ),
        pytest.param(StageCounts(targets=3), StageCounts(targets=4), True, id="fewer-targets"),
        pytest.param(
            StageCounts(targets=4, completed=1), StageCounts(targets=4, failed=1), True, id="failed-undone"
        ),
        pytest.param(StageCounts(targets=4), StageCounts(targets=4, syncing=1), True, id="fewer-recorded"),
    ],
)
def test_a_summary_behind_the_status_is_an_old_cache(
    new: StageCounts, shown_counts: StageCounts, behind: bool
) -> None:
    assert is_behind(new, shown_counts) is behind
