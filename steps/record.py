"""The `record` step: close a stage Succeeded or Failed by `failurePolicy.maxFailedClusters`.

The decision (`orchestrator.argocd.assess.assess_stage`) is taken on the stage's records as read
right before the write (the cluster steps record there, and are done when this step runs) and the
status as read for the write; the stage's summary of those records goes into the status with it
(`rollout_status.apply_summary`). The message carries the counts ("3 of 4 clusters updated, 1
failed ..."), and `finishedAt` is set once. A stage already closed, skipped or cancelled keeps
its phase and message, so running the step again writes nothing.

Caller: `python -m steps record` (steps.cli); tests call `record_stage` directly too.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.api.models import ProgressiveSyncStatus, StagePhase
from orchestrator.api.phases import FINISHED_STAGE_PHASES
from orchestrator.api.rollout_status import apply_summary, close_stage, find_stage
from orchestrator.api.stage_records import StageOutcomes, summarize, summary_line
from orchestrator.argocd.assess import assess_stage
from orchestrator.kube.client import Kube
from orchestrator.kube.status_writer import update_status
from steps.common import (
    read_stage_outcomes,
)
from steps.context import StepContext

NEVER_SELECTED = "the stage was never selected (its select step did not run)"


@dataclass(frozen=True)
class RecordResult:
    """How the stage was closed."""

    stage: str
    phase: StagePhase
    message: str
    # The stage's summary line (`stage_records.summary_line`), as `progressive-sync status --watch`
    # prints it: what the Argo UI shows of the stage's clusters, in this node's log.
    progress: str = ""

    @property
    def failed(self) -> bool:
        """True when the stage failed (exit 1)."""
        return self.phase == StagePhase.FAILED

    @property
    def summary(self) -> str:
        """One line for people."""
        progress = f" {self.progress}" if self.progress else ""
        return f"record: stage {self.stage!r}: {self.phase.value}{progress}: {self.message}"


def decide_close(
    status: ProgressiveSyncStatus, stage: str, outcomes: StageOutcomes, max_failed_clusters: int
) -> tuple[StagePhase, str]:
    """The phase and message the stage closes with, from the status and the stage's records as
    they are now."""
    entry = find_stage(status, stage)
    if entry is None or entry.phase == StagePhase.PENDING:
        return StagePhase.FAILED, NEVER_SELECTED
    if entry.phase in FINISHED_STAGE_PHASES and entry.finished_at:
        return entry.phase, entry.message
    return assess_stage(entry, outcomes, max_failed_clusters=max_failed_clusters)


def record_stage(kube: Kube, ctx: StepContext) -> RecordResult:
    """Close the stage in the status and return how (`ctx`: the step's opening, steps.context)."""
    rollout, ps, stage, clock, tuning = ctx.rollout, ctx.ps, ctx.stage_name, ctx.clock, ctx.tuning
    max_failed = ps.spec.failure_policy.max_failed_clusters
    now = clock.now()
    outcomes = read_stage_outcomes(kube, rollout, ps, stage)

    def close(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        phase, message = decide_close(status, stage, outcomes, max_failed)
        if outcomes.records:
            status = apply_summary(status, stage, summarize(outcomes))
        return close_stage(status, stage=stage, phase=phase, message=message, now=now)

    update = update_status(
        kube, rollout.namespace, rollout.name, close, what=f"close stage {stage!r}", settings=tuning.status
    )
    entry = find_stage(update.status, stage)
    assert entry is not None  # close_stage created it
    return RecordResult(stage, entry.phase, entry.message, summary_line(summarize(outcomes)))
