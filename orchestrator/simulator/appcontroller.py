"""The fleet simulator's controller loop: plays Argo CD's application controller (and, where switched
on, its ApplicationSet controller) against the API server, for the Applications of one namespace.

Where there is no Argo CD (tests, the demo, benchmarks) it moves Applications through what Argo CD
does to them; the decisions are `behaviours.next_step` (pure), this module only feeds and writes:

- **list -> watch** the Applications into a cache (`orchestrator.kube.watchloop`); on 410 re-list,
  on any other failure wait and go on (backoff capped, never giving up: a controller rides out an
  API server outage);
- **workers** (`DEFAULT_WORKERS`, `simulate run --workers`) take due Applications from a delay
  queue, each Application one worker's at a time, ask `next_step` for the next write, write it (a
  PUT carrying the resourceVersion it was decided on), then ask again; when nothing is due they
  sleep until the decision's wake-up time or the next change;
- **exact events**: when the answer to a write is lost (timeout, dropped connection, a 409 that may be
  our own retried write), the write is left unconfirmed and the next look at the Application reads
  the server and checks the step's proof: its events are logged once if and only if it landed;
- the world a decision needs (cluster Secrets, the owning ApplicationSet, the simulated Git refs) is
  read through short caches; a failed read keeps the last value.

Per-cluster behaviour comes from `SimulatorConfig` and `simulator.progressivesync.io/` annotations
(docs/simulator.md). The clock is injectable. It talks to the API only through
`orchestrator.kube.client`. Callers: `progressive-sync simulate run`, the demo, tests, benchmarks.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.core.clock import Clock, SystemClock
from orchestrator.kube.client import (
    APP_PROJECTS,
    APPLICATION_SETS,
    APPLICATIONS,
    CONFIG_MAPS,
    SECRETS,
    Conflict,
    Forbidden,
    Invalid,
    Kube,
    KubeError,
    NotFound,
)
from orchestrator.kube.cluster_secrets import CLUSTER_SECRET_LABEL, cluster_secret_from_object
from orchestrator.kube.watchloop import BackoffPolicy, Changed, Listed, WatchLoop, WatchLoopSettings
from orchestrator.simulator.appset import ClusterParams, owner_app_set
from orchestrator.simulator.behaviours import next_step
from orchestrator.simulator.config import DEFAULT_WORKERS, ConfigError, SimulatorConfig
from orchestrator.simulator.decision_types import Decision, Step, Timeline, World
from orchestrator.simulator.events import EventsLog
from orchestrator.simulator.git import GIT_CONFIGMAP, GitRefs
from orchestrator.simulator.windows import Window, WindowError, windows_of

log = logging.getLogger(__name__)

# How long cluster Secrets, ApplicationSets and the Git refs read once are trusted.
WORLD_CACHE_SECONDS = 1.0
# Waits between attempts of a failing list/watch or write; the last one repeats (never giving up).
BACKOFF_SECONDS = (0.2, 0.5, 1.0, 2.0, 3.0)


@dataclass(frozen=True)
class _Cluster:
    name: str
    server: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]


class _DelayQueue:
    """Application names due at a time; each name once, at its earliest due time. Thread-safe.

    A name handed to a worker (`pop`) is its worker's until `done`: a `put` meanwhile is kept and
    queued when the worker is done, so no two workers ever act on one Application at once and its
    writes keep their order (as client-go's workqueue does for a controller's workers).
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._due: dict[str, float] = {}
        self._active: set[str] = set()
        self._after: dict[str, float] = {}  # put while active: due once its worker is done
        self._seq = itertools.count()
        self._cond = threading.Condition()

    def put(self, name: str, delay: float = 0.0) -> None:
        due = time.monotonic() + max(0.0, delay)
        with self._cond:
            if name in self._active:
                self._after[name] = min(due, self._after.get(name, due))
                return
            self._push_locked(name, due)

    def _push_locked(self, name: str, due: float) -> None:
        if name in self._due and self._due[name] <= due:
            return
        self._due[name] = due
        heapq.heappush(self._heap, (due, next(self._seq), name))
        self._cond.notify()

    def pop(self, timeout: float) -> str | None:
        """The next due name, now the caller's until `done(name)`; None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier due time
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    _, _, name = heapq.heappop(self._heap)
                    del self._due[name]
                    self._active.add(name)
                    return name
                wait = deadline - now
                if self._heap:
                    wait = min(wait, self._heap[0][0] - now)
                if wait <= 0:
                    return None
                self._cond.wait(wait)

    def done(self, name: str) -> None:
        """The worker is done with `name`: what was put for it meanwhile is queued now."""
        with self._cond:
            self._active.discard(name)
            due = self._after.pop(name, None)
            if due is not None:
                self._push_locked(name, due)


class _Cached:
    """A value read from the API server at most every WORLD_CACHE_SECONDS; the last good one on errors."""

    def __init__(self, read: Callable[[], Any], what: str, default: Any) -> None:
        self._read = read
        self._what = what
        self.value = default
        self._at = float("-inf")

    def get(self, *, fresh: bool = False) -> Any:
        if fresh or time.monotonic() - self._at > WORLD_CACHE_SECONDS:
            try:
                self.value = self._read()
                self._at = time.monotonic()
            except KubeError as exc:
                log.warning("simulator: reading %s failed: %s; using what was read before", self._what, exc)
        return self.value


class FleetSimulator:
    """Argo CD's application controller, simulated, for the Applications of one namespace."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        config: SimulatorConfig | None = None,
        *,
        clock: Clock | None = None,
        events_log: str | Path | None = None,
        watch_window_seconds: int = 5,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.kube = kube
        self.namespace = namespace
        self.config = config or SimulatorConfig()
        self.clock = clock or SystemClock()
        self.events = EventsLog(events_log)
        self.watch_window_seconds = watch_window_seconds
        self.workers = workers
        self.error: BaseException | None = None  # a thread's crash, or a write the API server rejected
        self._queue = _DelayQueue()
        self._cache: dict[str, dict[str, Any]] = {}
        self._cache_lock = threading.Lock()
        self._unconfirmed: dict[str, Step] = {}
        self._failures: dict[str, int] = {}
        self._timeline = Timeline()
        # The decisions are pure and take microseconds: the workers make them one at a time (the
        # Timeline they read and mark is not thread-safe); their writes, the slow part, run at once.
        self._timeline_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._close_stream: Callable[[], None] | None = None
        self._clusters = _Cached(self._read_clusters, "cluster Secrets", {})
        self._git = _Cached(self._read_git, f"ConfigMap {GIT_CONFIGMAP}", GitRefs({}))
        self._app_sets: dict[str, _Cached] = {}
        self._projects: dict[str, _Cached] = {}

    # -- running --------------------------------------------------------------------------

    def start(self) -> FleetSimulator:
        """Run in background threads (watch + worker) until `stop()`."""
        workers = [(self._work_loop, f"sim-work-{i}") for i in range(self.workers)]
        for target, name in ((self._watch_loop, "sim-watch"), *workers):
            thread = threading.Thread(target=self._guard(target), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop both threads (ending the watch stream at once), waiting for them `timeout` seconds in
        all. They are daemon threads: one still inside an API call when that runs out (its read
        timeout is longer) ends with the process."""
        self._stop.set()
        close = self._close_stream
        if close is not None:
            close()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def run_forever(self) -> None:
        """Run in the foreground until `stop()` is called from elsewhere (signal handler)."""
        self.start()
        while not self._stop.wait(0.5):  # a timed wait lets signal handlers run promptly
            pass
        self.stop()
        if self.error is not None and not isinstance(self.error, KubeError):
            raise self.error

    def __enter__(self) -> FleetSimulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                if not self._stop.is_set():
                    log.exception("simulator thread failed")
                    self.error = exc
                    self._stop.set()

        return run

    def _pause(self, attempt: int) -> None:
        self._stop.wait(BACKOFF_SECONDS[min(attempt, len(BACKOFF_SECONDS) - 1)])

    # -- list -> watch -------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        """list -> watch -> on 410 re-list; every failure waits (capped backoff) and tries again."""
        loop = WatchLoop(
            self.kube,
            APPLICATIONS,
            self.namespace,
            settings=WatchLoopSettings(
                watch_timeout_seconds=self.watch_window_seconds,
                backoff=BackoffPolicy(delays=BACKOFF_SECONDS),  # never gives up
            ),
            name="simulator applications",
        )
        self._close_stream = loop.close_stream
        for step in loop.run(self._stop):
            if isinstance(step, Listed):
                self._replace_cache(step.items)
            elif isinstance(step, Changed):
                self._apply_event(step.event.type, step.event.object)

    def _replace_cache(self, items: list[dict[str, Any]]) -> None:
        names = set()
        with self._cache_lock:
            for item in items:
                name = str(item["metadata"]["name"])
                names.add(name)
                self._cache[name] = item
            for gone in set(self._cache) - names:
                del self._cache[gone]
        for name in names:
            self._queue.put(name)

    def _apply_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if not name:
            return
        with self._cache_lock:
            if kind == "DELETED":
                self._cache.pop(name, None)
                return
            if kind not in ("ADDED", "MODIFIED"):
                return
            if _newer_or_same(obj, self._cache.get(name)):
                self._cache[name] = obj
        self._queue.put(name)

    # -- the worker ---------------------------------------------------------------------------

    def _work_loop(self) -> None:
        while not self._stop.is_set():
            name = self._queue.pop(timeout=0.5)
            if name is None:
                continue
            try:
                self._reconcile(name)
            finally:
                self._queue.done(name)

    def _reconcile(self, name: str) -> None:
        if name in self._unconfirmed and not self._confirm(name):
            return
        with self._cache_lock:
            app = self._cache.get(name)
        if app is None:
            return
        now = self.clock.now()
        world = self._world(app)
        with self._timeline_lock:
            decision: Decision = next_step(app, world, now, self._timeline)
        if decision.step is not None:
            if self._write(name, decision.step, now):
                self._queue.put(name)  # the next step may be due at once
            return
        if decision.wake_at is not None:
            self._queue.put(name, (decision.wake_at - self.clock.now()).total_seconds())

    def _write(self, name: str, step: Step, now: datetime) -> bool:
        """PUT the step; True when it is known to have landed (its events are then logged)."""
        try:
            stored = self.kube.replace(APPLICATIONS, self.namespace, step.app)
        except NotFound:
            if step.name == "finalize":  # the last finalizer gone: the API server deleted it
                self._landed(name, step, None, now)
            return False
        except Conflict:
            # Someone else wrote meanwhile, or our own write landed and its answer was lost before a
            # retry: only the server can say which.
            self._unconfirmed[name] = step
            self._confirm(name)
            return False
        except (Invalid, Forbidden) as exc:
            log.error("simulator: the API server refused %s of %s: %s", step.name, name, exc)
            self.error = exc
            self._retry_later(name)
            return False
        except KubeError as exc:
            log.warning(
                "simulator: %s of %s: no answer (%s); will check what the server has", step.name, name, exc
            )
            self._unconfirmed[name] = step
            self._retry_later(name)
            return False
        if not step.landed_in(stored):
            # The API server dropped or changed what was written (a field the CRD's schema prunes):
            # the simulator writes something Argo CD would not. A bug to fix, not to ride out.
            self.error = AssertionError(f"the API server did not store {step.name} of {name} as written")
            log.error("simulator: %s", self.error)
        self._landed(name, step, stored, now)
        return True

    def _confirm(self, name: str) -> bool:
        """Settle an unconfirmed write from what the server has; False when it cannot be read now."""
        step = self._unconfirmed[name]
        try:
            stored = self.kube.get(APPLICATIONS, self.namespace, name)
        except NotFound:
            del self._unconfirmed[name]
            if step.name == "finalize":
                self._landed(name, step, None, self.clock.now())
            with self._cache_lock:
                self._cache.pop(name, None)
            return True
        except KubeError as exc:
            log.warning("simulator: cannot read %s to confirm its %s: %s", name, step.name, exc)
            self._retry_later(name)
            return False
        del self._unconfirmed[name]
        if step.landed_in(stored):
            log.info("simulator: %s of %s had landed (its answer was lost)", step.name, name)
            self._landed(name, step, stored, self.clock.now())
        else:
            with self._cache_lock:
                self._cache[name] = stored
        self._queue.put(name)
        return True

    def _landed(self, name: str, step: Step, stored: dict[str, Any] | None, now: datetime) -> None:
        self._failures.pop(name, None)
        if stored is not None:
            with self._cache_lock:
                if _newer_or_same(stored, self._cache.get(name)):
                    self._cache[name] = stored
        with self._timeline_lock:
            for mark in step.marks:
                self._timeline.mark(mark, now)
        cluster = self._cluster_name(step.app)
        for event in step.events:
            self.events.write(event.name, app=name, cluster=cluster, when=now, **dict(event.fields))

    def _retry_later(self, name: str) -> None:
        failures = self._failures.get(name, 0) + 1
        self._failures[name] = failures
        self._queue.put(name, BACKOFF_SECONDS[min(failures - 1, len(BACKOFF_SECONDS) - 1)])

    # -- the world a decision reads --------------------------------------------------------------

    def _read_clusters(self) -> dict[str, _Cluster]:
        items, _ = self.kube.list(SECRETS, self.namespace, label_selector=CLUSTER_SECRET_LABEL)
        clusters = {}
        for item in items:
            # Through the adapter's reader, which never decodes data.config.
            secret = cluster_secret_from_object(item)
            name = secret.name or secret.secret_name
            annotations = dict((item.get("metadata") or {}).get("annotations") or {})
            clusters[name] = _Cluster(name, secret.server.rstrip("/"), dict(secret.labels), annotations)
        return clusters

    def _read_git(self) -> GitRefs:
        try:
            return GitRefs.from_configmap(self.kube.get(CONFIG_MAPS, self.namespace, GIT_CONFIGMAP))
        except NotFound:
            return GitRefs({})

    def _app_set(self, name: str) -> Mapping[str, Any] | None:
        if name not in self._app_sets:

            def read() -> Mapping[str, Any] | None:
                try:
                    return self.kube.get(APPLICATION_SETS, self.namespace, name)
                except NotFound:
                    return None

            self._app_sets[name] = _Cached(read, f"ApplicationSet {name}", None)
        value: Mapping[str, Any] | None = self._app_sets[name].get()
        return value

    def _project(self, name: str) -> Mapping[str, Any] | None:
        """The AppProject (None when it, or the AppProject kind, does not exist)."""
        if name not in self._projects:

            def read() -> Mapping[str, Any] | None:
                try:
                    return self.kube.get(APP_PROJECTS, self.namespace, name)
                except NotFound:
                    return None

            self._projects[name] = _Cached(read, f"AppProject {name}", None)
        value: Mapping[str, Any] | None = self._projects[name].get()
        return value

    def _cluster_of(self, app: Mapping[str, Any]) -> _Cluster | None:
        destination = (app.get("spec") or {}).get("destination") or {}
        server = str(destination.get("server") or "").rstrip("/")
        name = str(destination.get("name") or "")
        clusters: dict[str, _Cluster] = self._clusters.get()
        # Argo CD's rule: destination.server first, else destination.name.
        found = next((c for c in clusters.values() if server and c.server == server), None)
        return found or (clusters.get(name) if name else None)

    def _cluster_name(self, app: Mapping[str, Any]) -> str:
        cluster = self._cluster_of(app)
        if cluster is not None:
            return cluster.name
        destination = (app.get("spec") or {}).get("destination") or {}
        return str(destination.get("name") or destination.get("server") or "")

    def _world(self, app: Mapping[str, Any]) -> World:
        cluster = self._cluster_of(app)
        cluster_name = cluster.name if cluster else self._cluster_name(app)
        app_name = str((app.get("metadata") or {}).get("name", ""))
        try:
            behaviour = self.config.behaviour_for(
                cluster_name,
                secret_annotations=cluster.annotations if cluster else None,
                app_annotations=(app.get("metadata") or {}).get("annotations") or {},
                app=app_name,
            )
        except ConfigError as exc:
            log.warning("simulator: %s; using the file's behaviour for %s", exc, cluster_name)
            behaviour = self.config.behaviour_for(cluster_name)
        owner = owner_app_set(app) if behaviour.app_set_controller else None
        windows: tuple[Window, ...] = ()
        windows_error = ""
        if app.get("operation"):  # only a running operation looks at windows
            try:
                windows = windows_of(self._project(str((app.get("spec") or {}).get("project") or "default")))
            except WindowError as exc:
                windows_error = str(exc)
        return World(
            behaviour=behaviour,
            cluster=ClusterParams(cluster.name, cluster.server, cluster.labels, cluster.annotations)
            if cluster
            else None,
            # An operation resolves its revision against the refs as they are now (a push just before
            # a sync is seen); comparisons may use refs a moment old.
            git=self._git.get(fresh=bool(app.get("operation"))),
            app_set=self._app_set(owner) if owner else None,
            preserved_annotations=self.config.preserved_annotations,
            preserved_labels=self.config.preserved_labels,
            sync_windows=windows,
            windows_error=windows_error,
        )


def _newer_or_same(obj: Mapping[str, Any], than: Mapping[str, Any] | None) -> bool:
    """True when `obj` is not older than `than` by resourceVersion (etcd revisions are integers)."""
    if than is None:
        return True
    mine = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    theirs = str((than.get("metadata") or {}).get("resourceVersion") or "")
    if mine.isdigit() and theirs.isdigit():
        return int(mine) >= int(theirs)
    return True
