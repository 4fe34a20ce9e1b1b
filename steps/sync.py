"""The `sync` step: request the pinned sync of one cluster's Applications, exactly once per rollout.

For each Application of the ApplicationSet on the cluster (`orchestrator.argocd.appsync` decides):

- this rollout already synced it (our rollout id in the operation's `info`, or a sync of ours in
  its history since the rollout started) -> write nothing: a retried step never syncs twice, so
  hooks never run twice;
- it is being deleted -> the cluster fails (Argo CD refuses to sync it);
- someone's operation is in progress -> never overwrite it: follow the Application with a watch
  until that operation ends, then decide again; if it is still running at the progress deadline
  the cluster fails with a reason naming who started it;
- it is already Synced at its release revision (someone else synced it) -> adopt it: no sync,
  `wait-healthy` waits for its health;
- it is Synced and Healthy at a revision outside the release -> Argo CD is asked to compare it again
  (`argocd.argoproj.io/refresh`) and its answer is decided on: left alone only when that answer
  still puts it outside the release (it may be one Argo CD had not compared since the release: a
  refresh `select` asked for that went unanswered); synced when the answer is OutOfSync at the
  release. While the step waits, the cluster's record's `note` says which Application and why; no answer by
  the progress deadline fails the cluster, naming the Application: every Application of the
  cluster gets the release or the cluster is not done (issue 29, point 4);
- otherwise one update carrying the resourceVersion sets `.operation` (revision pinned, our rollout
  id and stage in `info`) and nulls the finished `status.operationState`. A 409 means someone
  wrote in between: read again and decide again (bounded). Annotations are never written: the
  ApplicationSet controller owns them.

Then the cluster is recorded Syncing in its stage's ProgressiveSyncStage record (steps.status_sink:
no change, no write). Running the step twice for the same rollout writes nothing the second time.

A skip (orchestrator.planning.skip: `progressivesync.io/skip` on one of the cluster's Applications,
or `spec.skip`) is asked again here, right before the first write for the cluster, on the
Applications as read now and again before each write: a mark added after `select` planned the stage
is honoured. The cluster is then recorded Skipped with the mark's reason and nothing is written;
run again, the step finds the record and writes nothing. A mark found once this rollout has
synced some of the cluster's Applications comes too late for it: the cluster is finished (half a
cluster is worse than none) and the mark holds it out of the next rollout.

Windows (steps.window_gate: `spec.windows` and the Applications' AppProject sync windows): while
one is closed, before the cluster's first sync write, the step notes "waiting for window: opens at
<RFC3339>" on the cluster's record and waits; the cluster's progress deadline starts once they
open. A cluster with nothing to write (synced by this rollout already, adopted, up to date) does
not wait.

A stage that has failed (failures above `maxFailedClusters`) gets no new sync from this step, for no
Application: when the step starts, and again after every wait (someone's operation, a comparison).
Then what this rollout wrote on the cluster (by the Applications' own marks, `written_by_rollout`)
is ended and the cluster recorded failed ("stopped before it finished"); when nothing was written,
the cluster is not started (nothing recorded, exit 1).

Caller: `python -m steps sync` (steps.cli); tests call `sync_cluster` directly too.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from orchestrator.api.models import SkipSpec
from orchestrator.api.release import Revisions
from orchestrator.api.stage_records import ClusterState
from orchestrator.api.windows import evaluated_windows
from orchestrator.argocd import appsync
from orchestrator.argocd.appwatch import follow_applications
from orchestrator.argocd.fleet import Cluster, app_view_from_object
from orchestrator.core.clock import Clock
from orchestrator.kube.client import APPLICATIONS, Conflict, Kube, NotFound
from orchestrator.kube.status_writer import ConflictsExhausted
from orchestrator.planning.skip import skip_reason
from steps import status_sink as sinks
from steps.common import (
    RolloutRef,
    Tuning,
    load_progressive_sync,
    stage_failed_meanwhile,
    stage_failure,
    stopped_reason,
    written_by_rollout,
)
from steps.context import ALONE, Shared, StepContext
from steps.pause import hold_while_paused
from steps.status_sink import StatusSink
from steps.terminate import terminate_operations
from steps.window_gate import wait_for_window

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyncResult:
    """What `sync` did for one cluster."""

    cluster: str
    requested: tuple[str, ...] = ()  # Applications whose sync this run wrote
    already: tuple[str, ...] = ()  # Applications this rollout had synced before: nothing written
    adopted: tuple[str, ...] = ()  # Applications someone else brought to the release: not synced
    left_alone: tuple[str, ...] = ()  # Synced and Healthy at a revision outside the release: not synced
    failure: str = ""  # why the cluster failed (empty: it did not)
    skipped: str = ""  # why the cluster was left out by a skip mark (empty: it was not)
    waited_for: tuple[str, ...] = field(default=())  # Applications whose foreign operation we waited out

    @property
    def failed(self) -> bool:
        """True when the cluster failed (exit 1)."""
        return bool(self.failure)

    @property
    def summary(self) -> str:
        """One line for people."""
        if self.failed:
            return f"sync: cluster {self.cluster} failed: {self.failure}"
        if self.skipped:
            return f"sync: cluster {self.cluster} skipped, nothing written: {self.skipped}"
        parts = []
        if self.requested:
            parts.append(f"requested the sync of {', '.join(self.requested)}")
        if self.already:
            parts.append(f"already synced by this rollout: {', '.join(self.already)}")
        if self.adopted:
            parts.append(f"already at the release revision, adopted: {', '.join(self.adopted)}")
        if self.left_alone:
            parts.append(
                "up to date outside this release (Argo CD compared again at our request), left alone: "
                + ", ".join(self.left_alone)
            )
        return f"sync: cluster {self.cluster}: " + "; ".join(parts)


# What `sync` writes nothing for (the first wave too: steps/first_wave.py).
NOTHING_TO_WRITE = (
    appsync.SyncAction.ALREADY_REQUESTED,
    appsync.SyncAction.ADOPT,
    appsync.SyncAction.UP_TO_DATE,
)


class _Busy(Exception):
    """Someone's operation was still in progress at the deadline, or the Application cannot be synced."""


class _Skipped(Exception):
    """A skip mark was found right before the cluster's first write (the message says which)."""


class _Stopped(Exception):
    """The stage failed while this step waited: no new sync is written (the message says why)."""


def sync_cluster(kube: Kube, ctx: StepContext, cluster: str, shared: Shared = ALONE) -> SyncResult:
    """Request the pinned sync of every Application of the ApplicationSet on `cluster`.

    `ctx`: the step's opening (`steps.context`: the ProgressiveSync as read a moment ago, the stage,
    the release's revision tuples; each Application is pinned to its own,
    `orchestrator.argocd.appsync.release_pin`). `shared`: the sink for the cluster's record, the
    stage's records as read with that ProgressiveSync and the fleet lookup a caller hands in
    (`steps.context.Shared`; default: written at once, read here).
    """
    rollout, ps, stage, release = ctx.rollout, ctx.ps, ctx.stage_name, ctx.release
    clock, tuning = ctx.clock, ctx.tuning
    shared = shared.with_records(kube, ctx)
    sink, outcomes, fleet = shared.sink, shared.outcomes, shared.fleet_for(kube, ctx)
    assert sink is not None and outcomes is not None  # with_records made them
    found, clusters = fleet.find(cluster)
    if found is None:
        return _fail(
            kube,
            rollout,
            tuning,
            sink,
            stage=stage,
            cluster=cluster,
            reason=f"cluster {cluster}: no Argo CD cluster Secret has this name",
        )
    apps = fleet.apps_of(found, clusters)
    app_set_name = ps.spec.app_set_ref.name
    if not apps:
        return _fail(
            kube,
            rollout,
            tuning,
            sink,
            stage=stage,
            cluster=cluster,
            reason=f"cluster {cluster}: no Application of ApplicationSet {app_set_name} targets it",
        )
    names = [appsync.app_name(a) for a in apps]
    recorded = outcomes.clusters.get(cluster)
    if recorded is not None and recorded.state == ClusterState.SKIPPED:
        return SyncResult(cluster, skipped=recorded.reason)  # run again: the skip stands, nothing written
    failed_already = stage_failure(ps, stage, outcomes)
    if failed_already:
        # No new sync in a failed stage (DESIGN.md §3); what we wrote before is ended.
        if not written_by_rollout(apps, ps, rollout.rollout_id):
            log.info("cluster %s not started: %s", cluster, failed_already)
            return SyncResult(cluster, failure=f"cluster {cluster} not started: {failed_already}")
        return _fail(
            kube,
            rollout,
            tuning,
            sink,
            stage=stage,
            cluster=cluster,
            reason=stopped_reason(cluster, failed_already),
            apps=names,
            clock=clock,
        )
    # A skip is honoured only while this rollout wrote nothing on the cluster (see the module).
    may_skip = not written_by_rollout(apps, ps, rollout.rollout_id)
    if may_skip:
        mark = skip_reason(ps.spec.skip, found, [app_view_from_object(app) for app in apps])
        if mark is not None:
            return _skip(sink, clock, cluster, mark)
    since = ps.status.rollout.started_at if ps.status and ps.status.rollout else None
    by_action: dict[appsync.SyncAction, list[str]] = defaultdict(list)
    waited: list[str] = []

    def stage_check() -> str:
        return stage_failed_meanwhile(kube, rollout, stage=stage, cluster=cluster)

    def note(text: str) -> None:
        # What holds the cluster while the step waits for Argo CD's answer (its record's `note`).
        sink.record(cluster, sinks.note(text), what=f"cluster {cluster} note")

    if _may_write(apps, rollout, release=release, since=since):
        # No sync while a window is closed (steps.window_gate); the deadline starts after the wait.
        gate = wait_for_window(
            kube,
            rollout,
            evaluated_windows(ctx.contract.windows),
            apps,
            clock=clock,
            tuning=tuning,
            note=note,
            stage_check=stage_check,
        )
        if gate.stopped:
            # As after any other wait of this step: the cluster, recorded waiting, is recorded failed.
            return _fail(
                kube,
                rollout,
                tuning,
                sink,
                stage=stage,
                cluster=cluster,
                reason=gate.stopped,
                apps=names,
                clock=clock,
            )
        if gate.waited:
            # Paused while it waited: the cluster has not started, so it holds until the unpause
            # (steps.pause; running syncs finish, no new one starts).
            hold_while_paused(
                lambda: load_progressive_sync(kube, rollout).spec.paused, cluster, clock=clock, tuning=tuning
            )
            apps = fleet.apps_of(found, clusters)  # as they are after the waits
    deadline = clock.now() + timedelta(seconds=ps.spec.progress_deadline_seconds)

    for app in apps:
        name = appsync.app_name(app)
        try:
            outcome, did_wait = _sync_one(
                kube,
                rollout,
                app,
                release=release,
                stage=stage,
                prune=ps.spec.sync_options.prune,
                sync_options=ps.spec.sync_options.options or [],
                since=since,
                clock=clock,
                deadline=deadline,
                tuning=tuning,
                stage_check=stage_check,
                note=note,
                skip_check=(
                    (lambda current: _skip_mark(ps.spec.skip, found, current))
                    if may_skip and not by_action[appsync.SyncAction.REQUEST]
                    else None
                ),
            )
        except _Skipped as exc:
            return _skip(sink, clock, cluster, str(exc))
        except (_Busy, _Stopped) as exc:
            reason = str(exc) if isinstance(exc, _Stopped) else f"cluster {cluster}: {exc}"
            return _fail(
                kube,
                rollout,
                tuning,
                sink,
                stage=stage,
                cluster=cluster,
                reason=reason,
                apps=names,
                clock=clock,
            )
        by_action[outcome].append(name)
        if did_wait:
            waited.append(name)

    sink.record(
        cluster,
        sinks.syncing(clock.now(), list(dict.fromkeys(rev for pin in release for rev in pin))),
        what=f"cluster {cluster} syncing",
    )
    return SyncResult(
        cluster,
        requested=tuple(by_action[appsync.SyncAction.REQUEST]),
        already=tuple(by_action[appsync.SyncAction.ALREADY_REQUESTED]),
        adopted=tuple(by_action[appsync.SyncAction.ADOPT]),
        left_alone=tuple(by_action[appsync.SyncAction.UP_TO_DATE]),
        waited_for=tuple(waited),
    )


def _sync_one(
    kube: Kube,
    rollout: RolloutRef,
    app: dict[str, Any],
    *,
    release: Sequence[Revisions],
    stage: str,
    prune: bool,
    sync_options: list[str],
    since: datetime | None,
    clock: Clock,
    deadline: datetime,
    tuning: Tuning,
    stage_check: Callable[[], str],
    note: Callable[[str], None],
    skip_check: Callable[[Mapping[str, Any]], str | None] | None = None,
) -> tuple[appsync.SyncAction, bool]:
    """Decide and, when due, write one Application; re-decide after a 409, a foreign operation or
    a comparison asked for. After a wait the stage is read again: a failed stage gets no new sync
    (`stage_check` says why, _Stopped). `skip_check` (None once the cluster has a write of this
    rollout) asks the Application as read right before the write for a skip mark (_Skipped)."""
    name = appsync.app_name(app)
    backoffs = tuning.app_conflict_backoffs
    conflicts = 0
    waited = False
    compared_on_request = False
    while True:
        decision = appsync.decide_sync(
            app, rollout.rollout_id, release=release, since=since, compared_on_request=compared_on_request
        )
        if decision.action in NOTHING_TO_WRITE:
            log.info("%s; writing nothing", decision.reason)
            return decision.action, waited
        if decision.action == appsync.SyncAction.REFUSED:
            raise _Busy(decision.reason)
        if decision.action in (appsync.SyncAction.BUSY, appsync.SyncAction.CONFIRM):
            if decision.action == appsync.SyncAction.BUSY:
                log.info("%s; not overwriting it, waiting for it to end", decision.reason)
                app = _wait_until_free(
                    kube, rollout, name, since=since, clock=clock, deadline=deadline, tuning=tuning
                )
            else:
                log.info("%s", decision.reason)
                note(decision.reason)
                app = _compare_again(kube, rollout, app, clock=clock, deadline=deadline, tuning=tuning)
                note("")
                compared_on_request = True
            waited = True
            stopped = stage_check()
            if stopped:
                raise _Stopped(stopped)
            continue
        mark = skip_check(app) if skip_check is not None else None
        if mark is not None:
            raise _Skipped(mark)
        try:
            write_sync(
                kube,
                rollout,
                app,
                pins=decision.pins,
                stage=stage,
                prune=prune,
                sync_options=sync_options,
                now=clock.now(),
            )
        except Conflict as exc:
            if conflicts == len(backoffs):
                raise ConflictsExhausted(
                    f"Application {name}: still conflicting after {conflicts + 1} attempts: {exc}", status=409
                ) from exc
            delay = backoffs[conflicts]
            conflicts += 1
            log.info(
                "Application %s changed while we wrote (attempt %d/%d): %s; reading it again in %.2fs",
                name,
                conflicts,
                len(backoffs) + 1,
                exc,
                delay,
            )
            clock.sleep(delay)
            app = kube.get(APPLICATIONS, rollout.applications_namespace, name)
            continue
        log.info("Application %s: sync requested at revision %s", name, ",".join(decision.pins))
        return decision.action, waited


def _may_write(
    apps: Sequence[Mapping[str, Any]],
    rollout: RolloutRef,
    *,
    release: Sequence[Revisions],
    since: datetime | None,
) -> bool:
    """Whether the step may write a sync for one of `apps` (as read now): not when each is synced by
    this rollout already, adopted or up to date, so that a cluster with nothing to write does not
    wait for a window."""
    return any(
        appsync.decide_sync(app, rollout.rollout_id, release=release, since=since).action
        not in NOTHING_TO_WRITE
        for app in apps
    )


def write_sync(
    kube: Kube,
    rollout: RolloutRef,
    app: Mapping[str, Any],
    *,
    pins: Sequence[str],
    stage: str,
    prune: bool,
    sync_options: Sequence[str],
    now: datetime,
) -> None:
    """The one write that requests our sync of `app` (as read: its resourceVersion makes a change
    since then a Conflict): `.operation` pinned to `pins`, our rollout id and stage in its `info`."""
    body = appsync.build_sync_request(
        app,
        revisions=pins,
        rollout_id=rollout.rollout_id,
        stage=stage,
        prune=prune,
        sync_options=sync_options,
        now=now,
    )
    kube.replace(APPLICATIONS, rollout.applications_namespace, body)


def _wait_until_free(
    kube: Kube,
    rollout: RolloutRef,
    name: str,
    *,
    since: datetime | None,
    clock: Clock,
    deadline: datetime,
    tuning: Tuning,
) -> dict[str, Any]:
    """Follow the Application until its operation ends (or it is ours); _Busy at the deadline."""

    def window() -> int:
        left = (deadline - clock.now()).total_seconds()
        return tuning.watch_window_for(left)

    reason = ""
    snapshots = follow_applications(kube, rollout.applications_namespace, [name], window_seconds=window)
    try:
        for snapshot in snapshots:
            app = snapshot.objects[name]
            if app is None:
                raise _Busy(f"Application {name} was deleted while we waited to sync it")
            decision = appsync.decide_sync(app, rollout.rollout_id, release=(), since=since)
            if decision.action != appsync.SyncAction.BUSY:
                return app
            reason = decision.reason
            if clock.now() >= deadline:
                raise _Busy(f"{reason} and did not end within the progress deadline; not overwritten")
    finally:
        snapshots.close()
    raise AssertionError(f"unreachable: {reason}")


def _compare_again(
    kube: Kube,
    rollout: RolloutRef,
    app: Mapping[str, Any],
    *,
    clock: Clock,
    deadline: datetime,
    tuning: Tuning,
) -> dict[str, Any]:
    """Ask Argo CD to compare the Application again (unless a request is pending already) and follow
    it until Argo CD answered (the annotation is gone: a comparison that resolved the branch afresh,
    `orchestrator.argocd.compare_request`); the Application as answered. _Busy at the deadline."""
    name = appsync.app_name(app)
    namespace = rollout.applications_namespace
    before = ",".join(appsync.compared_revisions(app)) or "(no revision)"

    def ask() -> datetime:
        """Send a newly stamped request; when it was sent."""
        try:
            kube.patch(APPLICATIONS, namespace, name, appsync.refresh_patch(clock.now()))
        except NotFound as exc:
            raise _Busy(f"Application {name} was deleted while we asked Argo CD to compare it") from exc
        return clock.now()

    # Someone's request already pending gets as long as ours would before we ask again.
    asked_at = clock.now() if appsync.refresh_requested(app) else ask()

    def window() -> int:
        left = (deadline - clock.now()).total_seconds()
        return tuning.watch_window_for(min(left, tuning.refresh_again_seconds))

    snapshots = follow_applications(kube, namespace, [name], window_seconds=window)
    try:
        for snapshot in snapshots:
            current = snapshot.objects[name]
            if current is None:
                raise _Busy(f"Application {name} was deleted while we waited for Argo CD to compare it")
            if not appsync.refresh_requested(current):
                log.info("Application %s: Argo CD compared it again at our request", name)
                return current
            if clock.now() >= deadline:
                raise _Busy(
                    f"{name}: Synced and Healthy at {before}, which is not a revision of this release, "
                    "and Argo CD did not answer our request to compare it again within the progress "
                    "deadline: whether it runs the release is not known, so it is not left alone"
                )
            if (clock.now() - asked_at).total_seconds() >= tuning.refresh_again_seconds:
                # Unanswered: ask again with a new stamp, which reaches the controller as a new event.
                log.info("Application %s: Argo CD has not compared it yet; asking again", name)
                asked_at = ask()
    finally:
        snapshots.close()
    raise AssertionError(f"unreachable: {name}")


def _skip_mark(skip: SkipSpec | None, cluster: Cluster, app: Mapping[str, Any]) -> str | None:
    """The skip that holds the cluster back as this Application, read now, says (None: none)."""
    return skip_reason(skip, cluster, [app_view_from_object(app)])


def _skip(sink: StatusSink, clock: Clock, cluster: str, reason: str) -> SyncResult:
    """Record the cluster Skipped (nothing was written for it) and say so."""
    log.info("cluster %s skipped, no sync written: %s", cluster, reason)
    sink.record(cluster, sinks.skipped(clock.now(), reason), what=f"cluster {cluster} skipped", urgent=True)
    return SyncResult(cluster, skipped=reason)


def _fail(
    kube: Kube,
    rollout: RolloutRef,
    tuning: Tuning,
    sink: StatusSink,
    *,
    stage: str,
    cluster: str,
    reason: str,
    apps: Sequence[str] = (),
    clock: Clock | None = None,
) -> SyncResult:
    """End what this rollout already requested on the cluster, record it failed, return the failure."""
    if apps and clock is not None:
        ended = terminate_operations(kube, rollout, apps, clock=clock, tuning=tuning)
        if ended.acted:
            reason = f"{reason}; {ended.summary}"
    now = clock.now() if clock is not None else None
    sink.record(cluster, sinks.failed(now, reason), what=f"cluster {cluster} failed", urgent=True)
    return SyncResult(cluster, failure=reason)
