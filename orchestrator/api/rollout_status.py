"""Every change the steps make to a ProgressiveSync's status, as pure functions `status -> status`.

`orchestrator.kube.status_writer.update_status` applies one of these to a fresh read, compares, and
writes only when something changed; on a conflict it re-reads and applies the same function again.
So each function must be safe to re-apply: it states the end result ("cluster X is completed in
stage S") rather than a delta ("append X"). Each receives a copy it may change, and returns it.

Callers: the steps (`steps/`), through the status writer; tests call them directly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from orchestrator.api.conditions import ConditionType
from orchestrator.api.models import (
    ClusterFailure,
    ClusterNote,
    Condition,
    ConditionStatus,
    ProgressiveSyncStatus,
    RolloutPhase,
    RolloutStatus,
    StagePhase,
    StageStatus,
)
from orchestrator.api.phases import FINISHED_ROLLOUT_PHASES, UNFINISHED_STAGE_PHASES
from orchestrator.api.reasons import ROLLOUT_ENDED, Reason

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
    """`progress` = "updated/total" for `kubectl get`; the total comes from `select`'s plan."""
    tallies = [stage.tally() for stage in status.stages or []]
    completed = sum(tally.completed for tally in tallies)
    selected = sum(tally.targets for tally in tallies)
    total = planned_total
    if total is None and status.progress:
        match = re.fullmatch(r"\d+/(\d+)", status.progress)
        total = int(match.group(1)) if match else None
    status.progress = f"{completed}/{max(total or 0, selected)}"


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
    targets: Sequence[str],
    message: str,
    now: datetime,
    planned_total: int | None = None,
) -> ProgressiveSyncStatus:
    """Record the stage Progressing with its targets (keeps an earlier startedAt)."""
    entry = stage_of(status, stage)
    entry.phase = StagePhase.PROGRESSING
    entry.targets = list(targets)
    entry.clusters_omitted, entry.clusters_taken, entry.counts = "", None, None  # a ledger of its own again
    entry.message = message
    entry.started_at = entry.started_at or now
    entry.finished_at = None
    status.current_stage = stage
    if status.phase in (None, RolloutPhase.PENDING):
        # The watcher may have recorded the rollout as Pending; a stage under way makes it Progressing
        # (a Paused or ended rollout keeps its phase: those are the watcher's and finalize's to set).
        status.phase = RolloutPhase.PROGRESSING
    refresh_progress(status, planned_total)
    return status


def skip_stage(
    status: ProgressiveSyncStatus, *, stage: str, reason: str, now: datetime, planned_total: int | None = None
) -> ProgressiveSyncStatus:
    """Record the stage Skipped with the reason."""
    entry = stage_of(status, stage)
    entry.phase = StagePhase.SKIPPED
    entry.targets = []
    entry.message = reason
    entry.started_at = entry.started_at or now
    entry.finished_at = entry.finished_at or now
    status.current_stage = stage
    refresh_progress(status, planned_total)
    return status


def mark_syncing(status: ProgressiveSyncStatus, *, stage: str, cluster: str) -> ProgressiveSyncStatus:
    """The cluster's sync was requested: list it in `syncing` unless it already finished."""
    entry = stage_of(status, stage)
    finished = cluster in entry.completed or any(f.name == cluster for f in entry.failed)
    if not finished and cluster not in entry.syncing:
        entry.syncing.append(cluster)
    return status


def mark_completed(status: ProgressiveSyncStatus, *, stage: str, cluster: str) -> ProgressiveSyncStatus:
    """The cluster is done: move it from `syncing` to `completed`."""
    entry = stage_of(status, stage)
    entry.syncing = [name for name in entry.syncing if name != cluster]
    entry.failed = [failure for failure in entry.failed if failure.name != cluster]
    if cluster not in entry.completed:
        entry.completed.append(cluster)
    refresh_progress(status)
    return status


def set_note(status: ProgressiveSyncStatus, *, stage: str, cluster: str, note: str) -> ProgressiveSyncStatus:
    """The cluster's note in the stage (`notes`): set to `note`, or removed when `note` is empty."""
    entry = stage_of(status, stage)
    notes = [existing for existing in entry.notes if existing.name != cluster or note]
    for index, existing in enumerate(notes):
        if existing.name == cluster:
            notes[index] = ClusterNote(name=cluster, note=note)
            break
    else:
        if note:
            notes.append(ClusterNote(name=cluster, note=note))
    entry.notes = notes
    return status


def mark_failed(
    status: ProgressiveSyncStatus, *, stage: str, cluster: str, reason: str
) -> ProgressiveSyncStatus:
    """The cluster failed: move it from `syncing` to `failed` with the reason (first reason wins);
    its note goes (the reason says it all)."""
    entry = stage_of(status, stage)
    entry.notes = [note for note in entry.notes if note.name != cluster]
    entry.syncing = [name for name in entry.syncing if name != cluster]
    entry.completed = [name for name in entry.completed if name != cluster]
    if not any(failure.name == cluster for failure in entry.failed):
        entry.failed.append(ClusterFailure(name=cluster, reason=reason))
    refresh_progress(status)
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


def is_step_error(message: str) -> bool:
    """True for a stage message a step that could not do its job wrote (`note_step_error`)."""
    return message.startswith((STEP_ERROR, TEMPORARY_STEP_ERROR))


def close_stage(
    status: ProgressiveSyncStatus, *, stage: str, phase: StagePhase, message: str, now: datetime
) -> ProgressiveSyncStatus:
    """Record the stage's end (Succeeded, Failed or Skipped) and its finishedAt (kept once set)."""
    entry = stage_of(status, stage)
    entry.phase = phase
    entry.message = message
    entry.finished_at = entry.finished_at or now
    if phase == StagePhase.FAILED:
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
) -> ProgressiveSyncStatus:
    """The exit handler's write: the rollout's end phase, conditions, finishedAt, unfinished stages."""
    status.phase = phase
    status.message = reason
    if status.rollout is not None:
        status.rollout.finished_at = status.rollout.finished_at or now
    condition_reason = ROLLOUT_ENDED[phase]
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


def expanded(status: ProgressiveSyncStatus) -> dict[str, Any]:
    """The status as the API server stores it, with every stage's full cluster lists decoded.

    The stored status carries counts, the first few clusters in flight and failed and the ledger
    (`clusters`); this adds back, per stage, `targets`, `syncing`, `completed`, `failed` (every
    failed cluster; the reason where the status kept it) and `notes` as lists of every cluster,
    for `progressive-sync status -o json` and for tests that read per-cluster details.
    """
    data = status.to_api()
    for wire, stage in zip(data.get("stages") or [], status.stages or [], strict=True):
        wire["targets"] = list(stage.targets)
        wire["syncing"] = list(stage.syncing)
        wire["completed"] = list(stage.completed)
        wire["failed"] = [{"name": f.name, "reason": f.reason} for f in stage.failed]
        wire["notes"] = [{"name": n.name, "note": n.note} for n in stage.notes]
    return data


def expanded_wire(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """`expanded` of a status as read from the API server ({} for none)."""
    if not raw:
        return {}
    return expanded(ProgressiveSyncStatus.model_validate(dict(raw)))
