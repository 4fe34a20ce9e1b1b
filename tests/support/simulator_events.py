"""The arithmetic tests and benchmarks do on the simulator's events log
(`orchestrator.simulator.events`): operations picked up per Application, the order clusters
started syncing, and how many were busy at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SETTLED = ("healthy", "degraded")


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
