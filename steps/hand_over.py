"""The `record-and-select` step: close one stage, then select the next, in one pod (issue 15).

Between two stages with nothing in between (no approval gate on the next stage, no bake after
this one) the Workflow runs one step where it ran two (`record` of this stage, then `select` of the
next): each step pod on the critical path costs about a second on the local engine and ~8 s on the
real node (docs/design/dev-stack.md), once per stage boundary. docs/design/workflow.md says where it is used.

What it does is exactly what the two steps did, in the same order, each with its own status write:

1. `record` of `stage` (`steps.record.record_stage`); when the stage failed beyond
   `maxFailedClusters` the step stops there and exits 1, so nothing after it runs and the next
   stage is never selected (its targets output is an empty list);
2. `select` of `next_stage` (`steps.select_stage.select_stage`); its targets are the step's output, which the
   next stage's fan-out takes; it starts the next stage's first wave (the rollout contract's `startSyncs` for
   it) as `select` does (steps/first_wave.py). A next stage that cannot run (a plan with errors, a ledger too
   large) is recorded Failed by `select` as always, but this step exits 0: that failure is the next stage's,
   and the next stage's own closing step reports it (its record keeps the closed phase and exits 1), so the
   Argo UI shows the failed stage failed, not this one.

Idempotent like its parts: run again, `record` keeps a closed stage as it is and `select` returns
the recorded targets of a stage this rollout selected already.

Caller: `python -m steps record-and-select` (steps.cli); tests call `hand_over` directly too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.kube.client import Kube
from steps.context import StepContext
from steps.record import RecordResult, record_stage
from steps.select_stage import SelectResult, select_stage


@dataclass(frozen=True)
class HandOverResult:
    """How the stage was closed and, when it did not fail, how the next one was selected."""

    recorded: RecordResult
    selected: SelectResult | None

    @property
    def failed(self) -> bool:
        """True when the closed stage failed (exit 1); a next stage that cannot run is its own failure."""
        return self.recorded.failed

    @property
    def targets(self) -> tuple[str, ...]:
        """The next stage's targets in rollout order (empty when it was not selected or cannot run)."""
        if self.selected is None or self.selected.failed:
            return ()
        return self.selected.targets

    @property
    def summary(self) -> str:
        """One line for people."""
        if self.selected is None:
            return f"{self.recorded.summary}; the next stage is not selected"
        return f"{self.recorded.summary}; {self.selected.summary}"


def hand_over(
    kube: Kube, ctx: StepContext, next_stage: str, *, on_next: Callable[[], None] | None = None
) -> HandOverResult:
    """Close the stage of `ctx`; unless it failed, select `next_stage` (see module), with its first
    wave as the rollout contract sizes it, as `select_stage` starts it.

    `on_next` is called between the two (the entrypoint then attributes an error to the next stage).
    """
    recorded = record_stage(kube, ctx)
    if recorded.failed:
        return HandOverResult(recorded, None)
    if on_next is not None:
        on_next()
    selected = select_stage(kube, ctx.reopen(kube, stage=next_stage, taking_over=True))
    return HandOverResult(recorded, selected)
