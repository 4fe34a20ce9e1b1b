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
- otherwise one update carrying the resourceVersion sets `.operation` (revision pinned, our rollout
  id and stage in `info`) and nulls the finished `status.operationState`. A 409 means someone
  wrote in between: read again and decide again (bounded). Annotations are never written: the
  ApplicationSet controller owns them.

Then the cluster is listed in the stage's `syncing` (status writer: no change, no write). Running
the step twice for the same rollout writes nothing the second time.

Caller: `python -m steps sync` (steps.cli); tests call `sync_cluster` directly too.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from orchestrator.api.models import ProgressiveSync
from orchestrator.api.release import Revisions
from orchestrator.api.rollout_status import mark_failed, mark_syncing
from orchestrator.argocd import appsync
from orchestrator.argocd.appwatch import follow_applications
from orchestrator.core.clock import Clock
from orchestrator.kube.client import APPLICATIONS, Conflict, Kube
from orchestrator.kube.status_writer import ConflictsExhausted
from steps.common import (
    FleetLookup,
    RolloutRef,
    Tuning,
    check_revisions,
    check_rollout,
    check_stage,
    load_progressive_sync,
)
from steps.status_sink import DirectSink, StatusSink
from steps.terminate import terminate_operations

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
        parts = []
        if self.requested:
            parts.append(f"requested the sync of {', '.join(self.requested)}")
        if self.already:
            parts.append(f"already synced by this rollout: {', '.join(self.already)}")
        if self.adopted:
            parts.append(f"already at the release revision, adopted: {', '.join(self.adopted)}")
        if self.left_alone:
            parts.append(f"up to date outside this release, left alone: {', '.join(self.left_alone)}")
        return f"sync: cluster {self.cluster}: " + "; ".join(parts)


# What `sync` writes nothing for (the first wave too: steps/first_wave.py).
NOTHING_TO_WRITE = (
    appsync.SyncAction.ALREADY_REQUESTED,
    appsync.SyncAction.ADOPT,
    appsync.SyncAction.UP_TO_DATE,
)


class _Busy(Exception):
    """Someone's operation was still in progress at the deadline, or the Application cannot be synced."""


def sync_cluster(
    kube: Kube,
    rollout: RolloutRef,
    *,
    stage: str,
    cluster: str,
    revisions: Sequence[Revisions],
    clock: Clock,
    tuning: Tuning | None = None,
    sink: StatusSink | None = None,
    ps: ProgressiveSync | None = None,
    fleet: FleetLookup | None = None,
) -> SyncResult:
    """Request the pinned sync of every Application of the ApplicationSet on `cluster`.

    `revisions` are the release's revision tuples; each Application is pinned to its own
    (`orchestrator.argocd.appsync.release_pin`). Status changes go to `sink` (default: written at once).
    `ps`: the ProgressiveSync as the caller read it a moment ago (default: read here); `fleet`: the
    clusters and their Applications (default: read here; a batch shares one, see `FleetLookup`).
    """
    tuning = tuning or Tuning()
    sink = sink or DirectSink(kube, rollout.namespace, rollout.name, tuning.status)
    release = check_revisions(revisions)
    ps = ps or load_progressive_sync(kube, rollout)
    rollout = rollout.with_applications_of(ps)
    check_rollout(ps, rollout.rollout_id)
    check_stage(ps, stage)
    fleet = fleet or FleetLookup(kube, rollout, ps, clock=clock)
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
    deadline = clock.now() + timedelta(seconds=ps.spec.progress_deadline_seconds)
    since = ps.status.rollout.started_at if ps.status and ps.status.rollout else None
    outcomes: dict[appsync.SyncAction, list[str]] = defaultdict(list)
    waited: list[str] = []
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
            )
        except _Busy as exc:
            return _fail(
                kube,
                rollout,
                tuning,
                sink,
                stage=stage,
                cluster=cluster,
                reason=f"cluster {cluster}: {exc}",
                apps=[appsync.app_name(a) for a in apps],
                clock=clock,
            )
        outcomes[outcome].append(name)
        if did_wait:
            waited.append(name)

    sink.record(
        lambda status: mark_syncing(status, stage=stage, cluster=cluster), what=f"cluster {cluster} syncing"
    )
    return SyncResult(
        cluster,
        requested=tuple(outcomes[appsync.SyncAction.REQUEST]),
        already=tuple(outcomes[appsync.SyncAction.ALREADY_REQUESTED]),
        adopted=tuple(outcomes[appsync.SyncAction.ADOPT]),
        left_alone=tuple(outcomes[appsync.SyncAction.UP_TO_DATE]),
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
) -> tuple[appsync.SyncAction, bool]:
    """Decide and, when due, write one Application; re-decide after a 409 or a foreign operation."""
    name = appsync.app_name(app)
    backoffs = tuning.app_conflict_backoffs
    conflicts = 0
    waited = False
    while True:
        decision = appsync.decide_sync(app, rollout.rollout_id, release=release, since=since)
        if decision.action in NOTHING_TO_WRITE:
            log.info("%s; writing nothing", decision.reason)
            return decision.action, waited
        if decision.action == appsync.SyncAction.REFUSED:
            raise _Busy(decision.reason)
        if decision.action == appsync.SyncAction.BUSY:
            log.info("%s; not overwriting it, waiting for it to end", decision.reason)
            app = _wait_until_free(
                kube, rollout, name, since=since, clock=clock, deadline=deadline, tuning=tuning
            )
            waited = True
            continue
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
        return max(1, min(tuning.watch_window_seconds, math.ceil(left)))

    reason = ""
    snapshots = follow_applications(kube, rollout.applications_namespace, [name], window_seconds=window)
    try:
        for snapshot in snapshots:
            app = snapshot.apps[name]
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
    sink.record(
        lambda status: mark_failed(status, stage=stage, cluster=cluster, reason=reason),
        what=f"cluster {cluster} failed",
        urgent=True,
    )
    return SyncResult(cluster, failure=reason)
