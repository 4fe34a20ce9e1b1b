"""Every change the steps make to a ProgressiveSync's status, as pure functions `status -> status`.

`orchestrator.kube.status_writer.update_status` applies one of these to a fresh read, compares, and
writes only when something changed; on a conflict it re-reads and applies the same function again.
So each function must be safe to re-apply: it states the end result ("cluster X is completed in
stage S") rather than a delta ("append X"). Each receives a copy it may change, and returns it.

The status holds each stage's summary (counts, the first clusters in flight, failed and noted,
its records' names), never a cluster's own record: that is in the stage's ProgressiveSyncStage
objects (`orchestrator.api.stage_records`), which the cluster steps merge-patch without touching
the ProgressiveSync. `apply_summary` is the one function that puts a stage's summary
(`stage_records.summarize`) into the status, for every writer (select, record, finalize, the
watcher's live summary).

Callers: the steps (`steps/`), through the status writer, and the watcher; tests call them directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from orchestrator.api.conditions import ConditionType
from orchestrator.api.groups import group_phases, split_stage_name
from orchestrator.api.models import (
    STATUS_LIST_CAP,
    ClusterFailure,
    ClusterNote,
    Condition,
    ConditionStatus,
    MoreClusters,
    ProgressiveSyncStatus,
    RolloutPhase,
    RolloutStatus,
    SkippedCluster,
    StageAnalysisStatus,
    StageCounts,
    StagePhase,
    StageStatus,
    cut_reason,
)
from orchestrator.api.phases import FINISHED_ROLLOUT_PHASES, UNFINISHED_STAGE_PHASES
from orchestrator.api.reasons import ROLLOUT_ENDED, Reason
from orchestrator.api.stage_records import StageSummary

# How a stage message written by a step that could not do its job begins (`note_step_error`);
# `finalize_rollout` keeps such a message in the stage's final one.
STEP_ERROR = "step error: "
TEMPORARY_STEP_ERROR = "temporary step error (the Workflow retries the step): "


def stage_of(status: ProgressiveSyncStatus, name: str) -> StageStatus:
    """The stage's status entry, appended (Pending) when the status has none yet."""
    stages = status.stages if status.stages is not None else []
    status.stages = stages
    for stage in stages:
        if stage.name == name:
            return stage
    stage = StageStatus(name=name)
    stages.append(stage)
    return stage


def find_stage(status: ProgressiveSyncStatus | None, name: str) -> StageStatus | None:
    """The stage's status entry, or None (read-only lookup)."""
    for stage in (status.stages if status else None) or []:
        if stage.name == name:
            return stage
    return None


def set_condition(
    status: ProgressiveSyncStatus,
    type_: ConditionType,
    *,
    value: ConditionStatus,
    reason: Reason,
    message: str,
    now: datetime,
    generation: int | None = None,
) -> None:
    """Set a metav1.Condition; lastTransitionTime moves only when the status value changes.

    The type and the reason come from their catalogs (`orchestrator.api.conditions`,
    `orchestrator.api.reasons`): a reason a person reads always has a documented meaning and fix."""
    conditions = list(status.conditions or [])
    for index, existing in enumerate(conditions):
        if existing.type == type_:
            moved = existing.status != value
            conditions[index] = Condition(
                type=type_.value,
                status=value,
                reason=reason.value,
                message=message,
                last_transition_time=now if moved else existing.last_transition_time,
                observed_generation=generation if generation is not None else existing.observed_generation,
            )
            break
    else:
        conditions.append(
            Condition(
                type=type_.value,
                status=value,
                reason=reason.value,
                message=message,
                last_transition_time=now,
                observed_generation=generation,
            )
        )
    status.conditions = conditions


def refresh_progress(status: ProgressiveSyncStatus, planned_total: int | None = None) -> None:
    """`progress` = "updated/total" for `kubectl get` (the total comes from `select`'s plan), and
    `counts`, the stages' counts added up (absent while no stage took a cluster)."""
    tallies = [stage.tally() for stage in status.stages or []]
    totals = StageCounts(
        targets=sum(tally.targets for tally in tallies),
        syncing=sum(tally.syncing for tally in tallies),
        completed=sum(tally.completed for tally in tallies),
        failed=sum(tally.failed for tally in tallies),
        skipped=sum(tally.skipped or 0 for tally in tallies) or None,
    )
    status.counts = totals if totals != StageCounts() else None
    # A target skipped by the sync step's re-check is done without an update: out of the total.
    completed = sum(tally.completed for tally in tallies)
    left_out = totals.skipped or 0
    selected = sum(tally.targets for tally in tallies)
    total = planned_total
    if total is None and status.progress:
        match = re.fullmatch(r"\d+/(\d+)", status.progress)
        total = int(match.group(1)) if match else None
    status.progress = f"{completed}/{max(total or 0, selected) - left_out}"


def start_rollout(
    status: ProgressiveSyncStatus,
    *,
    rollout_id: str,
    stage_names: Sequence[str],
    now: datetime,
    revision: str = "",
    generation: int | None = None,
) -> ProgressiveSyncStatus:
    """Make the status describe rollout `rollout_id` with every stage listed (Pending when new).

    A status that describes another rollout is replaced: the Workflow that runs `select` is the
    current one (the watcher stops a superseded Workflow before it starts a new one).
    """
    if status.rollout is None or status.rollout.id != rollout_id:
        status.rollout = RolloutStatus(id=rollout_id, revision=revision, started_at=now)
        status.rollback = None
        status.stages = [StageStatus(name=name) for name in stage_names]
        status.phase = RolloutPhase.PROGRESSING
        status.message = f"rollout {rollout_id} started"
        status.current_stage = None
        status.progress = None
        for type_, value in (
            (ConditionType.READY, ConditionStatus.FALSE),
            (ConditionType.PROGRESSING, ConditionStatus.TRUE),
        ):
            set_condition(
                status,
                type_,
                value=value,
                reason=Reason.ROLLOUT_PROGRESSING,
                message=status.message,
                now=now,
                generation=generation,
            )
    else:
        if revision and not status.rollout.revision:
            status.rollout.revision = revision
        if status.rollout.started_at is None:
            status.rollout.started_at = now
    for name in stage_names:
        stage_of(status, name)
    return status


def start_stage(
    status: ProgressiveSyncStatus,
    *,
    stage: str,
    summary: StageSummary,
    message: str,
    now: datetime,
    planned_total: int | None = None,
) -> ProgressiveSyncStatus:
    """Record the stage Progressing with the summary of its records (keeps an earlier startedAt)."""
    entry = stage_of(status, stage)
    entry.phase = StagePhase.PROGRESSING
    entry.message = message
    entry.started_at = entry.started_at or now
    entry.finished_at = None
    status.current_stage = stage
    if status.phase in (None, RolloutPhase.PENDING):
        # The watcher may have recorded the rollout as Pending; a stage under way makes it Progressing
        # (a Paused or ended rollout keeps its phase: those are the watcher's and finalize's to set).
        status.phase = RolloutPhase.PROGRESSING
    apply_summary(status, stage, summary)
    refresh_progress(status, planned_total)
    return status


def skip_stage(
    status: ProgressiveSyncStatus, *, stage: str, reason: str, now: datetime, planned_total: int | None = None
) -> ProgressiveSyncStatus:
    """Record the stage Skipped with the reason (it took no cluster)."""
    entry = stage_of(status, stage)
    entry.phase = StagePhase.SKIPPED
    entry.counts, entry.more = None, None
    entry.syncing, entry.failed, entry.notes, entry.records = [], [], [], []
    entry.message = reason
    entry.started_at = entry.started_at or now
    entry.finished_at = entry.finished_at or now
    status.current_stage = stage
    refresh_progress(status, planned_total)
    return status


def apply_summary(status: ProgressiveSyncStatus, stage: str, summary: StageSummary) -> ProgressiveSyncStatus:
    """Put a stage's summary (`stage_records.summarize` of its records) into the status: its counts,
    the first clusters in flight, failed and noted (reasons and notes cut to `REASON_MAX_CHARS`),
    how many each list left out, and its records' names; then the rollout's counts and progress.

    The stage's phase and message are left as they are (the steps own them). The same records
    always give the same status, so applying it again writes nothing.
    """
    entry = stage_of(status, stage)
    counts = summary.counts
    entry.counts = counts if counts != StageCounts() or summary.records else None
    entry.syncing = list(summary.syncing)
    entry.failed = [ClusterFailure(name=f.name, reason=cut_reason(f.reason)) for f in summary.failed]
    entry.notes = [ClusterNote(name=n.name, note=cut_reason(n.note)) for n in summary.notes]
    entry.skipped = skipped_list(entry.skipped, summary.skipped)
    more = MoreClusters(
        syncing=summary.more_syncing,
        failed=summary.more_failed,
        notes=summary.more_notes,
        skipped=summary.more_skipped or None,
    )
    entry.more = more if more != MoreClusters() else None
    entry.records = list(summary.records)
    refresh_progress(status)
    return status


def skipped_list(
    recorded: Sequence[SkippedCluster], new: Iterable[SkippedCluster], cap: int = STATUS_LIST_CAP
) -> list[SkippedCluster]:
    """A stage's `skipped`: the clusters `select` left out (kept as written) and then the targets the
    `sync` step found marked (from the records), each once, at most `cap`."""
    merged = {entry.name: entry for entry in recorded}
    for entry in new:
        merged.setdefault(entry.name, SkippedCluster(name=entry.name, reason=cut_reason(entry.reason)))
    return list(merged.values())[:cap]


def note_skipped(
    status: ProgressiveSyncStatus, *, stage: str, skipped: Mapping[str, str]
) -> ProgressiveSyncStatus:
    """Add the clusters `select` left out of the stage (cluster -> why: the plan's
    `StagePlan.skipped`) to its `skipped`."""
    if skipped:
        entry = stage_of(status, stage)
        entry.skipped = skipped_list(
            entry.skipped, (SkippedCluster(name=name, reason=why) for name, why in skipped.items())
        )
    return status


def note_step_error(
    status: ProgressiveSyncStatus, *, stage: str, message: str, final: bool
) -> ProgressiveSyncStatus:
    """A step of the stage could not do its job: the stage's message says so in the step's words.

    Only while the stage is unfinished (a closed stage's message is its verdict)."""
    entry = stage_of(status, stage)
    if entry.phase in UNFINISHED_STAGE_PHASES:
        entry.message = (STEP_ERROR if final else TEMPORARY_STEP_ERROR) + message
    return status


def note_analysis(
    status: ProgressiveSyncStatus, *, stage: str, run: str, phase: str, message: str
) -> ProgressiveSyncStatus:
    """The stage's AnalysisRun as it stands (its name, phase and what it says; message cut)."""
    entry = stage_of(status, stage)
    entry.analysis = StageAnalysisStatus(run=run, phase=phase, message=cut_reason(message))
    return status


def is_step_error(message: str) -> bool:
    """True for a stage message a step that could not do its job wrote (`note_step_error`)."""
    return message.startswith((STEP_ERROR, TEMPORARY_STEP_ERROR))


def close_stage(
    status: ProgressiveSyncStatus, *, stage: str, phase: StagePhase, message: str, now: datetime
) -> ProgressiveSyncStatus:
    """Record the stage's end (Succeeded, Failed or Skipped) and its finishedAt (kept once set).

    A failed stage fails the rollout; with spec.groupBy, a failed group stage while another group
    still runs leaves the rollout Progressing and says the group stopped (the exit handler records
    Failed once every group ended: docs/groups.md)."""
    entry = stage_of(status, stage)
    entry.phase = phase
    entry.message = message
    entry.finished_at = entry.finished_at or now
    if phase == StagePhase.FAILED:
        group, _ = split_stage_name(stage)
        running = [
            other
            for other, other_phase in group_phases(status.stages or []).items()
            if other != group and other_phase in UNFINISHED_STAGE_PHASES
        ]
        if group is not None and running:
            status.message = (
                f"stage {stage!r} failed: {message}; group {group} stopped, groups {', '.join(running)} go on"
            )
            return status
        status.phase = RolloutPhase.FAILED
        status.message = f"stage {stage!r} failed: {message}"
    return status


def is_finalized(status: ProgressiveSyncStatus) -> bool:
    """True when the rollout's end was recorded already (finishedAt and a final phase)."""
    return (
        status.rollout is not None
        and status.rollout.finished_at is not None
        and status.phase in FINISHED_ROLLOUT_PHASES
    )


def finalize_rollout(
    status: ProgressiveSyncStatus,
    *,
    phase: RolloutPhase,
    reason: str,
    now: datetime,
    generation: int | None = None,
    condition_reason: Reason | None = None,
) -> ProgressiveSyncStatus:
    """The exit handler's write: the rollout's end phase, conditions, finishedAt, unfinished stages.
    `condition_reason`: the conditions' reason when not the phase's own (`ROLLOUT_ENDED`)."""
    status.phase = phase
    status.message = reason
    if status.rollout is not None:
        status.rollout.finished_at = status.rollout.finished_at or now
    condition_reason = condition_reason or ROLLOUT_ENDED[phase]
    ready = ConditionStatus.TRUE if phase == RolloutPhase.SUCCEEDED else ConditionStatus.FALSE
    for type_, value in ((ConditionType.READY, ready), (ConditionType.PROGRESSING, ConditionStatus.FALSE)):
        set_condition(
            status,
            type_,
            value=value,
            reason=condition_reason,
            message=reason,
            now=now,
            generation=generation,
        )
    ended = {RolloutPhase.FAILED: "failed", RolloutPhase.CANCELLED: "was cancelled"}.get(phase, "ended")
    for stage in status.stages or []:
        if stage.phase not in UNFINISHED_STAGE_PHASES:
            continue
        if stage.phase == StagePhase.PROGRESSING or is_step_error(stage.message):
            tally = stage.tally()
            counts = f"{tally.completed} of {tally.targets} clusters updated, {tally.failed} failed"
            why = f"{stage.message}; the rollout {ended}" if is_step_error(stage.message) else ""
            stage.phase = StagePhase.FAILED if phase == RolloutPhase.FAILED else StagePhase.CANCELLED
            stage.message = f"did not finish ({counts}): {why or f'the rollout {ended}: {reason}'}"
        else:
            stage.phase = StagePhase.CANCELLED
            stage.message = f"not started: the rollout {ended}: {reason}"
        stage.finished_at = stage.finished_at or now
    refresh_progress(status)
    return status
