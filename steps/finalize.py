"""The `finalize` step: the Workflow's exit handler; records how the rollout ended.

From `--workflow-status` (`{{workflow.status}}`: Succeeded, Failed, Error) and the Workflow's
`spec.shutdown` (`argo stop` sets Stop: the rollout was Cancelled), `orchestrator.argocd.assess.
assess_rollout` decides the rollout's phase; `orchestrator.api.rollout_status.finalize_rollout` sets
phase, message, the Ready and Progressing conditions, `rollout.finishedAt`, and closes the stages
that never finished (Progressing -> Failed or Cancelled, Pending -> Cancelled, each with why). Each
stage's summary is taken from its records first (`rollout_status.apply_summary`), so the status
shows the end counts whatever the watcher's live summary last wrote.

A Workflow whose rollout was superseded (the status describes a newer rollout) writes nothing: its
exit handler must not overwrite the new rollout's status. A rollout whose end is recorded
already keeps it: running the step twice writes nothing the second time.

Caller: `python -m steps finalize` (steps.cli), as the Workflow's `onExit`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from orchestrator.analysis.check import has_analysis
from orchestrator.api.models import (
    ProgressiveSync,
    ProgressiveSyncStatus,
    RolloutPhase,
)
from orchestrator.api.phases import STOPPED_ROLLOUT_PHASES
from orchestrator.api.rollout_status import apply_summary, finalize_rollout, is_finalized
from orchestrator.api.stage_records import summarize
from orchestrator.argocd import appsync
from orchestrator.argocd.assess import WorkflowOutcome, assess_rollout
from orchestrator.core.clock import Clock
from orchestrator.kube.client import PROGRESSIVE_SYNCS, WORKFLOWS, Kube, NotFound
from orchestrator.kube.stage_records import read_outcomes
from orchestrator.kube.status_writer import update_status
from orchestrator.planning.rollback import rollback_end
from steps.analyze import end_rollout_runs
from steps.common import RolloutRef, Tuning, owned_apps, run_view
from steps.terminate import terminate_operations

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FinalizeResult:
    """How the rollout ended (phase None: nothing was finalized, with why in `message`)."""

    rollout_id: str
    phase: RolloutPhase | None
    message: str
    # With `only`: the end is not that phase, or the Workflow is being shut down, and was left to
    # the exit handler (the last stage's `record` then exits 1: steps/rollout_end.py).
    deferred: bool = False

    @property
    def failed(self) -> bool:
        """The exit handler itself succeeded whatever the rollout's outcome: never exit 1."""
        return False

    @property
    def summary(self) -> str:
        """One line for people."""
        if self.phase is None:
            return f"finalize: rollout {self.rollout_id}: {self.message}"
        return f"finalize: rollout {self.rollout_id} {self.phase.value}: {self.message}"


def finalize(
    kube: Kube,
    rollout: RolloutRef,
    *,
    workflow_name: str,
    workflow_status: WorkflowOutcome,
    clock: Clock,
    tuning: Tuning | None = None,
    only: RolloutPhase | None = None,
) -> FinalizeResult:
    """Record the end of the rollout from the Workflow's outcome.

    `only`: record the end only when it is this phase, else write nothing (the last cluster step
    records a success before the exit handler runs, and leaves every other end to it:
    steps/rollout_end.py)."""
    tuning = tuning or Tuning()
    try:
        obj = kube.get(PROGRESSIVE_SYNCS, rollout.namespace, rollout.name)
    except NotFound:
        # Deleting a ProgressiveSync stops its Workflow; the exit handler then has nothing to mark.
        return FinalizeResult(
            rollout.rollout_id, None, f"ProgressiveSync {rollout.display} is gone; nothing to do"
        )
    ps = run_view(ProgressiveSync.model_validate(obj), rollout)
    generation = ps.metadata.generation
    shutdown = _shutdown(kube, rollout.namespace, workflow_name)
    if only is not None and shutdown:
        return FinalizeResult(
            rollout.rollout_id,
            None,
            f"the Workflow is being shut down ({shutdown}): its exit handler decides",
            deferred=True,
        )
    ended = _end_what_we_started(
        kube,
        rollout,
        ps,
        workflow_name=workflow_name,
        workflow_status=workflow_status,
        shutdown=shutdown,
        clock=clock,
        tuning=tuning,
    )
    now = clock.now()
    # Each stage's summary from its records, as they stand at the end (stage index -> outcomes).
    names = [s.name for s in ps.spec.stages]
    outcomes = read_outcomes(kube, rollout.namespace, rollout.name, rollout.rollout_id)
    summaries = {names[index]: summarize(stage) for index, stage in outcomes.items() if index < len(names)}

    def mutate(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        if status.rollout is not None and status.rollout.id != rollout.rollout_id:
            return status
        if is_finalized(status):
            # The first decision stands: stages it closed must not turn into a new reason.
            return status
        for stage in status.stages or []:
            if stage.name in summaries:
                status = apply_summary(status, stage.name, summaries[stage.name])
        phase, reason = assess_rollout(
            workflow_name, workflow_status, shutdown=shutdown, stages=status.stages or []
        )
        if only is not None and (phase != only or status.rollback is not None):
            return status
        if status.rollout is not None and not status.rollout.workflow:
            status.rollout.workflow = workflow_name
        if ended:
            reason = f"{reason}; {ended}"
        condition = None
        if status.rollback is not None:
            phase, reason, condition = rollback_end(status.rollback, names, outcomes, reason=reason, now=now)
        return finalize_rollout(
            status, phase=phase, reason=reason, now=now, generation=generation, condition_reason=condition
        )

    update = update_status(
        kube, rollout.namespace, rollout.name, mutate, what="finalize rollout", settings=tuning.status
    )
    stored = update.status
    if stored.rollout is not None and stored.rollout.id != rollout.rollout_id:
        return FinalizeResult(
            rollout.rollout_id, None, f"superseded by rollout {stored.rollout.id}; its status is left alone"
        )
    if only is not None and not is_finalized(stored):
        return FinalizeResult(
            rollout.rollout_id,
            None,
            f"the rollout's end is not {only.value}: its exit handler decides",
            deferred=True,
        )
    assert stored.phase is not None  # finalize_rollout always sets it
    return FinalizeResult(rollout.rollout_id, stored.phase, stored.message or "")


def _end_what_we_started(
    kube: Kube,
    rollout: RolloutRef,
    ps: ProgressiveSync,
    *,
    workflow_name: str,
    workflow_status: WorkflowOutcome,
    shutdown: str | None,
    clock: Clock,
    tuning: Tuning,
) -> str:
    """A rollout that failed or was cancelled terminates its syncs still in flight and its
    AnalysisRuns still running; what it did, in words.

    Nothing we started may apply the release after we said stop (DESIGN.md §3): `argo stop` kills
    the steps mid-wait, and a sync held back by a sync window would otherwise run when it opens.
    An AnalysisRun is ended here even though its step ends it on SIGTERM: Argo signals a step by
    exec into its container and does not retry when that fails (the Workflow's deadline).
    """
    status = ps.status or ProgressiveSyncStatus()
    if (status.rollout is not None and status.rollout.id != rollout.rollout_id) or is_finalized(status):
        return ""
    phase, _ = assess_rollout(workflow_name, workflow_status, shutdown=shutdown, stages=status.stages or [])
    if phase not in STOPPED_ROLLOUT_PHASES:
        return ""
    rollout = rollout.with_applications_of(ps)
    in_flight = [
        appsync.app_name(app)
        for app in owned_apps(kube, ps)
        if appsync.decide_terminate(app, rollout.rollout_id).action != appsync.TerminateAction.NONE
    ]
    said = []
    if in_flight:
        said.append(terminate_operations(kube, rollout, in_flight, clock=clock, tuning=tuning).summary)
    if has_analysis(ps.spec):
        runs = end_rollout_runs(
            kube,
            rollout.namespace,
            rollout.rollout_id,
            clock=clock,
            seconds=tuning.analysis_terminate_wait_seconds,
        )
        said += [runs] if runs else []
    return "; ".join(said)


def _shutdown(kube: Kube, namespace: str, workflow_name: str) -> str | None:
    """The Workflow's `spec.shutdown` (Stop/Terminate), or None (also when it is gone)."""
    try:
        workflow = kube.get(WORKFLOWS, namespace, workflow_name)
    except NotFound:
        log.warning(
            "Workflow %s/%s not found; deciding from --workflow-status alone", namespace, workflow_name
        )
        return None
    return (workflow.get("spec") or {}).get("shutdown") or None
