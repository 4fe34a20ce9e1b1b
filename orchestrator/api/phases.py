"""The phases of a rollout and of a stage, and the sets of them the code asks about, in one place.

`RolloutPhase` is `status.phase` (the ProgressiveSync's current or last rollout), `StagePhase` is
`status.stages[].phase`. Which phases are "finished", "unfinished" or "stopped" is asked by the
watcher's decision, the steps, the exit handler, the status functions and the CLI alike: each
question has one named set here, so a new phase is added to every answer at once.

Callers: `orchestrator.api.models` (the status fields' types; it re-exports the two enums), the
watcher, the steps, `orchestrator.argocd.assess`, `orchestrator.ops`; tests.
"""

from __future__ import annotations

from enum import StrEnum


class RolloutPhase(StrEnum):
    """The phase of the ProgressiveSync as a whole (its current or last rollout)."""

    PENDING = "Pending"
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    ROLLING_BACK = "RollingBack"
    """The rollout failed (or was cancelled) and `spec.rollback` is restoring the clusters it changed."""
    ROLLED_BACK = "RolledBack"
    """The rollout failed (or was cancelled) and every cluster it changed in the rollback's scope is
    back at the revision it ran before (or was left alone because someone moved it on since)."""


class StagePhase(StrEnum):
    """The phase of one stage within the current rollout."""

    PENDING = "Pending"
    PROGRESSING = "Progressing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SKIPPED = "Skipped"
    CANCELLED = "Cancelled"


# A rollout in one of these has ended: no step of it starts again (a person may `retry` a stopped one).
FINISHED_ROLLOUT_PHASES = frozenset(
    {RolloutPhase.SUCCEEDED, RolloutPhase.FAILED, RolloutPhase.CANCELLED, RolloutPhase.ROLLED_BACK}
)
# A rollout in one of these may still run steps (a Workflow of it is expected).
UNFINISHED_ROLLOUT_PHASES = frozenset(
    {RolloutPhase.PENDING, RolloutPhase.PROGRESSING, RolloutPhase.PAUSED, RolloutPhase.ROLLING_BACK}
)
# A rollout that ended without success: its syncs still in flight are ended, and a person may
# start it again with `progressive-sync retry` (the watcher never restarts it on its own; a
# release rolled back is not started again either).
STOPPED_ROLLOUT_PHASES = frozenset({RolloutPhase.FAILED, RolloutPhase.CANCELLED, RolloutPhase.ROLLED_BACK})
# Phases the steps record that the watcher's live summary of a running Workflow never replaces: the
# rollout's end (the exit handler's), and RollingBack (the exit handler's rollback is running).
STEP_RECORDED_ROLLOUT_PHASES = FINISHED_ROLLOUT_PHASES | {RolloutPhase.ROLLING_BACK}

# A stage in one of these has not reached its verdict yet (its message may still change).
UNFINISHED_STAGE_PHASES = frozenset({StagePhase.PENDING, StagePhase.PROGRESSING})
# A stage in one of these was closed; with `finishedAt` set its verdict is final.
FINISHED_STAGE_PHASES = frozenset(
    {StagePhase.SUCCEEDED, StagePhase.FAILED, StagePhase.SKIPPED, StagePhase.CANCELLED}
)
# A stage in one of these lets the rollout go on (and succeed): it updated its clusters or had none.
PASSED_STAGE_PHASES = frozenset({StagePhase.SUCCEEDED, StagePhase.SKIPPED})
# A stage in one of these ended without success: its clusters not started never will be.
STOPPED_STAGE_PHASES = frozenset({StagePhase.FAILED, StagePhase.CANCELLED})
