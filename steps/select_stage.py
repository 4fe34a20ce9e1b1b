"""The `select` step: plan one stage against the live fleet and record its targets.

It runs the planner (`orchestrator.planning.planner.plan_rollout`) on the live clusters, Applications and
ApplicationSet, with the progress the running rollout already recorded (the stages' phases in the
status, their clusters in their ProgressiveSyncStage records), so earlier stages keep their
clusters. A stage that runs gets its records first (`orchestrator.kube.stage_records.create_records`:
its ordered targets, cut into parts; a record that exists already, from a `select` run before, is
adopted with its targets: each cluster is recorded once), then is recorded Progressing in the
status with their summary and `startedAt`; a stage that does not is recorded Skipped with the
planner's reason; a plan with errors (e.g. out-of-date clusters no stage covers)
fails the stage instead of running it. The targets are the step's output (a JSON list).

Refresh lag (issue 12 finding 5, issue 13): Argo CD compares Applications one by one (every ~120 s
plus jitter without Git webhooks), so when a rollout starts some still read Synced at the commit
before the release and no stage would take them. Before planning the stage, `select` asks Argo CD to
compare again (`argocd.argoproj.io/refresh: normal`, which the ApplicationSet controller keeps) every
owned Application not compared against a release revision and without a refresh pending, then waits
(`--compare-wait-seconds`, polling with backoff) until Argo CD answered those and the pending ones
(the annotation is gone), and plans with the answers. The rule is on revisions, not on time
(`orchestrator.argocd.compare_request`): a comparison in the rollout's first second can still be
against the old commit. The stage message says how many were asked and how many did not answer in
time (a later stage's `select` asks them again).

A new cluster (issue 29 point 11): the steps read the cluster inventory the watcher publishes, not
the Secrets, so a cluster whose Secret and Application appeared together shortly before the stage
can reach `select` before the inventory lists it; its out-of-date Application then has no known
cluster (`RolloutPlan.homeless`) and the plan would fail the stage ("no cluster Secret for the
destination of ..."). `select` waits for the inventory to list those clusters first
(`wait_for_inventory`: polling with backoff, at most `Tuning.inventory_wait_seconds`) and plans
with it; the stage message says how long it waited, and at the bound, which destinations the
inventory still lacks and what to check. The lag alone never fails a stage.

The release is the rollout contract's (`orchestrator.planning.contract`, `steps.context`): the
planner is given it and never derives one again from the fleet (which no longer names it once
every Application still out of date is only waiting for its health), and `status.rollout.revision`
says it.

The first wave (issue 15): the rollout contract's `startSyncs` N for the stage (the builder sets
the stage's maxParallel); once the stage is recorded Progressing the step requests the syncs of its
first N targets itself, from the listing it planned with, and records them Syncing
(`steps.first_wave`); the cluster steps find those syncs ours and write nothing for them.

Idempotent: when this rollout already selected the stage, the recorded targets (its records') are
returned as they are, without planning again or writing anything. When the status describes no rollout or an
older one, `select` starts this rollout's status (see `rollout_status.start_rollout`): the watcher
may not have recorded it yet. A newer one (this Workflow was superseded: an old Workflow brought
back by `argo retry`) is never replaced: the step writes nothing and exits 1, as the other steps do
(`steps.common.check_succession`, `orchestrator.api.succession`).

The module is named `select_stage` so that it never shadows the standard library's `select`.
Caller: `python -m steps select` (steps.cli); tests call `select_stage` directly too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from orchestrator.api.models import ProgressiveSync, ProgressiveSyncStatus, StagePhase
from orchestrator.api.release import Revisions, revision_key
from orchestrator.api.rollout_status import (
    close_stage,
    find_stage,
    note_skipped,
    skip_stage,
    start_rollout,
    start_stage,
)
from orchestrator.api.stage_records import StageOutcomes, new_records, outcomes_of, summarize
from orchestrator.api.windows import evaluated_windows
from orchestrator.argocd import appsync
from orchestrator.argocd.compare_request import CompareNeed, compare_need, unanswered
from orchestrator.argocd.fleet import AppSetView, AppView, Cluster, app_view_from_object, index_clusters
from orchestrator.argocd.inventory import INVENTORY_NAME
from orchestrator.core.clock import Clock
from orchestrator.core.windows import Window
from orchestrator.kube.client import APPLICATIONS, Kube, NotFound
from orchestrator.kube.stage_records import create_records, read_outcomes
from orchestrator.kube.status_writer import update_status
from orchestrator.planning.planner import (
    IssueCode,
    RolloutPlan,
    StageState,
    plan_rollout,
    progress_from_status,
)
from steps.common import (
    RolloutRef,
    Superseded,
    app_namespace,
    apps_by_cluster,
    get_app_set,
    list_clusters,
    planning_spec,
    read_stage_outcomes,
    stage_index,
)
from steps.context import StepContext
from steps.first_wave import FirstWave, start_first_wave
from steps.status_sink import StageRecords
from steps.window_gate import closed_clusters, open_first, read_cluster_project_windows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SelectResult:
    """The stage's targets in rollout order (empty when skipped or failed) and why."""

    stage: str
    phase: StagePhase
    targets: tuple[str, ...]
    reason: str
    from_status: bool = False  # True: this rollout had selected the stage already
    first_wave: FirstWave = field(default_factory=FirstWave)  # the syncs this step started

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
            started = f"; {self.first_wave.summary}" if self.first_wave.summary else ""
            return f"select: stage {self.stage!r}{again}: {len(self.targets)} target(s): {targets}{started}"
        return f"select: stage {self.stage!r} {self.phase.value}{again}: {self.reason}"


def select_stage(kube: Kube, ctx: StepContext) -> SelectResult:
    """Plan the stage of `ctx` for this rollout and record it; return its targets.

    `ctx` is opened taking over (`StepContext.open(..., taking_over=True)`: the rollout this one may
    replace is `ctx.replaces`). Once the stage is recorded, the syncs of its first `startSyncs`
    targets (the rollout contract's) are requested, pinned to the contract's release, from the
    listing it was planned with (steps.first_wave).
    """
    rollout, ps, stage, clock, tuning = ctx.rollout, ctx.ps, ctx.stage_name, ctx.clock, ctx.tuning
    release, start_syncs = ctx.release, ctx.stage.start_syncs
    # The rollout this one may take over (None: none, or this one); any other found when writing
    # came meanwhile and is newer.
    replaced = ctx.replaces
    status = ps.status or ProgressiveSyncStatus()
    ours = status.rollout is not None and status.rollout.id == rollout.rollout_id
    already = _selected_already(kube, rollout, ps, stage) if ours else None
    if already is not None:
        return already
    progress_records = _recorded_progress(kube, rollout, ps) if ours else {}

    app_set = get_app_set(kube, app_namespace(ps), ps.spec.app_set_ref.name)
    clusters = list_clusters(kube, rollout.argocd_namespace)
    items, _ = kube.list(APPLICATIONS, app_namespace(ps))

    def plan_with(apps: Sequence[Mapping[str, Any]]) -> RolloutPlan:
        return plan_rollout(
            planning_spec(ps),
            ps_name=ps.metadata.name,
            appset=app_set,
            clusters=clusters,
            apps=[app_view_from_object(item) for item in apps],
            progress=progress_from_status(status, progress_records) if ours else None,
            # The contract's release, never one derived again from the fleet (see the module).
            release=release,
        )

    plan = plan_with(items)
    inventory = InventoryWait(clusters)
    if plan.homeless:
        inventory = wait_for_inventory(
            kube,
            rollout.argocd_namespace,
            [app_view_from_object(item) for item in items if item["metadata"]["name"] in plan.homeless],
            clock=clock,
            wait_seconds=tuning.inventory_wait_seconds,
        )
        clusters = list(inventory.clusters)
        plan = plan_with(items)
    compared = ask_to_compare(
        kube,
        app_namespace(ps),
        items,
        app_set=app_set,
        app_set_name=ps.spec.app_set_ref.name,
        release=release,
        clock=clock,
        wait_seconds=tuning.compare_wait_seconds,
    )
    if compared.awaited:
        plan = plan_with(compared.items)  # with Argo CD's answers
    for warning in plan.warnings:
        log.warning("plan: %s", warning.message)
    planned_total = sum(len(s.targets) for s in plan.stages)
    now = clock.now()
    revision = " ".join(revision_key(r) for r in release)  # for people: status.rollout.revision
    (phase, targets, reason), project_windows = _open_first(
        kube,
        ctx,
        stage_outcome(plan, stage, compared, inventory),
        items=compared.items,
        clusters=clusters,
        app_set=app_set,
    )
    # The stage's records before the status says it runs: a step that reads the status Progressing
    # finds them. Created once; one that exists (a select run before) is adopted with its targets.
    where = (
        create_stage_records(kube, rollout, ps, stage, targets, apps=plan.stage(stage).apps)
        if phase == StagePhase.PROGRESSING
        else StageRecords(rollout.namespace, stage, ())
    )
    targets = where.outcomes.targets if where.records else targets
    summary = summarize(outcomes_of(stage, where.records))

    recorded_here: list[bool] = []  # record() started the stage (not a concurrent select)

    def record(current: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        recorded_here.clear()
        _check_not_replaced(current, rollout, replaced, stage)
        current = start_rollout(
            current,
            rollout_id=rollout.rollout_id,
            stage_names=[s.name for s in ps.spec.stages],
            now=now,
            revision=revision,
            generation=ps.metadata.generation,
        )
        entry = find_stage(current, stage)
        if entry is not None and entry.phase != StagePhase.PENDING:
            return current  # a concurrent select of the same stage got there first: keep its answer
        if phase == StagePhase.PROGRESSING:
            recorded_here.append(True)
            current = start_stage(
                current, stage=stage, summary=summary, message=reason, now=now, planned_total=planned_total
            )
            return note_skipped(current, stage=stage, skipped=plan.stage(stage).skipped)
        if phase == StagePhase.SKIPPED:
            current = skip_stage(current, stage=stage, reason=reason, now=now, planned_total=planned_total)
            return note_skipped(current, stage=stage, skipped=plan.stage(stage).skipped)
        return close_stage(current, stage=stage, phase=StagePhase.FAILED, message=reason, now=now)

    update = update_status(
        kube, rollout.namespace, rollout.name, record, what=f"select stage {stage!r}", settings=tuning.status
    )
    entry = find_stage(update.status, stage)
    assert entry is not None  # record() created it
    if not recorded_here or entry.phase != StagePhase.PROGRESSING:
        # Not started here (skipped, failed, or a concurrent select of the stage got there first).
        kept: tuple[str, ...] = ()
        if entry.phase == StagePhase.PROGRESSING:
            kept = targets if where.records else read_stage_outcomes(kube, rollout, ps, stage).targets
        return SelectResult(stage, entry.phase, kept, entry.message)
    first_wave = start_first_wave(
        kube,
        ctx,
        where=where,
        wave=targets[:start_syncs],
        items=compared.items,
        clusters=clusters,
        app_set=app_set,
        since=update.status.rollout.started_at if update.status.rollout else None,
        project_windows=project_windows,
    )
    return SelectResult(stage, entry.phase, tuple(targets), entry.message, first_wave=first_wave)


def _open_first(
    kube: Kube,
    ctx: StepContext,
    outcome: tuple[StagePhase, tuple[str, ...], str],
    *,
    items: Sequence[Mapping[str, Any]],
    clusters: Sequence[Cluster],
    app_set: AppSetView | None,
) -> tuple[tuple[StagePhase, tuple[str, ...], str], dict[str, tuple[Window, ...]]]:
    """The stage's outcome (`stage_outcome`) with a running stage's targets ordered: the clusters
    whose windows are closed now behind the others (`steps.window_gate.open_first`: the slots go
    first to clusters that may sync), and the targets' AppProjects' windows it read for that (the
    first wave evaluates them again: one read per AppProject per `select`). A stage whose records
    exist already keeps their order (`create_stage_records` adopts them)."""
    phase, targets, reason = outcome
    if phase != StagePhase.PROGRESSING:
        return outcome, {}
    ps = ctx.ps
    by_cluster = apps_by_cluster(items, ps.spec.app_set_ref.name, app_set, index_clusters(clusters))
    rollout = ctx.rollout.with_applications_of(ps)
    project_windows = read_cluster_project_windows(kube, rollout, by_cluster=by_cluster, clusters=targets)
    closed = closed_clusters(
        evaluated_windows(ctx.contract.windows),
        project_windows,
        by_cluster=by_cluster,
        clusters=targets,
        now=ctx.clock.now(),
    )
    if closed and len(closed) < len(targets):
        log.info(
            "%d of %d target(s) wait for a window now and go after the others: %s",
            len(closed),
            len(targets),
            ", ".join(sorted(closed)),
        )
    return (phase, open_first(targets, closed), reason), project_windows


def _selected_already(
    kube: Kube, rollout: RolloutRef, ps: ProgressiveSync, stage: str
) -> SelectResult | None:
    """The answer this rollout recorded for the stage (its phase and message in the status, its
    targets in its records), None while the stage is Pending."""
    recorded = find_stage(ps.status, stage)
    if recorded is None or recorded.phase == StagePhase.PENDING:
        return None
    log.info("stage %r was selected by rollout %s already; not planning again", stage, rollout.rollout_id)
    targets = read_stage_outcomes(kube, rollout, ps, stage).targets
    return SelectResult(stage, recorded.phase, targets, recorded.message, from_status=True)


def _recorded_progress(kube: Kube, rollout: RolloutRef, ps: ProgressiveSync) -> dict[str, StageOutcomes]:
    """What this rollout recorded so far: stage name -> that stage's clusters, from its records."""
    names = [s.name for s in ps.spec.stages]
    found = read_outcomes(kube, rollout.namespace, rollout.name, rollout.rollout_id)
    return {names[index]: outcomes for index, outcomes in found.items() if index < len(names)}


def create_stage_records(
    kube: Kube,
    rollout: RolloutRef,
    ps: ProgressiveSync,
    stage: str,
    targets: Sequence[str],
    *,
    apps: Mapping[str, Sequence[str]] | None = None,
) -> StageRecords:
    """The stage's records with `targets` (one per part) and the Applications planned for each
    (`apps`, the plan's: recorded as `targetApps`), created owned by the ProgressiveSync; the ones
    that exist already are adopted as they are (their targets and Applications win)."""
    records = new_records(
        rollout.name,
        rollout.rollout_id,
        stage,
        stage_index=stage_index(ps, stage),
        targets=targets,
        namespace=rollout.namespace,
        apps=apps,
    )
    return StageRecords(rollout.namespace, stage, tuple(create_records(kube, ps.metadata, records)))


def _check_not_replaced(
    current: ProgressiveSyncStatus, rollout: RolloutRef, replaced: str | None, stage: str
) -> None:
    """Superseded when, while `select` planned, the status came to name a rollout other than this
    one and the one it may replace (a newer rollout was recorded meanwhile)."""
    found = current.rollout.id if current.rollout is not None else None
    if found not in (rollout.rollout_id, replaced):
        raise Superseded(
            f"ProgressiveSync {rollout.display} is on rollout {found}, recorded while rollout "
            f"{rollout.rollout_id} selected stage {stage!r}: this Workflow was superseded"
        )


def stage_outcome(
    plan: RolloutPlan, stage: str, compared: CompareRequests, inventory: InventoryWait | None = None
) -> tuple[StagePhase, tuple[str, ...], str]:
    """How the stage is recorded: Failed when the plan has errors, else Progressing with its
    targets or Skipped; the reason with the late clusters, what was asked of Argo CD and what was
    awaited of the cluster inventory."""
    stage_plan = plan.stage(stage)
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
    if inventory is not None and inventory.message:
        reason += "; " + inventory.message
    if compared.message:
        reason += "; " + compared.message
    return phase, targets, reason


@dataclass(frozen=True)
class InventoryWait:
    """What `wait_for_inventory` found: the inventory as last read, the Applications it waited for
    (name and destination), those whose cluster it still lacked at the bound, and for how long."""

    clusters: Sequence[Cluster]
    awaited: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    waited_seconds: float = 0.0
    where: str = ""  # the inventory ConfigMap, namespace/name

    @property
    def message(self) -> str:
        """For the stage message ("" when nothing was awaited)."""
        if not self.awaited:
            return ""
        if not self.missing:
            return (
                f"waited {self.waited_seconds:.1f} s for the cluster inventory ({self.where}) to list "
                f"the new cluster(s) of {_shown(self.awaited)}"
            )
        return (
            f"{IssueCode.MISSING_CLUSTER_SECRET.value}: the cluster inventory ({self.where}, which the "
            "watcher publishes from Argo CD's cluster "
            f"Secrets) still lists no cluster for {_shown(self.missing)} after {self.waited_seconds:.0f} s: "
            "either no cluster Secret has that server or name (add it, or fix the Application's "
            "destination), or the watcher has not published it (is the watcher running, and is "
            "--argocd-namespace right?)"
        )


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def wait_for_inventory(
    kube: Kube, namespace: str, apps: Sequence[AppView], *, clock: Clock, wait_seconds: float
) -> InventoryWait:
    """Read the cluster inventory until it lists a cluster for the destination of each of `apps`
    (out-of-date Applications whose cluster it did not know), or `wait_seconds` passed (backoff
    0.2 s doubling to 2 s). A new cluster's Secret and Application appear together; the watcher
    publishes the inventory within seconds of the Secret, so only the lag is waited out, never a
    fixed time."""
    started = clock.now()
    deadline = started + timedelta(seconds=wait_seconds)
    awaited = tuple(f"{app.name} -> {_destination(app)}" for app in apps)
    log.info(
        "waiting up to %g s for the cluster inventory to list the cluster(s) of %s",
        wait_seconds,
        _shown(awaited),
    )
    pause = _FIRST_POLL_SECONDS
    while True:
        clusters = list_clusters(kube, namespace)
        index = index_clusters(clusters)
        missing = tuple(f"{app.name} -> {_destination(app)}" for app in apps if index.cluster_of(app) is None)
        remaining = (deadline - clock.now()).total_seconds()
        if not missing or remaining <= 0:
            break
        clock.sleep(min(pause, remaining))
        pause = min(pause * 2, _LAST_POLL_SECONDS)
    waited = (clock.now() - started).total_seconds()
    if missing:
        log.warning(
            "the cluster inventory still lacks the cluster(s) of %s after %.0f s", _shown(missing), waited
        )
    else:
        log.info("the cluster inventory lists them after %.1f s", waited)
    return InventoryWait(clusters, awaited, missing, waited, f"ConfigMap {namespace}/{INVENTORY_NAME}")


def _destination(app: AppView) -> str:
    return app.destination_server or app.destination_name or "(no destination)"


@dataclass(frozen=True)
class CompareRequests:
    """What `ask_to_compare` did: the Applications asked, the ones awaited (asked or already
    pending), those Argo CD did not answer in time, and the Applications as last listed."""

    asked: tuple[str, ...]
    awaited: tuple[str, ...]
    unanswered: tuple[str, ...]
    items: Sequence[Mapping[str, Any]]
    wait_seconds: float

    @property
    def message(self) -> str:
        """For the stage message ("" when nothing was asked or awaited)."""
        if not self.awaited:
            return ""
        text = f"asked Argo CD to compare {len(self.asked)} Application(s) not compared against the release"
        if len(self.awaited) > len(self.asked):
            text += f" (and waited for {len(self.awaited) - len(self.asked)} refresh(es) already pending)"
        if self.unanswered:
            shown = ", ".join(self.unanswered[:10]) + (" ..." if len(self.unanswered) > 10 else "")
            text += (
                f"; {len(self.unanswered)} not answered within {self.wait_seconds:g} s: {shown} "
                "(a later stage asks again and takes them if they are behind the release)"
            )
        return text


def ask_to_compare(
    kube: Kube,
    namespace: str,
    items: Sequence[Mapping[str, Any]],
    *,
    app_set: AppSetView | None,
    app_set_name: str,
    release: Sequence[Revisions],
    clock: Clock,
    wait_seconds: float,
) -> CompareRequests:
    """Ask Argo CD to compare the owned Applications (in `namespace`, listed as `items`) not compared
    against `release`, then wait for
    the answers (see module and `compare_request`). One merge patch per Application asked; per poll
    while waiting (backoff 0.2 s doubling to 2 s, at most `wait_seconds`) a GET of each one still
    pending, or one list when that is cheaper (`read_by_name`)."""
    wanted = frozenset(tuple(revisions) for revisions in release)
    asked: list[str] = []
    awaited: list[str] = []
    for item in items:
        view: AppView = app_view_from_object(item)
        need = compare_need(
            view,
            owned=view.is_owned_by(app_set_name, app_set.uid if app_set else ""),
            release=wanted,
            refresh_pending=appsync.refresh_requested(item),
        )
        if need == CompareNeed.ASK:
            try:
                kube.patch(APPLICATIONS, namespace, view.name, appsync.refresh_patch(clock.now()))
            except NotFound:
                continue
            asked.append(view.name)
        if need.awaited:
            awaited.append(view.name)
    if asked:
        shown = ", ".join(asked[:10]) + (" ..." if len(asked) > 10 else "")
        log.info(
            "asked Argo CD to compare %d Application(s) not compared against the release: %s",
            len(asked),
            shown,
        )
    if not awaited:
        return CompareRequests((), (), (), items, wait_seconds)
    items, left = _wait_for_answers(kube, namespace, items, awaited, clock=clock, wait_seconds=wait_seconds)
    if left:
        log.warning(
            "%d Application(s) not compared by Argo CD within %g s: %s",
            len(left),
            wait_seconds,
            ", ".join(left[:10]),
        )
    return CompareRequests(tuple(asked), tuple(awaited), left, items, wait_seconds)


def _wait_for_answers(
    kube: Kube,
    namespace: str,
    items: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    *,
    clock: Clock,
    wait_seconds: float,
) -> tuple[Sequence[Mapping[str, Any]], tuple[str, ...]]:
    """Read the Applications until none of `names` has a refresh pending or `wait_seconds` passed;
    `items` (the list the requests were made from) with Argo CD's answers in, and the names still
    pending. Each poll reads only the pending ones by name while that is the cheaper read
    (`read_by_name`), else lists the namespace again."""
    deadline = clock.now() + timedelta(seconds=wait_seconds)
    pause = _FIRST_POLL_SECONDS
    latest: dict[str, Mapping[str, Any]] = {str(item["metadata"]["name"]): item for item in items}
    left = tuple(names)
    while True:
        if read_by_name(len(left), len(latest)):
            for name in left:
                try:
                    latest[name] = kube.get(APPLICATIONS, namespace, name)
                except NotFound:
                    latest.pop(name, None)  # deleted: answered, and no longer an Application to plan
        else:
            listed, _ = kube.list(APPLICATIONS, namespace)
            latest = {str(item["metadata"]["name"]): item for item in listed}
        left = unanswered(latest.values(), left)
        remaining = (deadline - clock.now()).total_seconds()
        if not left or remaining <= 0:
            return list(latest.values()), left
        clock.sleep(min(pause, remaining))
        pause = min(pause * 2, _LAST_POLL_SECONDS)


def read_by_name(pending: int, listed: int) -> bool:
    """Whether reading `pending` Applications one GET each costs less than listing the `listed` ones
    of the namespace: a request costs about `_REQUEST_COST_IN_OBJECTS` objects' worth of serving.
    In a namespace of 4,000 Applications (200 ApplicationSets x 20 clusters) a stage's 20 pending
    are 20 GETs instead of 8 pages of 500."""
    return pending * (1 + _REQUEST_COST_IN_OBJECTS) < listed + _REQUEST_COST_IN_OBJECTS


# What one request costs the API server, in objects served (an estimate: authentication, admission
# of the read, one round trip); only the choice between GETs and a list depends on it.
_REQUEST_COST_IN_OBJECTS = 50

# How often `select` looks whether Argo CD answered the refreshes it asked for (doubling).
_FIRST_POLL_SECONDS = 0.2
_LAST_POLL_SECONDS = 2.0
