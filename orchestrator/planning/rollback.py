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

With `spec.groupBy` (docs/groups.md, "Groups and rollback") each group is decided on its own:
`plan_group_rollback` takes each group's own outcome (`group_trigger`: its failed stage's
StageFailed/AnalysisFailed; for a group still running when the Workflow was stopped or ran out of
time, Cancelled/DeadlineExceeded; none for a group that Succeeded, which keeps the release) and
plans that group's stages alone, later first; `manual_group_targets` is the same for
`progressive-sync rollback` with the groups it picks. `RollbackTargets.groups` says, per group,
whether it rolls back and why, for the status and the CLI.

`fanout_items` says what each stage's rollback fan-out in the Workflow runs: a pod per cluster, or
batch pods, never more than may run at once (`rollback_batch_share` is a batch pod's share).

Pure: the caller reads the status, the records and the Workflow. Callers: `steps.rollback_plan`,
`steps.finalize`, `steps.manual_rollback`, `orchestrator.cli.ops_cmd`; tests.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.api.groups import group_phases, split_stage_name
from orchestrator.api.models import (
    STATUS_LIST_CAP,
    ClusterFailure,
    RollbackGroup,
    RollbackStatus,
    RolloutPhase,
    cut_reason,
)
from orchestrator.api.phases import StagePhase
from orchestrator.api.reasons import ANALYSIS_CLUSTER_REASON, Reason
from orchestrator.api.rollback import RollbackScope, RollbackTrigger
from orchestrator.api.stage_records import ROLLBACK_END_STATES, RollbackState, StageOutcomes
from orchestrator.planning.sizing import clusters_of_batch, rollback_batch_pods

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
class GroupDecision:
    """One group's part of a grouped rollback (spec.groupBy): its phase at the rollout's end, its
    own outcome as a trigger, the clusters it rolls back (0: it is left as it is) and why."""

    name: str
    phase: StagePhase
    trigger: Trigger
    clusters: int = 0
    why: str = ""

    @property
    def rolls_back(self) -> bool:
        """True when the rollback restores some of this group's clusters."""
        return self.clusters > 0

    def to_status(self) -> RollbackGroup:
        """The group as `status.rollback.groups[]` has it."""
        return RollbackGroup(
            name=self.name,
            trigger=self.trigger.reason,
            rolled_back=self.rolls_back,
            targets=self.clusters,
            reason=cut_reason(self.why),
        )


@dataclass(frozen=True)
class RollbackTargets:
    """What the rollback does: the stages in the order it rolls them back, and each one's clusters
    in rollout order (a stage index absent from `clusters` has none). `why` says it in words. With
    groups, `groups` says per group whether it rolls back (in the groups' order) and `stages` lists
    the groups' stages group after group, each group later stages first."""

    trigger: Trigger
    stages: tuple[int, ...] = ()
    clusters: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    why: str = ""
    groups: tuple[GroupDecision, ...] = ()

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
    among: Sequence[int] | None = None,
) -> RollbackTargets:
    """The stages and clusters to roll back for `trigger` (none when `on` does not list it);
    `among`: the stage indexes the scope may take (a group's, with groupBy; default every stage)."""
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
    stages = tuple(
        index
        for index in range(trigger.stage, first - 1, -1)
        if among is None or index in among or index == trigger.stage
    )
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


def _groups_of(stages: Sequence[StageView]) -> dict[str, list[int]]:
    """Each group's stage indexes, groups in the order their stages come ({} without groups)."""
    groups: dict[str, list[int]] = {}
    for index, stage in enumerate(stages):
        group, _ = split_stage_name(stage.name)
        if group is not None:
            groups.setdefault(group, []).append(index)
    return groups


def group_trigger(
    stages: Sequence[StageView],
    group: Sequence[int],
    *,
    phase: StagePhase,
    stopped: bool,
    deadline_passed: bool,
    outcomes: Mapping[int, StageOutcomes],
) -> Trigger:
    """One group's own outcome as a rollback trigger (`group`: its stage indexes). A group that
    Succeeded keeps the release (none), whatever ended the Workflow; a group whose stage failed
    ended by that failure (StageFailed or AnalysisFailed), also when the Workflow was stopped or
    ran out of time afterwards; a group still running (or not started) ends by how the Workflow
    ended: Cancelled when it was stopped, DeadlineExceeded when its deadline passed, else none (a
    step error)."""
    own = [stages[i] for i in group]
    if phase == StagePhase.SUCCEEDED:
        return Trigger("", None, "it succeeded: it keeps the release")
    failed = next((i for i in group if stages[i].phase == StagePhase.FAILED), None)
    if failed is not None:
        stage = stages[failed]
        if _failed_by_analysis(stage, outcomes.get(failed)):
            return Trigger(ANALYSIS_FAILED, failed, f"stage {stage.name!r} failed its analysis")
        return Trigger(STAGE_FAILED, failed, f"stage {stage.name!r} failed")
    current = _current_stage(own)
    at = group[current] if current is not None else None
    where = f" in stage {stages[at].name!r}" if at is not None else " before it started"
    if stopped:
        return Trigger(CANCELLED, at, f"the rollout was stopped{where}")
    if deadline_passed:
        return Trigger(DEADLINE_EXCEEDED, at, f"the Workflow's deadline passed{where}")
    return Trigger("", at, f"it ended by a step error{where}, not by a verdict on the release")


def plan_group_rollback(
    stages: Sequence[StageView],
    *,
    on: Collection[str],
    scope: str,
    stopped: bool,
    deadline_passed: bool,
    outcomes: Mapping[int, StageOutcomes],
    stopped_by_watcher: str = "",
) -> RollbackTargets:
    """A grouped rollout's rollback (spec.groupBy): each group's own outcome (`group_trigger`)
    planned over that group's stages alone (`plan_rollback`), the groups that `on` does not list,
    that Succeeded or that have no cluster to undo left as they are."""
    groups = _groups_of(stages)
    if stopped and stopped_by_watcher:
        why = f"no rollback: the watcher stopped the rollout: {stopped_by_watcher}"
        return RollbackTargets(Trigger("", None, why), why=why)
    phases = group_phases(stages)
    decisions: list[tuple[GroupDecision, RollbackTargets]] = []
    for group, indexes in groups.items():
        trigger = group_trigger(
            stages,
            indexes,
            phase=phases[group],
            stopped=stopped,
            deadline_passed=deadline_passed,
            outcomes=outcomes,
        )
        planned = plan_rollback(trigger, on=on, scope=scope, outcomes=outcomes, among=indexes)
        decisions.append((_decision(group, phases[group], planned), planned))
    return _combined(decisions, scope=scope)


def manual_group_targets(
    stages: Sequence[StageView],
    *,
    scope: str,
    outcomes: Mapping[int, StageOutcomes],
    groups: Collection[str] = (),
) -> RollbackTargets:
    """What `progressive-sync rollback` restores of a grouped rollout: in each group it picks, the
    stage that group ended in (its failed stage, else its last started one) and with Reached the
    group's stages before it, later first. `groups` names the groups (`--group`); by default the
    groups that did not Succeed, the ones the exit handler would pick, or every group when all of
    them Succeeded (as the command rolls back a Succeeded rollout without groups). A group it does
    not pick is listed as left."""
    all_groups = _groups_of(stages)
    phases = group_phases(stages)
    picked = (
        set(groups) or {g for g, phase in phases.items() if phase != StagePhase.SUCCEEDED} or set(all_groups)
    )
    decisions: list[tuple[GroupDecision, RollbackTargets]] = []
    for group, indexes in all_groups.items():
        if group not in picked:
            why = "not picked (--group)" if groups else f"it {phases[group].value}: it keeps the release"
            left = RollbackTargets(Trigger("", None, why), why=why)
            decisions.append((GroupDecision(group, phases[group], left.trigger, 0, why), left))
            continue
        own = [stages[i] for i in indexes]
        failed = next((i for i in indexes if stages[i].phase == StagePhase.FAILED), None)
        current = _current_stage(own)
        ended = failed if failed is not None else (indexes[current] if current is not None else None)
        where = f" from stage {stages[ended].name!r}" if ended is not None else ""
        trigger = Trigger(MANUAL, ended, f"rolled back by hand{where}")
        if ended is None:
            why = "nothing to roll back: none of its stages started"
            planned = RollbackTargets(trigger, why=why)
        else:
            planned = plan_rollback(trigger, on=(MANUAL,), scope=scope, outcomes=outcomes, among=indexes)
            if not planned.stages:
                planned = RollbackTargets(
                    trigger, why=f"nothing to roll back{where}: no cluster with a rollback still to do"
                )
        decisions.append((_decision(group, phases[group], planned), planned))
    return _combined(decisions, scope=scope, manual=True)


def _decision(group: str, phase: StagePhase, planned: RollbackTargets) -> GroupDecision:
    trigger = planned.trigger
    if planned.stages:
        why = f"{trigger.why} ({trigger.reason}): {planned.total} cluster(s)"
    else:
        why = planned.why.removeprefix("no rollback: ")
    return GroupDecision(group, phase, trigger, planned.total, why)


def describe_group_decisions(groups: Sequence[GroupDecision]) -> str:
    """'groups: eu-west-1 rolling back (stage 'eu-west-1/canary' failed (StageFailed): 1 cluster(s)),
    us-east-1 left (it succeeded: it keeps the release)' ("" without groups)."""
    if not groups:
        return ""
    return "groups: " + ", ".join(
        f"{group.name} {'rolling back' if group.rolls_back else 'left'} ({group.why})" for group in groups
    )


def _combined(
    decisions: Sequence[tuple[GroupDecision, RollbackTargets]], *, scope: str, manual: bool = False
) -> RollbackTargets:
    """The groups' rollbacks as one: their stages group after group, their clusters, the trigger
    of the groups that roll back (their distinct reasons, in order: "StageFailed, Cancelled")."""
    groups = tuple(decision for decision, _ in decisions)
    rolling = [planned for decision, planned in decisions if decision.rolls_back]
    reasons = list(dict.fromkeys(planned.trigger.reason for planned in rolling))
    said = describe_group_decisions(groups)
    if not rolling:
        nothing = "nothing to roll back" if manual else "no rollback"
        why = f"{nothing}: {said}"
        return RollbackTargets(Trigger("", None, why), why=why, groups=groups)
    stages = tuple(index for planned in rolling for index in planned.stages)
    clusters = {index: names for planned in rolling for index, names in planned.clusters.items()}
    total = sum(len(names) for names in clusters.values())
    first = rolling[0].trigger
    by_hand = "rolled back by hand, " if manual else ""
    trigger = Trigger(", ".join(reasons), first.stage, f"{by_hand}{said}")
    names = ", ".join(decision.name for decision in groups if decision.rolls_back)
    why = f"{by_hand}{said}: rolling back {total} cluster(s) of group(s) {names}, scope {scope}"
    return RollbackTargets(trigger, stages=stages, clusters=clusters, why=why, groups=groups)


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
    if rollback.groups:
        back = ", ".join(group.name for group in rollback.groups if group.rolled_back) or "none"
        kept = ", ".join(group.name for group in rollback.groups if not group.rolled_back) or "none"
        done += f"; groups rolled back: {back}; groups left: {kept}"
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


# rollback-plan's outputs, which the Workflow's rollback fan-outs take (workflow_templates.rollback).
CLUSTERS_OUTPUT_PREFIX = "rollback-"
BATCHES_OUTPUT_PREFIX = "rollback-batches-"


def clusters_output(stage_index: int) -> str:
    """rollback-plan's output (and file) with stage `stage_index`'s clusters, one `rollback` pod each."""
    return f"{CLUSTERS_OUTPUT_PREFIX}{stage_index}"


def batches_output(stage_index: int) -> str:
    """rollback-plan's output (and file) with stage `stage_index`'s `rollback-batch` pod indexes."""
    return f"{BATCHES_OUTPUT_PREFIX}{stage_index}"


@dataclass(frozen=True)
class FanoutItems:
    """What one stage's rollback fan-out iterates: `clusters`, one `rollback` pod each, or
    `batches`, the indexes of the `rollback-batch` pods with a cluster to restore. One of the two is
    empty, and neither holds more items than may run at once (`fanout_items`)."""

    clusters: tuple[str, ...] = ()
    batches: tuple[str, ...] = ()


def fanout_items(
    clusters: Sequence[str], outcomes: StageOutcomes | None, *, batches: int, parallel: int
) -> FanoutItems:
    """The items of a stage's rollback fan-out, for its `clusters` to restore (`plan_rollback`).

    The fan-out runs every item at once: the exit handler has no Argo `parallelism`, because Argo
    v3.7's controller exits (`level=fatal`, "was unable to get child node name") when `parallelism`
    holds back a task of an exit handler (docs/design/workflow.md, "No parallelism in the exit
    handler"). So a stage of one pod per cluster gets a pod per cluster only while they are at most
    `parallel` (rollbackParallel); with more, and for a stage in batches (`batches`, its forward
    batches), it gets `rollback_batch_pods` batch pods, each restoring its share one slot at a time.
    """
    if not batches and len(clusters) <= parallel:
        return FanoutItems(clusters=tuple(clusters))
    pods = rollback_batch_pods(batches, parallel)
    work = batches_with_work(outcomes, batches=pods, parallel=parallel)
    return FanoutItems(batches=tuple(str(batch) for batch in work))


def batches_with_work(outcomes: StageOutcomes | None, *, batches: int, parallel: int) -> list[int]:
    """The batch indexes of a stage's rollback that have a cluster to restore (in order)."""
    if outcomes is None:
        return []
    return [
        batch
        for batch in range(batches)
        if rollback_batch_share(outcomes, batches=batches, batch=batch, parallel=parallel)
    ]
