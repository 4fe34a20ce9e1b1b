"""The `rollback` step: put one cluster's Applications back where they were before this rollout.

For each Application of the ApplicationSet on the cluster, `orchestrator.argocd.rollback` decides
from the Application's own marks (what our forward sync recorded in its `info`):

- our forward sync is finished -> one update carrying the resourceVersion writes our rollback
  sync, pinned to the revision(s) it ran before (a 409: read again, decide again, bounded);
- our forward sync still runs (a cancelled rollout, a cluster stopped mid-sync) -> it is ended
  first (`steps.terminate`), then decided again;
- our rollback sync is there already -> nothing is written (a step run again, after any restart);
- someone else synced it after us -> left alone, named; we never synced it -> nothing to undo;
- it had no deployed revision before our sync, or it is being deleted -> not restored, named.

Then the Applications rolled back are followed (list -> watch) until each finished our rollback
sync Succeeded at the restored revision and is Healthy, observed after the sync finished
(`orchestrator.argocd.assess`; Argo CD reports them OutOfSync against Git afterwards: the bad
commit is still the target), or the rollback's deadline (`rollback.progressDeadlineSeconds`, from
when the cluster's rollback started, kept in its record so a restarted step keeps it) passed: then
our rollback sync still running is ended and the cluster is not restored.

The outcome is the cluster's `rollback` in its stage's ProgressiveSyncStage record: RolledBack,
Failed (exit 1: the rollout says which clusters are not restored) or LeftAlone. A cluster whose
rollback is recorded ended is reported as recorded, without reading or writing anything else.

Caller: `python -m steps rollback` (steps.cli) in the Workflow's exit handler; tests call
`rollback_cluster` directly too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orchestrator.api.stage_records import (
    ROLLBACK_END_STATES,
    ClusterRecord,
    ClusterRollback,
    ClusterState,
    RollbackState,
    cut_text,
    merge_rollback,
)
from orchestrator.argocd import appsync
from orchestrator.argocd.appwatch import follow_applications
from orchestrator.argocd.assess import ClusterPhase, assess_cluster
from orchestrator.argocd.rollback import (
    RollbackAction,
    RollbackDecision,
    build_rollback_request,
    decide_rollback,
)
from orchestrator.core.clock import Clock
from orchestrator.kube.client import APPLICATIONS, Conflict, Kube, NotFound
from orchestrator.kube.status_writer import ConflictsExhausted
from orchestrator.planning.rollback import rollback_batch_share
from orchestrator.planning.sizing import rollback_batch_pods, slots_of_batch
from steps.batch import run_clusters
from steps.common import RolloutRef, UsageProblem
from steps.context import ALONE, Shared, StepContext
from steps.status_sink import Change
from steps.terminate import terminate_operations
from steps.wait_healthy import Refreshes

log = logging.getLogger(__name__)

Write = Callable[[ClusterRollback], None]

# How many times one Application's forward operation is ended and looked at again before the
# cluster's rollback gives up on it (each end waits up to `Tuning.terminate_wait_seconds`).
_END_FORWARD_ATTEMPTS = 3


@dataclass(frozen=True)
class RollbackResult:
    """How one cluster's rollback ended."""

    cluster: str
    state: RollbackState
    reason: str
    restored: tuple[str, ...] = ()  # Applications back at their earlier revision
    left_alone: tuple[str, ...] = ()  # Applications someone else moved on, named in `reason`
    already_recorded: bool = False

    @property
    def failed(self) -> bool:
        """True when the cluster is not restored (exit 1)."""
        return self.state == RollbackState.FAILED

    @property
    def summary(self) -> str:
        """One line for people."""
        recorded = " (already recorded)" if self.already_recorded else ""
        return f"rollback: cluster {self.cluster} {self.state.value}{recorded}: {self.reason}"


@dataclass
class _Plan:
    """What the decisions of one cluster's Applications came to."""

    follow: list[str]  # rolled back by us (written now or before): followed to Healthy
    revisions: list[str]  # the revisions restored, each once
    left_alone: list[str]  # reasons of Applications left alone
    not_restored: list[str]  # reasons of Applications that cannot be restored


def rollback_cluster(kube: Kube, ctx: StepContext, cluster: str, shared: Shared = ALONE) -> RollbackResult:
    """Roll `cluster` back (see the module), record its outcome in its stage's records, return it.

    `shared`: the stage's records and the fleet lookup a caller read once for many clusters (a
    batch; `steps.context.Shared`; default: read here for this cluster)."""
    if ctx.contract.rollback is None:
        raise UsageProblem(
            "the rollout contract has no rollback: spec.rollback was not set when it was built"
        )
    rollout, ps, clock, tuning = ctx.rollout, ctx.ps, ctx.clock, ctx.tuning
    shared = shared.with_records(kube, ctx)
    sink, outcomes = shared.sink, shared.outcomes
    assert sink is not None and outcomes is not None  # with_records made them
    record = outcomes.clusters.get(cluster)
    if record is not None and record.rollback is not None and record.rollback.state in ROLLBACK_END_STATES:
        done = record.rollback
        return RollbackResult(cluster, done.state, done.reason or "recorded", already_recorded=True)

    def write(proposed: ClusterRollback) -> None:
        sink.record(cluster, _rollback_change(proposed), what=f"cluster {cluster} rollback {proposed.state}")

    started = (record.rollback.started_at if record and record.rollback else None) or clock.now()
    deadline = started + timedelta(seconds=ctx.contract.rollback.progress_deadline_seconds)
    fleet = shared.fleet_for(kube, ctx)
    found, clusters = fleet.find(cluster)
    if found is None:
        return _end(
            write,
            cluster,
            RollbackState.FAILED,
            f"cluster {cluster}: no Argo CD cluster Secret has this name",
            clock,
        )
    apps = fleet.apps_of(found, clusters)
    since = ps.status.rollout.started_at if ps.status and ps.status.rollout else None
    try:
        plan = _request(kube, ctx, apps, since=since, deadline=deadline, started=started, write=write)
    except _NotRestored as exc:
        return _end(write, cluster, RollbackState.FAILED, f"cluster {cluster}: {exc}", clock)
    if plan.not_restored:
        ended = (
            terminate_operations(kube, rollout, plan.follow, clock=clock, tuning=tuning)
            if plan.follow
            else None
        )
        reason = "; ".join(plan.not_restored + ([ended.summary] if ended and ended.acted else []))
        return _end(write, cluster, RollbackState.FAILED, f"cluster {cluster} not restored: {reason}", clock)
    if not plan.follow:
        reason = "; ".join(plan.left_alone) or "nothing of this rollout to undo"
        return _end(write, cluster, RollbackState.LEFT_ALONE, f"cluster {cluster}: {reason}", clock)
    verdict = _follow(kube, ctx, cluster, plan.follow, started=started, deadline=deadline)
    if verdict:
        ended = terminate_operations(kube, rollout, plan.follow, clock=clock, tuning=tuning)
        reason = verdict + (f"; {ended.summary}" if ended.acted else "")
        return _end(write, cluster, RollbackState.FAILED, reason, clock, revisions=plan.revisions)
    left = f"; left alone: {'; '.join(plan.left_alone)}" if plan.left_alone else ""
    reason = f"{', '.join(plan.follow)} back at {','.join(plan.revisions)} and Healthy{left}"
    write(
        ClusterRollback(
            state=RollbackState.ROLLED_BACK,
            reason=cut_text(reason),
            revisions=plan.revisions,
            finished_at=clock.now(),
        )
    )
    return RollbackResult(
        cluster,
        RollbackState.ROLLED_BACK,
        reason,
        restored=tuple(plan.follow),
        left_alone=tuple(plan.left_alone),
    )


class _NotRestored(Exception):
    """An Application of the cluster cannot be rolled back (the message says which and why)."""


def _request(
    kube: Kube,
    ctx: StepContext,
    apps: list[dict[str, Any]],
    *,
    since: datetime | None,
    deadline: datetime,
    started: datetime,
    write: Write,
) -> _Plan:
    """Decide every Application and write the rollback syncs due (see the module)."""
    plan = _Plan(follow=[], revisions=[], left_alone=[], not_restored=[])
    recorded_start = False
    for app in apps:
        decision = _decide_and_write(kube, ctx, app, since=since, deadline=deadline)
        name = appsync.app_name(app)
        if decision.action in (RollbackAction.ROLL_BACK, RollbackAction.DONE):
            plan.follow.append(name)
            plan.revisions.extend(r for r in decision.revisions if r not in plan.revisions)
            if not recorded_start:
                # The start is kept before the first wait: a step run again keeps the deadline.
                write(ClusterRollback(state=RollbackState.ROLLING_BACK, started_at=started))
                recorded_start = True
        elif decision.action == RollbackAction.MOVED_ON:
            plan.left_alone.append(decision.reason)
        elif decision.action in (RollbackAction.NO_EARLIER, RollbackAction.REFUSED):
            plan.not_restored.append(decision.reason)
    return plan


def _decide_and_write(
    kube: Kube,
    ctx: StepContext,
    app: dict[str, Any],
    *,
    since: datetime | None,
    deadline: datetime,
) -> RollbackDecision:
    """Decide one Application and act (end our forward sync, write the rollback); the decision
    that stands (ROLL_BACK once written, DONE, MOVED_ON, NOT_OURS, NO_EARLIER, REFUSED)."""
    rollout, clock, tuning = ctx.rollout, ctx.clock, ctx.tuning
    name = appsync.app_name(app)
    conflicts = 0
    ends = 0
    while True:
        decision = decide_rollback(app, rollout.rollout_id, since=since)
        if decision.action == RollbackAction.END_FORWARD:
            if ends == _END_FORWARD_ATTEMPTS or clock.now() >= deadline:
                raise _NotRestored(f"{decision.reason}, but it did not end (tried {ends} time(s))")
            ends += 1
            log.info("%s", decision.reason)
            terminate_operations(kube, rollout, [name], clock=clock, tuning=tuning)
            app = _read(kube, rollout, name)
            continue
        if decision.action != RollbackAction.ROLL_BACK:
            log.info("%s", decision.reason)
            return decision
        body = build_rollback_request(
            app,
            revisions=decision.revisions,
            rollout_id=rollout.rollout_id,
            stage=ctx.stage_name,
            prune=ctx.ps.spec.sync_options.prune,
            sync_options=list(ctx.ps.spec.sync_options.options or []),
            now=clock.now(),
        )
        try:
            kube.replace(APPLICATIONS, rollout.applications_namespace, body)
        except Conflict as exc:
            backoffs = tuning.app_conflict_backoffs
            if conflicts == len(backoffs):
                raise ConflictsExhausted(
                    f"Application {name}: still conflicting after {conflicts + 1} attempts: {exc}", status=409
                ) from exc
            clock.sleep(backoffs[conflicts])
            conflicts += 1
            app = _read(kube, rollout, name)
            continue
        log.info("Application %s: rollback sync requested at revision %s", name, ",".join(decision.revisions))
        return decision


def _read(kube: Kube, rollout: RolloutRef, name: str) -> dict[str, Any]:
    try:
        return kube.get(APPLICATIONS, rollout.applications_namespace, name)
    except NotFound as exc:
        raise _NotRestored(f"Application {name} was deleted during the rollback") from exc


def _follow(
    kube: Kube, ctx: StepContext, cluster: str, names: list[str], *, started: datetime, deadline: datetime
) -> str:
    """Follow the rolled-back Applications until they are Healthy at the restored revisions ("")
    or not restored (why)."""
    clock, tuning = ctx.clock, ctx.tuning
    # Argo CD stamps times in whole seconds: a sync that finished in the second of its last
    # comparison needs a comparison asked for (as wait-healthy asks).
    refreshes = Refreshes(kube, ctx.rollout.applications_namespace, tuning, clock)

    def window() -> int:
        now = clock.now()
        left = min((deadline - now).total_seconds(), refreshes.seconds_to_next(now))
        return tuning.watch_window_for(left)

    last = ""
    snapshots = follow_applications(kube, ctx.rollout.applications_namespace, names, window_seconds=window)
    try:
        for snapshot in snapshots:
            verdict = assess_cluster(
                cluster,
                snapshot.objects,
                release=(),
                rollout_id=ctx.rollout.rollout_id,
                started=started,
                now=clock.now(),
                deadline=deadline,
                degraded_grace=timedelta(seconds=ctx.ps.spec.degraded_grace_seconds),
            )
            if verdict.phase == ClusterPhase.DONE:
                return ""
            if verdict.phase == ClusterPhase.FAILED:
                return verdict.reason.replace("progress deadline", "rollback deadline", 1)
            if verdict.reason != last:
                log.info("rolling back: %s", verdict.reason)
                last = verdict.reason
            refreshes.request(verdict.refresh, snapshot.objects)
    finally:
        snapshots.close()
    raise AssertionError("unreachable: the Application follower never ends on its own")


def _end(
    write: Write,
    cluster: str,
    state: RollbackState,
    reason: str,
    clock: Clock,
    *,
    revisions: list[str] | None = None,
) -> RollbackResult:
    log.info("%s", reason)
    write(
        ClusterRollback(
            state=state, reason=cut_text(reason), revisions=revisions or None, finished_at=clock.now()
        )
    )
    return RollbackResult(cluster, state, reason)


def _rollback_change(proposed: ClusterRollback) -> Change:
    """The record's change that sets its `rollback` (by `merge_rollback`: an end is never replaced).
    A cluster without a record (one the rollback found by its Applications) is recorded Failed
    first: it was in this rollout and did not complete."""

    def change(current: ClusterRecord | None) -> ClusterRecord | None:
        base = current or ClusterRecord(state=ClusterState.FAILED, reason="rolled back")
        merged = merge_rollback(base.rollback, proposed)
        if merged is None:
            return None
        return base.model_copy(update={"rollback": merged})

    return change


@dataclass(frozen=True)
class RollbackBatchResult:
    """How one batch of a stage's rollback ended: each of its clusters' results."""

    stage: str
    batch: int
    results: tuple[RollbackResult, ...]

    @property
    def failed(self) -> bool:
        """True when a cluster of the batch is not restored (exit 1)."""
        return any(result.failed for result in self.results)

    @property
    def summary(self) -> str:
        """One line for people."""
        counts = {state: sum(1 for r in self.results if r.state == state) for state in RollbackState}
        said = ", ".join(f"{n} {state.value}" for state, n in counts.items() if n) or "nothing to restore"
        failed = [r.cluster for r in self.results if r.failed]
        tail = (
            f"; not restored: {', '.join(failed[:5])}" + (" ..." if len(failed) > 5 else "") if failed else ""
        )
        return f"rollback-batch: stage {self.stage!r} batch {self.batch}: {said}{tail}"


def rollback_batch(kube: Kube, ctx: StepContext, batch: int) -> RollbackBatchResult:
    """Restore batch `batch`'s share of a stage: the stage's recorded clusters dealt out as the
    forward batches deal them (`rollback_batch_share`), each through `rollback_cluster`, at most
    the batch's share of rollbackParallel at once; a temporary error is retried
    (`Tuning.batch_retry_backoffs`), as a forward batch does. A stage in batches (its contract's
    `batches`) has as many rollback batches as `rollback_batch_count`; a stage of one pod per
    cluster has rollbackParallel of one slot each, which its rollback runs when it restores more
    clusters than rollbackParallel (`rollback_batch_pods`)."""
    stage = ctx.stage
    parallel = stage.rollback_parallel or stage.max_parallel
    batches = rollback_batch_pods(stage.batches, parallel)
    if not 0 <= batch < batches:
        raise UsageProblem(
            f"--batch {batch}: stage {stage.name!r} rolls back in at most {batches} batch(es), "
            f"0 to {batches - 1}"
        )
    # One read of the stage's records and one fleet lookup for the batch's clusters (each cluster
    # belongs to one batch: no other pod writes its record meanwhile), as a forward batch shares them.
    shared = Shared(
        fleet=Shared().fleet_for(kube, ctx, max_age_seconds=ctx.tuning.fleet_lookup_seconds)
    ).with_records(kube, ctx)
    assert shared.outcomes is not None
    clusters = rollback_batch_share(shared.outcomes, batches=batches, batch=batch, parallel=parallel)
    slots = slots_of_batch(parallel, batches, batch)
    log.info(
        "stage %r batch %d: restoring %d cluster(s), %d at a time", stage.name, batch, len(clusters), slots
    )
    results = run_clusters(
        clusters,
        lambda cluster: rollback_cluster(kube, ctx, cluster, shared),
        slots=slots,
        clock=ctx.clock,
        backoffs=ctx.tuning.batch_retry_backoffs,
    )
    for result in results:
        log.info("%s", result.summary)
    return RollbackBatchResult(stage.name, batch, tuple(results))
