"""The watch loop: threads, work queue and wiring; informers → keys → observe → decide → act.

`Watcher(kube, settings)` runs, in one process:

- the **caches** (`caches.Caches`: one informer per resource and namespace, slim values);
- **triggers**: each change queues the keys of the ProgressiveSyncs it concerns (`triggers`), a
  cluster Secret's change also marks its inventory for publishing (`publisher`), and a status
  change becomes metrics and Events (`transitions`, recorded by their own thread); a first sight
  replays the current rollout's recent transitions as Events, named so that none is recorded twice;
- a de-duplicating **work queue** and `workers` threads: one reconcile per key at a time, failed
  ones retried with backoff, `RequeueAfter` honoured;
- **one reconcile**: held back while an informer it needs waits on a permission or a CRD
  (`holdback`, re-checked every 15 s and at once on recovery), else `observe` → `decide` (pure)
  → `act` (the effects); a 403 on its own calls is retried along the backoff and said once in a
  `ReconcileForbidden` Event, then `ReconcileResumed` (`holdback`);
- the **live summary**: after each reconcile, the summaries of the current rollout's running
  stages, from their ProgressiveSyncStage records, written at most once per
  `summary_interval_seconds` and only when they change the status (`summaries`, pure; a record's
  change queues its ProgressiveSync);
- **rollout history**: after each reconcile, on the watcher's start and when the rollout changed,
  the records of rollouts older than the current one and the `rollout_history` before it are
  deleted (`retention`, pure; `history`, the deletes);
- a periodic **resync** that queues every ProgressiveSync again, and the cluster inventory
  **publisher**;
- with `engine: local`, the **local executor** in the same process.

Run it with `watcher.run(stop_event)` (blocks; what `progressive-sync watch` does), or
`start()` / `stop()` around other work (the demo and the tests).

Callers: `orchestrator.watcher.process` (what `progressive-sync watch` runs), the demo, tests.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from datetime import timedelta
from typing import Any

import pydantic

from orchestrator.api.models import ProgressiveSyncStatus, StagePhase
from orchestrator.argocd.fleet import AppSetView, AppView, Cluster
from orchestrator.argocd.inventory import InventoryError
from orchestrator.core.clock import Clock, SystemClock
from orchestrator.kube.client import Forbidden, Kube, KubeError, retry_after_note
from orchestrator.kube.informer import Change, Informer, InformerFailed, run_in_thread, wait_synced
from orchestrator.kube.watchloop import Blocked
from orchestrator.watcher import triggers
from orchestrator.watcher.act import Actor
from orchestrator.watcher.build import build_workflows
from orchestrator.watcher.caches import CachedPS, CachedRecord, Caches, Handlers, Key
from orchestrator.watcher.decide import decide
from orchestrator.watcher.decision import Decision, RecordEvent
from orchestrator.watcher.history import RecordHistory
from orchestrator.watcher.holdback import BLOCKED_RECHECK_SECONDS, HoldBack
from orchestrator.watcher.metrics import WatcherMetrics
from orchestrator.watcher.observe import observe
from orchestrator.watcher.publisher import InventoryPublisher
from orchestrator.watcher.settings import Engine, Settings
from orchestrator.watcher.summaries import plan_summaries
from orchestrator.watcher.transitions import Transition, replayed_transitions, status_transitions
from orchestrator.watcher.workqueue import WorkQueue
from orchestrator.workflows.view import WorkflowView

log = logging.getLogger(__name__)

EVENT_BACKLOG = 1000  # Events waiting to be recorded; past it new ones are dropped (and logged)
# How far back a watcher that just started (or took the lease over) records the transitions it may
# have missed: longer than any takeover or restart, well under the API server's Event TTL (1 h).
EVENT_REPLAY_WINDOW = timedelta(minutes=15)


class Watcher:
    """See the module docstring. Thread-safe; one per process."""

    def __init__(
        self,
        kube: Kube,
        settings: Settings,
        *,
        clock: Clock | None = None,
        metrics: WatcherMetrics | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics or WatcherMetrics()
        self.stop_event = threading.Event()
        self.failed: list[BaseException] = []
        self.queue: WorkQueue[Key] = WorkQueue(settings.reconcile_backoffs)
        self.reconciles = 0
        # When each ProgressiveSync's live summary was last written (time.monotonic()).
        self._summary_written: dict[Key, float] = {}
        # Events from status transitions, recorded by their own thread (handlers must stay quick).
        self._events: queue.Queue[tuple[CachedPS, RecordEvent]] = queue.Queue(maxsize=EVENT_BACKLOG)
        self._threads: list[threading.Thread] = []
        self._workers: list[threading.Thread] = []
        self._started = False
        self._executor: Any = None
        self.caches = Caches(
            kube,
            settings,
            Handlers(
                progressive_sync=self._on_ps,
                workflow=self._on_workflow,
                appset=self._on_appset,
                app=self._on_app,
                cluster=self._on_cluster,
                record=self._on_record,
            ),
            on_blocked=self._informer_blocked,
        )
        self.actor = Actor(kube, settings, self.clock, requeue=self.queue.add_after)
        self.hold_back = HoldBack(settings)
        self.history = RecordHistory(kube, self.caches, settings.rollout_history, self.queue.add_after)
        self.publisher = InventoryPublisher(kube, self.caches.clusters_in, self.caches.inventory_namespaces)
        self.metrics.attach(
            phases=self.caches.phases,
            queue_depth=self.queue.pending,
            watch_restarts=self.caches.watch_restarts,
        )

    @property
    def informers(self) -> list[Informer[Any]]:
        """Every informer, ProgressiveSyncs last (so their first reconcile sees the rest listed)."""
        return self.caches.informers

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Watcher:
        """Start informers (waiting for their first lists), workers, resync and the local engine."""
        if self._started:
            raise RuntimeError("the watcher is already started")
        self._started = True
        for informer in self.informers:
            self._threads.append(run_in_thread(informer, self.stop_event, self._informer_failed))
        # An informer waiting on a permission or a missing CRD does not hold the start back: the
        # ProgressiveSyncs that need it wait (and say so), the others start.
        if not wait_synced(
            self.informers, self.stop_event, timeout=self.settings.sync_timeout_seconds, or_blocked=True
        ):
            self.stop()
            unsynced = [i.name for i in self.informers if not i.synced.is_set() and i.blocked is None]
            raise KubeError(f"the first list of {', '.join(unsynced)} did not finish in time")
        # The steps read clusters from the inventory: publish it before the first Workflow can start.
        for namespace in self.caches.inventory_namespaces():
            try:
                self.publisher.publish(namespace)
            except (KubeError, InventoryError) as exc:
                log.warning("publishing the cluster inventory of %s failed: %s; retrying", namespace, exc)
                self.publisher.mark(namespace)
        publisher = threading.Thread(
            target=self.publisher.run, args=(self.stop_event,), name="inventory", daemon=True
        )
        publisher.start()
        self._threads.append(publisher)
        for index in range(self.settings.workers):
            worker = threading.Thread(target=self._work, name=f"reconcile-{index}", daemon=True)
            worker.start()
            self._workers.append(worker)
        for target, name in ((self._resync_loop, "resync"), (self._event_loop, "events")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        if self.settings.engine == Engine.LOCAL:
            self._start_local_engine()
        log.info(
            "watching ProgressiveSyncs in %s (engine %s, %d workers)",
            ", ".join(self.settings.namespaces) or "every namespace",
            self.settings.engine.value,
            self.settings.workers,
        )
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop cleanly: no new reconcile starts, the ones in flight finish, streams close."""
        self.stop_event.set()
        self.queue.shutdown()
        for informer in self.informers:
            informer.stop_stream()
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        for thread in self._threads:
            thread.join(max(0.0, min(5.0, deadline - time.monotonic())))
        if self._executor is not None:
            self._executor.stop(timeout=max(1.0, deadline - time.monotonic()))
            self._executor = None
        self.actor.close()
        self.metrics.retire_watch_restarts(self.caches.watch_restarts())
        log.info("stopped")

    @property
    def running(self) -> bool:
        """True once `start` returned (caches filled, workers up) and until `stop`."""
        return self._started and bool(self._workers) and not self.stop_event.is_set()

    def run(self, stop: threading.Event | None = None, *, shutdown_timeout: float = 30.0) -> int:
        """Run until `stop` is set (SIGTERM) or a watch loop gives up; 0 on a clean stop, 1 on failure."""
        outer = stop or threading.Event()
        self.start()
        try:
            while not outer.wait(0.5):
                if self.failed:
                    break
        finally:
            self.stop(timeout=shutdown_timeout)
        if self.failed:
            log.error("exiting: %s", self.failed[0])
            return 1
        return 0

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _informer_failed(self, exc: BaseException) -> None:
        if self.stop_event.is_set():
            return
        self.failed.append(exc)
        if not isinstance(exc, InformerFailed):
            log.error("a watch loop crashed: %r", exc)

    def _informer_blocked(self, informer: Informer[Any], blocked: Blocked | None) -> None:
        # On the informer's thread: quick. Every ProgressiveSync is looked at again, so the ones it
        # affects report the wait (or resume) now rather than at the next resync.
        if blocked is None:
            log.info("%s: watching again; reconciling every ProgressiveSync", informer.name)
        for key in self.caches.progressive_sync_keys():
            self.queue.add(key)

    def _start_local_engine(self) -> None:
        from orchestrator.engine.executor import LocalExecutor  # noqa: PLC0415 - engine local only

        executor_settings = self.settings.local_executor_settings()
        self._executor = LocalExecutor(self.kube, executor_settings, clock=self.clock).start()

    def _resync_loop(self) -> None:
        period = self.settings.resync_seconds
        while not self.stop_event.wait(period):
            count = sum(informer.resync() for informer in self.caches.ps_informers)
            self.publisher.mark_all()
            log.debug("resync: %d ProgressiveSyncs queued again", count)

    # -- changes → keys (on the informers' threads: quick) ---------------------------------

    def _queue(self, keys: list[Key]) -> None:
        for key in keys:
            self.queue.add(key)

    def _on_ps(self, change: Change[CachedPS]) -> None:
        self._queue(triggers.progressive_sync_keys(change, self.caches))
        if change.old is not None and change.new is not None:
            self._note_transitions(change.old, change.new)
        elif change.new is not None:
            self._replay_transitions(change.new)

    def _on_workflow(self, change: Change[WorkflowView]) -> None:
        self._queue(triggers.workflow_keys(change))

    def _on_appset(self, change: Change[AppSetView]) -> None:
        self._queue(triggers.appset_keys(change, self.caches))

    def _on_app(self, change: Change[AppView]) -> None:
        self._queue(triggers.app_keys(change, self.caches))

    def _on_cluster(self, change: Change[Cluster]) -> None:
        self.publisher.mark(change.key[0])
        self._queue(triggers.cluster_keys(change, self.caches, self.settings))

    def _on_record(self, change: Change[CachedRecord]) -> None:
        self._queue(triggers.record_keys(change))

    def _note_transitions(self, old: CachedPS, new: CachedPS) -> None:
        """Metrics and Events from what the steps (or we) changed in the status."""
        if old.obj.get("status") == new.obj.get("status"):
            return
        try:
            before = ProgressiveSyncStatus.model_validate(old.obj.get("status") or {})
            after = ProgressiveSyncStatus.model_validate(new.obj.get("status") or {})
        except pydantic.ValidationError:
            return
        for transition in status_transitions(before, after):
            self.metrics.observe(new.key, transition)
            self._record_transition(new, transition, replayed=False)

    def _replay_transitions(self, new: CachedPS) -> None:
        """Events for what a watcher before us may not have recorded (it stopped, or lost the
        lease, between a step's write and its Event): the recent transitions of the current
        rollout, under the names it gave them, so what it did record is not recorded twice.
        Not counted in the metrics: they count what this process saw happen."""
        try:
            status = ProgressiveSyncStatus.model_validate(new.obj.get("status") or {})
        except pydantic.ValidationError:
            return
        for transition in replayed_transitions(status, self.clock.now(), EVENT_REPLAY_WINDOW):
            self._record_transition(new, transition, replayed=True)

    def _record_transition(self, new: CachedPS, transition: Transition, *, replayed: bool) -> None:
        if not transition.kind.recorded_as_event:
            return
        uid = str((new.obj.get("metadata") or {}).get("uid") or "")
        event = RecordEvent(
            transition.kind.event_type,
            transition.kind.reason,
            transition.message,
            identity=transition.identity(uid),
            at=transition.at if replayed else None,
            replayed=replayed,
        )
        try:
            self._events.put_nowait((new, event))
        except queue.Full:
            log.warning("event backlog full; dropping %s on %s/%s", event.reason, *new.key)

    def _event_loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                cached, event = self._events.get(timeout=0.5)
            except queue.Empty:
                continue
            self.actor.record_event(cached, event)

    # -- the workers ------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                self.metrics.reconciles.inc()
                decided = self.reconcile(key) is not None
            except Exception as exc:
                self.metrics.reconcile_errors.inc()
                failures = self.queue.failures(key) + 1
                delay = self.queue.retry(key, at_least=server_asked_wait(exc))
                if isinstance(exc, Forbidden):
                    self._report(key, self.hold_back.forbidden(key, str(exc)))
                level = logging.WARNING if isinstance(exc, KubeError) else logging.ERROR
                log.log(
                    level,
                    "reconcile %s/%s: attempt %d failed: %s%s; retrying in %.1fs",
                    key[0],
                    key[1],
                    failures,
                    exc,
                    retry_after_note(exc) if isinstance(exc, KubeError) else "",
                    delay,
                    exc_info=not isinstance(exc, KubeError),
                    extra={"ps": f"{key[0]}/{key[1]}"},
                )
            else:
                self.queue.forget(key)
                if decided:  # held back or gone: nothing was tried, so nothing is known to work
                    self._report(key, self.hold_back.allowed(key))
            finally:
                self.queue.done(key)

    def _report(self, key: Key, event: RecordEvent | None) -> None:
        cached = self.caches.progressive_sync(key) if event is not None else None
        if cached is not None and event is not None:
            self.actor.record_event(cached, event)

    def reconcile(self, key: Key) -> Decision | None:
        """Observe, decide and act for one ProgressiveSync; None when it is gone or held back."""
        if self.stop_event.is_set():
            return None
        cached = self.caches.progressive_sync(key)
        if cached is None:
            log.debug("%s/%s is gone; nothing to do", *key)
            self._summary_written.pop(key, None)
            self.history.forget(key)
            return None
        held_back, events = self.hold_back.check(cached, self.caches.decision_informers)
        for event in events:
            self.actor.record_event(cached, event)
        if held_back:
            self.queue.add_after(key, BLOCKED_RECHECK_SECONDS)
            return None
        obs = observe(cached, self.caches, self.settings, self.clock.now())
        decision = build_workflows(decide(obs, self.settings.policy), obs, self.settings.workflow_settings)
        self.reconciles += 1
        log.debug(
            "%s/%s: %s: %s",
            key[0],
            key[1],
            decision.step,
            decision.reason,
            extra={"ps": f"{key[0]}/{key[1]}", "step": decision.step},
        )
        self.actor.execute(cached, obs, decision)
        self._keep_summary(cached, obs.status)
        self.history.keep(cached, obs.status)
        return decision

    def _keep_summary(self, cached: CachedPS, status: ProgressiveSyncStatus) -> None:
        """The live summary: the running stages' summaries from their records, at most once per
        `summary_interval_seconds` (`summaries.plan_summaries` decides; a wait comes back here)."""
        key = cached.key
        running = any(stage.phase == StagePhase.PROGRESSING for stage in status.stages or [])
        if status.rollout is None or not running or cached.deleting:
            return
        records = self.caches.records_of(key[0], key[1], status.rollout.id)
        if records is None:  # the records' informer cannot list yet: the next event or resync retries
            return
        written = self._summary_written.get(key)
        plan = plan_summaries(
            status,
            records,
            since_last_write=None if written is None else time.monotonic() - written,
            interval=self.settings.summary_interval_seconds,
        )
        log.debug("%s/%s: summary: %s", *key, plan.reason, extra={"ps": f"{key[0]}/{key[1]}"})
        if plan.wait_seconds is not None:
            self.queue.add_after(key, plan.wait_seconds)
        elif plan.writes and self.actor.write_summaries(cached, plan):
            self._summary_written[key] = time.monotonic()


def server_asked_wait(exc: BaseException) -> float:
    """Seconds the API server asked us to wait before trying again (`Retry-After` with a 429, e.g.
    from API Priority and Fairness on a Workflow create); 0 when it asked nothing. The work queue
    waits at least this long, whatever its backoff says."""
    if isinstance(exc, KubeError) and exc.retry_after is not None:
        return max(0.0, exc.retry_after)
    return 0.0
