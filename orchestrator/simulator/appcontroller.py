"""The fleet simulator: plays Argo CD's application controller against the API server.

Where there is no Argo CD (tests, the demo, benchmarks) it does to Applications what the controller
does after someone writes `.operation` (REFERENCE.md, Argo CD):

1. **pick up**: `.operation` set and no operation running -> `status.operationState` =
   {operation: <copy>, phase: Running, startedAt}; the refresh annotation is consumed;
2. **finish**, `syncSeconds` later: phase Succeeded (`syncResult.revision(s)` = the pinned
   revision(s); an empty one resolves to what Argo CD compared against, as the real controller
   does) or Failed; `finishedAt`; `.operation` removed; on success sync status Synced at that
   revision, health Progressing, `reconciledAt` = finishedAt;
3. **settle**, `healthSeconds` later: health Healthy (or Degraded), `reconciledAt` after finishedAt.

Per-cluster behaviour comes from a YAML file and from annotations (see `Behaviour`,
`SimulatorConfig`); `hang` picks the operation up and never finishes it. Each sync start, finish
and health settle is appended to a JSON-lines events log (epoch seconds), which `read_events`,
`max_in_flight` and `sync_order` turn into the order and concurrency a test or benchmark asserts.

Every write is an update carrying the resourceVersion; on 409 the Application is read again and the
transition re-checked. The clock is injectable; waiting happens on a queue with a timeout.

`seed_fleet` creates a fleet to play with: cluster Secrets across regions and zones (labels
`region`, `zone`, `env`; `data.config` a dummy), an ApplicationSet, and Applications owned by it,
OutOfSync at a new revision with automated sync off.

Callers: `progressive-sync simulate run|seed` (orchestrator/cli/simulate_cmd.py), the tests,
the demo and the benchmarks. It talks to the API only through `orchestrator.kube.client`.
"""

from __future__ import annotations

import base64
import copy
import fnmatch
import heapq
import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from orchestrator.argocd import appsync
from orchestrator.core.clock import Clock, SystemClock, format_time, parse_time
from orchestrator.kube.client import (
    APPLICATION_SETS,
    APPLICATIONS,
    CLUSTER_SECRET_LABEL,
    CLUSTER_SECRET_TYPE,
    CLUSTER_SECRET_TYPE_LABEL,
    SECRETS,
    AlreadyExists,
    Conflict,
    Gone,
    Kube,
    KubeError,
    NotFound,
    cluster_secret_from_object,
)

log = logging.getLogger(__name__)

ANNOTATION_PREFIX = "simulator.progressivesync.io/"
# How long the cluster Secrets (and their behaviour annotations) read once are trusted.
CLUSTER_CACHE_SECONDS = 2.0


# --- behaviour -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Behaviour:
    """How one cluster's Applications behave when synced.

    YAML keys / annotation suffixes: `syncSeconds` / `sync-seconds`, `healthSeconds` /
    `health-seconds`, `fail`, `degrade`, `hang`.
    """

    sync_seconds: float = 1.0  # Running -> Succeeded/Failed
    health_seconds: float = 1.0  # Progressing -> Healthy/Degraded after the sync
    fail: bool = False  # the operation ends Failed
    degrade: bool = False  # health ends Degraded
    hang: bool = False  # the operation stays Running for ever


_KEYS = {
    "syncSeconds": "sync_seconds",
    "healthSeconds": "health_seconds",
    "fail": "fail",
    "degrade": "degrade",
    "hang": "hang",
}
_ANNOTATION_KEYS = {
    "sync-seconds": "sync_seconds",
    "health-seconds": "health_seconds",
    "fail": "fail",
    "degrade": "degrade",
    "hang": "hang",
}


class ConfigError(ValueError):
    """The simulator config file (or an annotation) is not valid; the message says where."""


def _coerce(attribute: str, value: Any, where: str) -> Any:
    kind = {f.name: f.type for f in fields(Behaviour)}[attribute]
    if kind == "bool" or isinstance(value, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "yes", "1"):
            return True
        if text in ("false", "no", "0"):
            return False
        raise ConfigError(f"{where}: {value!r} is not true/false")
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {value!r} is not a number of seconds") from exc
    if number < 0:
        raise ConfigError(f"{where}: {value!r} is negative")
    return number


def _overrides(values: Mapping[str, Any], keys: Mapping[str, str], where: str) -> dict[str, Any]:
    result = {}
    for key, value in values.items():
        if key not in keys:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(keys)})")
        result[keys[key]] = _coerce(keys[key], value, f"{where}.{key}")
    return result


def overrides_from_annotations(annotations: Mapping[str, str], where: str) -> dict[str, Any]:
    """`simulator.progressivesync.io/<key>` annotations as Behaviour overrides."""
    picked = {
        key[len(ANNOTATION_PREFIX) :]: value
        for key, value in annotations.items()
        if key.startswith(ANNOTATION_PREFIX)
    }
    return _overrides(picked, _ANNOTATION_KEYS, where)


@dataclass(frozen=True)
class SimulatorConfig:
    """Behaviour per cluster: `defaults`, then each `clusters` entry whose pattern matches.

    ```yaml
    defaults: {syncSeconds: 0.5, healthSeconds: 0.5}
    clusters:
      "*-eu-west-1a": {syncSeconds: 3}       # fnmatch patterns on the cluster name, in file order
      cells-7-us-east-1b: {degrade: true}    # later entries win
    ```

    Annotations override the file: first the cluster Secret's, then the Application's.
    """

    defaults: Behaviour = Behaviour()
    clusters: tuple[tuple[str, Mapping[str, Any]], ...] = ()

    @classmethod
    def from_yaml(cls, text: str, where: str = "config") -> SimulatorConfig:
        """Parse the YAML form; ConfigError names the bad key."""
        document = yaml.safe_load(text) or {}
        if not isinstance(document, Mapping):
            raise ConfigError(f"{where}: expected a mapping with 'defaults' and 'clusters'")
        unknown = set(document) - {"defaults", "clusters"}
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: defaults, clusters)"
            )
        defaults = replace(
            Behaviour(), **_overrides(document.get("defaults") or {}, _KEYS, f"{where}.defaults")
        )
        entries = []
        for pattern, values in (document.get("clusters") or {}).items():
            if not isinstance(values, Mapping):
                raise ConfigError(f"{where}.clusters.{pattern}: expected a mapping")
            entries.append((str(pattern), _overrides(values, _KEYS, f"{where}.clusters.{pattern}")))
        return cls(defaults, tuple(entries))

    @classmethod
    def load(cls, path: str | Path) -> SimulatorConfig:
        """Read the YAML file."""
        return cls.from_yaml(Path(path).read_text(), str(path))

    def behaviour_for(
        self,
        cluster: str,
        *,
        secret_annotations: Mapping[str, str] | None = None,
        app_annotations: Mapping[str, str] | None = None,
        app: str = "",
    ) -> Behaviour:
        """The behaviour of `cluster`'s Application: defaults < file entries < Secret < Application."""
        behaviour = self.defaults
        for pattern, values in self.clusters:
            if fnmatch.fnmatchcase(cluster, pattern):
                behaviour = replace(behaviour, **values)
        behaviour = replace(
            behaviour, **overrides_from_annotations(secret_annotations or {}, f"cluster Secret of {cluster}")
        )
        return replace(behaviour, **overrides_from_annotations(app_annotations or {}, f"Application {app}"))


# --- events log ------------------------------------------------------------------------------


class EventsLog:
    """Appends one JSON line per simulated transition; thread-safe. Without a path it only logs."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()

    def write(self, event: str, *, app: str, cluster: str, when: datetime, **extra: Any) -> None:
        """One event: sync-start, sync-finish, healthy, degraded."""
        record = {
            "event": event,
            "app": app,
            "cluster": cluster,
            "time": when.timestamp(),
            "at": format_time(when),
        }
        record.update(extra)
        log.info("simulated %s: %s (cluster %s) %s", event, app, cluster, extra or "")
        if self.path is None:
            return
        with self._lock, self.path.open("a") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """The events log as a list of dicts, in the order written."""
    file = Path(path)
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


SETTLED = ("healthy", "degraded")


def max_in_flight(events: Iterable[Mapping[str, Any]]) -> int:
    """The most clusters busy at once: from their first sync start until their Applications settle
    (healthy/degraded) or their sync fails."""
    changes: list[tuple[float, int]] = []
    busy: dict[str, int] = {}
    for event in sorted(events, key=lambda e: e["time"]):
        cluster, kind = event["cluster"], event["event"]
        ends = kind in SETTLED or (kind == "sync-finish" and event.get("phase") != "Succeeded")
        if kind == "sync-start":
            busy[cluster] = busy.get(cluster, 0) + 1
            if busy[cluster] == 1:
                changes.append((event["time"], 1))
        elif ends and busy.get(cluster, 0) > 0:
            busy[cluster] -= 1
            if busy[cluster] == 0:
                changes.append((event["time"], -1))
    peak = current = 0
    # At equal times an end comes before a start: a cluster that finishes as the next one starts
    # did not overlap it.
    for _, delta in sorted(changes):
        current += delta
        peak = max(peak, current)
    return peak


def sync_order(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """Clusters in the order their first sync started."""
    order: list[str] = []
    for event in sorted(events, key=lambda e: e["time"]):
        if event["event"] == "sync-start" and event["cluster"] not in order:
            order.append(event["cluster"])
    return order


# --- the controller --------------------------------------------------------------------------


@dataclass(order=True)
class _Timer:
    due: datetime
    seq: int
    action: str = field(compare=False)  # "finish" | "settle"
    app: str = field(compare=False)
    token: str = field(compare=False)  # startedAt of the operation the timer belongs to


@dataclass(frozen=True)
class _ClusterInfo:
    name: str
    server: str
    annotations: Mapping[str, str]


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
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.config = config or SimulatorConfig()
        self.clock = clock or SystemClock()
        self.events = EventsLog(events_log)
        self.watch_window_seconds = watch_window_seconds
        self._inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._clusters: dict[str, _ClusterInfo] = {}
        self._clusters_read_at = float("-inf")
        self._armed: set[tuple[str, str, str]] = set()  # (action, app, token) with a timer pending
        self.error: BaseException | None = None

    # -- running --------------------------------------------------------------------------

    def start(self) -> FleetSimulator:
        """Run in background threads (watch + controller) until `stop()`."""
        for target, name in ((self._watch_loop, "sim-watch"), (self._control_loop, "sim-control")):
            thread = threading.Thread(target=self._guard(target), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop both threads (the watch ends at its next window at the latest)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def run_forever(self) -> None:
        """Run in the foreground until `stop()` is called from elsewhere (signal handler)."""
        self.start()
        while not self._stop.wait(0.5):  # a timed wait lets signal handlers run promptly
            pass
        self.stop()
        if self.error is not None:
            raise self.error

    def __enter__(self) -> FleetSimulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _guard(self, target: Any) -> Any:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                if not self._stop.is_set():
                    log.exception("simulator thread failed")
                    self.error = exc
                    self._stop.set()

        return run

    def _watch_loop(self) -> None:
        """list → watch → on 410 or a dropped stream re-list; feeds the controller's inbox."""
        while not self._stop.is_set():
            items, resource_version = self.kube.list(APPLICATIONS, self.namespace)
            for item in items:
                self._inbox.put(item)
            try:
                while not self._stop.is_set():
                    for event in self.kube.watch(
                        APPLICATIONS,
                        self.namespace,
                        resource_version=resource_version,
                        timeout_seconds=self.watch_window_seconds,
                    ):
                        resource_version = event.resource_version or resource_version
                        if event.type in ("ADDED", "MODIFIED"):
                            self._inbox.put(event.object)
                        if self._stop.is_set():
                            return
            except Gone:
                log.info("simulator: watch expired; re-listing")
            except KubeError as exc:
                log.warning("simulator: watch failed: %s; re-listing", exc)
                self._stop.wait(0.5)

    def _control_loop(self) -> None:
        while not self._stop.is_set():
            timeout = 0.5
            if self._timers:
                timeout = min(timeout, max(0.0, (self._timers[0].due - self.clock.now()).total_seconds()))
            try:
                app = self._inbox.get(timeout=timeout)
            except queue.Empty:
                app = None
            if app is not None:
                self._observe(app)
            self._run_due_timers()

    def _run_due_timers(self) -> None:
        now = self.clock.now()
        while self._timers and self._timers[0].due <= now:
            timer = heapq.heappop(self._timers)
            self._armed.discard((timer.action, timer.app, timer.token))
            if timer.action == "finish":
                self._finish(timer.app, timer.token)
            else:
                self._settle(timer.app, timer.token)

    def _arm(self, action: str, app: str, token: str, seconds: float) -> None:
        key = (action, app, token)
        if key in self._armed:
            return
        self._armed.add(key)
        due = self.clock.now() + timedelta(seconds=seconds)
        heapq.heappush(self._timers, _Timer(due, next(self._seq), action, app, token))

    # -- what the controller does -----------------------------------------------------------

    def _observe(self, app: dict[str, Any]) -> None:
        """React to the Application as last seen: pick up an operation, or re-arm lost timers."""
        name = appsync.app_name(app)
        op = appsync.operation(app)
        state = appsync.operation_state(app)
        phase = (state or {}).get("phase")
        if appsync.refresh_requested(app) and op is None:
            self._refresh(name)
            return
        if op is not None and phase not in appsync.RUNNING_PHASES:
            self._pick_up(name)
            return
        if phase in appsync.RUNNING_PHASES and state is not None:
            # A simulator restarted mid-operation resumes it.
            behaviour = self._behaviour(app)
            if not behaviour.hang:
                self._arm("finish", name, str(state.get("startedAt", "")), behaviour.sync_seconds)
            return
        if (
            state is not None
            and phase == "Succeeded"
            and (app.get("status") or {}).get("health", {}).get("status") == "Progressing"
        ):
            self._arm("settle", name, str(state.get("startedAt", "")), self._behaviour(app).health_seconds)

    def _update(self, name: str, change: Any) -> dict[str, Any] | None:
        """Read, apply `change(app) -> new app | None`, write with resourceVersion; again on 409."""
        for _ in range(10):
            try:
                app = self.kube.get(APPLICATIONS, self.namespace, name)
            except NotFound:
                return None
            new = change(copy.deepcopy(app))
            if new is None:
                return None
            try:
                return self.kube.replace(APPLICATIONS, self.namespace, new)
            except Conflict:
                continue
            except NotFound:
                return None
        log.warning("simulator: Application %s kept conflicting; giving up this transition", name)
        return None

    def _refresh(self, name: str) -> None:
        """`argocd.argoproj.io/refresh`: compare now (reconciledAt moves) and remove the annotation."""
        now = self.clock.now()

        def change(app: dict[str, Any]) -> dict[str, Any] | None:
            annotations = (app.get("metadata") or {}).get("annotations") or {}
            if annotations.pop(appsync.REFRESH_ANNOTATION, None) is None:
                return None
            app.setdefault("status", {})["reconciledAt"] = format_time(now)
            return app

        self._update(name, change)

    def _pick_up(self, name: str) -> None:
        now = self.clock.now()
        started = format_time(now)
        picked: dict[str, Any] = {}

        def change(app: dict[str, Any]) -> dict[str, Any] | None:
            op = appsync.operation(app)
            state = appsync.operation_state(app)
            if op is None or (state or {}).get("phase") in appsync.RUNNING_PHASES:
                return None
            status = app.setdefault("status", {})
            status["operationState"] = {
                "operation": copy.deepcopy(op),
                "phase": "Running",
                "message": "(simulated) syncing",
                "startedAt": started,
            }
            annotations = app.get("metadata", {}).get("annotations") or {}
            annotations.pop(appsync.REFRESH_ANNOTATION, None)
            picked["op"] = op
            return app

        stored = self._update(name, change)
        if stored is None:
            return
        op = picked["op"]
        cluster = self._cluster_name(stored)
        behaviour = self._behaviour(stored)
        sync = op.get("sync") or {}
        self.events.write(
            "sync-start",
            app=name,
            cluster=cluster,
            when=now,
            revision=",".join(sync.get("revisions") or [sync.get("revision") or ""]),
            rollout=appsync.info_value(op, appsync.INFO_ROLLOUT_ID),
            initiatedBy=appsync.initiator(op),
        )
        if not behaviour.hang:
            self._arm("finish", name, started, behaviour.sync_seconds)

    def _finish(self, name: str, token: str) -> None:
        now = self.clock.now()
        finished = format_time(now)
        outcome: dict[str, Any] = {}

        def change(app: dict[str, Any]) -> dict[str, Any] | None:
            state = appsync.operation_state(app)
            if state is None or state.get("phase") != "Running" or str(state.get("startedAt")) != token:
                return None
            behaviour = self._behaviour(app)
            status = app["status"]
            sync = (state.get("operation") or {}).get("sync") or {}
            compared = status.get("sync") or {}
            result: dict[str, Any] = {}
            if appsync.source_count(app):
                result["revisions"] = sync.get("revisions") or compared.get("revisions") or []
            else:
                # An empty revision resolves to what Argo CD compared against: the trap `sync` avoids.
                result["revision"] = sync.get("revision") or compared.get("revision") or ""
            state["finishedAt"] = finished
            state["syncResult"] = result
            if behaviour.fail:
                state["phase"] = "Failed"
                state["message"] = "(simulated) one or more objects failed to apply"
            else:
                state["phase"] = "Succeeded"
                state["message"] = "(simulated) successfully synced (all tasks run)"
                status["sync"] = {"status": "Synced", **result}
                status["health"] = {
                    "status": "Progressing",
                    "message": "(simulated) waiting for rollout to finish",
                }
            status["reconciledAt"] = finished
            app.pop("operation", None)
            outcome.update(phase=state["phase"], behaviour=behaviour, result=result)
            return app

        stored = self._update(name, change)
        if stored is None:
            return
        result = outcome["result"]
        self.events.write(
            "sync-finish",
            app=name,
            cluster=self._cluster_name(stored),
            when=now,
            phase=outcome["phase"],
            revision=",".join(result.get("revisions") or [result.get("revision", "")]),
        )
        if outcome["phase"] == "Succeeded":
            self._arm("settle", name, token, outcome["behaviour"].health_seconds)

    def _settle(self, name: str, token: str) -> None:
        now = self.clock.now()
        health: dict[str, str] = {}

        def change(app: dict[str, Any]) -> dict[str, Any] | None:
            state = appsync.operation_state(app)
            status = app.get("status") or {}
            if (
                state is None
                or str(state.get("startedAt")) != token
                or state.get("phase") != "Succeeded"
                or (status.get("health") or {}).get("status") != "Progressing"
            ):
                return None
            finished = parse_time(state.get("finishedAt")) or now
            # reconciledAt must not be before finishedAt even with a clock that goes backwards.
            reconciled = max(now, finished)
            if self._behaviour(app).degrade:
                status["health"] = {"status": "Degraded", "message": "(simulated) 0 of 3 replicas available"}
            else:
                status["health"] = {"status": "Healthy"}
            status["reconciledAt"] = format_time(reconciled)
            health.update(status["health"])
            return app

        stored = self._update(name, change)
        if stored is None:
            return
        self.events.write(health["status"].lower(), app=name, cluster=self._cluster_name(stored), when=now)

    # -- clusters and behaviour ---------------------------------------------------------------

    def _refresh_clusters(self) -> None:
        # Through the adapter's cluster Secret reader (it never decodes data.config); of the rest
        # only the metadata's annotations are kept.
        items, _ = self.kube.list(SECRETS, self.namespace, label_selector=CLUSTER_SECRET_LABEL)
        clusters = {}
        for item in items:
            secret = cluster_secret_from_object(item)
            name = secret.name or secret.secret_name
            annotations = dict((item.get("metadata") or {}).get("annotations") or {})
            clusters[name] = _ClusterInfo(name, secret.server.rstrip("/"), annotations)
        self._clusters = clusters
        self._clusters_read_at = time.monotonic()

    def _find_cluster(self, server: str, name: str) -> _ClusterInfo | None:
        # Argo CD's rule, as the planner's: destination.server first, else destination.name.
        if server:
            by_server = next((c for c in self._clusters.values() if c.server == server), None)
            if by_server is not None:
                return by_server
        return self._clusters.get(name) if name else None

    def _cluster_of(self, app: Mapping[str, Any]) -> _ClusterInfo | None:
        destination = (app.get("spec") or {}).get("destination") or {}
        server = str(destination.get("server") or "").rstrip("/")
        name = str(destination.get("name") or "")
        found = self._find_cluster(server, name)
        if found is None or time.monotonic() - self._clusters_read_at > CLUSTER_CACHE_SECONDS:
            # Unknown destination, or annotations that may have changed: read the Secrets again.
            self._refresh_clusters()
            found = self._find_cluster(server, name)
        return found

    def _cluster_name(self, app: Mapping[str, Any]) -> str:
        cluster = self._cluster_of(app)
        if cluster is not None:
            return cluster.name
        destination = (app.get("spec") or {}).get("destination") or {}
        return str(destination.get("name") or destination.get("server") or "")

    def _behaviour(self, app: Mapping[str, Any]) -> Behaviour:
        cluster = self._cluster_of(app)
        name = cluster.name if cluster else self._cluster_name(app)
        try:
            return self.config.behaviour_for(
                name,
                secret_annotations=cluster.annotations if cluster else None,
                app_annotations=appsync.app_annotations(app),
                app=appsync.app_name(app),
            )
        except ConfigError as exc:
            log.warning("simulator: %s; using the file's behaviour for %s", exc, name)
            return self.config.behaviour_for(name)


# --- seeding a fleet -------------------------------------------------------------------------


@dataclass(frozen=True)
class SeededCluster:
    """One simulated cluster."""

    name: str
    server: str
    region: str
    zone: str


@dataclass(frozen=True)
class SeedResult:
    """What `seed_fleet` created (or found already there)."""

    clusters: tuple[SeededCluster, ...]
    app_set: str
    app_set_uid: str
    applications: tuple[str, ...]
    created: int
    existing: int


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def seed_clusters(count: int, regions: Sequence[str], zones_per_region: int = 3) -> list[SeededCluster]:
    """`count` clusters spread round-robin over regions, then zones a, b, c... within each region."""
    if count < 1:
        raise ValueError("--clusters must be at least 1")
    if not regions:
        raise ValueError("--regions needs at least one region")
    clusters = []
    for index in range(count):
        region = regions[index % len(regions)]
        zone = f"{region}{'abcdefghij'[(index // len(regions)) % zones_per_region]}"
        name = f"cells-{index + 1}-{zone}"
        clusters.append(SeededCluster(name, f"https://{name}.clusters.example.test", region, zone))
    return clusters


def seed_fleet(
    kube: Kube,
    namespace: str,
    *,
    clusters: int,
    regions: Sequence[str],
    revision: str,
    previous_revision: str = "0000000000000000000000000000000000000000",
    app_set: str = "myservice",
    env: str = "prod",
    zones_per_region: int = 3,
    now: datetime | None = None,
) -> SeedResult:
    """Create cluster Secrets, an ApplicationSet and one Application per cluster, owned by it.

    The Applications are OutOfSync at `revision` (what Argo CD compared against) and Healthy at
    `previous_revision`, with automated sync off. Half name their cluster by `destination.server`
    and half by `destination.name` (both forms are common). Objects that exist already are kept.
    """
    if not revision:
        raise ValueError("--revision is empty: the fleet needs a release revision to be OutOfSync at")
    now = now or SystemClock().now()
    created = existing = 0
    fleet = seed_clusters(clusters, regions, zones_per_region)

    def create(resource: Any, body: dict[str, Any]) -> dict[str, Any]:
        nonlocal created, existing
        try:
            obj = kube.create(resource, namespace, body)
            created += 1
            return obj
        except AlreadyExists:
            existing += 1
            return kube.get(resource, namespace, body["metadata"]["name"])

    for cluster in fleet:
        create(
            SECRETS,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {
                    "name": f"cluster-{cluster.name}",
                    "labels": {
                        CLUSTER_SECRET_TYPE_LABEL: CLUSTER_SECRET_TYPE,
                        "region": cluster.region,
                        "zone": cluster.zone,
                        "env": env,
                    },
                },
                "data": {
                    "name": _b64(cluster.name),
                    "server": _b64(cluster.server),
                    # A stand-in for the credentials; nothing in progressive-sync ever reads it.
                    "config": _b64('{"bearerToken": "simulated-not-a-secret"}'),
                },
            },
        )
    template_source = {
        "repoURL": "https://git.example.test/myservice.git",
        "path": "deploy",
        "targetRevision": "main",
    }
    app_set_obj = create(
        APPLICATION_SETS,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "ApplicationSet",
            "metadata": {"name": app_set},
            "spec": {
                "generators": [{"clusters": {"selector": {}}}],
                "template": {
                    "metadata": {"name": f"{app_set}-{{{{name}}}}"},
                    "spec": {
                        "project": "default",
                        "source": template_source,
                        "destination": {"server": "{{server}}", "namespace": app_set},
                    },
                },
            },
        },
    )
    uid = str(app_set_obj["metadata"]["uid"])
    names = []
    earlier = format_time(now - timedelta(hours=1))
    for index, cluster in enumerate(fleet):
        destination = {"server": cluster.server} if index % 2 == 0 else {"name": cluster.name}
        name = f"{app_set}-{cluster.name}"
        names.append(name)
        create(
            APPLICATIONS,
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Application",
                "metadata": {
                    "name": name,
                    "ownerReferences": [
                        {
                            "apiVersion": "argoproj.io/v1alpha1",
                            "kind": "ApplicationSet",
                            "name": app_set,
                            "uid": uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {
                    "project": "default",
                    "source": template_source,
                    "destination": {**destination, "namespace": app_set},
                    "syncPolicy": {},
                },
                "status": {
                    "sync": {"status": "OutOfSync", "revision": revision},
                    "health": {"status": "Healthy"},
                    "reconciledAt": format_time(now),
                    "operationState": {
                        "operation": {
                            "sync": {"revision": previous_revision},
                            "initiatedBy": {"username": "seed"},
                        },
                        "phase": "Succeeded",
                        "startedAt": earlier,
                        "finishedAt": earlier,
                        "syncResult": {"revision": previous_revision},
                    },
                },
            },
        )
    return SeedResult(tuple(fleet), app_set, uid, tuple(names), created, existing)
