"""What a running rollout already did, read from the ProgressiveSync status for the planner.

`progress_from_status(status)` turns the recorded stages into `RolloutProgress`: per stage, the
clusters it took (its targets, or, where the status left its list out, the digests of their names),
those it updated and those that failed, and its phase. The planner keeps a stage this rollout
selected exactly as recorded (`targets_of_taken_sets` resolves a stage kept only by its digests to
the fleet's clusters; `recorded_state` says what it is), so later stages get the answer the plan
gave at the start.

Pure; callers: `orchestrator.planning.planner`, the `select` step (through the planner).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from orchestrator.api.ledger import name_digest
from orchestrator.api.models import ProgressiveSyncStatus, StageCounts, StagePhase
from orchestrator.argocd.fleet import Cluster
from orchestrator.planning.plan import IssueCode, Issues, StageState, names_in_message

# --- progress of a running rollout --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageProgress:
    """What a running rollout recorded for one stage (from `status.stages[]`)."""

    name: str
    targets: tuple[str, ...] = ()
    completed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    phase: StagePhase = StagePhase.PENDING
    # A stage whose ledger the status left out: no names (`failed` holds only the few the status
    # kept), the digests of its targets' names (`orchestrator.api.ledger.name_digest`; empty when
    # the status kept none) and its stored counts.
    taken: frozenset[bytes] = frozenset()
    counted: StageCounts | None = None

    @property
    def is_selected(self) -> bool:
        """True once the rollout's `select` ran for this stage (or skipped it)."""
        return self.phase is not StagePhase.PENDING or bool(self.targets) or bool(self.taken)

    @property
    def targets_unknown(self) -> bool:
        """True when the status kept neither its targets nor their digests while some of them are
        not updated (a later stage could take those again)."""
        counted = self.counted
        return (
            not self.targets
            and not self.taken
            and counted is not None
            and counted.targets > counted.completed
        )


@dataclass(frozen=True, slots=True)
class RolloutProgress:
    """What the rollout under way already did: per stage, the clusters it took and updated."""

    rollout_id: str = ""
    stages: tuple[StageProgress, ...] = ()


def progress_from_status(status: ProgressiveSyncStatus) -> RolloutProgress:
    """The progress recorded in a ProgressiveSync status (pass it only for the rollout under way)."""
    return RolloutProgress(
        rollout_id=status.rollout.id if status.rollout else "",
        stages=tuple(
            StageProgress(
                name=stage.name,
                targets=tuple(stage.targets),
                completed=tuple(stage.completed),
                failed=tuple(f.name for f in stage.failed),
                phase=stage.phase,
                taken=stage.taken_digests(),
                counted=stage.tally() if stage.clusters_omitted else None,
            )
            for stage in status.stages or []
        ),
    )


def targets_of_taken_sets(
    issues: Issues, recorded: dict[str, StageProgress], clusters: Mapping[str, Cluster]
) -> dict[str, StageProgress]:
    """The recorded stages, those the status kept only as taken-sets with their targets: the
    fleet's clusters whose name digests are in the set (a cluster that left the fleet is no
    candidate anyway). A stage kept without either is an error (see `targets_unknown`)."""
    unknown = [s.name for s in recorded.values() if s.targets_unknown]
    if unknown:
        issues.error(
            IssueCode.PROGRESS_LEFT_OUT,
            f"the status no longer says which clusters stage(s) {names_in_message(unknown)} of the running "
            "rollout took (their list was left out of the status without the set of clusters taken, "
            "which an earlier version did not keep), and some of them are not updated: a later stage "
            "could take them again; retry the rollout (progressive-sync retry)",
            unknown,
        )
    if not any(s.taken and not s.targets for s in recorded.values()):
        return recorded
    by_digest = {name_digest(name): name for name in clusters}
    resolved = dict(recorded)
    for name, stage in recorded.items():
        if stage.taken and not stage.targets:
            targets = sorted(by_digest[d] for d in stage.taken if d in by_digest)
            resolved[name] = replace(stage, targets=tuple(targets))
    return resolved


def recorded_state(recorded: StageProgress, rollout: str) -> tuple[StageState, str]:
    """The state of a stage the running rollout already selected, and why."""
    targets = recorded.targets
    done = set(recorded.completed)
    completed = sum(1 for t in targets if t in done)
    total, failed = len(targets), len(recorded.failed)
    counted = recorded.counted
    if counted is not None:  # its ledger was left out: the stored counts
        total, completed, failed = counted.targets, counted.completed, counted.failed
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
