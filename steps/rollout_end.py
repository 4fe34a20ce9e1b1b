"""The rollout's end recorded by the step of its last cluster (issue 33), before the exit handler.

On the real engine the Workflow of a rollout ends several step pods after its last cluster is done:
that cluster's pod ends, the controller sees it, the last stage's `record` pod starts, runs and
ends, then the exit handler's `finalize` pod does (docs/design/dev-stack.md: seconds each). The
syncs no longer wait for pods (the hand-offs, the stage boundary, the follower: steps/chain.py,
steps/follow.py), so on a short rollout these pods were most of the time between the last cluster
Healthy and the ProgressiveSync saying Succeeded. When the rollout contract says the last stage's
`record` is the Workflow's last step (`endsRollout`, orchestrator.planning.contract), the step that
closes that stage early (`steps.chain.close_early`: the last cluster's pod, or the follower) does
their work itself, with their functions:

1. `record` of the stage (`steps.record.record_stage`);
2. unless the stage failed, the exit handler's `finalize` as on a Workflow that succeeded
   (`steps.finalize.finalize`), which records the end only when it is Succeeded (`only`): not when
   the Workflow is being shut down, a rollback was recorded, or any stage did not pass. Every other
   end stays with the exit handler, which also starts a rollback.

The Workflow's own `record` runs after it as before, finds the stage closed and the end recorded
(it keeps the first decision) and writes nothing; the exit handler's steps are then skipped (below).
The status's fields are unchanged, only the moment the ProgressiveSync says Succeeded moves. A
rollout recorded Succeeded is never rolled back afterwards, even when the Workflow is stopped in its
last seconds (steps/rollback_plan.py).

The last stage's own `record` step does the same (`record_step`, issue 33): when the end was
not recorded early (a batch stage, analysis after the clusters, a cluster that failed within the
tolerance), `record` records it, so a Workflow that Succeeded always has its end recorded before its
exit handler runs. That is what lets the exit handler skip `finalize` (and `rollback-plan`) on a
Workflow that Succeeded (`workflow_templates.exit_handler`): one step pod, ~6 s on the real node,
off the end of every rollout that succeeds. To keep that true, `record` exits 1 when the stage
passed but the end could not be recorded Succeeded (the Workflow is being shut down, a stage never
finished): the Workflow then fails and its exit handler decides, as before.

Callers: `steps.chain.close_early`; `python -m steps record` for a stage that `endsRollout`.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.api.metadata import workflow_name
from orchestrator.api.models import RolloutPhase
from orchestrator.argocd.assess import WorkflowOutcome
from orchestrator.kube.client import Kube
from steps.context import StepContext
from steps.finalize import FinalizeResult, finalize
from steps.record import RecordResult, record_stage


@dataclass(frozen=True)
class RolloutEnd:
    """How the last stage was closed and, when it passed, what the end's record did."""

    recorded: RecordResult
    finalized: FinalizeResult | None

    @property
    def failed(self) -> bool:
        """As the last stage's `record` step exits: 1 when the stage failed, or when it passed and
        the end is left to the exit handler (see the module): a Workflow that Succeeded skips it."""
        if self.recorded.failed:
            return True
        return self.finalized is not None and self.finalized.deferred

    @property
    def summary(self) -> str:
        """One line for people."""
        if self.finalized is None:
            return f"{self.recorded.summary}; the rollout's end is left to the exit handler"
        return f"{self.recorded.summary}; {self.finalized.summary}"


def record_step(kube: Kube, ctx: StepContext) -> RecordResult | RolloutEnd:
    """The `record` step: for a stage that `endsRollout`, close it and record the end (see the
    module); for any other stage, close it (`steps.record.record_stage`)."""
    if ctx.stage.ends_rollout:
        return end_rollout(kube, ctx)
    return record_stage(kube, ctx)


def end_rollout(kube: Kube, ctx: StepContext) -> RolloutEnd:
    """Close the last stage of `ctx` and, unless it failed, record the rollout Succeeded (see the
    module)."""
    recorded = record_stage(kube, ctx)
    if recorded.failed:
        return RolloutEnd(recorded, None)
    rollout = ctx.rollout
    finalized = finalize(
        kube,
        rollout,
        workflow_name=workflow_name(rollout.name, rollout.rollout_id),
        workflow_status=WorkflowOutcome.SUCCEEDED,
        clock=ctx.clock,
        tuning=ctx.tuning,
        only=RolloutPhase.SUCCEEDED,
    )
    return RolloutEnd(recorded, finalized)
