"""The pure status decisions of `orchestrator.argocd.assess`, table-driven, without any cluster."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.models import RolloutPhase, StagePhase
from orchestrator.argocd import appsync
from orchestrator.argocd.assess import (
    ClusterPhase,
    Notice,
    WorkflowOutcome,
    assess_application,
    assess_cluster,
    assess_rollout,
    assess_stage,
    remember_uids,
)
from tests.support.builders import (
    NEW_REVISION,
    OLD_REVISION,
    ROLLOUT,
    at,
    done_application,
    foreign_operation,
    make_application,
    make_stage_outcomes,
    make_stage_status,
    our_operation,
)

D, W, F = ClusterPhase.DONE, ClusterPhase.WAITING, ClusterPhase.FAILED


NOW = at(20)
ALICE_SYNCED = foreign_operation("alice", revision=NEW_REVISION)


def pruning_leftovers(*names: str, prune_needed: bool = True) -> list[dict[str, Any]]:
    """`status.resources` with one Synced Deployment and the named ConfigMaps OutOfSync."""
    resources: list[dict[str, Any]] = [{"kind": "Deployment", "name": "web", "status": "Synced"}]
    for name in names:
        entry: dict[str, Any] = {"kind": "ConfigMap", "name": name, "status": "OutOfSync"}
        if prune_needed:
            entry["requiresPruning"] = True
        resources.append(entry)
    return resources


def with_status(app: dict[str, Any], **fields: Any) -> dict[str, Any]:
    app["status"].update(fields)
    return app


def deleting(app: dict[str, Any]) -> dict[str, Any]:
    app["metadata"]["deletionTimestamp"] = "2030-01-01T12:00:15Z"
    return app


@pytest.mark.parametrize(
    ("app", "expected", "reason_has"),
    [
        pytest.param(done_application(), D, "Synced and Healthy", id="done"),
        pytest.param(None, F, "was deleted", id="deleted-application-fails"),
        pytest.param(deleting(done_application()), F, "is being deleted", id="deletion-timestamp-fails"),
        pytest.param(make_application(), W, "not requested yet", id="not-synced-by-this-rollout"),
        pytest.param(
            done_application(
                state_operation=our_operation(rollout_id="r0", revision=OLD_REVISION),
                result_revision=OLD_REVISION,
                sync="OutOfSync",
            ),
            W,
            "not requested yet",
            id="done-for-another-rollout-is-not-done",
        ),
        # Finding 1: no annotation of ours survives the ApplicationSet controller; the operation's
        # info is what identifies our sync (the builders write no annotation at all).
        pytest.param(
            done_application(), D, "Synced and Healthy", id="ours-by-operation-info-without-any-annotation"
        ),
        pytest.param(
            make_application(operation=our_operation()), W, "not picked up", id="our-operation-not-picked-up"
        ),
        pytest.param(
            make_application(phase="Succeeded", finished_at=at(5), operation=foreign_operation("alice")),
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
        # Finding 6: between Argo CD's own retries the state is Running with finishedAt set; a
        # stored Failed is final, retries left or not.
        pytest.param(
            make_application(
                phase="Running",
                state_operation=our_operation(retry_limit=5),
                retry_count=1,
                finished_at=at(5),
                message="one or more objects failed to apply. Retrying attempt #1 at 12:00PM.",
            ),
            W,
            "Argo CD retries it (attempt 1 of 5)",
            id="running-with-finished-at-is-between-retries",
        ),
        pytest.param(
            make_application(
                phase="Failed", state_operation=our_operation(retry_limit=5), retry_count=1, finished_at=at(5)
            ),
            F,
            "sync operation Failed",
            id="stored-failed-is-final-even-with-retries-left",
        ),
        pytest.param(
            make_application(phase="Running", message="Sync operation blocked by sync window"),
            W,
            "Argo CD holds the sync: Sync operation blocked by sync window",
            id="blocked-by-sync-window-waits-and-says-so",
        ),
        pytest.param(
            make_application(
                phase="Succeeded", state_operation=foreign_operation("bob"), result_revision=NEW_REVISION
            ),
            W,
            "not requested yet",
            id="operation-state-of-someone-else-is-not-ours",
        ),
        pytest.param(
            done_application(result_revision=OLD_REVISION),
            F,
            "not the pinned",
            id="succeeded-at-another-revision",
        ),
        # Finding 6: the resolved full SHA against a pin written short.
        pytest.param(
            done_application(state_operation=our_operation(revision=NEW_REVISION[:7])),
            D,
            "Synced and Healthy",
            id="short-sha-pin-resolves-to-the-full-sha",
        ),
        pytest.param(
            done_application(state_operation=our_operation(revision="v1.4.2")),
            D,
            "Synced and Healthy",
            id="tag-pin-is-what-argo-cd-resolved",
        ),
        pytest.param(
            done_application(sync="OutOfSync"),
            W,
            "still OutOfSync after the sync",
            id="succeeded-but-out-of-sync",
        ),
        # Finding 6: prune off and a manifest removed from Git: OutOfSync for ever, by design.
        pytest.param(
            with_status(done_application(sync="OutOfSync"), resources=pruning_leftovers("old-config")),
            D,
            "1 resource(s) that only pruning removes are left (prune is off): ConfigMap/old-config",
            id="prune-off-leftovers-count-as-done-and-say-so",
        ),
        pytest.param(
            with_status(
                done_application(sync="OutOfSync"),
                resources=pruning_leftovers("old-config", prune_needed=False),
            ),
            W,
            "still OutOfSync",
            id="out-of-sync-for-another-reason-waits",
        ),
        # Finding 6: the stale in-between state.
        pytest.param(
            done_application(revision=OLD_REVISION, reconciled_at=at(10)),
            W,
            "health not observed since the sync finished",
            id="stale-state-old-revision-reconciled-in-the-same-second",
        ),
        pytest.param(
            done_application(reconciled_at=at(10)),
            W,
            "health not observed since the sync finished",
            id="reconciled-in-the-same-second-proves-nothing",
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
            done_application(revision=OLD_REVISION, sync="OutOfSync"),
            D,
            f"Argo CD now compares it against {OLD_REVISION}",
            id="compared-against-a-newer-commit-since-judged-by-health",
        ),
        # Finding 6: Degraded within the grace after the sync waits; past it, fails.
        pytest.param(
            done_application(health="Degraded", health_message="0/3 pods ready"),
            W,
            "health Degraded 10s after the sync (grace 120s): 0/3 pods ready",
            id="transient-degraded-within-the-grace-waits",
        ),
        pytest.param(
            done_application(
                health="Degraded", health_message="0/3 pods ready", finished_at=at(-200), reconciled_at=at(0)
            ),
            F,
            "health Degraded after the sync, past the grace of 120s: 0/3 pods ready",
            id="degraded-past-the-grace-fails",
        ),
        pytest.param(
            done_application(health="Degraded", reconciled_at=at(9)),
            W,
            "health not observed",
            id="stale-degraded-before-reconcile-waits",
        ),
        pytest.param(done_application(health="Progressing"), W, "health Progressing", id="progressing-waits"),
        pytest.param(
            done_application(health="Suspended", health_message="CanaryPauseStep"),
            W,
            "health Suspended (e.g. a paused Argo Rollouts canary): CanaryPauseStep",
            id="suspended-waits-with-words",
        ),
        pytest.param(done_application(health="Missing"), W, "health Missing", id="missing-waits-with-words"),
        pytest.param(done_application(health="Unknown"), W, "health Unknown", id="unknown-waits-with-words"),
        pytest.param(done_application(sync="Unknown"), W, "sync status Unknown", id="unknown-sync-status"),
        pytest.param(done_application(sources=2), D, "Healthy", id="multi-source-done-at-all-revisions"),
        # Finding 7: someone else already synced it to the release revision: adopted, not synced.
        pytest.param(
            make_application(
                phase="Succeeded",
                state_operation=ALICE_SYNCED,
                result_revision=NEW_REVISION,
                finished_at=at(5),
                sync="Synced",
                health="Progressing",
                reconciled_at=at(6),
            ),
            W,
            "health Progressing",
            id="adopted-sync-of-someone-else-waits-for-health",
        ),
        pytest.param(
            make_application(
                phase="Succeeded",
                state_operation=ALICE_SYNCED,
                result_revision=NEW_REVISION,
                finished_at=at(5),
                sync="Synced",
                health="Healthy",
                reconciled_at=at(6),
            ),
            D,
            "synced by alice; adopted, not synced again",
            id="adopted-sync-of-someone-else-done-when-healthy",
        ),
        pytest.param(
            make_application(sync="Synced", health="Healthy"),
            D,
            "adopted",
            id="already-up-to-date-without-any-operation",
        ),
        pytest.param(
            make_application(sync="Synced", revision=OLD_REVISION, health="Healthy"),
            D,
            "not a revision of this release: left alone",
            id="up-to-date-outside-the-release-is-what-sync-left-alone",
        ),
    ],
)
def test_assess_application(app: dict[str, Any] | None, expected: ClusterPhase, reason_has: str) -> None:
    release = [(NEW_REVISION, NEW_REVISION)] if app and app["spec"].get("sources") else [(NEW_REVISION,)]
    verdict = assess_application(
        "myservice-c1", app, release=release, rollout_id=ROLLOUT, now=NOW, since=at(0)
    )
    assert (verdict.phase, reason_has in verdict.reason) == (expected, True), verdict.reason


@pytest.mark.parametrize(
    ("app", "notice"),
    [
        pytest.param(
            make_application(phase="Running", message="blocked by sync window"),
            Notice.SYNC_WINDOW,
            id="window",
        ),
        pytest.param(done_application(health="Suspended"), Notice.SUSPENDED, id="suspended"),
        pytest.param(done_application(health="Missing"), Notice.MISSING, id="missing"),
        pytest.param(
            done_application(health="Missing", sync="OutOfSync"), Notice.MISSING, id="missing-and-out-of-sync"
        ),
        pytest.param(done_application(health="Unknown"), Notice.UNKNOWN, id="unknown"),
        pytest.param(done_application(health="Degraded"), Notice.DEGRADED, id="degraded-in-grace"),
        pytest.param(done_application(health="Progressing"), None, id="progressing-is-no-news"),
        pytest.param(make_application(phase="Running"), None, id="running-is-no-news"),
    ],
)
def test_waits_worth_a_word_carry_a_notice(app: dict[str, Any], notice: Notice | None) -> None:
    verdict = assess_application("a", app, release=[(NEW_REVISION,)], rollout_id=ROLLOUT, now=NOW)
    assert verdict.notice == notice, verdict.reason


def _cluster(apps: dict[str, Any], *, now_s: float = 20, deadline_s: float = 600, exists: bool = True):
    return assess_cluster(
        "c1",
        apps,
        release=[(NEW_REVISION,)],
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
            {
                "a": done_application(),
                "b": done_application(health="Degraded", finished_at=at(-200), reconciled_at=at(0)),
            },
            {},
            F,
            "b: health Degraded",
            id="one-degraded-past-the-grace-fails-the-cluster",
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
    verdict = _cluster(apps, **kwargs)
    assert verdict.phase == expected, verdict.reason
    assert reason_has in verdict.reason


@pytest.mark.parametrize(
    ("stage", "max_failed", "expected", "message"),
    [
        pytest.param(
            (StagePhase.PROGRESSING, make_stage_outcomes(targets=("a",), completed=("a",))),
            0,
            StagePhase.SUCCEEDED,
            "1 of 1 clusters updated",
            id="all-updated",
        ),
        pytest.param(
            (
                StagePhase.PROGRESSING,
                make_stage_outcomes(targets=("a", "b"), completed=("a",), failed={"b": "Degraded"}),
            ),
            0,
            StagePhase.FAILED,
            "1 of 2 clusters failed (at most 0 tolerated): b (Degraded); 1 updated",
            id="one-failed-cluster-halts-stage",
        ),
        pytest.param(
            (
                StagePhase.PROGRESSING,
                make_stage_outcomes(targets=("a", "b"), completed=("a",), failed={"b": "Degraded"}),
            ),
            1,
            StagePhase.SUCCEEDED,
            "1 of 2 clusters updated, 1 failed (at most 1 tolerated)",
            id="failure-within-policy",
        ),
        pytest.param(
            (
                StagePhase.PROGRESSING,
                make_stage_outcomes(targets=("a", "b"), completed=("a",), syncing=("b",)),
            ),
            0,
            StagePhase.FAILED,
            "1 of 2 clusters did not finish: b; 1 updated, 0 failed",
            id="unfinished-cluster-fails",
        ),
        pytest.param(
            (StagePhase.SKIPPED, make_stage_outcomes()),
            0,
            StagePhase.SKIPPED,
            "matches nothing",
            id="skipped-stays-skipped",
        ),
    ],
)
def test_assess_stage(stage: Any, max_failed: int, expected: StagePhase, message: str) -> None:
    phase, outcomes = stage
    status = make_stage_status(phase=phase, message="matches nothing" if phase == StagePhase.SKIPPED else "")
    assert assess_stage(status, outcomes, max_failed_clusters=max_failed) == (expected, message)


@pytest.mark.parametrize(
    ("outcome", "shutdown", "stages", "expected", "reason_has"),
    [
        pytest.param(
            WorkflowOutcome.SUCCEEDED,
            None,
            [
                make_stage_status(phase=StagePhase.SUCCEEDED, completed=("a",)),
                make_stage_status("rest", phase=StagePhase.SKIPPED),
            ],
            RolloutPhase.SUCCEEDED,
            "2 stage(s) finished; 1 cluster(s) updated",
            id="succeeded",
        ),
        pytest.param(
            WorkflowOutcome.FAILED,
            "Stop",
            [make_stage_status(phase=StagePhase.PROGRESSING)],
            RolloutPhase.CANCELLED,
            "was stopped (Stop)",
            id="stopped-is-cancelled",
        ),
        pytest.param(
            WorkflowOutcome.FAILED,
            None,
            [make_stage_status(phase=StagePhase.FAILED, message="1 of 1 clusters failed")],
            RolloutPhase.FAILED,
            "stage 'canary' failed: 1 of 1 clusters failed",
            id="failed-stage",
        ),
        pytest.param(
            WorkflowOutcome.FAILED,
            None,
            [
                make_stage_status(
                    phase=StagePhase.PROGRESSING, targets=("a",), failed={"a": "cluster a: health Degraded"}
                )
            ],
            RolloutPhase.FAILED,
            "ended Failed; failed: a (cluster a: health Degraded)",
            id="workflow-failed-mid-stage-names-clusters",
        ),
        pytest.param(
            WorkflowOutcome.ERROR,
            None,
            [make_stage_status(phase=StagePhase.PROGRESSING)],
            RolloutPhase.FAILED,
            "ended Error",
            id="error",
        ),
        pytest.param(
            WorkflowOutcome.SUCCEEDED,
            None,
            [make_stage_status(phase=StagePhase.PENDING)],
            RolloutPhase.FAILED,
            "never finished: canary",
            id="succeeded-with-unfinished-stage-is-not-success",
        ),
        pytest.param(
            WorkflowOutcome.FAILED,
            None,
            [make_stage_status(phase=StagePhase.PENDING, message="step error: select step: 403 forbidden")],
            RolloutPhase.FAILED,
            "stage 'canary': step error: select step: 403 forbidden",
            id="a-step-that-could-not-run-is-named-with-its-words",
        ),
    ],
)
def test_assess_rollout(
    outcome: WorkflowOutcome, shutdown: str | None, stages: list[Any], expected: RolloutPhase, reason_has: str
) -> None:
    phase, reason = assess_rollout("myservice-r1", outcome, shutdown=shutdown, stages=stages)
    assert phase == expected, reason
    assert reason_has in reason


def test_a_fresh_comparison_is_asked_for_after_the_second_of_finished_at() -> None:
    # finishedAt and reconciledAt in the same whole second: only a later comparison can tell.
    verdict = assess_application(
        "a",
        done_application(reconciled_at=at(10)),
        release=[(NEW_REVISION,)],
        rollout_id=ROLLOUT,
        now=at(10.4),
    )
    assert verdict.phase == W and verdict.refresh_after == at(11)
    assert (
        assess_application(
            "a", done_application(), release=[(NEW_REVISION,)], rollout_id=ROLLOUT, now=NOW
        ).refresh_after
        is None
    )


COMPARISON_ERROR = {"type": "ComparisonError", "message": "failed to load target state:\n  rpc error"}


@pytest.mark.parametrize(
    ("app", "reason_has"),
    [
        pytest.param(
            with_status(done_application(reconciled_at=at(10)), conditions=[COMPARISON_ERROR]),
            "health not observed since the sync finished at 2030-01-01T12:00:10Z (last reconciled "
            "2030-01-01T12:00:10Z); Argo CD reports ComparisonError: failed to load target state: rpc error",
            id="a-stale-health-names-why-argo-cd-cannot-compare",
        ),
        pytest.param(
            with_status(
                done_application(),
                sync={"status": "Unknown", "revision": NEW_REVISION},
                conditions=[COMPARISON_ERROR],
            ),
            "sync status Unknown; Argo CD reports ComparisonError",
            id="an-unknown-sync-status-names-it",
        ),
        pytest.param(
            with_status(
                done_application(),
                health={"status": "Unknown"},
                conditions=[{"type": "InvalidSpecError", "message": "cluster not found"}],
            ),
            "health Unknown; waiting for Healthy; Argo CD reports InvalidSpecError: cluster not found",
            id="an-unknown-health-names-it",
        ),
    ],
)
def test_a_wait_names_the_error_conditions_argo_cd_reports(app: dict[str, Any], reason_has: str) -> None:
    verdict = assess_application("a", app, release=[(NEW_REVISION,)], rollout_id=ROLLOUT, now=at(10.4))
    assert verdict.phase == W
    assert reason_has in verdict.reason


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        pytest.param([], [], id="none"),
        pytest.param(
            [{"type": "SharedResourceWarning", "message": "shared"}, {"type": "SyncError", "message": ""}],
            ["SyncError"],
            id="warnings-are-left-out-an-empty-message-is-the-type",
        ),
        pytest.param(
            [{"type": "ComparisonError", "message": "x" * 300}],
            ["ComparisonError: " + "x" * 197 + "..."],
            id="a-long-message-is-cut",
        ),
        pytest.param(
            [{"type": f"E{i}Error", "message": str(i)} for i in range(4)],
            ["E0Error: 0", "E1Error: 1"],
            id="at-most-two",
        ),
    ],
)
def test_error_conditions(conditions: list[dict[str, str]], expected: list[str]) -> None:
    assert appsync.error_conditions({"status": {"conditions": conditions}}) == expected


def _with_uid(uid: str) -> dict[str, Any]:
    app = done_application()
    app["metadata"]["uid"] = uid
    return app


EU1 = "myservice-eu-1"


@pytest.mark.parametrize(
    ("first_seen", "apps", "expected", "reason_has"),
    [
        pytest.param(
            {}, {EU1: _with_uid("a")}, D, "Synced and Healthy", id="first-sight-is-not-a-replacement"
        ),
        pytest.param({EU1: "a"}, {EU1: _with_uid("a")}, D, "Synced and Healthy", id="same-uid"),
        pytest.param({EU1: "a"}, {EU1: None}, F, f"Application {EU1} was deleted", id="deleted"),
        pytest.param(
            {EU1: "a"},
            {EU1: _with_uid("b")},
            F,
            f"Application {EU1} was deleted and created again (uid a -> b)",
            id="new-uid-same-name-is-another-object-even-when-done",
        ),
        pytest.param(
            {EU1: "a"},
            {EU1: _with_uid("a"), "myservice-eu-2": _with_uid("c")},
            D,
            "Synced and Healthy",
            id="an-application-first-seen-later-is-not-a-replacement",
        ),
    ],
)
def test_a_replaced_application_fails_the_cluster_never_judged_by_the_old_objects_result(
    first_seen: dict[str, str], apps: dict[str, Any], expected: ClusterPhase, reason_has: str
) -> None:
    remembered = remember_uids(dict(first_seen), apps)
    verdict = assess_cluster(
        "eu-1",
        apps,
        release=[[NEW_REVISION]],
        rollout_id=ROLLOUT,
        started=at(0),
        now=NOW,
        deadline=at(600),
        first_seen=remembered,
    )
    assert verdict.phase == expected, verdict
    assert reason_has in verdict.reason
    # A name keeps the uid it was first seen with.
    assert all(remembered[name] == uid for name, uid in first_seen.items())
