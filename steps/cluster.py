"""The `cluster` step: one cluster of a stage, start to end: `sync`, then `wait-healthy`, in one process.

The rollout Workflow runs one pod of this step per cluster (docs/design/workflow.md says why one pod and
not a sync pod and a wait pod). In order:

1. the outcome this rollout already recorded for the cluster (a step run again after a lost pod or
   a restarted executor) is reported as it is, without syncing or waiting again;
2. when the stage has already failed, i.e. its failed clusters exceed
   `failurePolicy.maxFailedClusters` (DESIGN.md §3: then no new cluster starts), the cluster is
   not started: nothing is synced, nothing is recorded for it, and the step exits 1 so the
   Workflow shows it did not succeed. The fan-out has no `failFast` (Argo's hangs or stalls the
   rollout around nested templates), so this check is what stops the stage. A cluster in flight
   already is not "not started": its record says Syncing (its sync started by `select`,
   steps/first_wave.py), or, when that record was lost (a crash between the writes and the record,
   an error while recording, a lost answer to a write), its Applications carry a sync of this rollout
   (`steps.common.written_by_rollout`: the Applications say what we wrote). It goes straight to
   wait-healthy, which stops what was started and records it failed: no new sync is written for
   any of its Applications (issue 29, points 4 and 5);
3. `steps.sync.sync_cluster`, then `steps.wait_healthy.wait_healthy`, each idempotent, each
   recording the cluster's outcome in its stage's records as they do when run alone.

Exit codes (steps.cli): 0 the cluster is done; 1 it failed, or it was not started because the
stage had failed; 75 a temporary error, which the Workflow's retryStrategy retries (running the
step again is safe: see 1 and the idempotence of sync and wait-healthy).

Caller: `python -m steps cluster` (steps.cli); tests call `run_cluster` directly too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from enum import StrEnum

from orchestrator.api.models import ProgressiveSync
from orchestrator.api.stage_records import ClusterState, StageOutcomes
from orchestrator.argocd.assess import ClusterPhase
from orchestrator.kube.client import Kube
from steps.common import (
    FleetLookup,
    stage_failure,
    written_by_rollout,
)
from steps.context import ALONE, Shared, StepContext
from steps.sync import sync_cluster
from steps.wait_healthy import wait_healthy

log = logging.getLogger(__name__)


class ClusterOutcome(StrEnum):
    """How one cluster's step ended."""

    DONE = "done"
    FAILED = "failed"
    NOT_STARTED = "not started"


@dataclass(frozen=True)
class ClusterResult:
    """The end of one cluster's step, with the reason in words."""

    cluster: str
    outcome: ClusterOutcome
    reason: str
    finished_here: bool = False  # this run followed the cluster to its end (not a rerun that found it)

    @property
    def failed(self) -> bool:
        """True unless the cluster is done (exit 1)."""
        return self.outcome != ClusterOutcome.DONE

    @property
    def summary(self) -> str:
        """One line for people."""
        return f"cluster {self.cluster} {self.outcome.value}: {self.reason}"


def run_cluster(kube: Kube, ctx: StepContext, cluster: str, shared: Shared = ALONE) -> ClusterResult:
    """Sync `cluster` and wait until it is done or failed, unless its stage has failed already.

    `ctx`: the step's opening (`steps.context`), its ProgressiveSync read right before. `shared`:
    the sink its records go to (default: written at once; a batch gathers them), the stage's
    records read with that ProgressiveSync (default: read here: the cluster's recorded outcome and
    the stage's failures decide whether the cluster starts) and the fleet lookup (default: one for
    this cluster's sync and wait, read once: a list of every Application of the namespace is ~15 MB
    at 10,000 clusters; a batch shares one between its clusters).
    """
    rollout, ps, stage, tuning = ctx.rollout, ctx.ps, ctx.stage_name, ctx.tuning
    shared = shared.with_records(kube, ctx)
    outcomes = shared.outcomes
    assert outcomes is not None  # with_records reads them when not handed in
    recorded = _recorded(outcomes, cluster)
    if recorded is not None:
        return recorded
    # Shared by the sync and the wait: the inventory and the Applications' list are read once (each
    # Application itself is still read fresh before every decision: steps.common.FleetLookup).
    fleet = shared.fleet_for(kube, ctx, max_age_seconds=tuning.fleet_lookup_seconds)
    shared = replace(shared, fleet=fleet)
    refused = stage_failure(ps, stage, outcomes)
    if (
        refused
        and not in_flight(outcomes, cluster)
        and not _written_here(fleet, ps, rollout.rollout_id, cluster)
    ):
        log.info("cluster %s not started: %s", cluster, refused)
        return ClusterResult(cluster, ClusterOutcome.NOT_STARTED, refused)
    if not refused:
        synced = sync_cluster(kube, ctx, cluster, shared)
        if synced.failed:
            return ClusterResult(cluster, ClusterOutcome.FAILED, synced.failure)
        if synced.skipped:
            return ClusterResult(cluster, ClusterOutcome.DONE, f"skipped: {synced.skipped}")
    # In flight in a failed stage: no new sync (not even for an Application the first wave left);
    # wait-healthy stops what we started there and records the cluster failed.
    # The ProgressiveSync read again (the rollout and stage checked on it); the records as read
    # before the sync: wait-healthy reports a cluster the sync recorded failed.
    waited = wait_healthy(kube, ctx.reopen(kube), cluster, shared)
    outcome = ClusterOutcome.DONE if waited.phase == ClusterPhase.DONE else ClusterOutcome.FAILED
    return ClusterResult(cluster, outcome, waited.reason, finished_here=True)


def in_flight(outcomes: StageOutcomes, cluster: str) -> bool:
    """True when the cluster's record says its sync was requested (Syncing)."""
    record = outcomes.clusters.get(cluster)
    return record is not None and record.state == ClusterState.SYNCING


def _written_here(fleet: FleetLookup, ps: ProgressiveSync, rollout_id: str, cluster: str) -> bool:
    """True when an Application of the cluster carries a sync this rollout wrote (see the module)."""
    found, clusters = fleet.find(cluster)
    if found is None:
        return False
    return bool(written_by_rollout(fleet.apps_of(found, clusters), ps, rollout_id))


def _recorded(outcomes: StageOutcomes, cluster: str) -> ClusterResult | None:
    """The outcome this rollout recorded for the cluster already, if any."""
    record = outcomes.clusters.get(cluster)
    if record is None:
        return None
    if record.state == ClusterState.COMPLETED:
        return ClusterResult(cluster, ClusterOutcome.DONE, "recorded as completed already")
    if record.state == ClusterState.FAILED:
        return ClusterResult(cluster, ClusterOutcome.FAILED, f"recorded as failed already: {record.reason}")
    if record.state == ClusterState.SKIPPED:
        return ClusterResult(cluster, ClusterOutcome.DONE, f"recorded as skipped already: {record.reason}")
    return None
