"""What the watcher's decision writes, applied with its status patch: the new release's Workflow name
and status, a retry's own rollout id, a deleted Workflow's condition and event, the reasons of an
invalid reference, the approval wait, a deletion stop; a patch applied twice changes nothing, the
end phase the exit handler recorded is never overwritten, the created Workflow carries the identity
a restarted watcher reads back.

No API server: inputs from tests/support/decide_inputs.py; time is a fixed `NOW`.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from orchestrator.api.models import (
    ConditionStatus,
    ProgressiveSyncStatus,
    RolloutPhase,
    RolloutStatus,
    StageCounts,
    StagePhase,
    StageStatus,
)
from orchestrator.argocd.fleet import AppSetView
from orchestrator.planning.contract import parse_contract
from orchestrator.planning.planner import release_id
from orchestrator.watcher.build import build_workflows
from orchestrator.watcher.decide import decide
from orchestrator.watcher.decision import (
    CreateWorkflow,
    Observed,
    RecordEvent,
    RequeueAfter,
    StopWorkflow,
)
from orchestrator.watcher.status_patch import apply_patch
from orchestrator.workflows.view import workflow_view_from_object
from tests.support.decide_inputs import (
    HASH,
    LONG_AGO,
    NOW,
    OLD_REVISION,
    POLICY,
    RELEASE,
    REVISION,
    WF_NAME,
    actions_of,
    condition_of,
    kinds,
    make_plan,
    make_rollout,
    make_status,
    make_wf,
    observed,
    patch_of,
)
from workflow_templates.settings import WorkflowSettings


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
    status = apply_patch(ProgressiveSyncStatus(), patch_of(decision), NOW)
    assert status.rollout is not None
    assert (status.rollout.id, status.rollout.workflow, status.rollout.attempt) == (RELEASE, WF_NAME, 1)
    assert (status.rollout.generation, status.rollout.spec_hash) == (1, HASH)
    assert status.phase == RolloutPhase.PROGRESSING
    assert status.progress == "0/3"
    assert [stage.name for stage in status.stages or []] == ["canary", "rest"]
    assert condition_of(status, "Progressing") == (ConditionStatus.TRUE, "RolloutProgressing")


def test_retry_attempt_gets_its_own_rollout_id_and_workflow() -> None:
    decision = decide(
        observed(status=make_status(RolloutPhase.FAILED, make_rollout()), retry_token="t1"), POLICY
    )
    create = actions_of(decision, CreateWorkflow)[0]
    assert isinstance(create, CreateWorkflow)
    assert (create.rollout_id, create.name, create.attempt) == (f"{RELEASE}-2", f"{WF_NAME}-2", 2)
    status = apply_patch(make_status(RolloutPhase.FAILED, make_rollout()), patch_of(decision), NOW)
    assert status.rollout is not None
    assert (status.rollout.attempt, status.rollout.retry_token) == (2, "t1")


def test_deleted_workflow_is_reported_with_condition_and_event() -> None:
    decision = decide(
        observed(status=make_status(RolloutPhase.PROGRESSING, make_rollout()), workflows=()), POLICY
    )
    status = apply_patch(make_status(RolloutPhase.PROGRESSING, make_rollout()), patch_of(decision), NOW)
    assert status.phase == RolloutPhase.CANCELLED
    assert condition_of(status, "Ready") == (ConditionStatus.FALSE, "WorkflowDeleted")
    assert status.rollout is not None and status.rollout.finished_at == NOW
    event = actions_of(decision, RecordEvent)[0]
    assert isinstance(event, RecordEvent) and event.reason == "WorkflowDeleted"


def test_invalid_reference_names_the_reason() -> None:
    decision = decide(observed(claimed_by="argocd/older"), POLICY)
    status = apply_patch(ProgressiveSyncStatus(), patch_of(decision), NOW)
    assert condition_of(status, "Valid") == (ConditionStatus.FALSE, "ApplicationSetClaimed")
    assert status.phase == RolloutPhase.PENDING
    assert "argocd/older" in (status.message or "")


def test_an_applicationset_with_argo_cds_rollingsync_is_refused() -> None:
    appset = AppSetView(name="myservice", namespace="argocd", uid="u1", strategy="RollingSync")
    decision = decide(observed(appset=appset), POLICY)
    status = apply_patch(ProgressiveSyncStatus(), patch_of(decision), NOW)
    assert condition_of(status, "Valid") == (ConditionStatus.FALSE, "ApplicationSetRollingSync")
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
    status = apply_patch(make_status(RolloutPhase.PROGRESSING, make_rollout()), patch_of(decision), NOW)
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
    once = apply_patch(obs.status.model_copy(deep=True), patch_of(decision), NOW)
    twice = apply_patch(once.model_copy(deep=True), patch_of(decision), NOW + timedelta(minutes=1))
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
    status = apply_patch(recorded.model_copy(deep=True), patch_of(decision), NOW)
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
    status = apply_patch(selected.model_copy(deep=True), patch_of(decide(observed(), POLICY)), NOW)
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
        assert apply_patch(status_in.model_copy(deep=True), patch_of(decision), NOW).phase == phase


def test_the_created_workflow_carries_the_identity_a_restarted_watcher_reads_back() -> None:
    obs = observed(retry_token="t0", uid="ps-uid")
    create = actions_of(build_workflows(decide(obs, POLICY), obs, WorkflowSettings()), CreateWorkflow)[0]
    assert isinstance(create, CreateWorkflow)
    view = workflow_view_from_object(create.workflow)
    assert (view.name, view.rollout_id, view.release_id, view.attempt) == (WF_NAME, RELEASE, RELEASE, 1)
    assert (view.generation, view.spec_hash, view.revision, view.retry_token) == (1, HASH, REVISION, "t0")
    assert create.workflow["metadata"]["ownerReferences"][0]["uid"] == "ps-uid"


def test_mixed_revisions_reach_the_steps_as_data() -> None:
    """Finding 4: the release's revision sets go from the plan to the steps' rollout contract unjoined."""
    plan = make_plan(revisions=((OLD_REVISION,), (REVISION,)))
    obs = observed(plan=plan)
    create = actions_of(build_workflows(decide(obs, POLICY), obs, WorkflowSettings()), CreateWorkflow)[0]
    assert isinstance(create, CreateWorkflow)
    assert create.release.revisions == ((REVISION,), (OLD_REVISION,))  # sorted, one tuple each
    arguments = {p["name"]: p["value"] for p in create.workflow["spec"]["arguments"]["parameters"]}
    assert parse_contract(arguments["contract"]).release == create.release.revisions
    cluster_step = next(t for t in create.workflow["spec"]["templates"] if t["name"] == "cluster")
    env = {e["name"]: e["value"] for e in cluster_step["container"]["env"]}
    assert env["PROGRESSIVE_SYNC_CONTRACT"] == "{{workflow.parameters.contract}}"
    assert create.release.id == release_id(1, [(REVISION,), (OLD_REVISION,)])


def test_a_workflow_that_cannot_be_built_is_a_reason_in_the_status_and_nothing_starts() -> None:
    obs = observed(has_finalizer=False)
    decision = build_workflows(decide(obs, POLICY), obs, WorkflowSettings(max_nodes=10))
    assert (decision.step, kinds(decision)) == ("workflow-invalid", ["AddFinalizer", "UpdateStatus"])
    status = apply_patch(make_status(), patch_of(decision), NOW)
    assert condition_of(status, "Valid") == (ConditionStatus.FALSE, "WorkflowInvalid")
    assert "above the limit of 10" in decision.reason
    assert (status.phase, status.rollout) == (None, None)
