"""Status transitions the watcher turns into Events and metrics, and the metrics they feed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api.models import ProgressiveSyncStatus
from orchestrator.watcher.metrics import WatcherMetrics
from orchestrator.watcher.transitions import (
    TransitionKind,
    replayed_transitions,
    status_transitions,
    transition_identity,
)

T0 = "2030-01-01T12:00:00Z"
T1 = "2030-01-01T12:01:30Z"
DONE = {"targets": 1, "completed": 1}


def status(phase: str = "Progressing", rollout: str = "r1", **stage: Any) -> ProgressiveSyncStatus:
    entry = {"name": "canary", "phase": "Progressing", "startedAt": T0, **stage}
    return ProgressiveSyncStatus.model_validate(
        {"phase": phase, "rollout": {"id": rollout}, "stages": [entry], "message": f"rollout {phase}"}
    )


@pytest.mark.parametrize(
    ("old", "new", "kinds"),
    [
        pytest.param(None, status(syncing=["c1"]), [], id="first-sight-says-nothing"),
        pytest.param(status(), status(syncing=["c1"]), ["ClusterSyncing"], id="sync-requested"),
        pytest.param(status(syncing=["c1"]), status(counts=DONE), ["ClusterCompleted"], id="cluster-done"),
        pytest.param(
            status(syncing=["c1"]),
            status(failed=[{"name": "c1", "reason": "Degraded"}]),
            ["ClusterFailed"],
            id="cluster-failed-not-also-completed",
        ),
        pytest.param(status(counts=DONE), status(counts=DONE), [], id="no-change-no-transition"),
        pytest.param(
            status(counts=DONE),
            ProgressiveSyncStatus.model_validate(
                {
                    "phase": "Progressing",
                    "rollout": {"id": "r1"},
                    "stages": [
                        {
                            "name": "canary",
                            "phase": "Succeeded",
                            "startedAt": T0,
                            "finishedAt": T1,
                            "counts": DONE,
                            "message": "1 of 1 clusters updated",
                        }
                    ],
                }
            ),
            ["StageSucceeded"],
            id="stage-succeeded",
        ),
        pytest.param(status(), status(phase="Cancelled"), ["RolloutCancelled"], id="rollout-cancelled"),
        pytest.param(status(phase="Failed"), status(phase="Failed"), [], id="an-end-is-reported-once"),
        pytest.param(status(phase="Failed"), status(phase="RollingBack"), ["RollingBack"], id="rolling-back"),
        pytest.param(
            status(phase="RollingBack"), status(phase="RolledBack"), ["RolloutRolledBack"], id="rolled-back"
        ),
        pytest.param(
            status(rollout="r0", phase="Failed", syncing=["c1"]),
            status(rollout="r1", syncing=["c1"]),
            ["ClusterSyncing"],
            id="another-rollout-is-not-compared",
        ),
    ],
)
def test_status_transitions(
    old: ProgressiveSyncStatus | None, new: ProgressiveSyncStatus, kinds: list[str]
) -> None:
    assert [t.kind.value for t in status_transitions(old, new)] == kinds


def test_events_are_recorded_for_what_people_need_to_see() -> None:
    assert {k for k in TransitionKind if k.recorded_as_event} == {
        TransitionKind.ROLLOUT_STARTED,
        TransitionKind.STAGE_SUCCEEDED,
        TransitionKind.STAGE_FAILED,
        TransitionKind.CLUSTER_FAILED,
        TransitionKind.ANALYSIS_SUCCESSFUL,
        TransitionKind.ANALYSIS_FAILED,
        TransitionKind.ANALYSIS_ERROR,
        TransitionKind.ANALYSIS_INCONCLUSIVE,
        TransitionKind.ROLLOUT_SUCCEEDED,
        TransitionKind.ROLLOUT_FAILED,
        TransitionKind.ROLLOUT_CANCELLED,
        TransitionKind.ROLLING_BACK,
        TransitionKind.ROLLOUT_ROLLED_BACK,
        TransitionKind.ROLLBACK_FAILED,
    }
    assert TransitionKind.ROLLING_BACK.event_type == "Warning"
    assert TransitionKind.ROLLBACK_FAILED.event_type == "Warning"
    assert TransitionKind.CLUSTER_FAILED.event_type == "Warning"
    assert TransitionKind.ANALYSIS_FAILED.event_type == "Warning"
    assert TransitionKind.ANALYSIS_INCONCLUSIVE.event_type == "Warning"
    assert TransitionKind.ANALYSIS_SUCCESSFUL.event_type == "Normal"


WINDOW = timedelta(minutes=15)
T0_TIME = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def ended(
    rollout_phase: str = "Succeeded", *, attempt: int = 1, stage_end: str = T1, rest: str = "Succeeded"
) -> ProgressiveSyncStatus:
    """A rollout of two stages: canary done (one cluster failed, tolerated), rest `rest`; the
    stages ended at `stage_end`."""
    stage = {"startedAt": T0, "finishedAt": stage_end, "counts": DONE}
    return ProgressiveSyncStatus.model_validate(
        {
            "phase": rollout_phase,
            "message": f"rollout r1 {rollout_phase}",
            "rollout": {
                "id": "r1",
                "workflow": "web-r1",
                "attempt": attempt,
                "startedAt": T0,
                "finishedAt": T1,
            },
            "stages": [
                {
                    "name": "canary",
                    "phase": "Succeeded",
                    **stage,
                    "failed": [{"name": "c9", "reason": "Degraded"}],
                },
                {"name": "rest", "phase": rest, **stage},
            ],
        }
    )


@pytest.mark.parametrize(
    ("status_", "now", "kinds"),
    [
        pytest.param(
            ended(),
            T0_TIME + timedelta(minutes=5),
            ["RolloutStarted", "ClusterFailed", "StageSucceeded", "StageSucceeded", "RolloutSucceeded"],
            id="a-recent-rollout-is-replayed-whole",
        ),
        pytest.param(
            ended(), T0_TIME + timedelta(hours=2), [], id="a-rollout-past-the-window-is-not-replayed"
        ),
        pytest.param(
            ended(stage_end="2030-01-01T12:20:00Z"),
            T0_TIME + timedelta(minutes=30),
            ["ClusterFailed", "StageSucceeded", "StageSucceeded"],
            id="only-what-the-status-dates-within-the-window",
        ),
        pytest.param(
            ProgressiveSyncStatus.model_validate({"phase": "Pending"}),
            T0_TIME,
            [],
            id="no-rollout-nothing-to-replay",
        ),
    ],
)
def test_a_watcher_that_just_started_replays_the_recent_transitions(
    status_: ProgressiveSyncStatus, now: datetime, kinds: list[str]
) -> None:
    replayed = replayed_transitions(status_, now, WINDOW)
    assert [t.kind.value for t in replayed if t.kind.recorded_as_event] == kinds
    if kinds and kinds[0] == "RolloutStarted":
        assert replayed[0].message.startswith("rollout r1 started in Workflow web-r1: ")


def test_a_replayed_transition_has_the_identity_of_the_live_one() -> None:
    """What a leader recorded live and what its successor replays are one Event (one name)."""
    before = ended("Progressing", rest="Progressing")
    live = {t.identity("uid-1") for t in status_transitions(before, ended())}
    replayed = {t.identity("uid-1") for t in replayed_transitions(ended(), T0_TIME, WINDOW)}
    assert live and live <= replayed
    started = transition_identity("uid-1", "r1", 1, TransitionKind.ROLLOUT_STARTED)
    assert started in replayed


@given(
    uid=st.sampled_from(["uid-1", "uid-2"]),
    attempt=st.integers(min_value=1, max_value=3),
    kind=st.sampled_from(list(TransitionKind)),
    stage=st.sampled_from(["", "canary", "rest"]),
    cluster=st.sampled_from(["", "c1", "c2"]),
)
def test_identities_differ_exactly_when_the_transition_does(
    uid: str, attempt: int, kind: TransitionKind, stage: str, cluster: str
) -> None:
    one = transition_identity(uid, "r1", attempt, kind, stage=stage, cluster=cluster)
    assert one == transition_identity(uid, "r1", attempt, kind, stage=stage, cluster=cluster)
    assert len(one) == 16 and one.isalnum()
    assert one != transition_identity(uid, "r1", attempt + 1, kind, stage=stage, cluster=cluster)
    assert one != transition_identity(uid + "x", "r1", attempt, kind, stage=stage, cluster=cluster)
    assert one != transition_identity(uid, "r2", attempt, kind, stage=stage, cluster=cluster)


def run(phase: str, name: str = "web-r1-canary-0123456789", message: str = "") -> dict[str, str]:
    return {"run": name, "phase": phase, "message": message}


@pytest.mark.parametrize(
    ("old", "new", "kinds"),
    [
        pytest.param(None, status(analysis=run("Failed")), [], id="first-sight-says-nothing"),
        pytest.param(status(), status(analysis=run("Running")), [], id="a-running-run-is-no-outcome"),
        pytest.param(
            status(analysis=run("Running")),
            status(analysis=run("Failed", message="metric error-rate = 0.3")),
            ["AnalysisFailed"],
            id="stage-run-failed",
        ),
        pytest.param(
            status(analysis=run("Running")), status(analysis=run("Error")), ["AnalysisError"], id="error"
        ),
        pytest.param(
            status(analysis=run("Running")),
            status(analysis=run("Inconclusive")),
            ["AnalysisInconclusive"],
            id="inconclusive",
        ),
        pytest.param(
            status(), status(analysis=run("Successful")), ["AnalysisSuccessful"], id="passed-at-first-write"
        ),
        pytest.param(
            status(analysis=run("Failed", message="a")),
            status(analysis=run("Failed", message="b")),
            [],
            id="same-run-same-phase-once",
        ),
        pytest.param(
            status(analysis=run("Failed", name="old-run")),
            status(analysis=run("Failed")),
            ["AnalysisFailed"],
            id="another-run-counts-again",
        ),
        pytest.param(
            status(syncing=["c1"]),
            status(failed=[{"name": "c1", "reason": "cluster c1: AnalysisFailed: analysis x failed: m = 1"}]),
            ["ClusterFailed", "AnalysisFailed"],
            id="per-cluster-run-failed",
        ),
        pytest.param(
            status(syncing=["c1"]),
            status(failed=[{"name": "c1", "reason": "cluster c1: AnalysisTimedOut: not ended"}]),
            ["ClusterFailed", "AnalysisError"],
            id="per-cluster-run-timed-out-is-error",
        ),
        pytest.param(
            status(syncing=["c1"]),
            status(failed=[{"name": "c1", "reason": "Degraded"}]),
            ["ClusterFailed"],
            id="a-plain-cluster-failure-is-no-analysis",
        ),
    ],
)
def test_analysis_transitions(
    old: ProgressiveSyncStatus | None, new: ProgressiveSyncStatus, kinds: list[str]
) -> None:
    assert [t.kind.value for t in status_transitions(old, new)] == kinds


def test_metrics_count_analysis_outcomes_per_stage_and_phase() -> None:
    metrics = WatcherMetrics()
    key = ("argocd", "web")
    for old, new in [
        (status(analysis=run("Running")), status(analysis=run("Failed"))),
        (status(analysis=run("Failed")), status(analysis=run("Failed"))),
        (status(syncing=["c1"]), status(failed=[{"name": "c1", "reason": "cluster c1: AnalysisError: x"}])),
    ]:
        for transition in status_transitions(old, new):
            metrics.observe(key, transition)
    text = metrics.exposition().decode()
    for phase in ("Failed", "Error"):
        labels = f'name="web",namespace="argocd",phase="{phase}",stage="canary"'
        assert f"progressive_sync_analysis_runs_total{{{labels}}} 1.0" in text


def test_metrics_count_syncs_and_time_clusters_and_stages() -> None:
    now = [100.0]
    metrics = WatcherMetrics(monotonic=lambda: now[0])
    metrics.attach(
        phases=lambda: ["Progressing", "Succeeded", ""], queue_depth=lambda: 3, leader=lambda: True
    )
    key = ("argocd", "web")
    for transition in status_transitions(status(), status(syncing=["c1", "c2"])):
        metrics.observe(key, transition)
    now[0] = 160.0
    for transition in status_transitions(
        status(syncing=["c1", "c2"]), status(counts=DONE, failed=[{"name": "c2", "reason": "x"}])
    ):
        metrics.observe(key, transition)
    done = ProgressiveSyncStatus.model_validate(
        {
            "rollout": {"id": "r1"},
            "stages": [{"name": "canary", "phase": "Failed", "startedAt": T0, "finishedAt": T1}],
        }
    )
    for transition in status_transitions(status(), done):
        metrics.observe(key, transition)
    text = metrics.exposition().decode()
    assert "progressive_sync_syncs_started_total 2.0" in text
    assert "progressive_sync_syncs_failed_total 1.0" in text
    assert 'progressive_sync_cluster_duration_seconds_sum{outcome="completed"} 60.0' in text
    assert 'progressive_sync_cluster_duration_seconds_sum{outcome="failed"} 60.0' in text
    assert 'progressive_sync_stage_duration_seconds_sum{outcome="failed"} 90.0' in text
    assert 'progressive_sync_rollouts{phase="Pending"} 1.0' in text
    assert 'progressive_sync_rollouts{phase="Succeeded"} 1.0' in text
    assert "progressive_sync_queue_depth 3.0" in text
    assert "progressive_sync_leader 1.0" in text


def test_watch_restart_counts_survive_a_new_term() -> None:
    metrics = WatcherMetrics()
    metrics.attach(watch_restarts=lambda: {"applications": 4})
    metrics.retire_watch_restarts({"applications": 4})
    metrics.attach(watch_restarts=lambda: {"applications": 1})
    assert (
        'progressive_sync_watch_restarts_total{resource="applications"} 5.0' in metrics.exposition().decode()
    )
