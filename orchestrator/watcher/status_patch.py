"""The watcher's status writes: the conditions it sets, and `apply_patch`, which writes a `StatusPatch`.

The condition builders take a `ConditionType` and a `Reason` of the catalog
(`orchestrator.api.reasons`); a message defaults to the reason's own when it has one without blanks.
`apply_patch` applies a decision's patch to a fresh status as a re-appliable function for the
optimistic-concurrency writer (`orchestrator.kube.status_writer`), and never overwrites the steps'
fields (docs/design/status-ownership.md).

Callers: `orchestrator.watcher.decide` and its rule modules, `build`, `act`; tests.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.api.conditions import ConditionType
from orchestrator.api.models import ConditionStatus, ProgressiveSyncStatus, RolloutPhase, StagePhase
from orchestrator.api.phases import FINISHED_STAGE_PHASES, STEP_RECORDED_ROLLOUT_PHASES
from orchestrator.api.reasons import Reason
from orchestrator.api.rollout_status import find_stage, set_condition, start_rollout
from orchestrator.watcher.decision import ConditionPatch, StatusPatch


def condition(type_: ConditionType, status: ConditionStatus, reason: Reason, message: str) -> ConditionPatch:
    """One condition to set."""
    return ConditionPatch(type_, status, reason, message)


def paused_condition(*, by_spec: bool, message: str = "") -> ConditionPatch:
    """`Paused`: True (SpecPaused) when `spec.paused` holds the rollout, else False (NotPaused)."""
    if by_spec:
        return condition(
            ConditionType.PAUSED,
            ConditionStatus.TRUE,
            Reason.SPEC_PAUSED,
            message or Reason.SPEC_PAUSED.say(),
        )
    return condition(ConditionType.PAUSED, ConditionStatus.FALSE, Reason.NOT_PAUSED, Reason.NOT_PAUSED.say())


def running_conditions(
    message: str, reason: Reason = Reason.ROLLOUT_PROGRESSING
) -> tuple[ConditionPatch, ...]:
    """`Ready=False, Progressing=True`: a rollout runs (or waits to start)."""
    return (
        condition(ConditionType.READY, ConditionStatus.FALSE, reason, message),
        condition(ConditionType.PROGRESSING, ConditionStatus.TRUE, reason, message),
    )


def ended_conditions(phase: RolloutPhase, reason: Reason, message: str) -> tuple[ConditionPatch, ...]:
    """`Ready` (True only for Succeeded), `Progressing=False`: the rollout ended in `phase`."""
    ready = ConditionStatus.TRUE if phase == RolloutPhase.SUCCEEDED else ConditionStatus.FALSE
    return (
        condition(ConditionType.READY, ready, reason, message),
        condition(ConditionType.PROGRESSING, ConditionStatus.FALSE, reason, message),
    )


def apply_patch(status: ProgressiveSyncStatus, patch: StatusPatch, now: datetime) -> ProgressiveSyncStatus:
    """Set the watcher's fields of `status` from `patch` (a copy the caller may change).

    Safe to re-apply to a fresher status after a conflict: it states end values, keeps the
    steps' fields (stages, their clusters, finishedAt once set, an end phase they recorded) and
    moves a condition's lastTransitionTime only when its status flips.
    """
    generation = patch.observed_generation
    status.observed_generation = generation
    if patch.start is not None:
        start = patch.start
        # The steps' own start (select) resets the stages for a new rollout id; same function here.
        start_rollout(
            status,
            rollout_id=start.id,
            stage_names=patch.stage_names,
            now=start.started_at or now,
            revision=start.revision,
            generation=generation,
        )
        assert status.rollout is not None
        status.rollout.workflow = start.workflow
        status.rollout.attempt = start.attempt
        status.rollout.generation = start.generation
        status.rollout.spec_hash = start.spec_hash
        status.rollout.retry_token = start.retry_token
        if start.started_at is not None and status.rollout.started_at is None:
            status.rollout.started_at = start.started_at
        if patch.progress_total is not None and status.progress is None:
            status.progress = f"0/{patch.progress_total}"
    if patch.retry_token is not None and status.rollout is not None:
        status.rollout.retry_token = patch.retry_token
    if patch.finish_rollout and status.rollout is not None and status.rollout.finished_at is None:
        status.rollout.finished_at = now
    # The watcher's live summary never replaces a phase the steps recorded (an end, RollingBack);
    # its own end record does replace RollingBack (a Workflow terminated or deleted mid-rollback).
    lifecycle_open = (
        patch.force_lifecycle
        or status.phase not in STEP_RECORDED_ROLLOUT_PHASES
        or (status.phase == RolloutPhase.ROLLING_BACK and patch.finish_rollout)
    )
    if lifecycle_open:
        if patch.phase is not None:
            status.phase = patch.phase
        if patch.message is not None:
            status.message = patch.message
        if patch.current_stage is not None and not _started_after(status, patch.current_stage):
            status.current_stage = patch.current_stage
        for lifecycle in patch.lifecycle:
            _set(status, lifecycle, now, generation)
    for other in patch.conditions:
        _set(status, other, now, generation)
    return status


def _started_after(status: ProgressiveSyncStatus, node_stage: str) -> bool:
    """Did the steps start the status's current stage after `node_stage`, the stage whose Workflow
    node runs now, closed already? The last cluster step of a stage closes it and selects the next
    one before Argo leaves the stage's node (the stage boundary, steps/chain.py): for those few
    seconds the status is ahead of the Workflow, and the watcher does not move it back."""
    ahead = status.current_stage
    if not ahead or ahead == node_stage:
        return False
    closed, started = find_stage(status, node_stage), find_stage(status, ahead)
    return (
        closed is not None
        and closed.phase in FINISHED_STAGE_PHASES
        and started is not None
        and started.phase == StagePhase.PROGRESSING
    )


def _set(status: ProgressiveSyncStatus, patched: ConditionPatch, now: datetime, generation: int) -> None:
    if patched.only_from is not None:
        stored = next((c for c in status.conditions or [] if c.type == patched.type), None)
        if stored is None or stored.status != patched.only_from:
            return  # the status moved on since the decision was taken on the cached one
    set_condition(
        status,
        patched.type,
        value=patched.status,
        reason=patched.reason,
        message=patched.message,
        now=now,
        generation=generation,
    )
