"""What Argo CD's controllers do next to one Application: pure decisions, one write at a time.

`next_step(app, world, now, timeline)` returns the next write the simulated controllers make (a
`Step`: the whole Application as it must be stored, the events it stands for, and how to recognise it
on the server) or, when nothing is due yet, when to look again. The controller loop
(`appcontroller`) writes the step, then asks again: the writes come one by one, in Argo CD's order
(controller/appcontroller.go `processRequestedAppOperation`, `processAppRefreshQueueItem`,
controller/sync.go `SyncAppState`, applicationset_controller.go `createOrUpdateInCluster`):

1. the ApplicationSet controller rewrites annotations and labels (when switched on);
2. the resources finalizer of an Application being deleted is removed (`deletionSeconds` later);
3. the operation (only while `.operation` is set, as the real operation queue):
   pick-up `{operation, phase: Running, startedAt}` -> blocked by a sync window of the AppProject
   or the `syncWindow` behaviour ("Sync operation blocked by sync window", stays Running) ->
   "one or more tasks are running" with `syncResult.revision` resolved to the full SHA ->
   Succeeded / Failed / Error with `finishedAt` and `.operation` removed; with `operation.retry`
   a failed attempt is Running with `finishedAt` and `retryCount`, then "Retrying operation.
   Attempt #N"; `phase: Terminating` -> Failed "Operation terminated" (also while a deny window
   holds it: v3.6's SyncAppState skips the window check for a terminate);
4. the refresh annotation -> a comparison now, the annotation removed;
5. after an operation: the comparison (`status.sync` at the resolved revision, health Progressing,
   `reconciledAt`), `staleSeconds` late with the stale in-between state before it;
6. health settles (`healthSeconds` after that comparison), a Degraded recovers (`recoverSeconds`);
   these do not move `reconciledAt` (Argo CD's CompareWithRecent);
7. the periodic comparison (`refreshSeconds` after `reconciledAt`, spread per Application).

Durations are measured from when the simulator first saw a state (`Timeline`); timestamps written are
whole seconds, as metav1.Time. Nothing here talks to the API server.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from orchestrator.core.clock import format_time, parse_time
from orchestrator.simulator.appset import ClusterParams, desired_metadata, owner_app_set
from orchestrator.simulator.config import Behaviour, Health, SyncWindow
from orchestrator.simulator.git import GitRefs, UnresolvableRevision
from orchestrator.simulator.windows import Window, can_sync

REFRESH_ANNOTATION = "argocd.argoproj.io/refresh"
RESOURCES_FINALIZER = "resources-finalizer.argocd.argoproj.io"
COMPLETED = frozenset({"Succeeded", "Failed", "Error"})

MSG_RUNNING = "one or more tasks are running"
MSG_SUCCEEDED = "successfully synced (all tasks run)"
MSG_FAILED = "one or more objects failed to apply"
MSG_ERROR = "rpc error: code = Unavailable desc = connection refused (simulated repo-server outage)"
MSG_BLOCKED = "Sync operation blocked by sync window"
MSG_TERMINATED = "Operation terminated"

# Argo CD's retry defaults (pkg/apis/application/v1alpha1: DefaultSyncRetry*).
RETRY_DURATION_SECONDS = 5.0
RETRY_FACTOR = 2.0
RETRY_MAX_DURATION_SECONDS = 180.0
REVISION_HISTORY_LIMIT = 10
# How often a blocked or hung operation is looked at again (a window may be lifted by an annotation).
RECHECK_SECONDS = 1.0

Path = tuple[str, ...]


# --- inputs and outputs ------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """Everything a decision reads besides the Application: its cluster's behaviour and parameters,
    the simulated Git repository, the ApplicationSet that owns it, the controller's flags."""

    behaviour: Behaviour
    cluster: ClusterParams | None = None
    git: GitRefs = field(default_factory=lambda: GitRefs({}))
    app_set: Mapping[str, Any] | None = None
    preserved_annotations: tuple[str, ...] = ()
    preserved_labels: tuple[str, ...] = ()
    # The sync windows of the Application's AppProject (or why they do not parse).
    sync_windows: tuple[Window, ...] = ()
    windows_error: str = ""


@dataclass(frozen=True)
class Event:
    """One line of the events log: its name and its own keys."""

    name: str
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One write: the Application as it must be stored (it carries the resourceVersion it was decided
    on), the events it stands for, the paths whose stored values prove it landed (an answer can be
    lost), and the moments to remember once it has."""

    name: str
    app: dict[str, Any]
    events: tuple[Event, ...]
    proof: tuple[tuple[Path, Any], ...]
    marks: tuple[str, ...] = ()

    def landed_in(self, stored: Mapping[str, Any]) -> bool:
        """True when the stored object shows this write (compared on the proof paths)."""
        return all(get_path(stored, path) == value for path, value in self.proof)


@dataclass(frozen=True)
class Decision:
    """The next write, or when to look at the Application again (None: only when it changes)."""

    step: Step | None = None
    wake_at: datetime | None = None


class Timeline:
    """When the simulator first saw each state of each Application (its memory of durations).

    Not thread-safe: the controller's one worker owns it. Forgets the oldest entries past `limit`.
    """

    def __init__(self, limit: int = 20000) -> None:
        self._seen: dict[str, datetime] = {}
        self._limit = limit

    def first(self, key: str, now: datetime) -> datetime:
        """When `key` was first seen (now, if this is the first time)."""
        if key not in self._seen:
            if len(self._seen) >= self._limit:
                for old in list(self._seen)[: self._limit // 2]:
                    del self._seen[old]
            self._seen[key] = now
        return self._seen[key]

    def mark(self, key: str, when: datetime) -> None:
        """Remember that `key` happened at `when` (kept if already known)."""
        self.first(key, when)

    def knows(self, key: str) -> bool:
        """True when `key` was seen or marked."""
        return key in self._seen


# --- small readers -------------------------------------------------------------------------------


def get_path(obj: Mapping[str, Any], path: Path) -> Any:
    """The value at `path` (None when any part is missing)."""
    value: Any = obj
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _name(app: Mapping[str, Any]) -> str:
    return str((app.get("metadata") or {}).get("name", ""))


def _state(app: Mapping[str, Any]) -> dict[str, Any] | None:
    value = (app.get("status") or {}).get("operationState")
    return value if isinstance(value, dict) and value else None


def _operation(app: Mapping[str, Any]) -> dict[str, Any] | None:
    value = app.get("operation")
    return value if isinstance(value, dict) and value else None


def _multi_source(app: Mapping[str, Any]) -> bool:
    return bool((app.get("spec") or {}).get("sources"))


def _sources(app: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = app.get("spec") or {}
    if spec.get("sources"):
        return [dict(source) for source in spec["sources"]]
    return [dict(spec.get("source") or {})]


def _fingerprint(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _info(op: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(entry.get("name")): str(entry.get("value", ""))
        for entry in op.get("info") or []
        if isinstance(entry, Mapping)
    }


def _initiator(op: Mapping[str, Any]) -> str:
    by = op.get("initiatedBy") or {}
    return str(by.get("username") or ("automated" if by.get("automated") else "unknown"))


def _pins(op: Mapping[str, Any]) -> list[str]:
    sync = op.get("sync") or {}
    return [str(r) for r in sync.get("revisions") or []] or [str(sync.get("revision") or "")]


def _result_revisions(result: Mapping[str, Any] | None) -> list[str]:
    if not result:
        return []
    return [str(r) for r in result.get("revisions") or []] or (
        [str(result["revision"])] if result.get("revision") else []
    )


def _sync_options(op: Mapping[str, Any]) -> list[str]:
    return [str(option) for option in (op.get("sync") or {}).get("syncOptions") or []]


def _kitchen(when: datetime) -> str:
    """Go's time.Kitchen ("3:04PM"), which Argo CD's retry message uses."""
    return f"{(when.hour % 12) or 12}:{when.minute:02d}{'AM' if when.hour < 12 else 'PM'}"


def _seconds(value: Any, default: float) -> float:
    """A retry backoff duration as Argo CD parses it: a bare number is seconds, else a Go duration."""
    if value in (None, ""):
        return default
    text = str(value).strip()
    try:
        return float(int(text))
    except ValueError:
        pass
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    index = 0
    while index < len(text):
        char = text[index]
        if char.isdigit() or char == ".":
            number += char
            index += 1
            continue
        unit = "ms" if text[index : index + 2] == "ms" else char
        if unit not in units or not number:
            return default
        total += float(number) * units[unit]
        number = ""
        index += len(unit)
    return total if not number else default


def next_retry_at(retry: Mapping[str, Any], last_attempt: datetime, retry_count: int) -> datetime:
    """Argo CD's `RetryStrategy.NextRetryAt`: duration * factor^retryCount, capped at maxDuration."""
    backoff = retry.get("backoff") or {}
    duration = _seconds(backoff.get("duration"), RETRY_DURATION_SECONDS)
    max_duration = _seconds(backoff.get("maxDuration"), RETRY_MAX_DURATION_SECONDS)
    factor = float(backoff["factor"]) if backoff.get("factor") is not None else RETRY_FACTOR
    wait = duration * math.pow(factor, retry_count)
    if max_duration > 0:
        wait = min(max_duration, wait)
    return last_attempt + timedelta(seconds=wait)


def _retries_left(op: Mapping[str, Any], retry_count: int) -> bool:
    limit = int((op.get("retry") or {}).get("limit") or 0)
    return limit < 0 or retry_count < limit


def _new_app(app: Mapping[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(dict(app))
    new.setdefault("status", {})
    return new


def _health_event(status: str) -> str:
    return status.lower()


# --- comparison (status.sync, health, resources) ---------------------------------------------------


def _applied(app: Mapping[str, Any]) -> list[str] | None:
    """The revision(s) live in the cluster: the last Succeeded operation's, else what a comparison
    last found Synced; None when unknown (a failed sync may have applied part of anything)."""
    state = _state(app)
    if state and state.get("phase") == "Succeeded" and _result_revisions(state.get("syncResult")):
        return _result_revisions(state.get("syncResult"))
    sync = (app.get("status") or {}).get("sync") or {}
    if sync.get("status") == "Synced":
        return [str(r) for r in sync.get("revisions") or []] or [str(sync.get("revision") or "")]
    return None


def _head(app: Mapping[str, Any], git: GitRefs, *, after_sync: bool = False) -> list[str]:
    """What the Application is compared against: its sources' targetRevisions resolved in the
    repository; without a repository, what a sync just applied (`after_sync`), else the revision(s)
    its status already names, else what is live."""
    if git.exists:
        return [git.resolve_source(source) for source in _sources(app)]
    if after_sync and (applied := _applied(app)):
        return applied
    sync = (app.get("status") or {}).get("sync") or {}
    named = [str(r) for r in sync.get("revisions") or []] or (
        [str(sync["revision"])] if sync.get("revision") else []
    )
    return named or (_applied(app) or [])


def _orphan_live(app: Mapping[str, Any], behaviour: Behaviour) -> bool:
    """The resource the release removed is still in the cluster (prune off)."""
    if not behaviour.removed_resource:
        return False
    state = _state(app)
    if state and state.get("phase") == "Succeeded":
        return not bool(((state.get("operation") or {}).get("sync") or {}).get("prune"))
    return any(r.get("requiresPruning") for r in (app.get("status") or {}).get("resources") or [])


def _resources(app: Mapping[str, Any], synced: bool, health: str, orphan: bool) -> list[dict[str, Any]]:
    namespace = str(((app.get("spec") or {}).get("destination") or {}).get("namespace") or "")
    name = _name(app)
    resources: list[dict[str, Any]] = []
    if orphan:
        resources.append(
            {
                "version": "v1",
                "kind": "ConfigMap",
                "namespace": namespace,
                "name": f"{name}-removed",
                "status": "OutOfSync",
                "requiresPruning": True,
            }
        )
    resources.append(
        {
            "group": "apps",
            "version": "v1",
            "kind": "Deployment",
            "namespace": namespace,
            "name": name,
            "status": "Synced" if synced else "OutOfSync",
            "health": {"status": health},
        }
    )
    return resources


def _compare(
    app: Mapping[str, Any],
    world: World,
    now: datetime,
    *,
    health: str | None = None,
    after_sync: bool = False,
) -> dict[str, Any]:
    """The status a full comparison writes (CompareWithLatest): sync, health, resources, reconciledAt."""
    status = dict(app.get("status") or {})
    spec = app.get("spec") or {}
    comparedTo: dict[str, Any] = {"destination": dict(spec.get("destination") or {})}
    if _multi_source(app):
        comparedTo["sources"] = _sources(app)
    else:
        comparedTo["source"] = _sources(app)[0]
    current_health = dict(status.get("health") or {})
    new_health = health or str(current_health.get("status") or "Healthy")
    try:
        head = _head(app, world.git, after_sync=after_sync)
    except UnresolvableRevision as exc:
        # Argo CD: a ComparisonError condition, sync and health Unknown.
        status["sync"] = {"status": "Unknown", "comparedTo": comparedTo}
        status["health"] = _health_value(current_health, "Unknown", now)
        status["conditions"] = [
            {"type": "ComparisonError", "message": str(exc), "lastTransitionTime": format_time(now)}
        ]
        status["reconciledAt"] = format_time(now)
        return status
    orphan = _orphan_live(app, world.behaviour)
    missing = new_health == Health.MISSING.value
    live_matches = _applied(app) == head and not missing
    synced = live_matches and not orphan
    sync: dict[str, Any] = {"status": "Synced" if synced else "OutOfSync", "comparedTo": comparedTo}
    if _multi_source(app):
        sync["revisions"] = head
    else:
        sync["revision"] = head[0] if head else ""
    status["sync"] = sync
    status["health"] = _health_value(current_health, new_health, now)
    status["resources"] = _resources(app, live_matches, new_health, orphan)
    status.pop("conditions", None)
    status["reconciledAt"] = format_time(now)
    return status


_HEALTH_MESSAGES = {
    "Degraded": "Deployment has exceeded its progress deadline (simulated)",
    "Suspended": "Rollout is paused at a canary step (simulated)",
    "Missing": "Deployment is missing (simulated)",
}


def _health_value(current: Mapping[str, Any], status: str, now: datetime) -> dict[str, Any]:
    """Argo CD's AppHealthStatus: lastTransitionTime moves only when the status changes."""
    if current.get("status") == status:
        return dict(current)
    value: dict[str, Any] = {"status": status, "lastTransitionTime": format_time(now)}
    if status in _HEALTH_MESSAGES:
        value["message"] = _HEALTH_MESSAGES[status]
    return value


# --- the decision ----------------------------------------------------------------------------------


def next_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    """The next write of Argo CD's controllers for this Application, or when to look again."""
    wakes: list[datetime] = []
    for decide in (_app_set_step, _deletion_step, _operation_step, _refresh_step, _post_sync_step):
        decision = decide(app, world, now, timeline)
        if decision.step is not None:
            return decision
        if decision.wake_at is not None:
            wakes.append(decision.wake_at)
            if decide is _post_sync_step:
                # The comparison after a sync is pending (the stale state): health and the periodic
                # comparison come after it.
                return Decision(wake_at=min(wakes))
    for decide in (_health_step, _periodic_step):
        decision = decide(app, world, now, timeline)
        if decision.step is not None:
            return decision
        if decision.wake_at is not None:
            wakes.append(decision.wake_at)
    return Decision(wake_at=min(wakes) if wakes else None)


def _compared_after_sync(app: Mapping[str, Any], state: Mapping[str, Any], timeline: Timeline) -> bool:
    """True once the comparison after this operation was written (by this simulator, or before it
    started: reconciledAt not before finishedAt)."""
    name, started = _name(app), str(state.get("startedAt") or "")
    if timeline.knows(f"compared:{name}:{started}"):
        return True
    if timeline.knows(f"finished:{name}:{started}"):
        return False
    finished = parse_time(state.get("finishedAt"))
    reconciled = parse_time((app.get("status") or {}).get("reconciledAt"))
    return finished is not None and reconciled is not None and reconciled >= finished


def _app_set_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    if not world.behaviour.app_set_controller or world.app_set is None or world.cluster is None:
        return Decision()
    if owner_app_set(app) != str((world.app_set.get("metadata") or {}).get("name")):
        return Decision()
    annotations, labels = desired_metadata(
        app,
        world.app_set,
        world.cluster,
        preserved_annotations=world.preserved_annotations,
        preserved_labels=world.preserved_labels,
    )
    metadata = app.get("metadata") or {}
    current_annotations = dict(metadata.get("annotations") or {})
    current_labels = dict(metadata.get("labels") or {})
    if annotations == current_annotations and labels == current_labels:
        return Decision()
    new = _new_app(app)
    new["metadata"]["annotations"] = annotations
    new["metadata"]["labels"] = labels
    removed = sorted(set(current_annotations) - set(annotations)) + sorted(
        f"label:{key}" for key in set(current_labels) - set(labels)
    )
    changed = sorted(
        key
        for key in annotations
        if key in current_annotations and annotations[key] != current_annotations[key]
    )
    return Decision(
        Step(
            "appset-rewrite",
            new,
            (Event("appset-rewrite", {"removed": removed, "changed": changed}),),
            ((("metadata", "annotations"), annotations or None), (("metadata", "labels"), labels or None)),
        )
    )


def _deletion_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    metadata = app.get("metadata") or {}
    finalizers = list(metadata.get("finalizers") or [])
    if not metadata.get("deletionTimestamp") or _operation(app) is not None:
        return Decision()
    ours = [f for f in finalizers if f.startswith(RESOURCES_FINALIZER)]
    if not ours:
        return Decision()
    due = timeline.first(f"deleting:{_name(app)}:{metadata.get('uid')}", now) + timedelta(
        seconds=world.behaviour.deletion_seconds
    )
    if now < due:
        return Decision(wake_at=due)
    new = _new_app(app)
    remaining = [f for f in finalizers if f not in ours]
    new["metadata"]["finalizers"] = remaining
    return Decision(
        Step(
            "finalize",
            new,
            (Event("finalized", {"finalizers": ours}),),
            ((("metadata", "finalizers"), remaining or None),),
        )
    )


def _operation_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    op = _operation(app)
    if op is None:
        return Decision()
    state = _state(app)
    if state is None or state.get("phase") in COMPLETED:
        return _pick_up(app, op, world, now, timeline)
    return _run(app, state, world, now, timeline)


def _pick_up(
    app: Mapping[str, Any], op: dict[str, Any], world: World, now: datetime, timeline: Timeline
) -> Decision:
    due = timeline.first(f"requested:{_name(app)}:{_fingerprint(op)}", now) + timedelta(
        seconds=world.behaviour.pick_up_seconds
    )
    if now < due:
        return Decision(wake_at=due)
    started = format_time(now)
    new = _new_app(app)
    new["status"]["operationState"] = {
        "operation": copy.deepcopy(op),
        "phase": "Running",
        "startedAt": started,
    }
    event = Event(
        "sync-start",
        {"revision": ",".join(_pins(op)), "initiatedBy": _initiator(op), "info": _info(op)},
    )
    proof = (
        (("status", "operationState", "startedAt"), started),
        (("status", "operationState", "operation"), op),
    )
    return Decision(Step("pick-up", new, (event,), proof))


def _window_message(app: Mapping[str, Any], op: Mapping[str, Any], world: World, now: datetime) -> str | None:
    """Argo CD's `syncWindowPreventsSync`: the Running message when a window holds the sync, else
    None. The windows are the AppProject's and the cluster's `syncWindow` behaviour."""
    manual = not bool((op.get("initiatedBy") or {}).get("automated"))
    behaviour = world.behaviour
    if world.windows_error:
        return f"{MSG_BLOCKED}: invalid sync windows: {world.windows_error}"
    if behaviour.sync_window == SyncWindow.DENY and not (manual and behaviour.sync_window_manual_sync):
        return MSG_BLOCKED
    if not can_sync(world.sync_windows, app, now, manual=manual):
        return MSG_BLOCKED
    return None


def _initial_result(app: Mapping[str, Any], op: Mapping[str, Any]) -> dict[str, Any]:
    """`newSyncOperationResult`: the revision as requested (not resolved yet) and the sources."""
    sync = op.get("sync") or {}
    result: dict[str, Any] = {"revision": str(sync.get("revision") or "")}
    if _multi_source(app):
        result["sources"] = _sources(app)
        result["revisions"] = [str(r) for r in sync.get("revisions") or []]
    else:
        result["source"] = _sources(app)[0]
    return result


def _resolve(app: Mapping[str, Any], op: Mapping[str, Any], git: GitRefs) -> list[str]:
    """The full SHA(s) the operation syncs to (a chart version for a Helm chart source); an empty pin
    means what targetRevision resolves to."""
    sync = op.get("sync") or {}
    sources = _sources(app)
    if _multi_source(app):
        pins = [str(r) for r in sync.get("revisions") or []] or [""] * len(sources)
    else:
        pins = [str(sync.get("revision") or "")]
    if not git.exists:
        compared = _head(app, git)
        return [pin or (compared[index] if index < len(compared) else "") for index, pin in enumerate(pins)]
    return [
        git.resolve_source(sources[index] if index < len(sources) else {}, pin)
        for index, pin in enumerate(pins)
    ]


def _with_revisions(result: dict[str, Any], app: Mapping[str, Any], revisions: list[str]) -> dict[str, Any]:
    result = dict(result)
    if _multi_source(app):
        result["revisions"] = revisions
        result["revision"] = ""
    else:
        result["revision"] = revisions[0] if revisions else ""
    return result


def _attempt_outcome(
    op: Mapping[str, Any], state: Mapping[str, Any], behaviour: Behaviour, app: Mapping[str, Any]
) -> tuple[str, str]:
    """(phase, message) of one sync attempt."""
    if behaviour.error:
        return "Error", MSG_ERROR
    options = _sync_options(op)
    missing = [option for option in behaviour.require_sync_options if option not in options]
    if missing:
        namespace = ((app.get("spec") or {}).get("destination") or {}).get("namespace") or "default"
        reason = (
            f'namespaces "{namespace}" not found'
            if any(option.startswith("CreateNamespace") for option in missing)
            else f"the objects need the sync option(s) {', '.join(missing)} (simulated)"
        )
        return "Failed", f"{MSG_FAILED}, reason: {reason}"
    retry_count = int(state.get("retryCount") or 0)
    if behaviour.fail or retry_count < behaviour.fail_attempts:
        return "Failed", f'{MSG_FAILED}, reason: Deployment.apps "{_name(app)}" is invalid (simulated)'
    return "Succeeded", MSG_SUCCEEDED


@dataclass(frozen=True)
class _Running:
    """A Running (or Terminating) operation as read, and how to write its next state."""

    app: Mapping[str, Any]
    state: Mapping[str, Any]
    now: datetime

    @property
    def op(self) -> dict[str, Any]:
        return dict(self.state.get("operation") or {})

    @property
    def started(self) -> str:
        return str(self.state.get("startedAt") or "")

    @property
    def retry_count(self) -> int:
        return int(self.state.get("retryCount") or 0)

    @property
    def result(self) -> dict[str, Any]:
        return dict(self.state.get("syncResult") or _initial_result(self.app, self.op))

    def write(
        self, name: str, changes: Mapping[str, Any], events: tuple[Event, ...], *, done: bool = False
    ) -> Decision:
        """The operation state with `changes` (None removes a key); `done` also removes `.operation`."""
        new = _new_app(self.app)
        new_state = dict(self.state)
        for key, value in changes.items():
            if value is None:
                new_state.pop(key, None)
            else:
                new_state[key] = value
        new["status"]["operationState"] = new_state
        proof: list[tuple[Path, Any]] = [(("status", "operationState", "startedAt"), self.started)]
        proof += [(("status", "operationState", key), value) for key, value in changes.items()]
        marks: tuple[str, ...] = ()
        if done:
            new.pop("operation", None)
            proof.append((("operation",), None))
            marks = (f"finished:{_name(self.app)}:{self.started}",)
        return Decision(Step(name, new, events, tuple(proof), marks))

    def finish(
        self, outcome: str, message: str, revisions: list[str], *, terminated: bool = False
    ) -> Decision:
        """End the attempt: a retry when Argo CD has retries left, else the operation's end."""
        result = _with_revisions(self.result, self.app, revisions) if revisions else self.result
        now, retry_count = self.now, self.retry_count
        if outcome in ("Failed", "Error") and not terminated and _retries_left(self.op, retry_count):
            count = retry_count + 1
            retry_at = next_retry_at(self.op.get("retry") or {}, now, retry_count)
            return self.write(
                "sync-attempt-failed",
                {
                    "phase": "Running",
                    "message": f"{message}. Retrying attempt #{count} at {_kitchen(retry_at)}.",
                    "finishedAt": format_time(now),
                    "retryCount": count,
                    "syncResult": result,
                },
                (Event("sync-attempt-failed", {"phase": outcome, "retryCount": count, "message": message}),),
            )
        if retry_count > 0 and outcome != "Succeeded":
            message = f"{message} (retried {retry_count} times)."
        event = Event(
            "sync-finish",
            {
                "phase": outcome,
                "revision": ",".join(_result_revisions(result)),
                "message": message,
                "retryCount": retry_count,
                "terminated": terminated,
            },
        )
        changes = {"phase": outcome, "message": message, "finishedAt": format_time(now), "syncResult": result}
        decision = self.write("sync-finish", changes, (event,), done=True)
        if outcome == "Succeeded" and decision.step is not None:
            _record_history(decision.step.app, self.state, result, now)
        return decision


def _run(
    app: Mapping[str, Any], state: dict[str, Any], world: World, now: datetime, timeline: Timeline
) -> Decision:
    """A Running (or Terminating) operation: window, terminate, retry wait, attempt, finish."""
    running = _Running(app, state, now)
    op, behaviour = running.op, world.behaviour
    phase = str(state.get("phase") or "")
    if phase == "Terminating":
        # Before the window: a terminate is never held by a sync window (v3.6 SyncAppState checks
        # the window only when the phase is not Terminating; it used to, and stayed Terminating).
        return running.finish("Failed", MSG_TERMINATED, [], terminated=True)
    blocked = _window_message(app, op, world, now)
    if blocked is not None:
        if phase == "Running" and state.get("message") != blocked:
            return running.write(
                "sync-blocked",
                {"message": blocked, "syncResult": running.result},
                (Event("sync-blocked", {"message": blocked}),),
            )
        return Decision(wake_at=now + timedelta(seconds=RECHECK_SECONDS))
    if state.get("finishedAt"):  # Running with finishedAt: waiting for Argo CD's next retry
        finished = parse_time(state.get("finishedAt")) or now
        retry_at = next_retry_at(op.get("retry") or {}, finished, running.retry_count)
        if now < retry_at:
            return Decision(wake_at=retry_at)
        return running.write(
            "sync-retry",
            {
                "message": f"Retrying operation. Attempt #{running.retry_count}",
                "finishedAt": None,
                "syncResult": None,
            },
            (Event("sync-retry", {"attempt": running.retry_count}),),
        )
    try:
        revisions = _resolve(app, op, world.git)
    except UnresolvableRevision as exc:
        return running.finish("Error", f"ComparisonError: {exc}", [])
    attempt = timeline.first(f"attempt:{_name(app)}:{running.started}:{running.retry_count}", now)
    due = attempt + timedelta(seconds=behaviour.sync_seconds)
    resolved = _with_revisions(running.result, app, revisions)
    in_progress = behaviour.hang or now < due
    if in_progress and (state.get("message") != MSG_RUNNING or state.get("syncResult") != resolved):
        return running.write("sync-running", {"message": MSG_RUNNING, "syncResult": resolved}, ())
    if behaviour.hang:
        return Decision()  # until someone terminates it (the change wakes the controller)
    if now < due:
        return Decision(wake_at=due)
    outcome, message = _attempt_outcome(op, state, behaviour, app)
    return running.finish(outcome, message, revisions)


def _record_history(
    app: dict[str, Any], state: Mapping[str, Any], result: Mapping[str, Any], now: datetime
) -> None:
    """Append the deployment to `status.history` (Argo CD's persistRevisionHistory)."""
    status = app.setdefault("status", {})
    history = list(status.get("history") or [])
    entry: dict[str, Any] = {
        "id": (max((int(h.get("id") or 0) for h in history), default=-1) + 1),
        "deployedAt": format_time(now),
        "deployStartedAt": state.get("startedAt"),
        "initiatedBy": dict((state.get("operation") or {}).get("initiatedBy") or {}),
    }
    if result.get("revisions"):
        entry["revisions"] = list(result["revisions"])
        entry["sources"] = list(result.get("sources") or [])
    else:
        entry["revision"] = result.get("revision", "")
        entry["source"] = dict(result.get("source") or {})
    status["history"] = [*history, entry][-REVISION_HISTORY_LIMIT:]


def _refresh_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    annotations = (app.get("metadata") or {}).get("annotations") or {}
    if REFRESH_ANNOTATION not in annotations:
        return Decision()
    state = _state(app)
    if _post_sync_pending(app, state, timeline):
        # The first comparison after a sync, whoever asks for it, sees what the sync applied.
        assert state is not None
        step = _post_sync_compare(app, state, world, now)
    else:
        new = _new_app(app)
        new["status"] = _compare(app, world, now)
        sync = new["status"].get("sync") or {}
        event = Event("compared", {"status": sync.get("status"), "revision": _joined(sync)})
        step = Step("refresh", new, (event,), ((("status", "reconciledAt"), new["status"]["reconciledAt"]),))
    remaining = {k: v for k, v in annotations.items() if k != REFRESH_ANNOTATION}
    step.app["metadata"]["annotations"] = remaining
    return Decision(
        Step(
            "refresh",
            step.app,
            (*step.events, Event("refresh-consumed", {"refresh": annotations[REFRESH_ANNOTATION]})),
            ((("metadata", "annotations", REFRESH_ANNOTATION), None), *step.proof),
            step.marks,
        )
    )


def _joined(sync: Mapping[str, Any]) -> str:
    return ",".join(str(r) for r in sync.get("revisions") or []) or str(sync.get("revision") or "")


def _post_sync_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    """The comparison Argo CD requests when an operation completes (and the stale state before it)."""
    state = _state(app)
    if state is None or state.get("phase") not in COMPLETED or _operation(app) is not None:
        return Decision()
    name, started = _name(app), str(state.get("startedAt") or "")
    status = app.get("status") or {}
    finished_key = f"finished:{name}:{started}"
    if _compared_after_sync(app, state, timeline):
        return Decision()
    behaviour = world.behaviour
    seen = timeline.first(finished_key, now)
    stale_key = f"stale:{name}:{started}"
    succeeded = state.get("phase") == "Succeeded"
    if behaviour.stale_seconds > 0 and succeeded and not timeline.knows(stale_key):
        # A comparison that raced the sync: it landed in the same second as finishedAt and still saw
        # the revision applied before this sync (Synced + the old health).
        new = _new_app(app)
        history = status.get("history") or []
        previous = str(history[-2].get("revision") or "") if len(history) >= 2 else ""
        if previous and not _multi_source(app):
            new["status"]["sync"] = {
                **dict(status.get("sync") or {}),
                "status": "Synced",
                "revision": previous,
            }
        new["status"]["reconciledAt"] = state.get("finishedAt")
        sync = new["status"].get("sync") or {}
        event = Event("compared", {"status": sync.get("status"), "revision": _joined(sync), "stale": True})
        proof = (
            (("status", "reconciledAt"), state.get("finishedAt")),
            (("status", "sync"), new["status"].get("sync")),
        )
        return Decision(Step("stale-compare", new, (event,), proof, (stale_key,)))
    due = seen + timedelta(seconds=behaviour.stale_seconds)
    if now < due:
        return Decision(wake_at=due)
    return Decision(_post_sync_compare(app, state, world, now))


def _post_sync_pending(app: Mapping[str, Any], state: Mapping[str, Any] | None, timeline: Timeline) -> bool:
    """An operation completed and the comparison after it has not been written yet."""
    if state is None or state.get("phase") not in COMPLETED or _operation(app) is not None:
        return False
    return not _compared_after_sync(app, state, timeline)


def _post_sync_compare(app: Mapping[str, Any], state: Mapping[str, Any], world: World, now: datetime) -> Step:
    """The comparison after an operation: a successful sync applied its revision, health Progressing."""
    name, started = _name(app), str(state.get("startedAt") or "")
    status = app.get("status") or {}
    succeeded = state.get("phase") == "Succeeded"
    new = _new_app(app)
    new["status"] = _compare(
        app, world, now, health="Progressing" if succeeded else None, after_sync=succeeded
    )
    sync = new["status"].get("sync") or {}
    events = [Event("compared", {"status": sync.get("status"), "revision": _joined(sync)})]
    if succeeded and (status.get("health") or {}).get("status") != "Progressing":
        events.append(Event("progressing"))
    proof = (
        (("status", "reconciledAt"), new["status"]["reconciledAt"]),
        (("status", "sync"), new["status"]["sync"]),
    )
    return Step(
        "compare", new, tuple(events), proof, (f"compared:{name}:{started}", f"progressing:{name}:{started}")
    )


def _health_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    """Health moving on after a sync: Progressing settles, a Degraded recovers (reconciledAt stays)."""
    state = _state(app)
    status = app.get("status") or {}
    health = str((status.get("health") or {}).get("status") or "")
    if state is None or state.get("phase") != "Succeeded" or _operation(app) is not None:
        return Decision()
    if not _compared_after_sync(app, state, timeline):
        return Decision()
    name, started = _name(app), str(state.get("startedAt") or "")
    behaviour = world.behaviour
    if health == "Progressing":
        target = behaviour.settled_health.value
        due = timeline.first(f"progressing:{name}:{started}", now) + timedelta(
            seconds=behaviour.health_seconds
        )
        key = f"settled:{name}:{started}"
    elif health == "Degraded" and behaviour.recover_seconds > 0:
        target = Health.HEALTHY.value
        due = timeline.first(f"degraded:{name}:{started}", now) + timedelta(seconds=behaviour.recover_seconds)
        key = f"recovered:{name}:{started}"
    else:
        return Decision()
    if now < due:
        return Decision(wake_at=due)
    new = _new_app(app)
    new_status = new["status"]
    new_status["health"] = _health_value(status.get("health") or {}, target, now)
    if target == Health.MISSING.value:
        # A missing resource is OutOfSync too.
        new_status["sync"] = {**dict(status.get("sync") or {}), "status": "OutOfSync"}
    for resource in new_status.get("resources") or []:
        if resource.get("kind") == "Deployment":
            resource["health"] = {"status": target}
            if target == Health.MISSING.value:
                resource["status"] = "OutOfSync"
    marks = (key, f"degraded:{name}:{started}") if target == Health.DEGRADED.value else (key,)
    proof = (
        (("status", "health", "status"), target),
        (("status", "health", "lastTransitionTime"), new_status["health"].get("lastTransitionTime")),
    )
    return Decision(Step("health", new, (Event(_health_event(target)),), proof, marks))


def _jitter(name: str, seconds: float) -> float:
    """A fixed spread per Application in [0, seconds): they refresh one by one, the same way each run."""
    return (int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF) * seconds


def _periodic_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    period = world.behaviour.refresh_seconds
    if period <= 0 or _operation(app) is not None:
        return Decision()
    reconciled = parse_time((app.get("status") or {}).get("reconciledAt"))
    due = now if reconciled is None else reconciled + timedelta(seconds=period + _jitter(_name(app), period))
    if now < due:
        return Decision(wake_at=due)
    new = _new_app(app)
    new["status"] = _compare(app, world, now)
    sync = new["status"].get("sync") or {}
    event = Event("compared", {"status": sync.get("status"), "revision": _joined(sync), "periodic": True})
    proof = ((("status", "reconciledAt"), new["status"]["reconciledAt"]), (("status", "sync"), sync))
    return Decision(Step("periodic-compare", new, (event,), proof))
