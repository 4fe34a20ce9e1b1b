"""The `select` step: plan one stage against the live fleet and record its targets.

It runs the planner (`orchestrator.planning.planner.plan_rollout`) on the live clusters, Applications and
ApplicationSet, with the progress the running rollout already recorded, so earlier stages keep
their clusters. The stage is recorded Progressing with its ordered targets and `startedAt`, or
Skipped with the planner's reason; a plan with errors (e.g. out-of-date clusters no stage covers)
fails the stage instead of running it. The targets are the step's output (a JSON list).

Idempotent: when this rollout already selected the stage, the recorded targets are returned as
they are, without planning again or writing anything. When the status describes no rollout or
another one, `select` starts this rollout's status (see `rollout_status.start_rollout`).

The module is named `select_stage` so that it never shadows the standard library's `select`.
Caller: `python -m steps select` (steps.cli); tests call `select_stage` directly too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from orchestrator.api.models import ProgressiveSyncStatus, StagePhase
from orchestrator.api.release import revision_key
from orchestrator.api.rollout_status import close_stage, find_stage, skip_stage, start_rollout, start_stage
from orchestrator.argocd.fleet import app_view_from_object
from orchestrator.core.clock import Clock
from orchestrator.kube.client import APPLICATIONS, Kube
from orchestrator.kube.status_writer import update_status
from orchestrator.planning.planner import StageState, plan_rollout, progress_from_status
from steps.common import RolloutRef, Tuning, check_stage, get_app_set, list_clusters, load_progressive_sync

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SelectResult:
    """The stage's targets in rollout order (empty when skipped or failed) and why."""

    stage: str
    phase: StagePhase
    targets: tuple[str, ...]
    reason: str
    from_status: bool = False  # True: this rollout had selected the stage already

    @property
    def failed(self) -> bool:
        """True when the stage cannot run (exit 1)."""
        return self.phase == StagePhase.FAILED

    @property
    def summary(self) -> str:
        """One line for people."""
        again = " (already selected)" if self.from_status else ""
        if self.phase == StagePhase.PROGRESSING or self.targets:
            targets = ", ".join(self.targets)
            return f"select: stage {self.stage!r}{again}: {len(self.targets)} target(s): {targets}"
        return f"select: stage {self.stage!r} {self.phase.value}{again}: {self.reason}"


def select_stage(
    kube: Kube, rollout: RolloutRef, *, stage: str, clock: Clock, tuning: Tuning | None = None
) -> SelectResult:
    """Plan `stage` for this rollout and record it; return its targets."""
    tuning = tuning or Tuning()
    ps = load_progressive_sync(kube, rollout)
    check_stage(ps, stage)
    status = ps.status or ProgressiveSyncStatus()
    ours = status.rollout is not None and status.rollout.id == rollout.rollout_id
    recorded = find_stage(status, stage) if ours else None
    if recorded is not None and recorded.phase != StagePhase.PENDING:
        log.info("stage %r was selected by rollout %s already; not planning again", stage, rollout.rollout_id)
        return SelectResult(
            stage, recorded.phase, tuple(recorded.targets), recorded.message, from_status=True
        )

    app_set = get_app_set(kube, rollout.argocd_namespace, ps.spec.app_set_ref.name)
    clusters = list_clusters(kube, rollout.argocd_namespace)
    items, _ = kube.list(APPLICATIONS, rollout.argocd_namespace)
    plan = plan_rollout(
        ps.spec,
        ps_name=ps.metadata.name,
        appset=app_set,
        clusters=clusters,
        apps=[app_view_from_object(item) for item in items],
        progress=progress_from_status(status) if ours else None,
    )
    for warning in plan.warnings:
        log.warning("plan: %s", warning.message)
    stage_plan = plan.stage(stage)
    planned_total = sum(len(s.targets) for s in plan.stages)
    now = clock.now()
    stage_names = [s.name for s in ps.spec.stages]
    revision = " ".join(revision_key(r) for r in plan.revisions)  # for people: status.rollout.revision

    targets: tuple[str, ...]
    if plan.has_errors:
        reason = "the plan has errors: " + "; ".join(issue.message for issue in plan.errors)
        phase, targets = StagePhase.FAILED, ()
    elif stage_plan.state == StageState.PLANNED:
        reason, phase, targets = stage_plan.reason, StagePhase.PROGRESSING, stage_plan.targets
    else:
        reason, phase, targets = stage_plan.reason, StagePhase.SKIPPED, ()

    def record(current: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        current = start_rollout(
            current,
            rollout_id=rollout.rollout_id,
            stage_names=stage_names,
            now=now,
            revision=revision,
            generation=ps.metadata.generation,
        )
        entry = find_stage(current, stage)
        if entry is not None and entry.phase != StagePhase.PENDING:
            return current  # a concurrent select of the same stage got there first: keep its answer
        if phase == StagePhase.PROGRESSING:
            return start_stage(
                current, stage=stage, targets=targets, message=reason, now=now, planned_total=planned_total
            )
        if phase == StagePhase.SKIPPED:
            return skip_stage(current, stage=stage, reason=reason, now=now, planned_total=planned_total)
        return close_stage(current, stage=stage, phase=StagePhase.FAILED, message=reason, now=now)

    update = update_status(
        kube, rollout.namespace, rollout.name, record, what=f"select stage {stage!r}", settings=tuning.status
    )
    entry = find_stage(update.status, stage)
    assert entry is not None  # record() created it
    return SelectResult(stage, entry.phase, tuple(entry.targets), entry.message)
