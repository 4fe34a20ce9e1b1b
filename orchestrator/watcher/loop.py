"""The watcher: informers → work queue → `reconcile.decide` → actions, for every ProgressiveSync.

`Watcher(kube, settings)` runs, in one process:

- **informers** (orchestrator.kube.informer) for ProgressiveSyncs and their Workflows (each watched
  namespace, or all), and for ApplicationSets, Applications and Argo CD cluster Secrets (each Argo
  CD namespace). Their caches keep slim values only: a ProgressiveSync without managedFields, an
  `AppView` per Application owned by an ApplicationSet, a `WorkflowView`, a `Cluster`;
- **event mapping** to the owning ProgressiveSync's key (namespace, name): an Application → its
  ApplicationSet owner → the ProgressiveSyncs whose `spec.appSetRef` names it; a Workflow → its
  `progressivesync.io/name` label; an ApplicationSet → the ProgressiveSyncs naming it; a cluster
  Secret → every ProgressiveSync of that Argo CD namespace; a ProgressiveSync → itself and the
  others naming the same ApplicationSet (ownership may move);
- a de-duplicating **work queue** and `workers` threads: one reconcile per key at a time, failed
  ones retried with backoff, `RequeueAfter` honoured;
- **reconcile**: gather `Observed` from the caches (a Workflow the status names but the cache
  lacks is read directly, so a lagging cache never reads as "deleted by someone"), `decide`,
  then execute the actions in order through the adapter: the finalizer by a conditional update,
  the Workflow `decide` built created as it is (AlreadyExists: adopt it), stop/suspend/resume as
  merge patches, Events best-effort, and the status through the optimistic-concurrency writer
  (`status_writer.update_status`) only when the patch changes the cached status;
- a periodic **resync** that queues every ProgressiveSync again;
- **waiting on an operator**: an informer that meets a 403 (a RoleBinding removed) or a missing CRD
  waits for it without giving up (`orchestrator.kube.watchloop.blocked_by`); the ProgressiveSyncs it
  affects (its namespace is theirs, their ApplicationSet's, their Argo CD's or their Workflows') are
  not reconciled on its stale cache meanwhile: each gets one Warning Event naming the resource, what
  is missing and the fix (`WatchForbidden`, `CRDMissing`), a Normal `WatchResumed` when it is back,
  and is reconciled again at once; the others carry on;
- **a 403 on a reconcile's own call** (a Role narrowed: e.g. `update` on `progressivesyncs/status`
  taken away): no condition can say it (the status is what may not be written), so the
  ProgressiveSync gets one Warning Event `ReconcileForbidden` quoting the API server (which verb on
  which resource) and the fix, the reconcile is retried along the capped backoff (no crash loop: the
  watcher keeps running, the other ProgressiveSyncs and the running Workflow carry on), and a Normal
  `ReconcileResumed` once a reconcile of it works again;
- with `engine: local`, the **local executor** in the same process.

Run it with `watcher.run(stop_event)` (blocks; what `progressive-sync watch` does), or
`start()` / `stop()` around other work (the demo and the tests). `wait_until_idle()` waits until
nothing is queued or in flight.

Callers: `orchestrator.cli.watch_cmd`, the demo, tests.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pydantic

from orchestrator.api.metadata import (
    FINALIZER,
    NAME_LABEL,
    RETRY_ANNOTATION,
    label_value,
    rollout_workflow_name,
)
from orchestrator.api.models import (
    ProgressiveSync,
    ProgressiveSyncSpec,
    ProgressiveSyncStatus,
)
from orchestrator.argocd.fleet import (
    APPLICATION_SET_KIND,
    AppSetView,
    AppView,
    Cluster,
    app_set_view_from_object,
    app_view_from_object,
    cluster_from_secret,
)
from orchestrator.argocd.inventory import InventoryError
from orchestrator.core.clock import Clock, SystemClock, format_time, parse_time
from orchestrator.kube.argo_server import ArgoServerSubmitter
from orchestrator.kube.client import (
    APPLICATION_SETS,
    APPLICATIONS,
    EVENTS,
    PROGRESSIVE_SYNCS,
    SECRETS,
    WORKFLOWS,
    AlreadyExists,
    Forbidden,
    Kube,
    KubeError,
    NotFound,
)
from orchestrator.kube.cluster_secrets import CLUSTER_SECRET_LABEL, cluster_secret_from_object
from orchestrator.kube.informer import (
    Change,
    Informer,
    InformerFailed,
    run_in_thread,
    wait_synced,
)
from orchestrator.kube.status_writer import update_status
from orchestrator.kube.watchloop import Blocked
from orchestrator.planning.planner import RolloutPlan, plan_rollout
from orchestrator.watcher.decide import (
    AddFinalizer,
    CreateWorkflow,
    Decision,
    Observed,
    RecordEvent,
    RemoveFinalizer,
    RequeueAfter,
    ResumeWorkflow,
    StatusPatch,
    StopWorkflow,
    SuspendWorkflow,
    UpdateStatus,
    apply_patch,
    decide,
    live_workflows,
)
from orchestrator.watcher.metrics import WatcherMetrics
from orchestrator.watcher.publisher import InventoryPublisher
from orchestrator.watcher.settings import Engine, Settings
from orchestrator.watcher.transitions import status_transitions
from orchestrator.watcher.workqueue import WorkQueue
from orchestrator.workflows import control
from orchestrator.workflows.phases import Shutdown
from orchestrator.workflows.view import WorkflowView, workflow_view_from_object

log = logging.getLogger(__name__)

Key = tuple[str, str]

# Index names of the informers.
BY_APPSET = "appset"  # ProgressiveSyncs by "appset namespace/appset", Applications by owner name
BY_OWNER = "owner"  # Workflows by "namespace/progressive-sync name"
EVENT_BACKLOG = 1000  # Events waiting to be recorded; past it new ones are dropped (and logged)
# A ProgressiveSync held back by an informer waiting on a permission or a CRD is looked at again this
# often (the informer's recovery queues it at once too): no busy loop, and a missed wake-up heals.
BLOCKED_RECHECK_SECONDS = 15.0
WATCH_RESUMED = "WatchResumed"
RECONCILE_FORBIDDEN = "ReconcileForbidden"
RECONCILE_RESUMED = "ReconcileResumed"


# --- slim cache values ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CachedPS:
    """A ProgressiveSync as the informer keeps it: the object without managedFields."""

    obj: dict[str, Any]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CachedPS) and self.obj == other.obj

    __hash__ = None  # type: ignore[assignment]

    @property
    def key(self) -> Key:
        """(namespace, name)."""
        meta = self.obj.get("metadata") or {}
        return str(meta.get("namespace", "")), str(meta.get("name", ""))

    @property
    def app_set_name(self) -> str:
        """`spec.appSetRef.name` as written (even when the spec is otherwise invalid)."""
        return str(((self.obj.get("spec") or {}).get("appSetRef") or {}).get("name") or "")

    @property
    def app_set_namespace(self) -> str:
        """Where the ApplicationSet is: `spec.appSetRef.namespace`, else this object's namespace."""
        ref = (self.obj.get("spec") or {}).get("appSetRef") or {}
        return str(ref.get("namespace") or self.key[0])

    @property
    def app_set_key(self) -> str:
        """`namespace/name` of the ApplicationSet (the index value)."""
        return f"{self.app_set_namespace}/{self.app_set_name}"

    @property
    def deleting(self) -> bool:
        """True once `metadata.deletionTimestamp` is set."""
        return bool((self.obj.get("metadata") or {}).get("deletionTimestamp"))

    @property
    def created(self) -> str:
        """`metadata.creationTimestamp` (RFC 3339 sorts as text)."""
        return str((self.obj.get("metadata") or {}).get("creationTimestamp") or "")


def slim_progressive_sync(obj: dict[str, Any]) -> CachedPS:
    """Drop managedFields (the largest part, and noise to compare)."""
    metadata = dict(obj.get("metadata") or {})
    metadata.pop("managedFields", None)
    return CachedPS({**obj, "metadata": metadata})


def slim_application(obj: dict[str, Any]) -> AppView | None:
    """The `AppView` of an Application owned by some ApplicationSet; None for any other.

    The free-text operation message is dropped: the planner does not read it, and at 10,000
    Applications it is most of what would stay in memory.
    """
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    if not any(ref.get("kind") == APPLICATION_SET_KIND for ref in owners if isinstance(ref, Mapping)):
        return None
    view = app_view_from_object(obj)
    owners_ = tuple(
        replace(
            ref,
            api_version=sys.intern(ref.api_version),
            kind=sys.intern(ref.kind),
            name=sys.intern(ref.name),
            uid=sys.intern(ref.uid),
        )
        for ref in view.owner_references
    )
    return replace(
        view,
        owner_references=owners_,
        name=sys.intern(view.name),
        namespace=sys.intern(view.namespace),
        destination_server=sys.intern(view.destination_server),
        destination_name=sys.intern(view.destination_name),
        sync_revisions=tuple(sys.intern(r) for r in view.sync_revisions),
        operation_revisions=tuple(sys.intern(r) for r in view.operation_revisions),
        rollout_id=sys.intern(view.rollout_id),
        rollout_stage=sys.intern(view.rollout_stage),
        operation_message="",
        uid="",
    )


def slim_cluster(obj: dict[str, Any]) -> Cluster:
    """The `Cluster` of a cluster Secret: labels, name and server, never credentials."""
    return cluster_from_secret(cluster_secret_from_object(obj))


def _app_owner_names(app: AppView) -> list[str]:
    return [ref.name for ref in app.owner_references if ref.kind == APPLICATION_SET_KIND]


# --- the watcher -----------------------------------------------------------------------------


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
        # Events from status transitions, recorded by their own thread (handlers must stay quick).
        self._events: queue.Queue[tuple[CachedPS, RecordEvent]] = queue.Queue(maxsize=EVENT_BACKLOG)
        self._threads: list[threading.Thread] = []
        self._workers: list[threading.Thread] = []
        self._started = False
        # Per ProgressiveSync: the waits (informer name, reason) already reported by an Event.
        self._blocked_reported: dict[Key, set[tuple[str, str]]] = {}
        self._blocked_lock = threading.Lock()
        # Per ProgressiveSync: the 403 its reconciles meet, already reported by an Event.
        self._forbidden_reported: dict[Key, str] = {}
        self._executor: Any = None
        self._submitter: ArgoServerSubmitter | None = None
        if settings.argo_server:
            self._submitter = ArgoServerSubmitter(
                settings.argo_server,
                settings.argo_token,
                verify_tls=settings.argo_verify_tls,
                timeout_seconds=settings.request_timeout_seconds,
            )
        watched: list[str | None] = list(settings.namespaces) or [None]
        if settings.argocd_namespace:
            argocd: list[str | None] = [settings.argocd_namespace]
        else:
            argocd = watched
        # ApplicationSets (and the Applications they generate, in their own namespace) are read in
        # the watched namespaces and the Argo CD namespace: where `spec.appSetRef` may point.
        app_namespaces: list[str | None] = (
            [None] if None in watched else list(dict.fromkeys([*watched, *argocd]))
        )
        self.app_namespaces = app_namespaces
        informer_settings = settings.informer
        self.ps_informers = [
            Informer(
                kube,
                PROGRESSIVE_SYNCS,
                ns,
                slim=slim_progressive_sync,
                handler=self._on_ps,
                settings=informer_settings,
                on_blocked=self._informer_blocked,
                indexers={BY_APPSET: lambda ps: [ps.app_set_key]},
            )
            for ns in watched
        ]
        workflow_namespaces: list[str | None] = (
            [settings.workflow_namespace] if settings.workflow_namespace else watched
        )
        self.workflow_informers = [
            Informer(
                kube,
                WORKFLOWS,
                ns,
                slim=workflow_view_from_object,
                handler=self._on_workflow,
                settings=informer_settings,
                on_blocked=self._informer_blocked,
                label_selector=NAME_LABEL,
                indexers={BY_OWNER: lambda wf: [f"{wf.namespace}/{wf.ps_name}"]},
            )
            for ns in workflow_namespaces
        ]
        self.appset_informers = [
            Informer(
                kube,
                APPLICATION_SETS,
                ns,
                slim=app_set_view_from_object,
                handler=self._on_appset,
                settings=informer_settings,
                on_blocked=self._informer_blocked,
            )
            for ns in app_namespaces
        ]
        self.app_informers = [
            Informer(
                kube,
                APPLICATIONS,
                ns,
                slim=slim_application,
                handler=self._on_app,
                settings=informer_settings,
                on_blocked=self._informer_blocked,
                indexers={BY_APPSET: _app_owner_names},
            )
            for ns in app_namespaces
        ]
        self.cluster_informers = [
            Informer(
                kube,
                SECRETS,
                ns,
                slim=slim_cluster,
                handler=self._on_cluster,
                settings=informer_settings,
                on_blocked=self._informer_blocked,
                label_selector=CLUSTER_SECRET_LABEL,
            )
            for ns in argocd
        ]
        self.publisher = InventoryPublisher(kube, self._clusters_in, self._inventory_namespaces)
        self.metrics.attach(
            phases=self._phases, queue_depth=self.queue.pending, watch_restarts=self._watch_restarts
        )

    @property
    def informers(self) -> list[Informer[Any]]:
        """Every informer, ProgressiveSyncs last (so their first reconcile sees the rest listed)."""
        return [
            *self.workflow_informers,
            *self.appset_informers,
            *self.app_informers,
            *self.cluster_informers,
            *self.ps_informers,
        ]

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
        for namespace in self._inventory_namespaces():
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
        if self._submitter is not None:
            self._submitter.close()
        self.metrics.retire_watch_restarts(self._watch_restarts())
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

    def wait_until_idle(self, timeout: float = 30.0) -> bool:
        """Wait until nothing is queued, delayed or being reconciled (tests, the demo)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.queue.pending() == 0:
                return True
            time.sleep(0.05)
        return False

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
        for ps_informer in self.ps_informers:
            for key, _ in ps_informer.items():
                self.queue.add(key)

    def _affects(self, informer: Informer[Any], cached: CachedPS) -> bool:
        namespace = informer.namespace
        if namespace is None:
            return True
        ps_namespace = cached.key[0]
        return namespace in (
            ps_namespace,
            cached.app_set_namespace,
            self.settings.argocd_namespace_for(ps_namespace),
            self.settings.workflow_namespace,
        )

    def _held_back(self, cached: CachedPS) -> bool:
        """True (and reported once per cause) when an informer this ProgressiveSync needs is waiting on
        a permission or a CRD, or has not listed yet: its cache cannot be trusted for a decision."""
        waiting = [i for i in self.informers if not i.usable and self._affects(i, cached)]
        key = cached.key
        causes = {(i.name, blocked.reason): blocked for i in waiting if (blocked := i.blocked) is not None}
        with self._blocked_lock:
            reported = self._blocked_reported.get(key, set())
            new = [cause for cause in causes if cause not in reported]
            if causes:
                self._blocked_reported[key] = reported | set(causes)
            else:
                self._blocked_reported.pop(key, None)
        for cause in new:
            blocked = causes[cause]
            self._record_event(
                cached, RecordEvent("Warning", blocked.reason, f"not reconciled meanwhile: {blocked.message}")
            )
        if not waiting and reported:
            was = ", ".join(sorted(f"{name} ({reason})" for name, reason in reported))
            self._record_event(
                cached,
                RecordEvent(
                    "Normal",
                    WATCH_RESUMED,
                    "every resource this ProgressiveSync needs is listed and watched again "
                    f"(was waiting on {was})",
                ),
            )
        return bool(waiting)

    def _start_local_engine(self) -> None:
        from orchestrator.engine.executor import ExecutorSettings, LocalExecutor  # noqa: PLC0415 - engine local only

        namespaces = self.settings.namespaces
        executor_settings = ExecutorSettings(
            kubeconfig=Path(self.settings.kubeconfig) if self.settings.kubeconfig else None,
            namespace=namespaces[0] if len(namespaces) == 1 else None,
        )
        self._executor = LocalExecutor(self.kube, executor_settings, clock=self.clock).start()

    def _resync_loop(self) -> None:
        period = self.settings.resync_seconds
        while not self.stop_event.wait(period):
            count = sum(informer.resync() for informer in self.ps_informers)
            self.publisher.mark_all()
            log.debug("resync: %d ProgressiveSyncs queued again", count)

    # -- events → keys ----------------------------------------------------------------------

    def _on_ps(self, change: Change[CachedPS]) -> None:
        ps = change.current
        if ps is None:
            return
        self.queue.add(ps.key)
        if change.old is not None and change.new is not None:
            self._note_transitions(change.old, change.new)
        # Ownership of an ApplicationSet can move when a ProgressiveSync comes, goes or changes ref.
        appsets = {p.app_set_key for p in (change.old, change.new) if p is not None}
        for appset in appsets:
            for other in self._ps_by_appset(appset):
                if other.key != ps.key:
                    self.queue.add(other.key)

    def _on_workflow(self, change: Change[WorkflowView]) -> None:
        wf = change.current
        if wf is not None and wf.ps_name:
            self.queue.add((wf.namespace, wf.ps_name))

    def _on_appset(self, change: Change[AppSetView]) -> None:
        appset = change.current
        if appset is not None:
            for ps in self._ps_naming_appset(appset.namespace, appset.name):
                self.queue.add(ps.key)

    def _on_app(self, change: Change[AppView]) -> None:
        owners: set[str] = set()
        for app in (change.old, change.new):
            if app is not None:
                owners.update(_app_owner_names(app))
        namespace = change.key[0]
        for owner in owners:
            for ps in self._ps_naming_appset(namespace, owner):
                self.queue.add(ps.key)

    def _on_cluster(self, change: Change[Cluster]) -> None:
        namespace = change.key[0]
        self.publisher.mark(namespace)
        for informer in self.ps_informers:
            for ps in informer.values():
                if self.settings.argocd_namespace_for(ps.key[0]) == namespace:
                    self.queue.add(ps.key)

    def _ps_by_appset(self, appset_key: str) -> list[CachedPS]:
        found: list[CachedPS] = []
        for informer in self.ps_informers:
            found.extend(informer.by_index(BY_APPSET, appset_key))
        return found

    def _ps_naming_appset(self, namespace: str, appset: str) -> list[CachedPS]:
        """ProgressiveSyncs whose `spec.appSetRef` names the ApplicationSet `namespace/appset`."""
        return self._ps_by_appset(f"{namespace}/{appset}")

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
            if not transition.kind.recorded_as_event:
                continue
            event = RecordEvent(transition.kind.event_type, transition.kind.value, transition.message)
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
            self._record_event(cached, event)

    # -- metrics sources --------------------------------------------------------------------

    def _phases(self) -> list[str]:
        return [
            str((ps.obj.get("status") or {}).get("phase") or "")
            for informer in self.ps_informers
            for ps in informer.values()
        ]

    def _watch_restarts(self) -> dict[str, int]:
        """Per resource: streams opened after the first one, and failed list/watch attempts."""
        counts: dict[str, int] = {}
        for informer in self.informers:
            stats = informer.stats
            resource = informer.resource.plural
            counts[resource] = counts.get(resource, 0) + max(0, stats.watches - 1) + stats.failures
        return counts

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
                delay = self.queue.retry(key)
                if isinstance(exc, Forbidden):
                    self._report_forbidden(key, exc)
                level = logging.WARNING if isinstance(exc, KubeError) else logging.ERROR
                log.log(
                    level,
                    "reconcile %s/%s: attempt %d failed: %s; retrying in %.1fs",
                    key[0],
                    key[1],
                    failures,
                    exc,
                    delay,
                    exc_info=not isinstance(exc, KubeError),
                    extra={"ps": f"{key[0]}/{key[1]}"},
                )
            else:
                self.queue.forget(key)
                if decided:  # held back or gone: nothing was tried, so nothing is known to work
                    self._report_allowed(key)
            finally:
                self.queue.done(key)

    def _report_forbidden(self, key: Key, exc: Forbidden) -> None:
        """One Warning Event per episode: what the API server refused (its message names the verb,
        the resource and the account) and the fix. A status condition cannot say it: writing the
        status may be exactly what is refused."""
        with self._blocked_lock:
            first = key not in self._forbidden_reported
            self._forbidden_reported[key] = str(exc)
        if not first:
            return
        cached = self._get_ps(key)
        if cached is None:
            return
        cap = max(self.settings.reconcile_backoffs)
        self._record_event(
            cached,
            RecordEvent(
                "Warning",
                RECONCILE_FORBIDDEN,
                f"not reconciled: {exc}: grant the watcher's account this permission (the chart's "
                "Role has it: was the Role narrowed or its RoleBinding removed?); retrying with "
                f"backoff (at most {cap:.0f}s apart), resuming by itself once it is back",
            ),
        )

    def _report_allowed(self, key: Key) -> None:
        with self._blocked_lock:
            was = self._forbidden_reported.pop(key, None)
        cached = self._get_ps(key) if was is not None else None
        if cached is not None:
            self._record_event(
                cached,
                RecordEvent("Normal", RECONCILE_RESUMED, "reconciled again: the permission is back"),
            )

    # -- one reconcile ----------------------------------------------------------------------

    def reconcile(self, key: Key) -> Decision | None:
        """Decide about one ProgressiveSync and carry the decision out; None when it is gone."""
        if self.stop_event.is_set():
            return None
        cached = self._get_ps(key)
        if cached is None:
            log.debug("%s/%s is gone; nothing to do", *key)
            return None
        if self._held_back(cached):
            self.queue.add_after(key, BLOCKED_RECHECK_SECONDS)
            return None
        obs = self.observe(cached)
        decision = decide(obs, self.settings.policy)
        self.reconciles += 1
        log.debug(
            "%s/%s: %s: %s",
            key[0],
            key[1],
            decision.step,
            decision.reason,
            extra={"ps": f"{key[0]}/{key[1]}", "step": decision.step},
        )
        self._execute(cached, obs, decision)
        return decision

    def _get_ps(self, key: Key) -> CachedPS | None:
        for informer in self.ps_informers:
            if informer.namespace in (None, key[0]):
                found = informer.get(key)
                if found is not None:
                    return found
        return None

    def observe(self, cached: CachedPS) -> Observed:
        """Everything `decide` needs about one ProgressiveSync, from the caches (and one read at most)."""
        obj = cached.obj
        namespace, name = cached.key
        meta = obj.get("metadata") or {}
        spec: ProgressiveSyncSpec | None = None
        ps_model: ProgressiveSync | None = None
        spec_error = ""
        try:
            ps_model = ProgressiveSync.model_validate(obj)
            spec = ps_model.spec
        except pydantic.ValidationError as exc:
            spec_error = _short_validation_error(exc)
        try:
            status = ProgressiveSyncStatus.model_validate(obj.get("status") or {})
        except pydantic.ValidationError as exc:
            log.warning("%s/%s: status does not parse (%s); reading it as empty", namespace, name, exc)
            status = ProgressiveSyncStatus()
        argocd_namespace = self.settings.argocd_namespace_for(namespace)
        appset_namespace = cached.app_set_namespace
        appset_watched = self._reads_appsets_in(appset_namespace)
        appset = (
            self._appset(appset_namespace, cached.app_set_name)
            if cached.app_set_name and appset_watched
            else None
        )
        workflows = self._workflows_of(namespace, name, status)
        plan: RolloutPlan | None = None
        if spec is not None and not cached.deleting and not live_workflows(workflows):
            plan = self._plan(spec, name, appset, appset_namespace, argocd_namespace)
        now = self.clock.now()
        observed = Observed(
            namespace=namespace,
            name=name,
            generation=int(meta.get("generation") or 0),
            spec=spec,
            status=status,
            now=now,
            spec_error=spec_error,
            deleting=cached.deleting,
            deletion_started=parse_time(meta.get("deletionTimestamp")),
            has_finalizer=FINALIZER in (meta.get("finalizers") or []),
            retry_token=str((meta.get("annotations") or {}).get(RETRY_ANNOTATION) or ""),
            appset=appset,
            appset_namespace=appset_namespace,
            appset_watched=appset_watched,
            watched_appset_namespaces=tuple(ns for ns in self.app_namespaces if ns is not None),
            claimed_by=self._claimed_by(cached, appset),
            plan=plan,
            workflows=tuple(workflows),
            uid=str(meta.get("uid") or ""),
        )
        return observed

    def _appset(self, namespace: str, name: str) -> AppSetView | None:
        for informer in self.appset_informers:
            if informer.namespace in (None, namespace):
                found = informer.get((namespace, name))
                if found is not None:
                    return found
        return None

    def _workflows_of(self, namespace: str, name: str, status: ProgressiveSyncStatus) -> list[WorkflowView]:
        found: list[WorkflowView] = []
        for informer in self.workflow_informers:
            found.extend(informer.by_index(BY_OWNER, f"{namespace}/{name}"))
        if status.rollout is not None:
            expected = rollout_workflow_name(name, status.rollout)
            if all(wf.name != expected for wf in found):
                # Absent from the cache: just created (the cache lags) or really gone? Ask.
                with contextlib.suppress(NotFound):
                    found.append(workflow_view_from_object(self.kube.get(WORKFLOWS, namespace, expected)))
        return found

    def _reads_appsets_in(self, namespace: str) -> bool:
        return any(informer.namespace in (None, namespace) for informer in self.appset_informers)

    def _plan(
        self,
        spec: ProgressiveSyncSpec,
        name: str,
        appset: AppSetView | None,
        appset_namespace: str,
        argocd_namespace: str,
    ) -> RolloutPlan:
        # The ApplicationSet controller creates its Applications in the ApplicationSet's namespace.
        apps: list[AppView] = []
        for informer in self.app_informers:
            if informer.namespace in (None, appset_namespace):
                apps.extend(
                    app
                    for app in informer.by_index(BY_APPSET, spec.app_set_ref.name)
                    if app.namespace == appset_namespace
                )
        clusters = self._clusters_in(argocd_namespace)
        return plan_rollout(spec, ps_name=name, appset=appset, clusters=clusters, apps=apps)

    def _clusters_in(self, argocd_namespace: str) -> list[Cluster]:
        clusters: list[Cluster] = []
        for cluster_informer in self.cluster_informers:
            if cluster_informer.namespace in (None, argocd_namespace):
                clusters.extend(c for key, c in cluster_informer.items() if key[0] == argocd_namespace)
        return clusters

    def _inventory_namespaces(self) -> list[str]:
        """The Argo CD namespaces whose cluster inventory the watcher publishes."""
        if self.settings.argocd_namespace:
            return [self.settings.argocd_namespace]
        found = set(self.settings.namespaces)
        for cluster_informer in self.cluster_informers:
            cluster_keys = cluster_informer.keys()  # a snapshot (ruff's SIM118 takes it for a dict)
            found.update(namespace for namespace, _ in cluster_keys)
        for ps_informer in self.ps_informers:
            ps_keys = ps_informer.keys()
            found.update(self.settings.argocd_namespace_for(namespace) for namespace, _ in ps_keys)
        return sorted(found)

    def _claimed_by(self, cached: CachedPS, appset: AppSetView | None) -> str:
        """The ProgressiveSync that owns this one's ApplicationSet, when it is another one.

        Only ProgressiveSyncs of namespaces the ApplicationSet admits are claimants (a squatter in
        another namespace cannot block its owner). Of those, the oldest (creationTimestamp, then
        namespace/name) live one owns it, so the answer is the same whichever one is reconciled
        first, and ownership passes on when it goes.
        """
        if not cached.app_set_name or appset is None:
            return ""
        claimants = [
            ps
            for ps in self._ps_by_appset(cached.app_set_key)
            if not ps.deleting and appset.admits(ps.key[0])
        ]
        if cached not in claimants:
            claimants.append(cached)
        owner = min(claimants, key=lambda ps: (ps.created, ps.key))
        return "" if owner.key == cached.key else f"{owner.key[0]}/{owner.key[1]}"

    # -- executing a decision ---------------------------------------------------------------

    def _execute(self, cached: CachedPS, obs: Observed, decision: Decision) -> None:
        namespace, name = cached.key
        extra = {"ps": f"{namespace}/{name}", "step": decision.step}
        for action in decision.actions:
            if isinstance(action, AddFinalizer | RemoveFinalizer):
                self._set_finalizer(namespace, name, present=isinstance(action, AddFinalizer))
            elif isinstance(action, CreateWorkflow):
                self._create_workflow(namespace, name, action, extra)
            elif isinstance(action, StopWorkflow):
                self._patch_workflow(
                    namespace, action.name, control.shutdown_patch(Shutdown.STOP), action.reason, extra
                )
            elif isinstance(action, SuspendWorkflow):
                self._patch_workflow(
                    namespace,
                    action.name,
                    control.suspend_patch(by_watcher=True),
                    "spec.paused is true",
                    extra,
                )
            elif isinstance(action, ResumeWorkflow):
                self._patch_workflow(
                    namespace,
                    action.name,
                    control.lift_watcher_suspend_patch(),
                    "spec.paused is false",
                    extra,
                )
            elif isinstance(action, RecordEvent):
                self._record_event(cached, action)
            elif isinstance(action, RequeueAfter):
                self.queue.add_after(cached.key, action.seconds)
            elif isinstance(action, UpdateStatus):
                self._write_status(cached, obs.status, action.patch, decision.step, extra)

    def _set_finalizer(self, namespace: str, name: str, *, present: bool) -> None:
        # A conditional update (resourceVersion) rather than a merge patch: a merge patch replaces
        # the whole finalizers list and could drop another controller's finalizer.
        try:
            obj = self.kube.get(PROGRESSIVE_SYNCS, namespace, name)
        except NotFound:
            return
        finalizers = list((obj.get("metadata") or {}).get("finalizers") or [])
        if (FINALIZER in finalizers) == present:
            return
        finalizers = [*finalizers, FINALIZER] if present else [f for f in finalizers if f != FINALIZER]
        obj["metadata"]["finalizers"] = finalizers
        try:
            self.kube.replace(PROGRESSIVE_SYNCS, namespace, obj)
        except NotFound:
            return
        log.info(
            "%s finalizer %s on %s/%s",
            "added" if present else "removed",
            FINALIZER,
            namespace,
            name,
            extra={"ps": f"{namespace}/{name}"},
        )

    def _create_workflow(
        self, namespace: str, ps_name: str, action: CreateWorkflow, extra: dict[str, str]
    ) -> None:
        body = dict(action.workflow)
        try:
            if self._submitter is not None:
                self._submit_through_argo_server(namespace, body)
            else:
                self.kube.create(WORKFLOWS, namespace, body)
        except AlreadyExists:
            existing = self.kube.get(WORKFLOWS, namespace, action.name)
            owner = str(((existing.get("metadata") or {}).get("labels") or {}).get(NAME_LABEL, ""))
            if owner != label_value(ps_name):
                raise KubeError(
                    f"Workflow {namespace}/{action.name} exists but belongs to {owner or 'nobody'}; "
                    "not adopting it"
                ) from None
            log.info(
                "Workflow %s exists already; adopting it",
                action.name,
                extra={**extra, "workflow": action.name},
            )
            return
        log.info(
            "created Workflow %s (rollout %s, attempt %d)",
            action.name,
            action.rollout_id,
            action.attempt,
            extra={**extra, "workflow": action.name},
        )

    def _submit_through_argo_server(self, namespace: str, body: dict[str, Any]) -> None:
        assert self._submitter is not None
        try:
            self._submitter.create(namespace, body)
        except AlreadyExists:
            raise
        except KubeError:
            # Argo Server does not always say 409 for a duplicate name; if it is there, it exists.
            try:
                self.kube.get(WORKFLOWS, namespace, body["metadata"]["name"])
            except NotFound:
                raise
            raise AlreadyExists(f"Workflow {body['metadata']['name']} exists", status=409) from None

    def _patch_workflow(
        self, namespace: str, name: str, patch: dict[str, Any], reason: str, extra: dict[str, str]
    ) -> None:
        try:
            self.kube.patch(WORKFLOWS, namespace, name, patch)
        except NotFound:
            log.info("Workflow %s is gone; nothing to patch", name, extra=extra)
            return
        log.info(
            "Workflow %s: %s (%s)", name, _describe_patch(patch), reason, extra={**extra, "workflow": name}
        )

    def _write_status(
        self,
        cached: CachedPS,
        status: ProgressiveSyncStatus,
        patch: StatusPatch,
        step: str,
        extra: dict[str, str],
    ) -> None:
        namespace, name = cached.key
        now = self.clock.now()
        # Compare on the cached status first: a converged ProgressiveSync costs no request at all.
        if apply_patch(status.model_copy(deep=True), patch, now).to_api() == status.to_api():
            log.debug("%s/%s: status unchanged; not writing", namespace, name, extra=extra)
            return
        try:
            result = update_status(
                self.kube,
                namespace,
                name,
                lambda current: apply_patch(current, patch, now),
                what=f"watcher {step}",
            )
        except NotFound:
            return
        if result.written:
            log.debug("%s/%s: status written (%s)", namespace, name, step, extra=extra)

    def _record_event(self, cached: CachedPS, action: RecordEvent) -> None:
        namespace, name = cached.key
        meta = cached.obj.get("metadata") or {}
        now = format_time(self.clock.now())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": cached.obj.get("apiVersion", ""),
                "kind": "ProgressiveSync",
                "name": name,
                "namespace": namespace,
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": action.reason,
            "message": action.message[:1024],
            "type": action.type,
            "source": {"component": "progressive-sync-watcher"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "progressive-sync-watcher",
        }
        try:
            self.kube.create(EVENTS, namespace, body)
        except KubeError as exc:  # an Event is a courtesy: never fail a reconcile over it
            log.info("could not record event %s on %s/%s: %s", action.reason, namespace, name, exc)
        log.info(
            "%s/%s: %s: %s",
            namespace,
            name,
            action.reason,
            action.message,
            extra={"ps": f"{namespace}/{name}", "event": action.reason},
        )


def _describe_patch(patch: Mapping[str, Any]) -> str:
    spec = patch.get("spec") or {}
    if spec.get("shutdown"):
        return f"shutdown {spec['shutdown']}"
    if spec.get("suspend") is True:
        return "suspended"
    return "resumed"


def _short_validation_error(exc: pydantic.ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', '')}")
    more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
    return "; ".join(parts) + more
