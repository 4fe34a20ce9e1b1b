"""The arithmetic tests and benchmarks do on the simulator's events log
(`orchestrator.simulator.events`): operations picked up per Application, the order clusters
started syncing, and how many were busy at once; and reading the log of a running simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.simulator.events import read_events
from tests.support.wait import wait_for

SETTLED = ("healthy", "degraded")


def logged_events(
    log: Path, until: Callable[[list[dict[str, Any]]], bool], *, what: str, timeout: float = 10.0
) -> list[dict[str, Any]]:
    """The running simulator's events, once `until` holds for them.

    The simulator logs a write's events when the API server's answer comes back, and the write is
    visible to everyone else before that: a test that saw an Application settle may read the log
    before that write's events are in it."""
    events: list[dict[str, Any]] = []

    def logged() -> bool:
        events[:] = read_events(log)
        return until(events)

    wait_for(logged, timeout=timeout, what=what)
    return events


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
