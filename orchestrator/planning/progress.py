"""What a running rollout already did, for the planner: each stage's phase and its clusters.

`progress_from_status(status, outcomes)` turns the recorded stages into `RolloutProgress`: per
stage, its phase from the ProgressiveSync status and the clusters it took, updated and failed
from its ProgressiveSyncStage records (`orchestrator.api.stage_records.StageOutcomes`, issue 30).
The planner keeps a stage this rollout selected exactly as recorded (`recorded_state` says what
it is), so later stages get the answer the plan gave at the start.

Pure; callers: `orchestrator.planning.planner`, the `select` step (through the planner).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.api.models import ProgressiveSyncStatus, StagePhase
from orchestrator.api.stage_records import StageOutcomes
from orchestrator.planning.plan import StageState, names_in_message

# --- progress of a running rollout --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageProgress:
    """What a running rollout recorded for one stage: its phase (`status.stages[]`) and its clusters
    (its ProgressiveSyncStage records)."""

    name: str
    targets: tuple[str, ...] = ()
    completed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    phase: StagePhase = StagePhase.PENDING

    @property
    def is_selected(self) -> bool:
        """True once the rollout's `select` ran for this stage (or skipped it)."""
        return self.phase is not StagePhase.PENDING or bool(self.targets)


@dataclass(frozen=True, slots=True)
class RolloutProgress:
    """What the rollout under way already did: per stage, the clusters it took and updated."""

    rollout_id: str = ""
    stages: tuple[StageProgress, ...] = ()


def progress_from_status(
    status: ProgressiveSyncStatus, outcomes: Mapping[str, StageOutcomes]
) -> RolloutProgress:
    """The progress of the rollout under way (pass it only for that one): each stage's phase from
    the status, its targets, completed and failed clusters from its records (`outcomes`, stage
    name -> `orchestrator.api.stage_records.StageOutcomes`; a stage without records took none)."""
    stages = []
    for stage in status.stages or []:
        found = outcomes.get(stage.name)
        stages.append(
            StageProgress(
                name=stage.name,
                targets=found.targets if found else (),
                completed=found.completed if found else (),
                failed=found.failed if found else (),
                phase=stage.phase,
            )
        )
    return RolloutProgress(rollout_id=status.rollout.id if status.rollout else "", stages=tuple(stages))


def recorded_state(recorded: StageProgress, rollout: str) -> tuple[StageState, str]:
    """The state of a stage the running rollout already selected, and why."""
    targets = recorded.targets
    done = set(recorded.completed)
    completed = sum(1 for t in targets if t in done)
    total, failed = len(targets), len(recorded.failed)
    if recorded.phase is StagePhase.SKIPPED:
        return StageState.SKIPPED, f"skipped by {rollout}"
    if recorded.phase is StagePhase.SUCCEEDED or (total and completed == total):
        return StageState.DONE, f"{completed} of {total} clusters updated by {rollout}"
    reason = f"selected by {rollout}: {completed} of {total} clusters updated"
    if failed:
        reason += f", {failed} failed ({names_in_message(recorded.failed)})"
    if recorded.phase is not StagePhase.PROGRESSING:
        reason += f"; stage {recorded.phase.value}"
    return StageState.PLANNED, reason


def rollout_name(progress: RolloutProgress | None) -> str:
    """The rollout as messages name it."""
    return f"rollout {progress.rollout_id}" if progress and progress.rollout_id else "the running rollout"
