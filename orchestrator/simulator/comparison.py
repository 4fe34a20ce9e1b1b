"""Argo CD's comparison of an Application with Git, and when the simulated controller writes one.

`compare_status` is the status a full comparison writes (`status.sync`, health, resources,
`reconciledAt`: CompareWithLatest). The steps that write it, in `next_step`'s order: the refresh
annotation (`refresh_step`), the comparison after an operation with the stale state before it
(`post_sync_step`), health settling or a Degraded recovering (`health_step`, which does not move
`reconciledAt`: CompareWithRecent) and the periodic comparison (`periodic_step`). Pure decisions.

Callers: `behaviours.next_step`; `sync_operation` reads `comparison_target` (what a sync with an
empty pin resolves to when there is no repository).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from orchestrator.core.clock import format_time, parse_time
from orchestrator.simulator import application
from orchestrator.simulator.config import Behaviour, Health
from orchestrator.simulator.decision_types import Decision, Event, Step, Timeline, World
from orchestrator.simulator.git import GitRefs, UnresolvableRevision

REFRESH_ANNOTATION = "argocd.argoproj.io/refresh"
REFRESH_TIMESTAMP_ANNOTATION = "argocd.argoproj.io/refresh-timestamp"


def _applied(app: Mapping[str, Any]) -> list[str] | None:
    """The revision(s) live in the cluster: the last Succeeded operation's, else what a comparison
    last found Synced; None when unknown (a failed sync may have applied part of anything)."""
    state = application.operation_state(app)
    if state and state.get("phase") == "Succeeded" and application.result_revisions(state.get("syncResult")):
        return application.result_revisions(state.get("syncResult"))
    sync = (app.get("status") or {}).get("sync") or {}
    if sync.get("status") == "Synced":
        return [str(r) for r in sync.get("revisions") or []] or [str(sync.get("revision") or "")]
    return None


def comparison_target(app: Mapping[str, Any], git: GitRefs, *, after_sync: bool = False) -> list[str]:
    """What the Application is compared against: its sources' targetRevisions resolved in the
    repository; without a repository, what a sync just applied (`after_sync`), else the revision(s)
    its status already names, else what is live."""
    if git.exists:
        return [git.resolve_source(source) for source in application.sources(app)]
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
    state = application.operation_state(app)
    if state and state.get("phase") == "Succeeded":
        return not bool(((state.get("operation") or {}).get("sync") or {}).get("prune"))
    return any(r.get("requiresPruning") for r in (app.get("status") or {}).get("resources") or [])


def _resources(app: Mapping[str, Any], synced: bool, health: str, orphan: bool) -> list[dict[str, Any]]:
    namespace = str(((app.get("spec") or {}).get("destination") or {}).get("namespace") or "")
    name = application.name(app)
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


def compare_status(
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
    if application.is_multi_source(app):
        comparedTo["sources"] = application.sources(app)
    else:
        comparedTo["source"] = application.sources(app)[0]
    current_health = dict(status.get("health") or {})
    new_health = health or str(current_health.get("status") or "Healthy")
    try:
        head = comparison_target(app, world.git, after_sync=after_sync)
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
    if application.is_multi_source(app):
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


def _health_event(status: str) -> str:
    return status.lower()


# --- the steps that write a comparison ---------------------------------------------------------


def _compared_after_sync(app: Mapping[str, Any], state: Mapping[str, Any], timeline: Timeline) -> bool:
    """True once the comparison after this operation was written (by this simulator, or before it
    started: reconciledAt not before finishedAt)."""
    name, started = application.name(app), str(state.get("startedAt") or "")
    if timeline.knows(f"compared:{name}:{started}"):
        return True
    if timeline.knows(f"finished:{name}:{started}"):
        return False
    finished = parse_time(state.get("finishedAt"))
    reconciled = parse_time((app.get("status") or {}).get("reconciledAt"))
    return finished is not None and reconciled is not None and reconciled >= finished


def refresh_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    """The refresh annotation: a comparison now (the one after a sync if that is pending); the
    annotation and its `refresh-timestamp` removed."""
    annotations = (app.get("metadata") or {}).get("annotations") or {}
    if REFRESH_ANNOTATION not in annotations:
        return Decision()
    state = application.operation_state(app)
    if _post_sync_pending(app, state, timeline):
        # The first comparison after a sync, whoever asks for it, sees what the sync applied.
        assert state is not None
        step = _post_sync_compare(app, state, world, now)
    else:
        new = application.writable_copy(app)
        new["status"] = compare_status(app, world, now)
        sync = new["status"].get("sync") or {}
        event = Event("compared", {"status": sync.get("status"), "revision": _joined(sync)})
        step = Step("refresh", new, (event,), ((("status", "reconciledAt"), new["status"]["reconciledAt"]),))
    consumed = [key for key in (REFRESH_ANNOTATION, REFRESH_TIMESTAMP_ANNOTATION) if key in annotations]
    step.app["metadata"]["annotations"] = {k: v for k, v in annotations.items() if k not in consumed}
    return Decision(
        Step(
            "refresh",
            step.app,
            (*step.events, Event("refresh-consumed", {"refresh": annotations[REFRESH_ANNOTATION]})),
            (*((("metadata", "annotations", key), None) for key in consumed), *step.proof),
            step.marks,
        )
    )


def _joined(sync: Mapping[str, Any]) -> str:
    return ",".join(str(r) for r in sync.get("revisions") or []) or str(sync.get("revision") or "")


def post_sync_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    """The comparison Argo CD requests when an operation completes (and the stale state before it)."""
    state = application.operation_state(app)
    if (
        state is None
        or state.get("phase") not in application.COMPLETED_PHASES
        or application.requested_operation(app) is not None
    ):
        return Decision()
    name, started = application.name(app), str(state.get("startedAt") or "")
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
        new = application.writable_copy(app)
        history = status.get("history") or []
        previous = str(history[-2].get("revision") or "") if len(history) >= 2 else ""
        if previous and not application.is_multi_source(app):
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
    if (
        state is None
        or state.get("phase") not in application.COMPLETED_PHASES
        or application.requested_operation(app) is not None
    ):
        return False
    return not _compared_after_sync(app, state, timeline)


def _post_sync_compare(app: Mapping[str, Any], state: Mapping[str, Any], world: World, now: datetime) -> Step:
    """The comparison after an operation: a successful sync applied its revision, health Progressing."""
    name, started = application.name(app), str(state.get("startedAt") or "")
    status = app.get("status") or {}
    succeeded = state.get("phase") == "Succeeded"
    new = application.writable_copy(app)
    new["status"] = compare_status(
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


def health_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    """Health moving on after a sync: Progressing settles, a Degraded recovers (reconciledAt stays)."""
    state = application.operation_state(app)
    status = app.get("status") or {}
    health = str((status.get("health") or {}).get("status") or "")
    if state is None or state.get("phase") != "Succeeded" or application.requested_operation(app) is not None:
        return Decision()
    if not _compared_after_sync(app, state, timeline):
        return Decision()
    name, started = application.name(app), str(state.get("startedAt") or "")
    behaviour = world.behaviour
    if health == "Progressing":
        target = behaviour.health_after(application.result_revisions(state.get("syncResult") or {})).value
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
    new = application.writable_copy(app)
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


def periodic_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    """The timed comparison, `refreshSeconds` after `reconciledAt` plus a fixed spread per Application."""
    period = world.behaviour.refresh_seconds
    if period <= 0 or application.requested_operation(app) is not None:
        return Decision()
    reconciled = parse_time((app.get("status") or {}).get("reconciledAt"))
    due = (
        now
        if reconciled is None
        else reconciled + timedelta(seconds=period + _jitter(application.name(app), period))
    )
    if now < due:
        return Decision(wake_at=due)
    new = application.writable_copy(app)
    new["status"] = compare_status(app, world, now)
    sync = new["status"].get("sync") or {}
    event = Event("compared", {"status": sync.get("status"), "revision": _joined(sync), "periodic": True})
    proof = ((("status", "reconciledAt"), new["status"]["reconciledAt"]), (("status", "sync"), sync))
    return Decision(Step("periodic-compare", new, (event,), proof))
