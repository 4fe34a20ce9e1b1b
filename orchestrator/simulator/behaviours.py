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

This module holds the order and steps 1-2; its parts, one job each: `decision_types` (World,
Step, Decision, Timeline), `application` (reading an Application), `sync_operation` (step 3) and
`comparison` (steps 4-7). Caller: the controller loop (`appcontroller`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from orchestrator.simulator import application
from orchestrator.simulator.appset import desired_metadata, owner_app_set
from orchestrator.simulator.comparison import health_step, periodic_step, post_sync_step, refresh_step
from orchestrator.simulator.decision_types import Decision, Event, Step, Timeline, World
from orchestrator.simulator.sync_operation import operation_step

RESOURCES_FINALIZER = "resources-finalizer.argocd.argoproj.io"


def next_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    """The next write of Argo CD's controllers for this Application, or when to look again."""
    wakes: list[datetime] = []
    for decide in (_app_set_step, _deletion_step, operation_step, refresh_step, post_sync_step):
        decision = decide(app, world, now, timeline)
        if decision.step is not None:
            return decision
        if decision.wake_at is not None:
            wakes.append(decision.wake_at)
            if decide is post_sync_step:
                # The comparison after a sync is pending (the stale state): health and the periodic
                # comparison come after it.
                return Decision(wake_at=min(wakes))
    for decide in (health_step, periodic_step):
        decision = decide(app, world, now, timeline)
        if decision.step is not None:
            return decision
        if decision.wake_at is not None:
            wakes.append(decision.wake_at)
    return Decision(wake_at=min(wakes) if wakes else None)


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
    new = application.writable_copy(app)
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
    if not metadata.get("deletionTimestamp") or application.requested_operation(app) is not None:
        return Decision()
    ours = [f for f in finalizers if f.startswith(RESOURCES_FINALIZER)]
    if not ours:
        return Decision()
    due = timeline.first(f"deleting:{application.name(app)}:{metadata.get('uid')}", now) + timedelta(
        seconds=world.behaviour.deletion_seconds
    )
    if now < due:
        return Decision(wake_at=due)
    new = application.writable_copy(app)
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
