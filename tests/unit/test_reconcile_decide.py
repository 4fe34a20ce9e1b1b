"""The watcher's pure decision (`decide`), table by table: for each observed state (deletion,
validity, a new release, a running, finished or deleted Workflow, ...) the step it takes and the
actions it returns, in order.

No API server: every input is built with the keyword builders of tests/support/decide_inputs.py;
time is a fixed `NOW`.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from orchestrator.analysis.check import AnalysisBlocker
from orchestrator.api.models import (
    RolloutPhase,
)
from orchestrator.api.reasons import Reason
from orchestrator.watcher.decide import decide
from orchestrator.watcher.decision import (
    Observed,
)
from tests.support.decide_inputs import (
    FINISHED,
    LONG_AGO,
    NOW,
    POLICY,
    RELEASE,
    kinds,
    make_plan,
    make_rollout,
    make_spec,
    make_status,
    make_wf,
    observed,
)


@pytest.mark.parametrize(
    ("obs", "step", "actions"),
    [
        # -- deletion ------------------------------------------------------------------------
        pytest.param(
            observed(deleting=True, deletion_started=NOW - timedelta(seconds=5), workflows=(make_wf(),)),
            "deleting-await-stop",
            ["StopWorkflow", "RequeueAfter"],
            id="delete-with-a-live-workflow-stops-it-and-waits",
        ),
        pytest.param(
            observed(
                deleting=True,
                deletion_started=NOW - timedelta(seconds=5),
                workflows=(make_wf(shutdown="Stop"),),
            ),
            "deleting-await-stop",
            ["RequeueAfter"],
            id="delete-does-not-stop-twice",
        ),
        pytest.param(
            observed(
                deleting=True,
                deletion_started=NOW - timedelta(minutes=5),
                workflows=(make_wf(shutdown="Stop"),),
            ),
            "deleting-release",
            ["RemoveFinalizer"],
            id="delete-lets-go-after-the-grace-period",
        ),
        pytest.param(
            observed(deleting=True, workflows=(make_wf(phase="Failed"),)),
            "deleting-release",
            ["RemoveFinalizer"],
            id="delete-with-the-workflow-finished-lets-go",
        ),
        pytest.param(
            observed(deleting=True, workflows=()),
            "deleting-release",
            ["RemoveFinalizer"],
            id="delete-with-the-workflow-gone-lets-go",
        ),
        pytest.param(
            observed(deleting=True, has_finalizer=False),
            "deleted",
            [],
            id="delete-without-our-finalizer-does-nothing",
        ),
        # -- validity ------------------------------------------------------------------------
        pytest.param(
            observed(spec=None, spec_error="stages: at least 1 item"),
            "invalid-spec",
            ["UpdateStatus"],
            id="invalid-spec-is-reported",
        ),
        pytest.param(
            observed(appset=None),
            "invalid-reference",
            ["UpdateStatus"],
            id="missing-applicationset-is-reported-nothing-created",
        ),
        pytest.param(
            observed(claimed_by="argocd/older"),
            "invalid-reference",
            ["UpdateStatus"],
            id="applicationset-claimed-by-another-is-reported",
        ),
        pytest.param(
            observed(plan=make_plan(errors=("3 clusters are not covered by any stage",))),
            "invalid-plan",
            ["UpdateStatus"],
            id="plan-with-errors-is-not-run",
        ),
        pytest.param(
            observed(
                analysis_blocker=AnalysisBlocker(
                    Reason.ANALYSIS_TEMPLATE_NOT_FOUND, "stage 'canary', analysis error-rate: not found"
                )
            ),
            "invalid-analysis",
            ["UpdateStatus", "RequeueAfter"],
            id="analysis-that-cannot-run-starts-nothing",
        ),
        # -- starting ------------------------------------------------------------------------
        pytest.param(
            observed(has_finalizer=False),
            "create",
            ["AddFinalizer", "CreateWorkflow", "UpdateStatus", "RecordEvent"],
            id="first-sight-adds-the-finalizer-then-creates",
        ),
        pytest.param(
            observed(), "create", ["CreateWorkflow", "UpdateStatus", "RecordEvent"], id="new-release-creates"
        ),
        pytest.param(
            observed(plan=make_plan(revisions=())),
            "up-to-date",
            ["UpdateStatus"],
            id="nothing-out-of-date-waits",
        ),
        pytest.param(
            observed(spec=make_spec(paused=True)),
            "due-but-paused",
            ["UpdateStatus"],
            id="paused-spec-does-not-start-a-due-release",
        ),
        # -- no loops ------------------------------------------------------------------------
        pytest.param(
            observed(
                status=make_status(RolloutPhase.SUCCEEDED, make_rollout()),
                workflows=(make_wf(phase="Succeeded", finished_at=LONG_AGO),),
            ),
            "already-rolled-out",
            ["UpdateStatus"],
            id="succeeded-release-is-not-rolled-out-again",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.FAILED, make_rollout()),
                workflows=(make_wf(phase="Failed", finished_at=LONG_AGO),),
            ),
            "already-rolled-out",
            ["UpdateStatus"],
            id="failed-rollout-is-never-re-created",
        ),
        pytest.param(
            observed(status=make_status(RolloutPhase.FAILED, make_rollout()), workflows=()),
            "already-rolled-out",
            ["UpdateStatus"],
            id="failed-rollout-with-its-workflow-garbage-collected-is-not-re-created",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.ROLLED_BACK, make_rollout()),
                workflows=(make_wf(phase="Failed", finished_at=LONG_AGO),),
            ),
            "already-rolled-out",
            ["UpdateStatus"],
            id="rolled-back-release-is-not-started-again",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.FAILED, make_rollout()),
                retry_token="t1",
                workflows=(make_wf(phase="Failed", finished_at=LONG_AGO),),
            ),
            "create",
            ["CreateWorkflow", "UpdateStatus", "RecordEvent"],
            id="retry-token-starts-a-second-attempt",
        ),
        pytest.param(
            observed(
                status=make_status(
                    RolloutPhase.FAILED, make_rollout(rollout_id=f"{RELEASE}-2", attempt=2, retry_token="t1")
                ),
                retry_token="t1",
                workflows=(
                    make_wf(rollout_id=f"{RELEASE}-2", phase="Failed", finished_at=LONG_AGO, attempt=2),
                ),
            ),
            "already-rolled-out",
            ["UpdateStatus"],
            id="a-handled-retry-token-is-not-handled-again",
        ),
        pytest.param(
            observed(
                generation=3,
                spec=make_spec(paused=False),
                status=make_status(RolloutPhase.FAILED, make_rollout(generation=1)),
            ),
            "already-rolled-out",
            ["UpdateStatus"],
            id="pause-and-unpause-bump-the-generation-but-are-not-a-new-release",
        ),
        pytest.param(
            observed(
                generation=2,
                spec=make_spec(max_parallel=2),
                status=make_status(RolloutPhase.FAILED, make_rollout(generation=1)),
            ),
            "create",
            ["CreateWorkflow", "UpdateStatus", "RecordEvent"],
            id="a-real-spec-change-is-a-new-release",
        ),
        # -- the live rollout ----------------------------------------------------------------
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(stage="canary"),),
                plan=None,
            ),
            "follow",
            ["UpdateStatus"],
            id="running-workflow-is-followed",
        ),
        pytest.param(
            observed(
                spec=make_spec(paused=True),
                generation=2,
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(stage="canary"),),
                plan=None,
            ),
            "pause",
            ["SuspendWorkflow", "RecordEvent", "UpdateStatus"],
            id="pause-suspends-the-workflow",
        ),
        pytest.param(
            observed(
                spec=make_spec(paused=True),
                status=make_status(RolloutPhase.PAUSED, make_rollout()),
                workflows=(make_wf(suspended=True, by_us=True),),
                plan=None,
            ),
            "pause",
            ["UpdateStatus"],
            id="pause-of-a-suspended-workflow-writes-no-second-suspend",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PAUSED, make_rollout()),
                workflows=(make_wf(suspended=True, by_us=True),),
                plan=None,
            ),
            "resume",
            ["ResumeWorkflow", "RecordEvent", "UpdateStatus"],
            id="unpause-resumes-our-suspend",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(suspended=True, by_us=False),),
                plan=None,
            ),
            "suspended-by-someone",
            ["UpdateStatus"],
            id="argo-suspend-by-a-person-is-reported-not-undone",
        ),
        pytest.param(
            observed(
                generation=2,
                spec=make_spec(max_parallel=2, paused=True),
                status=make_status(RolloutPhase.SUCCEEDED, make_rollout(finished_at=NOW)),
                workflows=(make_wf(),),
                plan=None,
            ),
            "await-workflow-end",
            ["UpdateStatus"],
            id="an-end-recorded-by-the-last-cluster-lets-the-workflow-finish-unstopped-unsuspended",
        ),
        pytest.param(
            observed(
                spec=make_spec(paused=True),
                status=make_status(RolloutPhase.SUCCEEDED, make_rollout(finished_at=NOW)),
                workflows=(make_wf(suspended=True, by_us=True),),
                plan=None,
            ),
            "await-workflow-end",
            ["ResumeWorkflow", "UpdateStatus"],
            id="a-suspend-made-while-the-end-was-recorded-is-resumed",
        ),
        pytest.param(
            observed(
                generation=2,
                spec=make_spec(max_parallel=2),
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(),),
                plan=None,
            ),
            "stop-for-new-spec",
            ["StopWorkflow", "RecordEvent", "UpdateStatus"],
            id="new-spec-stops-the-running-rollout",
        ),
        pytest.param(
            observed(
                generation=2,
                spec=make_spec(max_parallel=2),
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(shutdown="Stop"),),
                plan=None,
            ),
            "stop-for-new-spec",
            ["UpdateStatus"],
            id="new-spec-waits-for-the-stop-without-stopping-twice",
        ),
        pytest.param(
            observed(
                generation=2,
                spec=make_spec(max_parallel=2),
                status=make_status(RolloutPhase.CANCELLED, make_rollout()),
                workflows=(make_wf(shutdown="Stop", phase="Failed", finished_at=FINISHED),),
            ),
            "create",
            ["CreateWorkflow", "UpdateStatus", "RecordEvent"],
            id="new-spec-starts-once-the-old-rollout-ended",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(shutdown="Stop"),),
                plan=None,
            ),
            "stopping",
            ["UpdateStatus"],
            id="argo-stop-in-progress-is-waited-for",
        ),
        # -- ends ----------------------------------------------------------------------------
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(phase="Succeeded", finished_at=FINISHED),),
            ),
            "await-exit-handler",
            ["UpdateStatus", "RequeueAfter"],
            id="finished-workflow-gives-its-exit-handler-time",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(phase="Error", finished_at=LONG_AGO),),
            ),
            "record-end",
            ["UpdateStatus"],
            id="finished-workflow-without-exit-handler-record-is-recorded",
        ),
        pytest.param(
            observed(status=make_status(RolloutPhase.PROGRESSING, make_rollout()), workflows=()),
            "workflow-deleted",
            ["UpdateStatus", "RecordEvent"],
            id="externally-deleted-workflow-is-reported-not-re-created",
        ),
        pytest.param(
            observed(status=make_status(RolloutPhase.CANCELLED, make_rollout()), workflows=()),
            "already-rolled-out",
            ["UpdateStatus"],
            id="after-the-report-the-deleted-workflow-stays-deleted",
        ),
        # -- restarts ------------------------------------------------------------------------
        pytest.param(
            observed(status=make_status(), workflows=(make_wf(),), plan=None),
            "adopt",
            ["UpdateStatus"],
            id="live-workflow-created-before-a-crash-is-adopted",
        ),
        pytest.param(
            observed(
                status=make_status(),
                workflows=(make_wf(), make_wf(rollout_id="0123456789", generation=0)),
                plan=None,
            ),
            "adopt",
            ["StopWorkflow", "UpdateStatus"],
            id="of-two-live-workflows-the-newest-is-adopted-the-other-stopped",
        ),
        pytest.param(
            observed(status=make_status(), workflows=(make_wf(phase="Failed", finished_at=LONG_AGO),)),
            "create",
            ["CreateWorkflow", "UpdateStatus", "RecordEvent"],
            id="finished-unrecorded-workflow-is-created-again-and-adopted-on-alreadyexists",
        ),
    ],
)
def test_decide(obs: Observed, step: str, actions: list[str]) -> None:
    decision = decide(obs, POLICY)
    assert (decision.step, kinds(decision)) == (step, actions), decision.reason
