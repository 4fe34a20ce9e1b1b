"""The simulator's events log: one JSON line per transition it wrote, and the arithmetic tests and
benchmarks do on it (order and concurrency of syncs).

Each line: `event`, `app`, `cluster`, `time` (epoch seconds, float), `at` (RFC 3339, whole seconds)
and the event's own keys. The events (docs/simulator.md lists their keys):

- `sync-start`: the controller picked up an operation (its pick-up write is on the server);
- `sync-blocked`: a sync window holds the operation Running;
- `sync-attempt-failed`: an attempt failed and Argo CD will retry (Running with finishedAt set);
- `sync-retry`: a retry attempt began;
- `sync-finish`: the operation ended: `phase` Succeeded, Failed or Error (a terminated one: Failed);
- `compared`: a comparison wrote `status.sync` (`status`, `revision`, `stale` for the in-between one);
- `healthy`, `progressing`, `degraded`, `suspended`, `missing`, `unknown`: health changed to this;
- `appset-rewrite`: the ApplicationSet controller rewrote annotations/labels (`removed`, `changed`);
- `refresh-consumed`: the `argocd.argoproj.io/refresh` annotation was honoured and removed;
- `finalized`: the resources finalizer of an Application being deleted was removed.

Every event is written once per write that landed on the server, also when the answer to the write
was lost (the controller decides from what the server has).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.core.clock import format_time

log = logging.getLogger(__name__)

SETTLED = ("healthy", "degraded")


class EventsLog:
    """Appends one JSON line per simulated transition; thread-safe. Without a path it only logs."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()

    def write(self, event: str, *, app: str, cluster: str, when: datetime, **extra: Any) -> None:
        """Append one event."""
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


def sync_starts(events: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Application name -> how many operations the controller picked up for it."""
    counts: dict[str, int] = {}
    for event in events:
        if event["event"] == "sync-start":
            counts[event["app"]] = counts.get(event["app"], 0) + 1
    return counts


def max_in_flight(events: Iterable[Mapping[str, Any]]) -> int:
    """The most clusters busy at once: from their first sync start until their Applications settle
    (healthy/degraded) or their sync ends otherwise than Succeeded."""
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
