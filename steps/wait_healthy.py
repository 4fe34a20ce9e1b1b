"""The `wait-healthy` step: follow one cluster's Applications until the cluster is done or failed.

It watches the Applications (list → watch, `orchestrator.argocd.appwatch`), never sleeps and polls, and
decides on every change with `orchestrator.argocd.assess.assess_cluster` (DESIGN.md §3): done when every
Application finished its operation Succeeded at the pinned revision, is Synced and Healthy, with
the health observed after the operation finished; failed when an operation ended Failed/Error
(after Argo CD's retries), health went Degraded after the sync, an Application or the cluster
Secret disappeared, an Application was replaced by a new object of the same name (another uid:
deleted and created again; `assess.replacement`), or the progress deadline passed, or its stage
failed (a sibling's failure beyond `maxFailedClusters`: then what we started is stopped, looked at
when the step starts and every `Tuning.stage_check_seconds`). The deadline
is `progressDeadlineSeconds` after the sync started (the controller's `operationState.startedAt`
for our operation, else the time our request was written), so a restarted step keeps the
original deadline.

The outcome is recorded in the cluster's record of its stage (completed, or failed with the
reason). A cluster already recorded for this rollout is reported as recorded
without waiting or writing again.

Caller: `python -m steps wait-healthy` (steps.cli); tests call `wait_healthy` directly too.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orchestrator.api.models import ProgressiveSync
from orchestrator.api.release import Revisions
from orchestrator.api.stage_records import ClusterState, StageOutcomes
from orchestrator.argocd import appsync
from orchestrator.argocd.appwatch import SnapshotCause, follow_applications
from orchestrator.argocd.assess import ClusterPhase, assess_cluster, remember_uids
from orchestrator.core.clock import Clock, format_time
from orchestrator.kube.client import APPLICATIONS, Kube, NotFound
from steps import status_sink as sinks
from steps.common import (
    FleetLookup,
    RolloutRef,
    Tuning,
    stage_failed_meanwhile,
    stage_failure,
    stopped_reason,
)
from steps.context import ALONE, Shared, StepContext
from steps.status_sink import StatusSink
from steps.terminate import terminate_operations

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WaitResult:
    """How one cluster ended."""

    cluster: str
    phase: ClusterPhase
    reason: str
    already_recorded: bool = False
    apps: tuple[str, ...] = ()  # the cluster's Applications that were followed
    note: str = ""  # what a done cluster left worth a remark (kept in the stage's notes)

    @property
    def failed(self) -> bool:
        """True when the cluster failed (exit 1)."""
        return self.phase == ClusterPhase.FAILED

    @property
    def summary(self) -> str:
        """One line for people."""
        verdict = "done" if self.phase == ClusterPhase.DONE else "FAILED"
        recorded = " (already recorded)" if self.already_recorded else ""
        return f"wait-healthy: cluster {self.cluster} {verdict}{recorded}: {self.reason}"


def wait_healthy(kube: Kube, ctx: StepContext, cluster: str, shared: Shared = ALONE) -> WaitResult:
    """Wait until `cluster` is done or failed, record it in its stage's records, and return it.

    `ctx`: the step's opening (`steps.context`; the release's revision tuples, see
    `orchestrator.argocd.assess`). `shared`: the status sink and the fleet lookup a caller hands in
    (`steps.context.Shared`; default: written at once, read here).
    """
    rollout, ps, stage, release = ctx.rollout, ctx.ps, ctx.stage_name, ctx.release
    clock, tuning = ctx.clock, ctx.tuning
    shared = shared.with_records(kube, ctx)
    sink, outcomes = shared.sink, shared.outcomes
    assert sink is not None and outcomes is not None  # with_records made them
    recorded = _recorded(outcomes, cluster)
    if recorded is not None:
        return recorded

    result = _follow(
        kube,
        rollout,
        ps,
        stage=stage,
        cluster=cluster,
        release=release,
        clock=clock,
        tuning=tuning,
        sink=sink,
        fleet=shared.fleet_for(kube, ctx),
        outcomes=outcomes,
    )
    if result.phase == ClusterPhase.FAILED and result.apps:
        # Nothing we started may apply the release after we said the cluster failed (a sync a
        # sync window holds back would run when the window opens): end it first, then record.
        ended = terminate_operations(kube, rollout, result.apps, clock=clock, tuning=tuning)
        if ended.acted:
            result = dataclasses.replace(result, reason=f"{result.reason}; {ended.summary}")

    now = clock.now()
    change = (
        sinks.completed(now, result.note)
        if result.phase == ClusterPhase.DONE
        else sinks.failed(now, result.reason)
    )
    sink.record(cluster, change, what=f"cluster {cluster} {result.phase.value.lower()}", urgent=result.failed)
    return result


def _recorded(outcomes: StageOutcomes, cluster: str) -> WaitResult | None:
    """The outcome already recorded for this cluster, if any."""
    record = outcomes.clusters.get(cluster)
    if record is None:
        return None
    if record.state == ClusterState.COMPLETED:
        return WaitResult(cluster, ClusterPhase.DONE, "recorded as completed", already_recorded=True)
    if record.state == ClusterState.FAILED:
        return WaitResult(cluster, ClusterPhase.FAILED, record.reason, already_recorded=True)
    if record.state == ClusterState.SKIPPED:
        # Never synced, so nothing to wait for: done for the stage (neither failed nor pending).
        return WaitResult(cluster, ClusterPhase.DONE, f"skipped: {record.reason}", already_recorded=True)
    return None


def _follow(
    kube: Kube,
    rollout: RolloutRef,
    ps: ProgressiveSync,
    *,
    stage: str,
    cluster: str,
    release: Sequence[Revisions],
    clock: Clock,
    tuning: Tuning,
    sink: StatusSink,
    fleet: FleetLookup,
    outcomes: StageOutcomes,
) -> WaitResult:
    names = _apps_to_follow(ps, fleet, stage=stage, cluster=cluster, outcomes=outcomes)
    if isinstance(names, WaitResult):
        return names

    since = ps.status.rollout.started_at if ps.status and ps.status.rollout else None
    started: datetime | None = None
    deadline: datetime | None = None
    last_cluster_check = clock.now()
    last_stage_check = clock.now()
    cluster_exists = True
    last_reason = ""
    notes = _Notes(sink, stage=stage, cluster=cluster)
    first_uids: dict[str, str] = {}  # each Application as first seen: a new uid is another object
    refreshes = Refreshes(kube, rollout.applications_namespace, tuning, clock)

    def window() -> int:
        now = clock.now()
        left = (deadline - now).total_seconds() if deadline else tuning.watch_window_seconds
        left = min(left, refreshes.seconds_to_next(now))
        left = min(left, tuning.stage_check_seconds - (now - last_stage_check).total_seconds())
        return tuning.watch_window_for(left)

    snapshots = follow_applications(kube, rollout.applications_namespace, names, window_seconds=window)
    try:
        for index, snapshot in enumerate(snapshots):
            now = clock.now()
            if started is None:
                started = sync_started(snapshot.objects, rollout.rollout_id) or now
                deadline = started + timedelta(seconds=ps.spec.progress_deadline_seconds)
                log.info(
                    "cluster %s: following %s; deadline %s (%ss after the sync started at %s)",
                    cluster,
                    ", ".join(names),
                    format_time(deadline),
                    ps.spec.progress_deadline_seconds,
                    format_time(started),
                )
            assert deadline is not None
            if (now - last_stage_check).total_seconds() >= tuning.stage_check_seconds:
                # A sibling's failure may have failed the stage: the rollout is Failed, so what we
                # started here must not go on applying the release (DESIGN.md §3).
                last_stage_check = now
                stopped = stage_failed_meanwhile(kube, rollout, stage=stage, cluster=cluster)
                if stopped:
                    return WaitResult(cluster, ClusterPhase.FAILED, stopped, apps=tuple(names))
            stale_check = (now - last_cluster_check).total_seconds() >= tuning.watch_window_seconds
            # The first snapshot needs no look: `fleet.find` found the cluster a moment ago.
            if (snapshot.cause != SnapshotCause.EVENT and index > 0) or stale_check:
                cluster_exists = fleet.still_exists(cluster, max_age_seconds=tuning.stage_check_seconds)
                last_cluster_check = now
            verdict = assess_cluster(
                cluster,
                snapshot.objects,
                release=release,
                rollout_id=rollout.rollout_id,
                started=started,
                now=now,
                deadline=deadline,
                cluster_exists=cluster_exists,
                since=since,
                degraded_grace=timedelta(seconds=ps.spec.degraded_grace_seconds),
                first_seen=remember_uids(first_uids, snapshot.objects),
            )
            if verdict.phase != ClusterPhase.WAITING:
                log.info("%s", verdict.reason)
                note = "; ".join(verdict.notices) if verdict.phase == ClusterPhase.DONE else ""
                return WaitResult(cluster, verdict.phase, verdict.reason, apps=tuple(names), note=note)
            if verdict.reason != last_reason:
                log.info("%s", verdict.reason)
                last_reason = verdict.reason
            notes.say("; ".join(verdict.notices))
            refreshes.request(verdict.refresh, snapshot.objects)
    finally:
        snapshots.close()
    raise AssertionError("unreachable: the Application follower never ends on its own")


def _apps_to_follow(
    ps: ProgressiveSync, fleet: FleetLookup, *, stage: str, cluster: str, outcomes: StageOutcomes
) -> list[str] | WaitResult:
    """The names of the cluster's Applications to follow, or why the cluster fails without a wait:
    no cluster Secret, no Application, or its stage failed already (in flight in a failed stage,
    steps.cluster: it is stopped at once)."""
    found, clusters = fleet.find(cluster)
    if found is None:
        return WaitResult(
            cluster, ClusterPhase.FAILED, f"cluster {cluster}: no Argo CD cluster Secret has this name"
        )
    names = [appsync.app_name(app) for app in fleet.apps_of(found, clusters)]
    if not names:
        return WaitResult(
            cluster,
            ClusterPhase.FAILED,
            f"cluster {cluster}: no Application of ApplicationSet {ps.spec.app_set_ref.name} targets it",
        )
    failed_already = stage_failure(ps, stage, outcomes)
    if failed_already:
        return WaitResult(
            cluster, ClusterPhase.FAILED, stopped_reason(cluster, failed_already), apps=tuple(names)
        )
    return names


def sync_started(apps: Mapping[str, Mapping[str, Any] | None], rollout_id: str) -> datetime | None:
    """When the first of this rollout's syncs of the cluster started (None when none is known)."""
    starts = [
        t
        for app in apps.values()
        if app is not None and (t := appsync.sync_started_at(app, rollout_id)) is not None
    ]
    return min(starts) if starts else None


class _Notes:
    """Writes the cluster's note into its record (`note`) when it changes: a person sees what
    holds the cluster (a sync window, Suspended, Missing, Unknown, Argo CD retrying, ...) while it lasts."""

    def __init__(self, sink: StatusSink, *, stage: str, cluster: str) -> None:
        self.sink = sink
        self.stage = stage
        self.cluster = cluster
        self.said: str | None = None  # None: not written by this step yet (a note may be left over)

    def say(self, note: str) -> None:
        if note == self.said:
            return
        # A cluster recorded done or failed already (by a step run again) keeps its own: its outcome says it.
        self.sink.record(self.cluster, sinks.note(note), what=f"cluster {self.cluster} note")
        self.said = note


class Refreshes:
    """Asks Argo CD to compare an Application again when only a fresh comparison can tell (bounded).

    A request goes out once the second of the sync's `finishedAt` is over (so that the comparison
    it triggers is stamped later; a wait of at most `_SECOND_TICK`), then again only after
    `refresh_again_seconds` without an answer: each request carries a new `refresh-timestamp`
    (`appsync.refresh_patch`), so asking again is a change the application controller is told of
    even while the earlier request's annotation is still there.
    """

    def __init__(self, kube: Kube, namespace: str, tuning: Tuning, clock: Clock) -> None:
        self.kube = kube
        self.namespace = namespace
        self.clock = clock
        self.again = timedelta(seconds=tuning.refresh_again_seconds)
        self.asked: dict[str, datetime] = {}
        self.due: dict[str, datetime] = {}

    def request(self, wanted: Mapping[str, datetime], apps: Mapping[str, Mapping[str, Any] | None]) -> None:
        """Ask for the comparisons `wanted` (name -> not before) that are due and not asked lately."""
        self.due = dict(wanted)
        for name, after in sorted(wanted.items()):
            if apps.get(name) is None:
                continue
            asked = self.asked.get(name)
            if asked is not None and self.clock.now() - asked < self.again:
                continue
            wait = (after - self.clock.now()).total_seconds()
            if wait > _SECOND_TICK:
                continue  # the watch window ends by then (seconds_to_next)
            if wait > 0:
                self.clock.sleep(wait)
            log.info("Application %s: asking Argo CD to compare it again (health predates the sync)", name)
            try:
                self.kube.patch(APPLICATIONS, self.namespace, name, appsync.refresh_patch(self.clock.now()))
            except NotFound:
                # Deleted since the snapshot: the watch brings the deletion (or the object made
                # again), and the assessment names it; a refresh of it is moot.
                log.info("Application %s is gone; not asking Argo CD to compare it", name)
                continue
            self.asked[name] = self.clock.now()

    def seconds_to_next(self, now: datetime) -> float:
        """Seconds until the next refresh may be sent (infinity when none is due)."""
        times = [
            max(after, self.asked[name] + self.again) if name in self.asked else after
            for name, after in self.due.items()
        ]
        return max(0.0, min(((t - now).total_seconds() for t in times), default=math.inf))


# Argo CD stamps reconciledAt in whole seconds: the refresh waits at most this long for the second
# of the sync's finishedAt to be over.
_SECOND_TICK = 1.5
