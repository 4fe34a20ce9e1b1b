"""Following a few Argo CD Applications with list → watch (never sleep-and-poll).

`follow_applications` yields a snapshot of the named Applications (name -> object, None when it
does not exist) after the initial list, after every event that touches one of them, and each time a
watch window ends quietly, so the caller can look at its clock (deadlines) and at anything a watch
does not cover (the cluster Secret). The caller stops by leaving the loop; the open stream is
released when the generator is closed.

The watch resumes from the last resourceVersion it saw; 410 Gone or a dropped stream re-lists. With
one Application the watch uses `fieldSelector=metadata.name=<name>`; with several it watches the
namespace's Applications and keeps the named ones.

Callers: `steps.sync` (waiting for someone else's operation to end) and `steps.wait_healthy`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.kube.client import APPLICATIONS, Gone, Kube, Retryable

log = logging.getLogger(__name__)


class SnapshotCause(StrEnum):
    """Why a snapshot was taken."""

    LISTED = "listed"  # a (re-)list: the first snapshot, or after 410 Gone / a dropped stream
    EVENT = "event"  # a watch event touched one of the Applications
    IDLE = "idle"  # a watch window ended without events: time to look at the clock


@dataclass(frozen=True)
class Snapshot:
    """The Applications as last seen (None: it does not exist) and why this snapshot was taken."""

    apps: dict[str, dict[str, Any] | None]
    cause: SnapshotCause


def follow_applications(
    kube: Kube,
    namespace: str,
    names: Sequence[str],
    *,
    window_seconds: Callable[[], int],
) -> Generator[Snapshot, None, None]:
    """Yield snapshots of the named Applications until the caller stops iterating.

    `window_seconds()` is asked before each watch request: how long the server may keep the stream
    open without events (the caller passes the time left to its deadline, capped).
    """
    wanted = list(dict.fromkeys(names))
    field_selector = f"metadata.name={wanted[0]}" if len(wanted) == 1 else None
    while True:
        items, resource_version = kube.list(APPLICATIONS, namespace, field_selector=field_selector)
        current: dict[str, dict[str, Any] | None] = dict.fromkeys(wanted)
        for item in items:
            name = item.get("metadata", {}).get("name")
            if name in current:
                current[name] = item
        yield Snapshot(dict(current), SnapshotCause.LISTED)
        try:
            while True:
                window = max(1, int(window_seconds()))
                for event in kube.watch(
                    APPLICATIONS,
                    namespace,
                    resource_version=resource_version,
                    timeout_seconds=window,
                    field_selector=field_selector,
                ):
                    resource_version = event.resource_version or resource_version
                    name = event.object.get("metadata", {}).get("name")
                    if event.type == "BOOKMARK" or name not in current:
                        continue
                    current[name] = None if event.type == "DELETED" else event.object
                    yield Snapshot(dict(current), SnapshotCause.EVENT)
                yield Snapshot(dict(current), SnapshotCause.IDLE)
        except Gone as exc:
            log.info("watch of Applications in %s: %s; re-listing", namespace, exc)
        except Retryable as exc:
            log.warning("watch of Applications in %s dropped: %s; re-listing", namespace, exc)
