"""The arithmetic of bench/bench_rollout.py: percentiles, critical path, slot reactions, write counts.

The benchmark itself runs a real control plane (`make bench`); its figures are only as good as
these pure helpers, so they are tested here. The script is loaded from its file (bench/ is not a
package: `make bench` runs every file in it).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.support.bench_scripts import load_bench

bench = load_bench("bench_rollout")


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        pytest.param([3.0], 95, 3.0, id="one-value"),
        pytest.param([1.0, 2.0, 3.0, 4.0], 50, 2.5, id="median-between-ranks"),
        pytest.param(list(range(1, 101)), 95, 95.05, id="p95-of-1-to-100"),
        pytest.param([5.0, 1.0, 3.0], 0, 1.0, id="unsorted-min"),
    ],
)
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert bench.percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(bench.percentile([], 50))


@pytest.mark.parametrize(
    ("durations", "parallel", "expected"),
    [
        pytest.param([10.0] * 4, 1, 40.0, id="serial"),
        pytest.param([10.0] * 4, 2, 20.0, id="two-waves"),
        pytest.param([10.0] * 5, 2, 30.0, id="ragged-last-wave"),
        pytest.param([10.0, 1.0, 1.0, 1.0], 2, 10.0, id="short-ones-fill-the-other-slot"),
        pytest.param([10.0] * 3, 10, 10.0, id="more-slots-than-clusters"),
        pytest.param([], 3, 0.0, id="empty-stage"),
    ],
)
def test_makespan(durations: list[float], parallel: int, expected: float) -> None:
    assert bench.makespan(durations, parallel) == pytest.approx(expected)


def test_critical_path_adds_stages() -> None:
    assert bench.critical_path([([30.0], 1), ([30.0] * 4, 4), ([30.0] * 95, 23)]) == pytest.approx(
        30 + 30 + 150
    )


@pytest.mark.parametrize(
    ("syncs", "healthies", "parallel", "expected"),
    [
        pytest.param([0.0, 10.5, 21.0], [10.0, 20.0, 30.0], 1, [0.5, 1.0], id="serial"),
        pytest.param([0.0, 0.1, 10.3, 10.6], [10.0, 10.2, 20.0, 20.0], 2, [0.1, 0.4], id="two-slots"),
    ],
)
def test_slot_reactions(
    syncs: list[float], healthies: list[float], parallel: int, expected: list[float]
) -> None:
    assert bench.slot_reactions(syncs, healthies, parallel) == pytest.approx(expected)


def audit_line(
    verb: str, name: str, user: str, code: int = 200, resource: str = "applications"
) -> dict[str, Any]:
    return {
        "verb": verb,
        "user": {"username": user},
        "objectRef": {"resource": resource, "name": name},
        "responseStatus": {"code": code},
        "stageTimestamp": "2026-11-29T10:00:00.250000Z",
    }


def test_writes_count_only_successful_updates_by_the_steps_user() -> None:
    lines = [
        audit_line("update", "a", "progressive-sync"),
        audit_line("update", "a", "progressive-sync", code=409),  # lost a race: not a write
        audit_line("update", "a", "admin"),  # the simulator
        audit_line("patch", "b", "progressive-sync"),
        audit_line("update", "ps", "progressive-sync", resource="progressivesyncs"),
        audit_line("create", "c", "progressive-sync"),
    ]
    assert bench.writes_per_app(lines, "progressive-sync") == {"a": 1, "b": 1}


def test_audit_time_keeps_microseconds() -> None:
    assert bench.audit_time(audit_line("update", "a", "x")) % 1 == pytest.approx(0.25)


def test_cluster_times_take_the_first_sync_by_the_given_user_and_the_first_healthy() -> None:
    steps_pod = "system:serviceaccount:argocd:progressive-sync-steps"  # the steps on a real node
    audit = [
        audit_line("update", "web-c1", "progressive-sync"),  # the local engine's steps: another run
        audit_line("update", "web-c1", steps_pod),
        audit_line("update", "web-c1", steps_pod),  # a later write: not the sync
        audit_line("update", "web-c2", steps_pod, code=409),
        audit_line("update", "other-c1", steps_pod),  # another ApplicationSet
    ]
    events = [
        {"event": "healthy", "app": "web-c1", "cluster": "c1", "time": 1.0},
        {"event": "healthy", "app": "web-c1", "cluster": "c1", "time": 9.0},
        {"event": "synced", "app": "web-c2", "cluster": "c2", "time": 2.0},
    ]
    sync_at, healthy_at = bench.cluster_times(audit, events, "web", 0.0, user=steps_pod)
    assert list(sync_at) == ["c1"] and healthy_at == {"c1": 1.0}
    assert bench.cluster_times(audit, events, "web", 0.0)[0].keys() == {"c1"}  # the default user
