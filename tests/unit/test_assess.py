"""The pure status decisions of `orchestrator.argocd.assess`, table-driven, without any cluster."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.models import RolloutPhase, StagePhase
from orchestrator.argocd.assess import (
    ClusterPhase,
    WorkflowOutcome,
    assess_application,
    assess_cluster,
    assess_rollout,
    assess_stage,
)
from tests.support.sync_builders import (
    OLD_REVISION,
    REVISION,
    ROLLOUT,
    at,
    done_application,
    foreign_operation,
    make_application,
    make_stage,
    our_operation,
)

D, W, F = ClusterPhase.DONE, ClusterPhase.WAITING, ClusterPhase.FAILED


@pytest.mark.parametrize(
    ("app", "expected", "reason_has"),
    [
        pytest.param(done_application(), D, "Synced and Healthy", id="done"),
        pytest.param(None, F, "was deleted", id="deleted-application-fails"),
        pytest.param(make_application(), W, "not requested yet", id="not-synced-by-this-rollout"),
        pytest.param(
            done_application(synced_by="r0"),
            W,
            "not requested yet",
            id="done-for-another-rollout-is-not-done",
        ),
        pytest.param(
            make_application(operation=our_operation()), W, "not picked up", id="our-operation-not-picked-up"
        ),
        pytest.param(
            make_application(synced_by=ROLLOUT, operation=foreign_operation("alice")),
            W,
            "started by alice",
            id="someone-elses-operation-in-progress",
        ),
        pytest.param(make_application(phase="Running"), W, "Running", id="operation-running"),
        pytest.param(make_application(phase="Terminating"), W, "Terminating", id="operation-terminating"),
        pytest.param(
            make_application(
                phase="Failed", message="one or more objects failed to apply", finished_at=at(5)
            ),
            F,
            "one or more objects failed to apply",
            id="operation-failed",
        ),
        pytest.param(
            make_application(phase="Error", message="rpc error", finished_at=at(5)),
            F,
            "Error",
            id="operation-error",
        ),
        pytest.param(
            make_application(phase="Failed", state_operation=our_operation(retry_limit=3), retry_count=1),
            W,
            "retries (1/3)",
            id="failed-with-retries-left-waits",
        ),
        pytest.param(
            make_application(phase="Failed", state_operation=our_operation(retry_limit=3), retry_count=3),
            F,
            "Failed",
            id="failed-after-retries-run-out",
        ),
        pytest.param(
            make_application(
                phase="Succeeded", state_operation=foreign_operation("bob"), result_revision=REVISION
            ),
            W,
            "started by bob",
            id="operation-state-of-someone-else-is-not-ours",
        ),
        pytest.param(
            done_application(result_revision=OLD_REVISION),
            F,
            "not the pinned",
            id="succeeded-at-another-revision",
        ),
        pytest.param(
            done_application(sync="OutOfSync"), W, "sync status OutOfSync", id="succeeded-but-out-of-sync"
        ),
        pytest.param(
            done_application(reconciled_at=at(9)),
            W,
            "health not observed since the sync finished",
            id="stale-healthy-before-reconciled-is-not-done",
        ),
        pytest.param(
            done_application(reconciled_at=None),
            W,
            "last reconciled never",
            id="never-reconciled-is-not-done",
        ),
        pytest.param(
            done_application(reconciled_at=at(10)), D, "Healthy", id="reconciled-in-the-same-second-counts"
        ),
        pytest.param(
            done_application(health="Degraded", health_message="0/3 pods ready"),
            F,
            "Degraded after the sync: 0/3 pods ready",
            id="degraded-after-sync-fails",
        ),
        pytest.param(
            done_application(health="Degraded", reconciled_at=at(9)),
            W,
            "health not observed",
            id="stale-degraded-before-reconcile-waits",
        ),
        pytest.param(done_application(health="Progressing"), W, "health Progressing", id="progressing-waits"),
        pytest.param(done_application(health="Missing"), W, "health Missing", id="missing-waits"),
        pytest.param(done_application(sources=2), D, "Healthy", id="multi-source-done-at-all-revisions"),
    ],
)
def test_assess_application(app: dict[str, Any] | None, expected: ClusterPhase, reason_has: str) -> None:
    revision = f"{REVISION},{REVISION}" if app and app["spec"].get("sources") else REVISION
    phase, reason = assess_application("myservice-c1", app, revision=revision, rollout_id=ROLLOUT)
    assert (phase, reason_has in reason) == (expected, True), reason


def _cluster(apps: dict[str, Any], *, now_s: float = 20, deadline_s: float = 600, exists: bool = True):
    return assess_cluster(
        "c1",
        apps,
        revision=REVISION,
        rollout_id=ROLLOUT,
        started=at(0),
        now=at(now_s),
        deadline=at(deadline_s),
        cluster_exists=exists,
    )


@pytest.mark.parametrize(
    ("apps", "kwargs", "expected", "reason_has"),
    [
        pytest.param(
            {"a": done_application(), "b": done_application()}, {}, D, "2 Applications", id="all-done"
        ),
        pytest.param(
            {"a": done_application(), "b": done_application(health="Progressing")},
            {},
            W,
            "b: health Progressing",
            id="one-still-progressing",
        ),
        pytest.param(
            {"a": done_application(), "b": done_application(health="Degraded")},
            {},
            F,
            "b: health Degraded",
            id="one-degraded-fails-the-cluster",
        ),
        pytest.param(
            {"a": done_application(), "b": None}, {}, F, "Application b was deleted", id="one-deleted"
        ),
        pytest.param(
            {"a": done_application()}, {"exists": False}, F, "cluster Secret was deleted", id="cluster-gone"
        ),
        pytest.param({}, {}, F, "no Application", id="no-applications"),
        pytest.param(
            {"a": make_application(phase="Running")},
            {"now_s": 600},
            F,
            "cluster c1: progress deadline of 600s passed (sync started 2030-01-01T12:00:00Z); "
            "still waiting for a: sync operation Running",
            id="deadline-names-cluster-and-what-it-waited-for",
        ),
        pytest.param(
            {"a": done_application(reconciled_at=at(9))},
            {"now_s": 700},
            F,
            "still waiting for a: health not observed",
            id="deadline-while-health-is-stale",
        ),
        pytest.param(
            {"a": done_application()}, {"now_s": 700}, D, "Healthy", id="done-wins-over-a-late-look"
        ),
        pytest.param(
            {"a": make_application(phase="Failed", finished_at=at(3))},
            {"now_s": 700},
            F,
            "sync operation Failed",
            id="failure-reason-wins-over-deadline",
        ),
    ],
)
def test_assess_cluster(
    apps: dict[str, Any], kwargs: dict[str, Any], expected: ClusterPhase, reason_has: str
) -> None:
    phase, reason = _cluster(apps, **kwargs)
    assert phase == expected, reason
    assert reason_has in reason


@pytest.mark.parametrize(
    ("stage", "max_failed", "expected", "message"),
    [
        pytest.param(
            make_stage(targets=("a",), completed=("a",)),
            0,
            StagePhase.SUCCEEDED,
            "1 of 1 clusters updated",
            id="all-updated",
        ),
        pytest.param(
            make_stage(targets=("a", "b"), completed=("a",), failed={"b": "Degraded"}),
            0,
            StagePhase.FAILED,
            "1 of 2 clusters failed (at most 0 tolerated): b (Degraded); 1 updated",
            id="one-failed-cluster-halts-stage",
        ),
        pytest.param(
            make_stage(targets=("a", "b"), completed=("a",), failed={"b": "Degraded"}),
            1,
            StagePhase.SUCCEEDED,
            "1 of 2 clusters updated, 1 failed (at most 1 tolerated)",
            id="failure-within-policy",
        ),
        pytest.param(
            make_stage(targets=("a", "b"), completed=("a",), syncing=("b",)),
            0,
            StagePhase.FAILED,
            "1 of 2 clusters did not finish: b; 1 updated, 0 failed",
            id="unfinished-cluster-fails",
        ),
        pytest.param(
            make_stage(phase=StagePhase.SKIPPED, message="matches nothing"),
            0,
            StagePhase.SKIPPED,
            "matches nothing",
            id="skipped-stays-skipped",
        ),
    ],
)
def test_assess_stage(stage: Any, max_failed: int, expected: StagePhase, message: str) -> None:
    assert assess_stage(stage, max_failed_clusters=max_failed) == (expected, message)


@pytest.mark.parametrize(
    ("outcome", "shutdown", "stages", "expected", "reason_has"),
    [
        pytest.param(
            WorkflowOutcome.SUCCEEDED,
            None,
            [
                make_stage(phase=StagePhase.SUCCEEDED, completed=("a",)),
                make_stage("rest", phase=StagePhase.SKIPPED),
            ],
            RolloutPhase.SUCCEEDED,
            "2 stage(s) finished; 1 cluster(s) updated",
            id="succeeded",
        ),
        pytest.param(
            WorkflowOutcome.FAILED,
            "Stop",
            [make_stage()],
            RolloutPhase.CANCELLED,
            "was stopped (Stop)",
            id="stopped-is-cancelled",
        ),
        pytest.param(
            WorkflowOutcome.FAILED,
            None,
            [make_stage(phase=StagePhase.FAILED, message="1 of 1 clusters failed")],
            RolloutPhase.FAILED,
            "stage 'canary' failed: 1 of 1 clusters failed",
            id="failed-stage",
        ),
        pytest.param(
            WorkflowOutcome.FAILED,
            None,
            [make_stage(targets=("a",), failed={"a": "cluster a: health Degraded"})],
            RolloutPhase.FAILED,
            "ended Failed; failed: a (cluster a: health Degraded)",
            id="workflow-failed-mid-stage-names-clusters",
        ),
        pytest.param(
            WorkflowOutcome.ERROR, None, [make_stage()], RolloutPhase.FAILED, "ended Error", id="error"
        ),
        pytest.param(
            WorkflowOutcome.SUCCEEDED,
            None,
            [make_stage(phase=StagePhase.PENDING)],
            RolloutPhase.FAILED,
            "never finished: canary",
            id="succeeded-with-unfinished-stage-is-not-success",
        ),
    ],
)
def test_assess_rollout(
    outcome: WorkflowOutcome, shutdown: str | None, stages: list[Any], expected: RolloutPhase, reason_has: str
) -> None:
    phase, reason = assess_rollout("myservice-r1", outcome, shutdown=shutdown, stages=stages)
    assert phase == expected, reason
    assert reason_has in reason
