"""The `select` step: plan one stage against the live fleet and record its targets.

It runs the planner (`orchestrator.planning.planner.plan_rollout`) on the live clusters, Applications and
ApplicationSet, with the progress the running rollout already recorded, so earlier stages keep
their clusters. The stage is recorded Progressing with its ordered targets and `startedAt`, or
Skipped with the planner's reason; a plan with errors (e.g. out-of-date clusters no stage covers)
fails the stage instead of running it. The targets are the step's output (a JSON list).

Refresh lag (issue 12 finding 5): Argo CD compares Applications one by one (every ~120 s plus
jitter without Git webhooks), so when a rollout starts some still read Synced at the commit before
the release and no stage would take them. Before recording the stage, `select` asks Argo CD to
compare again (`argocd.argoproj.io/refresh: normal`, which the ApplicationSet controller keeps)
every owned Application it has not compared since the rollout started and that does not already
was compared against a release revision; it does not wait for the answers: a later stage's `select`
plans with them. The stage message says how many were asked.

Idempotent: when this rollout already selected the stage, the recorded targets are returned as
they are, without planning again or writing anything. When the status describes no rollout or
another one, `select` starts this rollout's status (see `rollout_status.start_rollout`).

The module is named `select_stage` so that it never shadows the standard library's `select`.
Caller: `python -m steps select` (steps.cli); tests call `select_stage` directly too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.api.models import STATUS_MAX_BYTES, ProgressiveSyncStatus, StagePhase
from orchestrator.api.release import Revisions, revision_key
from orchestrator.api.rollout_status import (
    close_stage,
    find_stage,
    skip_stage,
    stage_of,
    start_rollout,
    start_stage,
)
from orchestrator.argocd import appsync
from orchestrator.argocd.fleet import AppSetView, AppView, app_view_from_object
from orchestrator.core.clock import Clock
from orchestrator.kube.client import APPLICATIONS, Kube, NotFound
from orchestrator.kube.status_writer import update_status
from orchestrator.planning.planner import IssueCode, StageState, plan_rollout, progress_from_status
from steps.common import (
    RolloutRef,
    Tuning,
    app_namespace,
    check_stage,
    get_app_set,
    list_clusters,
    load_progressive_sync,
)

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

    app_set = get_app_set(kube, app_namespace(ps), ps.spec.app_set_ref.name)
    clusters = list_clusters(kube, rollout.argocd_namespace)
    items, _ = kube.list(APPLICATIONS, app_namespace(ps))
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
    since = status.rollout.started_at if ours and status.rollout and status.rollout.started_at else now
    asked = refresh_not_compared_since(
        kube,
        rollout,
        items,
        app_set=app_set,
        app_set_name=ps.spec.app_set_ref.name,
        release=plan.revisions,
        since=since,
    )
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
    late = [w.message for w in plan.warnings if w.code == IssueCode.LATE_CLUSTERS]
    if late and phase != StagePhase.FAILED:
        reason += "; " + "; ".join(late)
    if asked:
        reason += (
            f"; asked Argo CD to compare {len(asked)} Application(s) not compared since the rollout "
            "started (a later stage takes them if they are behind the release)"
        )

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
            started = start_stage(
                current, stage=stage, targets=targets, message=reason, now=now, planned_total=planned_total
            )
            too_big = ledger_left_out(started, stage)
            if not too_big:
                return started
            entry = stage_of(started, stage)
            entry.targets, entry.clusters_omitted, entry.counts = [], "", None
            return close_stage(started, stage=stage, phase=StagePhase.FAILED, message=too_big, now=now)
        if phase == StagePhase.SKIPPED:
            return skip_stage(current, stage=stage, reason=reason, now=now, planned_total=planned_total)
        return close_stage(current, stage=stage, phase=StagePhase.FAILED, message=reason, now=now)

    update = update_status(
        kube, rollout.namespace, rollout.name, record, what=f"select stage {stage!r}", settings=tuning.status
    )
    entry = find_stage(update.status, stage)
    assert entry is not None  # record() created it
    return SelectResult(stage, entry.phase, tuple(entry.targets), entry.message)


def ledger_left_out(status: ProgressiveSyncStatus, stage: str) -> str:
    """Why the stage cannot run when the status could not hold its clusters' ledger ("" when it can).

    The steps read a stage's clusters from its ledger (`batch` its share, a step run again its
    outcome), so a stage whose ledger the bounded status would leave out is refused before any
    cluster starts (names of 253 characters, or tens of thousands of clusters in one stage).
    """
    for wire in status.to_api().get("stages") or []:
        if wire.get("name") == stage and wire.get("clustersOmitted"):
            targets = (wire.get("counts") or {}).get("targets", 0)
            return (
                f"its {targets} clusters' names do not fit in the ProgressiveSync status (kept under "
                f"{STATUS_MAX_BYTES:,} bytes), which the steps read them from: split the stage into "
                "smaller ones (a lower maxTargets, or one more stage with a narrower selector) or use "
                "shorter cluster names"
            )
    return ""


def refresh_not_compared_since(
    kube: Kube,
    rollout: RolloutRef,
    items: Sequence[Mapping[str, Any]],
    *,
    app_set: AppSetView | None,
    app_set_name: str,
    release: Sequence[Revisions],
    since: datetime,
) -> tuple[str, ...]:
    """Ask Argo CD to compare each owned Application it has not compared since `since` (see module).

    Skipped: Applications compared since, ones Argo CD already compared against a release revision
    (the plan has them, or they are up to date), ones with a refresh pending. One merge patch each;
    the names asked.
    """
    wanted = {tuple(revisions) for revisions in release}
    asked: list[str] = []
    for item in items:
        view: AppView = app_view_from_object(item)
        if not view.is_owned_by(app_set_name, app_set.uid if app_set else ""):
            continue
        if view.reconciled_at is not None and view.reconciled_at >= since:
            continue
        if tuple(view.sync_revisions) in wanted:
            continue  # Argo CD compared it against the release already
        if appsync.refresh_requested(item):
            continue
        try:
            namespace = str((item.get("metadata") or {}).get("namespace") or rollout.applications_namespace)
            kube.patch(APPLICATIONS, namespace, view.name, appsync.refresh_patch())
        except NotFound:
            continue
        asked.append(view.name)
    if asked:
        shown = ", ".join(asked[:10]) + (" ..." if len(asked) > 10 else "")
        log.info(
            "asked Argo CD to compare %d Application(s) not compared since %s: %s", len(asked), since, shown
        )
    return tuple(asked)
