"""The watcher's Prometheus metrics (prometheus-client), in a registry of its own (no global state).

Served on `/metrics` by `orchestrator.watcher.http`. One `WatcherMetrics` lives as long as the
process; each `Watcher` (one per leadership term) reports into it, so counters never go back.

- `progressive_sync_rollouts{phase}` (gauge): ProgressiveSyncs by `status.phase` (the leader's cache);
- `progressive_sync_stage_duration_seconds{outcome}` (histogram): stage startedAt → finishedAt;
- `progressive_sync_cluster_duration_seconds{outcome}` (histogram): a cluster's sync requested →
  done or failed, as the watcher saw it (a cluster in flight across a restart is not timed);
- `progressive_sync_syncs_started_total`, `progressive_sync_syncs_failed_total` (counters): clusters
  whose sync was requested, clusters that failed;
- `progressive_sync_analysis_runs_total{namespace, name, stage, phase}` (counter): analysis gates
  that ended, by their AnalysisRun's final phase (Successful, Failed, Error, Inconclusive): a
  stage's run, and a per-cluster run that failed its cluster (`orchestrator.watcher.transitions`);
- `progressive_sync_rollbacks_total{namespace, name, outcome}` (counter): rollbacks (`spec.rollback`)
  that started (`started`), ended with every cluster restored (`rolled-back`) or not (`failed`);
- `progressive_sync_reconciles_total`, `progressive_sync_reconcile_errors_total` (counters);
- `progressive_sync_queue_depth` (gauge): keys queued, delayed or in flight;
- `progressive_sync_watch_restarts_total{resource}` (counter): watch streams opened after the first
  one and failed list/watch attempts;
- `progressive_sync_leader` (gauge): 1 while this process holds the Lease (1 without election).

Callers: `orchestrator.watcher.loop` (observations), `orchestrator.watcher.process` (serving).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from orchestrator.watcher.transitions import ANALYSIS_ENDS, Transition, TransitionKind

DURATION_BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 21600.0)
ANALYSIS_KINDS = frozenset(ANALYSIS_ENDS.values())
PHASES = ("Pending", "Progressing", "Paused", "Succeeded", "Failed", "Cancelled")


# Rollback transitions and the `outcome` label of progressive_sync_rollbacks_total.
_ROLLBACK_OUTCOMES = {
    TransitionKind.ROLLING_BACK: "started",
    TransitionKind.ROLLOUT_ROLLED_BACK: "rolled-back",
    TransitionKind.ROLLBACK_FAILED: "failed",
}


class WatcherMetrics:
    """The metrics and the live sources read at scrape time (`attach`)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.monotonic = monotonic
        self.stage_seconds = Histogram(
            "progressive_sync_stage_duration_seconds",
            "Duration of finished stages, from their startedAt to finishedAt.",
            ["outcome"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.cluster_seconds = Histogram(
            "progressive_sync_cluster_duration_seconds",
            "From a cluster's sync being requested to the cluster being done or failed.",
            ["outcome"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.syncs_started = Counter(
            "progressive_sync_syncs_started", "Clusters whose sync was requested.", registry=self.registry
        )
        self.syncs_failed = Counter(
            "progressive_sync_syncs_failed", "Clusters that failed.", registry=self.registry
        )
        self.analysis_runs = Counter(
            "progressive_sync_analysis_runs",
            "Analysis gates that ended, by the ProgressiveSync, the stage and the AnalysisRun's final phase.",
            ["namespace", "name", "stage", "phase"],
            registry=self.registry,
        )
        self.rollbacks = Counter(
            "progressive_sync_rollbacks",
            "Rollbacks that started, ended restored (rolled-back) or not (failed), by the ProgressiveSync.",
            ["namespace", "name", "outcome"],
            registry=self.registry,
        )
        self.reconciles = Counter("progressive_sync_reconciles", "Reconciles run.", registry=self.registry)
        self.reconcile_errors = Counter(
            "progressive_sync_reconcile_errors", "Reconciles that raised.", registry=self.registry
        )
        self._lock = threading.Lock()
        self._sync_started: dict[tuple[str, str, str, str], float] = {}
        self._live = _LiveCollector()
        self.registry.register(self._live)

    # -- sources read at scrape time ----------------------------------------------------------

    def attach(
        self,
        *,
        phases: Callable[[], Iterable[str]] | None = None,
        queue_depth: Callable[[], int] | None = None,
        watch_restarts: Callable[[], dict[str, int]] | None = None,
        leader: Callable[[], bool] | None = None,
    ) -> None:
        """Set (or replace) the live sources: a new Watcher attaches its caches and queue."""
        self._live.update(
            phases=phases, queue_depth=queue_depth, watch_restarts=watch_restarts, leader=leader
        )

    def retire_watch_restarts(self, counts: dict[str, int]) -> None:
        """Keep the restart counts of a Watcher that stops, so the counter never goes back."""
        self._live.retire(counts)

    # -- observations ---------------------------------------------------------------------------

    def observe(self, key: tuple[str, str], transition: Transition) -> None:
        """Feed one status transition of the ProgressiveSync `key` (namespace, name)."""
        cluster_key = (*key, transition.rollout_id, transition.cluster)
        kind = transition.kind
        if kind == TransitionKind.CLUSTER_SYNCING:
            self.syncs_started.inc()
            with self._lock:
                self._sync_started.setdefault(cluster_key, self.monotonic())
        elif kind in (TransitionKind.CLUSTER_COMPLETED, TransitionKind.CLUSTER_FAILED):
            if kind == TransitionKind.CLUSTER_FAILED:
                self.syncs_failed.inc()
            with self._lock:
                started = self._sync_started.pop(cluster_key, None)
            if started is not None:
                outcome = "failed" if kind == TransitionKind.CLUSTER_FAILED else "completed"
                self.cluster_seconds.labels(outcome).observe(self.monotonic() - started)
        elif (
            kind in (TransitionKind.STAGE_SUCCEEDED, TransitionKind.STAGE_FAILED)
            and transition.seconds is not None
        ):
            outcome = "succeeded" if kind == TransitionKind.STAGE_SUCCEEDED else "failed"
            self.stage_seconds.labels(outcome).observe(transition.seconds)
        elif transition.phase and kind in ANALYSIS_KINDS:
            self.analysis_runs.labels(*key, transition.stage, transition.phase).inc()
        elif kind in _ROLLBACK_OUTCOMES:
            self.rollbacks.labels(*key, _ROLLBACK_OUTCOMES[kind]).inc()
        if kind in (
            TransitionKind.ROLLOUT_SUCCEEDED,
            TransitionKind.ROLLOUT_FAILED,
            TransitionKind.ROLLOUT_CANCELLED,
            TransitionKind.ROLLOUT_ROLLED_BACK,
        ):
            with self._lock:  # clusters of an ended rollout never report back: forget them
                for stale in [k for k in self._sync_started if k[:3] == cluster_key[:3]]:
                    del self._sync_started[stale]

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)


class _LiveCollector(Collector):
    """Gauges and counters computed from the running Watcher at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phases: Callable[[], Iterable[str]] | None = None
        self._queue_depth: Callable[[], int] | None = None
        self._watch_restarts: Callable[[], dict[str, int]] | None = None
        self._leader: Callable[[], bool] | None = None
        self._retired: dict[str, int] = {}

    def update(self, **sources: Any) -> None:
        with self._lock:
            for name, source in sources.items():
                if source is not None:
                    setattr(self, f"_{name}", source)

    def retire(self, counts: dict[str, int]) -> None:
        with self._lock:
            for resource, count in counts.items():
                self._retired[resource] = self._retired.get(resource, 0) + count
            self._watch_restarts = None
            self._phases = None
            self._queue_depth = None

    def collect(self) -> Iterator[Any]:
        with self._lock:
            phases, queue_depth = self._phases, self._queue_depth
            watch_restarts, leader, retired = self._watch_restarts, self._leader, dict(self._retired)
        rollouts = GaugeMetricFamily(
            "progressive_sync_rollouts", "ProgressiveSyncs by status.phase.", labels=["phase"]
        )
        counts = dict.fromkeys(PHASES, 0)
        for phase in phases() if phases is not None else ():
            counts[phase or "Pending"] = counts.get(phase or "Pending", 0) + 1
        for phase, count in counts.items():
            rollouts.add_metric([phase], count)
        yield rollouts
        yield GaugeMetricFamily(
            "progressive_sync_queue_depth",
            "ProgressiveSync keys queued, delayed or being reconciled.",
            value=queue_depth() if queue_depth is not None else 0,
        )
        restarts = CounterMetricFamily(
            "progressive_sync_watch_restarts",
            "Watch streams resumed, re-lists after 410 and failed list/watch attempts.",
            labels=["resource"],
        )
        current = watch_restarts() if watch_restarts is not None else {}
        for resource in sorted(set(current) | set(retired)):
            restarts.add_metric([resource], current.get(resource, 0) + retired.get(resource, 0))
        yield restarts
        yield GaugeMetricFamily(
            "progressive_sync_leader",
            "1 while this process holds the leader lease.",
            value=1 if leader is None or leader() else 0,
        )
