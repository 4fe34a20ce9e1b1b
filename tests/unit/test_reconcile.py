"""The watcher's pure decision (`reconcile.decide`) and its status patch, table by table.

No API server: every input is built here with small keyword builders; time is a fixed `NOW`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.api.models import (
    ConditionStatus,
    ProgressiveSyncSpec,
    ProgressiveSyncStatus,
    RolloutPhase,
    RolloutStatus,
    StageCounts,
    StagePhase,
    StageStatus,
)
from orchestrator.api.release import revisions_from_json, spec_hash
from orchestrator.argocd.fleet import AppSetView
from orchestrator.planning.planner import IssueCode, PlanIssue, RolloutPlan, StagePlan, StageState, release_id
from orchestrator.watcher.decide import (
    CreateWorkflow,
    Decision,
    EndSyncs,
    InFlightSync,
    Observed,
    ReconcilePolicy,
    RecordEvent,
    RemoveFinalizer,
    RequeueAfter,
    StopWorkflow,
    UpdateStatus,
    apply_patch,
    decide,
    syncs_in_flight,
)
from orchestrator.workflows.view import WorkflowView, workflow_view_from_object
from tests.support import builders
from tests.support.builders import make_stage
from workflow_templates.settings import WorkflowSettings

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PS = "web"
REVISION = "4f1c2e9"
OLD_REVISION = "9d2b7e4"
POLICY = ReconcilePolicy(finalize_grace_seconds=30, deletion_grace_seconds=30)


def make_spec(
    *, paused: bool = False, stages: tuple[str, ...] = ("canary", "rest"), max_parallel: int = 1
) -> ProgressiveSyncSpec:
    return builders.make_spec(
        *(make_stage(name, max_parallel=max_parallel) for name in stages), paused=paused
    )


SPEC = make_spec()
HASH = spec_hash(SPEC)
RELEASE = release_id(1, [(REVISION,)])
WF_NAME = f"{PS}-{RELEASE}"


def make_plan(
    *, revisions: tuple[tuple[str, ...], ...] = ((REVISION,),), errors: tuple[str, ...] = ()
) -> RolloutPlan:
    return RolloutPlan(
        ps_name=PS,
        app_set="myservice",
        stages=(
            StagePlan(name="canary", state=StageState.PLANNED, reason="", targets=("c1",)),
            StagePlan(name="rest", state=StageState.PLANNED, reason="", targets=("c2", "c3")),
        ),
        clusters={},
        revisions=revisions,
        errors=tuple(PlanIssue(IssueCode.UNCOVERED_CLUSTERS, message) for message in errors),
    )


def make_rollout(
    *,
    rollout_id: str = RELEASE,
    attempt: int = 1,
    generation: int = 1,
    spec_hash_: str = HASH,
    retry_token: str | None = None,
    workflow: str | None = None,
) -> RolloutStatus:
    return RolloutStatus(
        id=rollout_id,
        revision=REVISION,
        workflow=workflow if workflow is not None else f"{PS}-{rollout_id}",
        attempt=attempt,
        started_at=NOW - timedelta(minutes=10),
        generation=generation,
        spec_hash=spec_hash_,
        retry_token=retry_token,
    )


def make_status(
    phase: RolloutPhase | None = None, rollout: RolloutStatus | None = None
) -> ProgressiveSyncStatus:
    return ProgressiveSyncStatus(phase=phase, rollout=rollout, observed_generation=1)


def make_wf(
    *,
    rollout_id: str = RELEASE,
    phase: str = "Running",
    suspended: bool = False,
    by_us: bool = False,
    shutdown: str = "",
    spec_hash_: str = HASH,
    stage: str = "",
    waiting: str = "",
    finished_at: str = "",
    generation: int = 1,
    attempt: int = 1,
    started_at: str = "2026-11-30T11:50:00Z",
    created: str = "",
    name: str = "",
) -> WorkflowView:
    return WorkflowView(
        name=name or f"{PS}-{rollout_id}",
        created=created,
        namespace="argocd",
        ps_label=PS,
        rollout_id=rollout_id,
        release_id=rollout_id.split("-", maxsplit=1)[0],
        attempt=attempt,
        generation=generation,
        spec_hash=spec_hash_,
        revision=REVISION,
        phase=phase,
        suspended=suspended,
        suspended_by_us=by_us,
        shutdown=shutdown,
        current_stage=stage,
        waiting=waiting,
        started_at=started_at,
        finished_at=finished_at,
    )


def observed(**overrides: Any) -> Observed:
    base: dict[str, Any] = {
        "namespace": "argocd",
        "name": PS,
        "generation": 1,
        "spec": SPEC,
        "status": make_status(),
        "now": NOW,
        "appset": AppSetView(name="myservice", namespace="argocd", uid="u1"),
        "appset_namespace": "argocd",
        "plan": make_plan(),
    }
    base.update(overrides)
    return Observed(**base)


def kinds(decision: Decision) -> list[str]:
    return [type(action).__name__ for action in decision.actions]


def actions_of(decision: Decision, kind: type) -> list[Any]:
    """The decision's actions of one type, in order."""
    return [action for action in decision.actions if isinstance(action, kind)]


FINISHED = "2026-11-30T11:59:50Z"  # 10 s before NOW
LONG_AGO = "2026-11-30T11:00:00Z"


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


def test_new_release_workflow_name_and_status_record_the_release() -> None:
    decision = decide(observed(retry_token="old-token"), POLICY)
    create = actions_of(decision, CreateWorkflow)[0]
    assert isinstance(create, CreateWorkflow)
    assert (create.name, create.rollout_id, create.release_id, create.attempt) == (
        WF_NAME,
        RELEASE,
        RELEASE,
        1,
    )
    assert create.retry_token == "old-token", "a token present at a new release is consumed by it"
    status = apply_patch(ProgressiveSyncStatus(), _patch(decision), NOW)
    assert status.rollout is not None
    assert (status.rollout.id, status.rollout.workflow, status.rollout.attempt) == (RELEASE, WF_NAME, 1)
    assert (status.rollout.generation, status.rollout.spec_hash) == (1, HASH)
    assert status.phase == RolloutPhase.PROGRESSING
    assert status.progress == "0/3"
    assert [stage.name for stage in status.stages or []] == ["canary", "rest"]
    assert _condition(status, "Progressing") == (ConditionStatus.TRUE, "RolloutProgressing")


def test_retry_attempt_gets_its_own_rollout_id_and_workflow() -> None:
    decision = decide(
        observed(status=make_status(RolloutPhase.FAILED, make_rollout()), retry_token="t1"), POLICY
    )
    create = actions_of(decision, CreateWorkflow)[0]
    assert isinstance(create, CreateWorkflow)
    assert (create.rollout_id, create.name, create.attempt) == (f"{RELEASE}-2", f"{WF_NAME}-2", 2)
    status = apply_patch(make_status(RolloutPhase.FAILED, make_rollout()), _patch(decision), NOW)
    assert status.rollout is not None
    assert (status.rollout.attempt, status.rollout.retry_token) == (2, "t1")


def test_deleted_workflow_is_reported_with_condition_and_event() -> None:
    decision = decide(
        observed(status=make_status(RolloutPhase.PROGRESSING, make_rollout()), workflows=()), POLICY
    )
    status = apply_patch(make_status(RolloutPhase.PROGRESSING, make_rollout()), _patch(decision), NOW)
    assert status.phase == RolloutPhase.CANCELLED
    assert _condition(status, "Ready") == (ConditionStatus.FALSE, "WorkflowDeleted")
    assert status.rollout is not None and status.rollout.finished_at == NOW
    event = actions_of(decision, RecordEvent)[0]
    assert isinstance(event, RecordEvent) and event.reason == "WorkflowDeleted"


def test_invalid_reference_names_the_reason() -> None:
    decision = decide(observed(claimed_by="argocd/older"), POLICY)
    status = apply_patch(ProgressiveSyncStatus(), _patch(decision), NOW)
    assert _condition(status, "Valid") == (ConditionStatus.FALSE, "ApplicationSetClaimed")
    assert status.phase == RolloutPhase.PENDING
    assert "argocd/older" in (status.message or "")


def test_an_applicationset_with_argo_cds_rollingsync_is_refused() -> None:
    appset = AppSetView(name="myservice", namespace="argocd", uid="u1", strategy="RollingSync")
    decision = decide(observed(appset=appset), POLICY)
    status = apply_patch(ProgressiveSyncStatus(), _patch(decision), NOW)
    assert _condition(status, "Valid") == (ConditionStatus.FALSE, "ApplicationSetRollingSync")
    assert not actions_of(decision, CreateWorkflow), "two orchestrators would sync the same Applications"
    assert "spec.strategy" in (status.message or "")


def test_following_shows_the_stage_and_the_approval_wait() -> None:
    decision = decide(
        observed(
            status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
            workflows=(make_wf(stage="rest", waiting="approval"),),
            plan=None,
        ),
        POLICY,
    )
    status = apply_patch(make_status(RolloutPhase.PROGRESSING, make_rollout()), _patch(decision), NOW)
    assert status.current_stage == "rest"
    assert "waiting for approval" in (status.message or "")


def test_deletion_stop_names_the_reason() -> None:
    decision = decide(observed(deleting=True, deletion_started=NOW, workflows=(make_wf(),)), POLICY)
    stop = actions_of(decision, StopWorkflow)[0]
    requeue = actions_of(decision, RequeueAfter)[0]
    assert isinstance(stop, StopWorkflow) and "deleted" in stop.reason
    assert isinstance(requeue, RequeueAfter) and 0 < requeue.seconds <= 5


@pytest.mark.parametrize(
    "obs",
    [
        pytest.param(observed(), id="creating"),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(stage="canary"),),
            ),
            id="following",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.SUCCEEDED, make_rollout()), plan=make_plan(revisions=())
            ),
            id="converged",
        ),
        pytest.param(observed(appset=None), id="invalid"),
        pytest.param(
            observed(status=make_status(RolloutPhase.PROGRESSING, make_rollout()), workflows=()),
            id="deleted-workflow",
        ),
    ],
)
def test_applying_a_patch_twice_changes_nothing_the_second_time(obs: Observed) -> None:
    decision = decide(obs, POLICY)
    once = apply_patch(obs.status.model_copy(deep=True), _patch(decision), NOW)
    twice = apply_patch(once.model_copy(deep=True), _patch(decision), NOW + timedelta(minutes=1))
    assert twice.to_api() == once.to_api()


def test_the_watcher_never_overwrites_an_end_phase_the_exit_handler_recorded() -> None:
    recorded = make_status(RolloutPhase.FAILED, make_rollout())
    recorded.message = "stage 'canary' failed: c1 Degraded"
    # The decision was made on a stale cache that still said Progressing; the writer applies it to
    # the fresh status, which the exit handler already finalized.
    decision = decide(
        observed(
            status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
            workflows=(make_wf(phase="Failed", finished_at=LONG_AGO),),
        ),
        POLICY,
    )
    assert decision.step == "record-end"
    status = apply_patch(recorded.model_copy(deep=True), _patch(decision), NOW)
    assert (status.phase, status.message) == (RolloutPhase.FAILED, "stage 'canary' failed: c1 Degraded")


def test_start_keeps_what_select_recorded_for_the_same_rollout() -> None:
    selected = make_status(
        RolloutPhase.PROGRESSING, RolloutStatus(id=RELEASE, revision=REVISION, started_at=NOW)
    )
    selected.stages = [
        StageStatus(
            name="canary",
            phase=StagePhase.PROGRESSING,
            counts=StageCounts(targets=1, syncing=1),
            syncing=["c1"],
            records=["myservice-r1-0-0"],
        ),
        StageStatus(name="rest"),
    ]
    selected.progress = "0/3"
    status = apply_patch(selected.model_copy(deep=True), _patch(decide(observed(), POLICY)), NOW)
    assert status.stages is not None and status.stages[0] == selected.stages[0]
    assert status.rollout is not None and status.rollout.workflow == WF_NAME


def test_the_end_record_uses_the_workflow_outcome() -> None:
    status_in = make_status(RolloutPhase.PROGRESSING, make_rollout())
    for wf, phase in [
        (make_wf(phase="Succeeded", finished_at=LONG_AGO), RolloutPhase.SUCCEEDED),
        (make_wf(phase="Failed", finished_at=LONG_AGO), RolloutPhase.FAILED),
        (make_wf(phase="Failed", finished_at=LONG_AGO, shutdown="Terminate"), RolloutPhase.CANCELLED),
        # Terminated while Pending on the mutex: Argo marks it Succeeded without running a step.
        (make_wf(phase="Succeeded", finished_at=LONG_AGO, shutdown="Terminate"), RolloutPhase.CANCELLED),
    ]:
        decision = decide(observed(status=status_in, workflows=(wf,)), POLICY)
        assert apply_patch(status_in.model_copy(deep=True), _patch(decision), NOW).phase == phase


def test_the_created_workflow_carries_the_identity_a_restarted_watcher_reads_back() -> None:
    create = actions_of(decide(observed(retry_token="t0", uid="ps-uid"), POLICY), CreateWorkflow)[0]
    assert isinstance(create, CreateWorkflow)
    view = workflow_view_from_object(create.workflow)
    assert (view.name, view.rollout_id, view.release_id, view.attempt) == (WF_NAME, RELEASE, RELEASE, 1)
    assert (view.generation, view.spec_hash, view.revision, view.retry_token) == (1, HASH, REVISION, "t0")
    assert create.workflow["metadata"]["ownerReferences"][0]["uid"] == "ps-uid"


def test_mixed_revisions_reach_the_steps_as_data() -> None:
    """Finding 4: the release's revision sets go from the plan to the steps' `--revisions` unjoined."""
    plan = make_plan(revisions=((OLD_REVISION,), (REVISION,)))
    create = actions_of(decide(observed(plan=plan), POLICY), CreateWorkflow)[0]
    assert isinstance(create, CreateWorkflow)
    assert create.release.revisions == ((REVISION,), (OLD_REVISION,))  # sorted, one tuple each
    arguments = {p["name"]: p["value"] for p in create.workflow["spec"]["arguments"]["parameters"]}
    assert revisions_from_json(arguments["revisions"]) == create.release.revisions
    cluster_step = next(t for t in create.workflow["spec"]["templates"] if t["name"] == "cluster")
    assert cluster_step["container"]["args"][-2:] == ["--revisions", "{{workflow.parameters.revisions}}"]
    assert create.release.id == release_id(1, [(REVISION,), (OLD_REVISION,)])


def test_a_workflow_that_cannot_be_built_is_a_reason_in_the_status_and_nothing_starts() -> None:
    too_small = replace(POLICY, workflow=WorkflowSettings(max_nodes=10))
    decision = decide(observed(has_finalizer=False), too_small)
    assert (decision.step, kinds(decision)) == ("workflow-invalid", ["AddFinalizer", "UpdateStatus"])
    status = apply_patch(make_status(), _patch(decision), NOW)
    assert _condition(status, "Valid") == (ConditionStatus.FALSE, "WorkflowInvalid")
    assert "above the limit of 10" in decision.reason
    assert (status.phase, status.rollout) == (None, None)


def _patch(decision: Decision) -> Any:
    patches = [action.patch for action in actions_of(decision, UpdateStatus)]
    assert patches, decision
    return patches[0]


def _condition(status: ProgressiveSyncStatus, type_: str) -> tuple[ConditionStatus, str] | None:
    for condition in status.conditions or []:
        if condition.type == type_:
            return condition.status, condition.reason
    return None


# --- who may roll out what, and which sync options ------------------------------------------------


def spec_with(*, namespace: str | None = None, prune: bool = False, options: list[str] | None = None) -> Any:
    body = SPEC.to_api()
    if namespace is not None:
        body["appSetRef"]["namespace"] = namespace
    body["syncOptions"] = {"prune": prune, **({"options": options} if options else {})}
    return ProgressiveSyncSpec.model_validate(body)


SHARED = AppSetView(name="myservice", namespace="argocd", uid="u1", allowed_namespaces=("team-a",))


@pytest.mark.parametrize(
    ("obs", "policy", "reason", "words"),
    [
        pytest.param(
            observed(namespace="team-b", appset=SHARED, spec=spec_with(namespace="argocd")),
            POLICY,
            "NamespaceNotAllowed",
            ["argocd/myservice", "(team-a)", "not of namespace team-b", "allowed-namespaces"],
            id="another-namespace-not-listed-by-the-applicationset-is-refused",
        ),
        pytest.param(
            observed(
                namespace="team-b",
                appset=AppSetView(name="myservice", namespace="argocd", uid="u1"),
                spec=spec_with(namespace="argocd"),
            ),
            POLICY,
            "NamespaceNotAllowed",
            ["(none)", "not of namespace team-b"],
            id="an-applicationset-without-the-annotation-admits-only-its-own-namespace",
        ),
        pytest.param(
            observed(appset_watched=False, watched_appset_namespaces=("argocd",), appset=None),
            POLICY,
            "ApplicationSetNamespaceNotWatched",
            ["reads ApplicationSets only in namespace(s) argocd", "spec.appSetRef.namespace"],
            id="an-applicationset-in-a-namespace-the-watcher-does-not-read-is-refused",
        ),
        pytest.param(
            observed(spec=spec_with(prune=True)),
            POLICY,
            "SyncOptionNotAllowed",
            ["spec.syncOptions.prune: true", "policy.allowPrune"],
            id="prune-is-refused-unless-allowed",
        ),
        pytest.param(
            observed(spec=spec_with(options=["ServerSideApply=true", "Replace=true"])),
            POLICY,
            "SyncOptionNotAllowed",
            ["spec.syncOptions.options[1]: Replace=true", "allowed: ApplyOutOfSyncOnly=true"],
            id="a-sync-option-outside-the-allowed-list-is-refused-naming-field-and-value",
        ),
        pytest.param(
            observed(spec=spec_with(options=["Validate=false"])),
            ReconcilePolicy(allowed_sync_options=("ServerSideApply=true",)),
            "SyncOptionNotAllowed",
            ["options[0]: Validate=false", "allowed: ServerSideApply=true"],
            id="the-installation-list-replaces-the-default",
        ),
    ],
)
def test_a_refused_progressive_sync_is_valid_false_with_the_reason_and_starts_nothing(
    obs: Observed, policy: ReconcilePolicy, reason: str, words: list[str]
) -> None:
    decision = decide(obs, policy)
    assert actions_of(decision, CreateWorkflow) == []
    status = apply_patch(ProgressiveSyncStatus(), _patch(decision), NOW)
    valid = next(c for c in status.conditions or [] if c.type == "Valid")
    assert (valid.status, valid.reason) == (ConditionStatus.FALSE, reason)
    for word in words:
        assert word in valid.message, valid.message


@pytest.mark.parametrize(
    ("obs", "policy"),
    [
        pytest.param(
            observed(namespace="team-a", appset=SHARED, spec=spec_with(namespace="argocd")),
            POLICY,
            id="a-namespace-the-applicationset-lists-may-roll-it-out",
        ),
        pytest.param(
            observed(
                namespace="team-z",
                appset=AppSetView(name="myservice", namespace="argocd", allowed_namespaces=("*",)),
                spec=spec_with(namespace="argocd"),
            ),
            POLICY,
            id="star-admits-every-namespace",
        ),
        pytest.param(observed(), POLICY, id="its-own-namespace-needs-no-annotation"),
        pytest.param(
            observed(spec=spec_with(prune=True, options=["Replace=true"])),
            ReconcilePolicy(allow_prune=True, allowed_sync_options=("*",)),
            id="prune-and-any-option-when-the-installation-allows-them",
        ),
        pytest.param(
            observed(spec=spec_with(options=["ServerSideApply=true", "PruneLast=true"])),
            POLICY,
            id="default-allowed-options",
        ),
    ],
)
def test_an_admitted_progressive_sync_starts_its_rollout(obs: Observed, policy: ReconcilePolicy) -> None:
    decision = decide(obs, policy)
    assert decision.step == "create", decision.reason


# --- ending what a rollout started, without its exit handler (issue 29, point 7) ------------------

OLD_RELEASE = "0a1b2c3d4e"


def in_flight(*apps: str, rollout_id: str = RELEASE, phase: str = "Running") -> tuple[InFlightSync, ...]:
    return tuple(InFlightSync(app, "argocd", rollout_id, phase) for app in apps)


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        pytest.param(
            builders.make_app(operation=True, operation_info={"rollout-id": "r1"}),
            [("myservice-c1", "r1", "")],
            id="requested-not-taken-up",
        ),
        pytest.param(
            builders.make_app(
                operation=builders.our_operation(rollout_id="r1"),
                phase="Running",
                state_operation=builders.our_operation(rollout_id="r1"),
            ),
            [("myservice-c1", "r1", "Running")],
            id="running",
        ),
        pytest.param(
            builders.make_app(
                operation=builders.our_operation(rollout_id="r1"),
                phase="Terminating",
                state_operation=builders.our_operation(rollout_id="r1"),
            ),
            [("myservice-c1", "r1", "Terminating")],
            id="terminating",
        ),
        pytest.param(
            builders.make_app(phase="Failed", state_operation=builders.our_operation(rollout_id="r1")),
            [],
            id="ended",
        ),
        pytest.param(
            builders.make_app(
                operation=builders.foreign_operation(),
                phase="Running",
                state_operation=builders.foreign_operation(),
            ),
            [],
            id="someone-elses",
        ),
        pytest.param(builders.make_app(), [], id="no-operation"),
    ],
)
def test_syncs_in_flight(app: Any, expected: list[tuple[str, str, str]]) -> None:
    assert [(s.app, s.rollout_id, s.phase) for s in syncs_in_flight([app])] == expected


ENDED = make_status(RolloutPhase.FAILED, make_rollout())


@pytest.mark.parametrize(
    ("obs", "step", "actions"),
    [
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(),
                in_flight=in_flight("a1", "a2", phase=""),
            ),
            "workflow-deleted",
            ["EndSyncs", "UpdateStatus", "RecordEvent"],
            id="deleted-workflow-its-syncs-are-ended-then-the-end-recorded",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(phase="Failed", shutdown="Terminate", finished_at=LONG_AGO),),
                in_flight=in_flight("a1"),
            ),
            "record-end",
            ["EndSyncs", "UpdateStatus"],
            id="argo-terminate-skipped-the-exit-handler-the-watcher-ends-the-syncs",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(phase="Failed", shutdown="Terminate", finished_at=FINISHED),),
                in_flight=in_flight("a1"),
            ),
            "await-exit-handler",
            ["UpdateStatus", "RequeueAfter"],
            id="within-the-grace-the-exit-handler-ends-them",
        ),
        pytest.param(
            observed(status=ENDED, workflows=(), in_flight=in_flight("a1")),
            "already-rolled-out",
            ["EndSyncs", "UpdateStatus"],
            id="ended-rollout-with-a-sync-left-restart-or-bound-ends-it",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.SUCCEEDED, make_rollout()),
                workflows=(),
                in_flight=in_flight("a1"),
            ),
            "already-rolled-out",
            ["UpdateStatus"],
            id="a-rollout-that-succeeded-was-never-told-to-stop",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(phase="Succeeded", finished_at=LONG_AGO),),
                in_flight=in_flight("a1"),
            ),
            "record-end",
            ["UpdateStatus"],
            id="a-workflow-that-succeeded-without-its-exit-handler-ends-nothing",
        ),
        pytest.param(
            observed(status=ENDED, workflows=(), in_flight=in_flight("a1", phase="Terminating")),
            "already-rolled-out",
            ["UpdateStatus"],
            id="a-terminating-sync-is-argo-cds-to-end",
        ),
        pytest.param(
            observed(status=ENDED, workflows=(make_wf(),), in_flight=in_flight("a1"), plan=None),
            "follow",
            ["UpdateStatus"],
            id="its-workflow-still-runs-the-exit-handler",
        ),
        pytest.param(
            observed(status=ENDED, workflows=(), in_flight=in_flight("a1", rollout_id=OLD_RELEASE)),
            "already-rolled-out",
            ["UpdateStatus"],
            id="another-rollouts-sync-is-not-this-ones-to-end",
        ),
        pytest.param(
            observed(
                deleting=True, deletion_started=NOW, status=ENDED, workflows=(), in_flight=in_flight("a1")
            ),
            "deleting-release",
            ["EndSyncs", "RemoveFinalizer"],
            id="deletion-ends-the-syncs-before-the-finalizer-goes",
        ),
        pytest.param(
            observed(
                deleting=True,
                deletion_started=NOW,
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(shutdown="Stop"),),
                in_flight=in_flight("a1"),
            ),
            "deleting-await-stop",
            ["RequeueAfter"],
            id="deletion-gives-the-exit-handler-its-grace-first",
        ),
        pytest.param(
            observed(
                deleting=True,
                deletion_started=NOW - timedelta(minutes=5),
                status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
                workflows=(make_wf(shutdown="Stop"),),
                in_flight=in_flight("a1"),
            ),
            "deleting-release",
            ["EndSyncs", "RemoveFinalizer"],
            id="deletion-past-the-grace-ends-the-syncs-the-exit-handler-did-not",
        ),
    ],
)
def test_ending_syncs(obs: Observed, step: str, actions: list[str]) -> None:
    decision = decide(obs, POLICY)
    assert (decision.step, kinds(decision)) == (step, actions), decision.reason


def test_the_end_record_names_the_syncs_it_ends() -> None:
    obs = observed(
        status=make_status(RolloutPhase.PROGRESSING, make_rollout()),
        workflows=(),
        in_flight=in_flight("a1", "a2") + in_flight("b1", phase="Terminating"),
    )
    decision = decide(obs, POLICY)
    (end,) = actions_of(decision, EndSyncs)
    assert end == EndSyncs("argocd", RELEASE, ("a1", "a2"))
    status = apply_patch(obs.status.model_copy(deep=True), _patch(decision), NOW)
    assert status.phase == RolloutPhase.CANCELLED
    assert "ending the 2 sync(s) of it still in flight (a1, a2)" in (status.message or "")


@pytest.mark.parametrize("deleting", [pytest.param(False, id="ended"), pytest.param(True, id="deleting")])
def test_ending_is_bounded_per_reconcile_and_requeued(deleting: bool) -> None:
    obs = observed(
        status=ENDED,
        workflows=(),
        in_flight=in_flight("a1", "a2", "a3"),
        deleting=deleting,
        deletion_started=NOW,
    )
    decision = decide(obs, replace(POLICY, end_syncs_per_reconcile=2))
    (end,) = actions_of(decision, EndSyncs)
    assert end.apps == ("a1", "a2")
    assert actions_of(decision, RequeueAfter)
    assert not actions_of(decision, RemoveFinalizer), "the finalizer stays until every sync was ended"


# --- old Workflows brought back (issue 29, point 10b) ------------------------------------------

T_OLD, T_NEW = "2026-11-30T11:00:00Z", "2026-11-30T11:30:00Z"
NEW_RELEASE = "5e6f7a8b9c"


@pytest.mark.parametrize(
    ("obs", "step", "actions"),
    [
        pytest.param(
            observed(
                status=make_status(RolloutPhase.SUCCEEDED, make_rollout(rollout_id=NEW_RELEASE)),
                workflows=(
                    make_wf(rollout_id=NEW_RELEASE, phase="Succeeded", finished_at=LONG_AGO, created=T_NEW),
                    make_wf(rollout_id=OLD_RELEASE, created=T_OLD),
                ),
                plan=None,
            ),
            "no-plan",
            ["StopWorkflow", "RecordEvent"],
            id="argo-retry-of-an-old-workflow-is-stopped-not-adopted",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.PROGRESSING, make_rollout(rollout_id=NEW_RELEASE)),
                workflows=(
                    make_wf(rollout_id=NEW_RELEASE, created=T_NEW),
                    make_wf(rollout_id=OLD_RELEASE, created=T_OLD),
                ),
                plan=None,
            ),
            "follow",
            ["StopWorkflow", "RecordEvent", "UpdateStatus"],
            id="an-old-workflow-beside-the-running-rollout-is-stopped",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.SUCCEEDED, make_rollout(rollout_id=NEW_RELEASE)),
                workflows=(
                    make_wf(rollout_id=NEW_RELEASE, phase="Succeeded", finished_at=LONG_AGO, created=T_NEW),
                    make_wf(rollout_id=OLD_RELEASE, created=T_OLD, shutdown="Stop"),
                ),
                plan=None,
            ),
            "no-plan",
            [],
            id="a-stopped-old-workflow-is-not-stopped-again",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.SUCCEEDED, make_rollout(rollout_id=OLD_RELEASE)),
                workflows=(
                    make_wf(rollout_id=OLD_RELEASE, phase="Succeeded", finished_at=LONG_AGO, created=T_OLD),
                    make_wf(rollout_id=NEW_RELEASE, created=T_NEW),
                ),
                plan=None,
            ),
            "adopt",
            ["UpdateStatus"],
            id="a-newer-workflow-created-before-a-crash-is-adopted",
        ),
        pytest.param(
            observed(
                status=make_status(RolloutPhase.SUCCEEDED, make_rollout(rollout_id=NEW_RELEASE)),
                workflows=(
                    make_wf(rollout_id=NEW_RELEASE, phase="Succeeded", finished_at=LONG_AGO, created=T_OLD),
                    make_wf(rollout_id=OLD_RELEASE, created=T_NEW, name=f"{PS}-{OLD_RELEASE}-x7k2p"),
                ),
                plan=None,
            ),
            "no-plan",
            ["StopWorkflow", "RecordEvent"],
            id="a-resubmitted-copy-of-an-old-workflow-is-stopped",
        ),
    ],
)
def test_old_workflows_brought_back(obs: Observed, step: str, actions: list[str]) -> None:
    decision = decide(obs, POLICY)
    assert (decision.step, kinds(decision)) == (step, actions), decision.reason
    for stop in actions_of(decision, StopWorkflow):
        assert "argo retry" in stop.reason and NEW_RELEASE in stop.reason
