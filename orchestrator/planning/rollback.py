"""Whether a rollout's end rolls it back, and which clusters of which stages, in which order.

`rollback_trigger` names why a rollout ended, in the words of `spec.rollback.on`:

- Cancelled: a person stopped the Workflow (`argo stop`, `progressive-sync cancel`, the Argo UI);
  the watcher's own stops (a newer release or spec supersedes it, the ProgressiveSync is being
  deleted) are no trigger: what the clusters run next is the next rollout's to decide;
- AnalysisFailed: a stage failed because its analysis gate did (the stage's AnalysisRun ended
  Failed, Error or Inconclusive, or with perCluster a cluster failed its own run);
- StageFailed: a stage failed because its failed clusters exceeded `maxFailedClusters`;
- DeadlineExceeded: the Workflow's `activeDeadlineSeconds` passed while a stage was in progress;
- none: the rollout succeeded, or a step could not run (an error, not a verdict on the release).

`plan_rollback` then takes the stages the scope names (FailedStage: the stage that failed or was
in progress; Reached: every stage up to it) and, in each, every cluster this rollout recorded (a
cluster without a record was never started: nothing to undo), later stages first. Which of a
cluster's Applications are actually synced back is the `rollback` step's decision, from the
Applications themselves (`orchestrator.argocd.rollback`).

`manual_targets` is the same choice for `progressive-sync rollback` (trigger "Manual", not one a
spec can list in `on`): the stage the recorded rollout ended in (the first that failed, else the
last that started: for a Succeeded rollout its last stage) and, with Reached, every stage before
it. `rollback_end` is how a rollback ended, for the status (the exit handler's `finalize` and the
manual rollback record it the same way).

Pure: the caller reads the status, the records and the Workflow. Callers: `steps.rollback_plan`,
`steps.finalize`, `steps.manual_rollback`, `orchestrator.cli.ops_cmd`; tests.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.api.models import STATUS_LIST_CAP, ClusterFailure, RollbackStatus, RolloutPhase, cut_reason
from orchestrator.api.phases import StagePhase
from orchestrator.api.reasons import ANALYSIS_CLUSTER_REASON, Reason
from orchestrator.api.rollback import RollbackScope, RollbackTrigger
from orchestrator.api.stage_records import ROLLBACK_END_STATES, RollbackState, StageOutcomes
from orchestrator.planning.sizing import clusters_of_batch

STAGE_FAILED = RollbackTrigger.STAGE_FAILED.value
ANALYSIS_FAILED = RollbackTrigger.ANALYSIS_FAILED.value
DEADLINE_EXCEEDED = RollbackTrigger.DEADLINE_EXCEEDED.value
CANCELLED = RollbackTrigger.CANCELLED.value
FAILED_STAGE_SCOPE = RollbackScope.FAILED_STAGE.value
REACHED_SCOPE = RollbackScope.REACHED.value
# The trigger of `progressive-sync rollback`: shown in status.rollback.trigger, never listed in `on`.
MANUAL = "Manual"

# The AnalysisRun phases that fail a gate (onInconclusive: Fail fails it on Inconclusive too).
_FAILED_RUN_PHASES = frozenset({"Failed", "Error", "Inconclusive"})


@dataclass(frozen=True)
class StageView:
    """What the decision needs of one stage: its phase and, when known, its AnalysisRun's phase."""

    name: str
    phase: StagePhase
    analysis_phase: str = ""


@dataclass(frozen=True)
class Trigger:
    """Why the rollout ended, as a rollback trigger (`reason` "" when none), the stage it ended in
    (index into the spec's stages; None when no stage had started), and why, for people."""

    reason: str
    stage: int | None
    why: str


@dataclass(frozen=True)
class RollbackTargets:
    """What the rollback does: the stages in the order it rolls them back, and each one's clusters
    in rollout order (a stage index absent from `clusters` has none). `why` says it in words."""

    trigger: Trigger
    stages: tuple[int, ...] = ()
    clusters: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    why: str = ""

    @property
    def total(self) -> int:
        """How many clusters the rollback looks at."""
        return sum(len(names) for names in self.clusters.values())


def rollback_trigger(
    stages: Sequence[StageView],
    *,
    succeeded: bool,
    stopped: bool,
    deadline_passed: bool,
    outcomes: Mapping[int, StageOutcomes],
    stopped_by_watcher: str = "",
) -> Trigger:
    """Why the rollout ended, as `spec.rollback.on` names it (see the module docstring).
    `stopped_by_watcher`: why the watcher stopped it ("" when it did not)."""
    failed = next((i for i, stage in enumerate(stages) if stage.phase == StagePhase.FAILED), None)
    current = _current_stage(stages)
    if stopped and stopped_by_watcher:
        # A newer release or spec supersedes it, or the ProgressiveSync is being deleted: the next
        # rollout (or nobody) decides what the clusters run; rolling back would only churn them.
        return Trigger("", current, f"the watcher stopped the rollout: {stopped_by_watcher}")
    if stopped:
        where = f" in stage {stages[current].name!r}" if current is not None else ""
        return Trigger(CANCELLED, current, f"the rollout was stopped{where}")
    if failed is not None:
        stage = stages[failed]
        if _failed_by_analysis(stage, outcomes.get(failed)):
            return Trigger(ANALYSIS_FAILED, failed, f"stage {stage.name!r} failed its analysis")
        return Trigger(STAGE_FAILED, failed, f"stage {stage.name!r} failed")
    if succeeded:
        return Trigger("", None, "the rollout succeeded")
    if deadline_passed:
        where = f" in stage {stages[current].name!r}" if current is not None else ""
        return Trigger(DEADLINE_EXCEEDED, current, f"the Workflow's deadline passed{where}")
    return Trigger("", current, "the rollout ended by a step error, not by a verdict on the release")


def plan_rollback(
    trigger: Trigger,
    *,
    on: Collection[str],
    scope: str,
    outcomes: Mapping[int, StageOutcomes],
) -> RollbackTargets:
    """The stages and clusters to roll back for `trigger` (none when `on` does not list it)."""
    if not trigger.reason:
        return RollbackTargets(trigger, why=f"no rollback: {trigger.why}")
    if trigger.reason not in on:
        listed = ", ".join(on) or "nothing"
        return RollbackTargets(
            trigger, why=f"no rollback: {trigger.why} ({trigger.reason}), and spec.rollback.on lists {listed}"
        )
    if trigger.stage is None:
        return RollbackTargets(trigger, why=f"no rollback: {trigger.why} before any stage started")
    first = trigger.stage if scope == FAILED_STAGE_SCOPE else 0
    stages = tuple(range(trigger.stage, first - 1, -1))
    clusters = {index: names for index in stages if (names := _to_roll_back(outcomes.get(index)))}
    order = tuple(index for index in stages if index in clusters)
    total = sum(len(names) for names in clusters.values())
    if not total:
        return RollbackTargets(trigger, why=f"no rollback: {trigger.why}, and no cluster was started")
    return RollbackTargets(
        trigger,
        stages=order,
        clusters=clusters,
        why=f"{trigger.why} ({trigger.reason}): rolling back {total} cluster(s), scope {scope}",
    )


def manual_targets(
    stages: Sequence[StageView], *, scope: str, outcomes: Mapping[int, StageOutcomes]
) -> RollbackTargets:
    """What `progressive-sync rollback` restores of the recorded rollout (see the module
    docstring): the clusters with a record whose rollback has not ended, later stages first."""
    failed = next((i for i, stage in enumerate(stages) if stage.phase == StagePhase.FAILED), None)
    ended = failed if failed is not None else _current_stage(stages)
    where = f" from stage {stages[ended].name!r}" if ended is not None else ""
    trigger = Trigger(MANUAL, ended, f"rolled back by hand{where}")
    if ended is None:
        return RollbackTargets(trigger, why="nothing to roll back: no stage of the rollout started")
    targets = plan_rollback(trigger, on=(MANUAL,), scope=scope, outcomes=outcomes)
    if not targets.stages:
        return RollbackTargets(
            trigger, why=f"nothing to roll back{where}: no cluster with a rollback still to do"
        )
    return targets


def _current_stage(stages: Sequence[StageView]) -> int | None:
    """The stage the rollout was in: the last one that started (not Pending, not Skipped)."""
    started = [
        i for i, stage in enumerate(stages) if stage.phase not in (StagePhase.PENDING, StagePhase.SKIPPED)
    ]
    return started[-1] if started else None


def _failed_by_analysis(stage: StageView, outcomes: StageOutcomes | None) -> bool:
    if stage.analysis_phase in _FAILED_RUN_PHASES:
        return True
    if outcomes is None:
        return False
    return any(ANALYSIS_CLUSTER_REASON.match(outcomes.clusters[name].reason) for name in outcomes.failed)


def _to_roll_back(outcomes: StageOutcomes | None) -> tuple[str, ...]:
    """The stage's clusters with a record whose rollback has not ended (a plan run again after some
    ended leaves those out)."""
    if outcomes is None:
        return ()
    return tuple(
        name
        for name in outcomes.ordered()
        if (rollback := outcomes.clusters[name].rollback) is None or rollback.state not in ROLLBACK_END_STATES
    )


@dataclass(frozen=True)
class RollbackTally:
    """How a rollback ended, from the records of the stages it rolled back."""

    rolled_back: int = 0
    left_alone: int = 0
    failed: tuple[tuple[str, str], ...] = ()  # (cluster, why), the stages in rollback order

    @property
    def complete(self) -> bool:
        """True when no cluster is left not restored."""
        return not self.failed


def tally_rollback(stages: Sequence[int], outcomes: Mapping[int, StageOutcomes]) -> RollbackTally:
    """Count the rollback's outcomes in `stages` (indexes, rollback order): every recorded cluster
    of them was a target, so one without an ended rollback is not restored (its step did not run:
    the Workflow was stopped or terminated meanwhile, or the step could not finish)."""
    rolled_back = left_alone = 0
    failed: list[tuple[str, str]] = []
    for index in stages:
        stage = outcomes.get(index)
        if stage is None:
            continue
        for name in stage.ordered():
            rollback = stage.clusters[name].rollback
            if rollback is None or rollback.state not in ROLLBACK_END_STATES:
                failed.append((name, "its rollback did not finish"))
            elif rollback.state == RollbackState.ROLLED_BACK:
                rolled_back += 1
            elif rollback.state == RollbackState.LEFT_ALONE:
                left_alone += 1
            else:
                failed.append((name, rollback.reason))
    return RollbackTally(rolled_back, left_alone, tuple(failed))


def rollback_end(
    rollback: RollbackStatus,
    names: Sequence[str],
    outcomes: Mapping[int, StageOutcomes],
    *,
    reason: str,
    now: datetime,
) -> tuple[RolloutPhase, str, Reason | None]:
    """The rollout's end once its rollback ran (`rollback`: `status.rollback`, updated here with the
    counts from the records): RolledBack, or Failed with RollbackFailed naming the clusters not
    restored; the message says it after `reason`."""
    order = [names.index(stage) for stage in rollback.stages if stage in names]
    tally = tally_rollback(order, outcomes)
    rollback.rolled_back = tally.rolled_back
    rollback.left_alone = tally.left_alone
    rollback.failed = len(tally.failed)
    rollback.not_restored = [
        ClusterFailure(name=name, reason=cut_reason(why)) for name, why in tally.failed[:STATUS_LIST_CAP]
    ]
    rollback.finished_at = rollback.finished_at or now
    done = f"{tally.rolled_back} cluster(s) restored" + (
        f", {tally.left_alone} left alone" if tally.left_alone else ""
    )
    if tally.complete:
        return RolloutPhase.ROLLED_BACK, f"{reason}; rolled back ({done})", None
    failed = ", ".join(f"{name} ({why})" for name, why in tally.failed[:3])
    more = f" and {len(tally.failed) - 3} more" if len(tally.failed) > 3 else ""
    return (
        RolloutPhase.FAILED,
        f"{reason}; rollback incomplete ({done}): {len(tally.failed)} cluster(s) not restored: "
        f"{failed}{more}",
        Reason.ROLLBACK_FAILED,
    )


def rollback_batch_share(outcomes: StageOutcomes, *, batches: int, batch: int, parallel: int) -> list[str]:
    """The clusters batch `batch` of a stage's rollback restores: its share of the stage's recorded
    clusters in rollout order (`sizing.clusters_of_batch` over `StageOutcomes.ordered`, so the share
    never moves when some clusters' rollbacks end), without those whose rollback ended."""
    share = clusters_of_batch(outcomes.ordered(), batches, batch, parallel)
    left = set(_to_roll_back(outcomes))
    return [name for name in share if name in left]


def batches_with_work(outcomes: StageOutcomes | None, *, batches: int, parallel: int) -> list[int]:
    """The batch indexes of a stage's rollback that have a cluster to restore (in order)."""
    if outcomes is None:
        return []
    return [
        batch
        for batch in range(batches)
        if rollback_batch_share(outcomes, batches=batches, batch=batch, parallel=parallel)
    ]
