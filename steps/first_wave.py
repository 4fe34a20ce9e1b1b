"""The first wave of a stage starts from the step that selected it (issue 15).

A stage's first `maxParallel` clusters used to wait for their own pods (or a batch pod) to start
before anything was synced: on the real node that is seconds per stage, on the critical path of
every rollout. `select` (and `record-and-select` for the next stage) has just listed the
Applications it planned with, so once it recorded the stage it requests the syncs of the first
`startSyncs` targets itself (the rollout contract's, which the builder sets to the stage's
maxParallel: exactly the clusters the fan-out starts first, one pod per cluster or in batches, see
`steps.batch`):

- each Application is decided as `sync` decides it (`orchestrator.argocd.appsync.decide_sync`), on
  the object as listed, and when due written once with that resourceVersion (`steps.sync.write_sync`);
- anything else is left to the cluster's own step, which decides again on the Application as it
  is then: a conflict (someone wrote since the list), any API error, someone's operation in
  progress, an Application being deleted, a cluster without Applications; nothing is retried here;
- nothing starts while the ProgressiveSync is paused (DESIGN.md §3: no new step starts), nor when
  its rollout was superseded or the stage failed: the ProgressiveSync is read again (one GET) right
  before the writes, since the read `select` planned with is older by the listing, the planning and
  up to `--compare-wait-seconds` of waiting for Argo CD (issue 29, point 6);
- a cluster whose windows are closed now (steps.window_gate: `spec.windows`, the AppProjects' sync
  windows) gets no sync here: its own step waits for them;
- an Application Synced and Healthy outside the release is not decided here (its cluster step asks
  Argo CD to compare it again first, `steps.sync`); the cluster's other Applications are;
- a write whose answer is an error (a 409 after a lost answer, a timeout) is looked at once more
  (one GET): when the Application carries our sync, it was written;
- the clusters where a sync of ours was written are then recorded Syncing in the stage's records,
  one merge patch per part; it is best effort (the cluster step records them too). Nothing depends
  on that record alone: a cluster step of a failed stage asks the Applications what we wrote
  (`steps.cluster`).

The cluster steps find the syncs ours (our rollout id in `.operation.info`) and write nothing for
them, so every Application still gets exactly one sync write per rollout. A first-wave cluster of a
stage that fails before its step runs is stopped by that step (`steps.cluster`: it is recorded
Syncing, or its Applications carry our sync) rather than reported "not started". A `select` run
again for a stage already selected starts nothing: its cluster steps do.

Caller: `steps.select_stage.select_stage`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.api.models import ProgressiveSync
from orchestrator.api.release import Revisions
from orchestrator.api.stage_records import StageOutcomes
from orchestrator.api.windows import evaluated_windows
from orchestrator.argocd import appsync
from orchestrator.argocd.fleet import AppSetView, Cluster, index_clusters
from orchestrator.core.clock import Clock
from orchestrator.core.windows import Window
from orchestrator.kube.client import APPLICATIONS, Kube, KubeError
from steps import status_sink as sinks
from steps.common import (
    RolloutRef,
    apps_by_cluster,
    load_progressive_sync,
    read_stage_failures,
    stage_failure,
)
from steps.context import StepContext
from steps.status_sink import BatchedSink, StageRecords
from steps.sync import NOTHING_TO_WRITE, write_sync
from steps.window_gate import closed_clusters, read_cluster_project_windows

log = logging.getLogger(__name__)

# Sync writes in flight at once: each is one small PUT, so a handful of threads keep the API server
# busy without a burst the size of maxParallel.
WRITERS = 8


@dataclass(frozen=True)
class FirstWave:
    """The clusters of the first wave whose sync this step requested, and those left to their step
    (`reason`: why none was started, when the wave was refused as a whole)."""

    started: tuple[str, ...] = ()
    left: tuple[str, ...] = ()
    reason: str = ""

    @property
    def summary(self) -> str:
        """For the step's summary line ("" when nothing was tried)."""
        if not self.started and not self.left:
            return ""
        if self.reason:
            return f"started no sync ({self.reason}), left {len(self.left)} cluster(s) to their own step"
        text = f"started the sync of {len(self.started)} cluster(s)"
        if self.left:
            text += f", left {len(self.left)} to their own step"
        return text


def start_first_wave(
    kube: Kube,
    ctx: StepContext,
    *,
    where: StageRecords,
    wave: Sequence[str],
    items: Sequence[Mapping[str, Any]],
    clusters: Sequence[Cluster],
    app_set: AppSetView | None,
    since: datetime | None,
    project_windows: Mapping[str, tuple[Window, ...]],
) -> FirstWave:
    """Request the syncs of the clusters in `wave` from `items` (the Applications as listed), pinned
    to the contract's release, then record the clusters started Syncing in `where`, the stage's
    records (see the module). The ProgressiveSync and the stage's failures
    (`steps.common.read_stage_failures`) are read here, right before the writes, not taken from the
    read `select` planned with (`ctx.ps`); the AppProjects' windows are those `select` read for the
    targets' order (`project_windows`; a project missing there is read here), evaluated again now."""
    rollout, release, clock = ctx.rollout, ctx.release, ctx.clock
    if not wave:
        return FirstWave()
    stage = where.stage
    ps = load_progressive_sync(kube, rollout)
    refused = first_wave_refusal(ps, rollout.rollout_id, stage, read_stage_failures(kube, rollout, ps, stage))
    if refused:
        log.info("not starting the first wave of stage %r: %s", stage, refused)
        return FirstWave(left=tuple(wave), reason=refused)
    rollout = rollout.with_applications_of(ps)
    by_cluster = apps_by_cluster(items, ps.spec.app_set_ref.name, app_set, index_clusters(clusters))
    projects = read_cluster_project_windows(
        kube, rollout, by_cluster=by_cluster, clusters=wave, known=project_windows
    )
    closed = closed_clusters(
        evaluated_windows(ctx.contract.windows),
        projects,
        by_cluster=by_cluster,
        clusters=wave,
        now=clock.now(),
    )
    for cluster, why in closed.items():
        log.info("cluster %s: %s; left to its step", cluster, why)

    def start(cluster: str) -> bool:
        if cluster in closed:
            return False
        return start_cluster(
            kube,
            rollout,
            ps,
            stage=stage,
            cluster=cluster,
            apps=by_cluster.get(cluster, ()),
            release=release,
            since=since,
            clock=clock,
        )

    with ThreadPoolExecutor(max_workers=min(WRITERS, len(wave)), thread_name_prefix="first-wave") as pool:
        outcomes = list(pool.map(start, wave))
    started = tuple(cluster for cluster, ok in zip(wave, outcomes, strict=True) if ok)
    left = tuple(cluster for cluster, ok in zip(wave, outcomes, strict=True) if not ok)
    if started:
        _record_syncing(kube, where, clusters=started, clock=clock)
    log.info(
        "stage %r: requested the sync of %d first-wave cluster(s); %d left to their own step",
        stage,
        len(started),
        len(left),
    )
    return FirstWave(started, left)


def first_wave_refusal(ps: ProgressiveSync, rollout_id: str, stage: str, outcomes: StageOutcomes) -> str:
    """Why the first wave may not start on this read of the ProgressiveSync and of the stage's records
    ("" when it may): another rollout owns the status, the ProgressiveSync is paused, or the stage
    failed."""
    current = ps.status.rollout.id if ps.status and ps.status.rollout else None
    if current != rollout_id:
        return f"rollout {rollout_id} was superseded by {current or 'no rollout'}"
    if ps.spec.paused:
        return "the ProgressiveSync is paused"
    return stage_failure(ps, stage, outcomes)


def start_cluster(
    kube: Kube,
    rollout: RolloutRef,
    ps: ProgressiveSync,
    *,
    stage: str,
    cluster: str,
    apps: Sequence[Mapping[str, Any]],
    release: Sequence[Revisions],
    since: datetime | None,
    clock: Clock,
) -> bool:
    """Write the due syncs of one cluster's Applications (as read: each write carries its
    resourceVersion); True when at least one sync of ours was written (the cluster is then in
    flight, whatever its step does with the rest). Also the chained hand-off's (`steps.chain`)."""
    if not apps:
        log.info("cluster %s: no Application listed for it; left to its step", cluster)
        return False
    written = False
    for app in apps:
        name = appsync.app_name(app)
        decision = appsync.decide_sync(app, rollout.rollout_id, release=release, since=since)
        if decision.action in NOTHING_TO_WRITE or decision.action == appsync.SyncAction.CONFIRM:
            continue  # CONFIRM: the cluster's step asks Argo CD to compare it again, then decides
        if decision.action != appsync.SyncAction.REQUEST:
            log.info("cluster %s: %s; left to its step", cluster, decision.reason)
            return written
        try:
            write_sync(
                kube,
                rollout,
                app,
                pins=decision.pins,
                stage=stage,
                prune=ps.spec.sync_options.prune,
                sync_options=list(ps.spec.sync_options.options or []),
                now=clock.now(),
            )
        except KubeError as exc:  # a conflict, or the API: the cluster's step decides again
            if _landed(kube, rollout, name, since=since):
                # A lost answer retried into a 409, or a timeout after the write: it is ours.
                log.info("Application %s: the write answered %s, but the sync of ours is there", name, exc)
                written = True
                continue
            log.info("cluster %s: Application %s not written (%s); left to its step", cluster, name, exc)
            return written
        log.info("Application %s: sync requested at revision %s", name, ",".join(decision.pins))
        written = True
    return written


def _landed(kube: Kube, rollout: RolloutRef, name: str, *, since: datetime | None) -> bool:
    """Whether the Application carries a sync of this rollout after a write that answered an error
    (one GET; an error reading it is "not known": False, the cluster's step decides again)."""
    try:
        app = kube.get(APPLICATIONS, rollout.applications_namespace, name)
    except KubeError:
        return False
    return appsync.synced_by_rollout(app, rollout.rollout_id, since=since)


def _record_syncing(kube: Kube, where: StageRecords, *, clusters: Sequence[str], clock: Clock) -> None:
    """Record `clusters` Syncing, one merge patch per part of the stage; an error is logged, not raised."""
    sink = BatchedSink(kube, where, flush_seconds=0)
    now = clock.now()
    for cluster in clusters:
        sink.record(cluster, sinks.syncing(now), what=f"cluster {cluster} syncing (first wave)")
    try:
        sink.flush()
    except KubeError as exc:
        log.warning(
            "stage %r: could not record the first wave Syncing (%s); their steps will", where.stage, exc
        )
