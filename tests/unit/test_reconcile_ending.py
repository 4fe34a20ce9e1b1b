"""Ending what a rollout started without its exit handler (issue 29, point 7): the syncs in flight,
the decision that ends them (bounded per reconcile, requeued) and the end record naming them; and
old Workflows brought back (issue 29, point 10b).

No API server: inputs from tests/support/decide_inputs.py; time is a fixed `NOW`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from orchestrator.api.models import (
    RolloutPhase,
)
from orchestrator.watcher.decide import decide
from orchestrator.watcher.decision import (
    EndSyncs,
    InFlightSync,
    Observed,
    RemoveFinalizer,
    RequeueAfter,
    StopWorkflow,
    syncs_in_flight,
)
from orchestrator.watcher.status_patch import apply_patch
from tests.support import builders
from tests.support.decide_inputs import (
    FINISHED,
    LONG_AGO,
    NOW,
    POLICY,
    PS,
    RELEASE,
    actions_of,
    kinds,
    make_rollout,
    make_status,
    make_wf,
    observed,
    patch_of,
)

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
    status = apply_patch(obs.status.model_copy(deep=True), patch_of(decision), NOW)
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


@pytest.mark.parametrize(
    ("finish", "phase"),
    [
        pytest.param(False, "RollingBack", id="the-live-summary-keeps-rolling-back"),
        pytest.param(True, "Cancelled", id="the-watchers-end-record-replaces-rolling-back"),
    ],
)
def test_rolling_back_is_replaced_only_by_an_end_record(finish: bool, phase: str) -> None:
    """Issue 32: the steps' RollingBack stays while its Workflow runs; a Workflow terminated or
    deleted mid-rollback is ended by the watcher's record (else the status stayed RollingBack)."""
    from orchestrator.api.models import ProgressiveSyncStatus, RolloutPhase, RolloutStatus
    from orchestrator.watcher.decision import StatusPatch

    status = ProgressiveSyncStatus(phase=RolloutPhase.ROLLING_BACK, rollout=RolloutStatus(id="r1"))
    patch = StatusPatch(
        observed_generation=1,
        phase=RolloutPhase.CANCELLED if finish else RolloutPhase.PROGRESSING,
        message="x",
        finish_rollout=finish,
    )
    assert apply_patch(status, patch, NOW).phase == phase
