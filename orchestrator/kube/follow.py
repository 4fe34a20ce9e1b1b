"""Following a few named objects of one resource with list → watch (never sleep-and-poll).

`follow_objects` yields a snapshot of the named objects (name -> object, None when it does not
exist) after the initial list, after every event that touches one of them, and each time a watch
window ends quietly, so the caller can look at its clock (deadlines) and at anything a watch does
not cover. The caller stops by leaving the loop; the open stream is released when the generator is
closed.

The loop is `orchestrator.kube.watchloop.WatchLoop`: a dropped or half-open stream resumes from the
last resourceVersion seen, 410 Gone re-lists, failures back off (progress resets them) and a 403,
404 or 422 is raised at once. With one name the watch uses `fieldSelector=metadata.name=<name>`;
with several it watches the namespace's objects (narrowed by `label_selector` when the caller
knows a label they share) and keeps the named ones.

Callers: `orchestrator.argocd.appwatch` (Applications), `steps.analyze` (AnalysisRuns), `steps.turn`
(a stage's records), `steps.depends` (the ProgressiveSyncs a stage waits for).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.kube.client import Forbidden, Invalid, Kube, NotFound, Resource
from orchestrator.kube.watchloop import BackoffPolicy, Changed, Listed, WatchLoop, WatchLoopSettings

# A step gives up after about half a minute of failures in a row without progress (WatchGaveUp, a
# temporary error: the Workflow's retry runs the step again); any progress starts the count afresh.
FOLLOW_BACKOFF = BackoffPolicy(delays=(0.2, 0.5, 1.0, 2.0, 4.0, 5.0), give_up_after=10)


class SnapshotCause(StrEnum):
    """Why a snapshot was taken."""

    LISTED = "listed"  # a (re-)list: the first snapshot, or after 410 Gone / a dropped stream
    EVENT = "event"  # a watch event touched one of the objects
    IDLE = "idle"  # a watch window ended without events: time to look at the clock


@dataclass(frozen=True)
class Snapshot:
    """The objects as last seen (None: it does not exist) and why this snapshot was taken."""

    objects: dict[str, dict[str, Any] | None]
    cause: SnapshotCause


def follow_objects(
    kube: Kube,
    resource: Resource,
    namespace: str,
    names: Sequence[str],
    *,
    window_seconds: Callable[[], int],
    label_selector: str | None = None,
) -> Generator[Snapshot, None, None]:
    """Yield snapshots of the named objects until the caller stops iterating.

    `window_seconds()` is asked before each watch request: how long the server may keep the stream
    open without events (the caller passes the time left to its next look at the clock, capped).
    """
    wanted = list(dict.fromkeys(names))
    field_selector = f"metadata.name={wanted[0]}" if len(wanted) == 1 else None
    loop = WatchLoop(
        kube,
        resource,
        namespace,
        settings=WatchLoopSettings(
            watch_timeout_seconds=window_seconds,
            backoff=FOLLOW_BACKOFF,
            fatal=(Forbidden, NotFound, Invalid),
        ),
        field_selector=field_selector,
        label_selector=label_selector,
        name=f"{resource.plural}@{namespace}",
    )
    current: dict[str, dict[str, Any] | None] = dict.fromkeys(wanted)
    for step in loop.run(threading.Event()):  # the caller stops by closing the generator
        if isinstance(step, Listed):
            current = dict.fromkeys(wanted)
            for item in step.items:
                name = item.get("metadata", {}).get("name")
                if name in current:
                    current[name] = item
            yield Snapshot(dict(current), SnapshotCause.LISTED)
        elif isinstance(step, Changed):
            event = step.event
            name = event.object.get("metadata", {}).get("name")
            if event.type == "BOOKMARK" or name not in current:
                continue
            current[name] = None if event.type == "DELETED" else event.object
            yield Snapshot(dict(current), SnapshotCause.EVENT)
        else:
            yield Snapshot(dict(current), SnapshotCause.IDLE)
