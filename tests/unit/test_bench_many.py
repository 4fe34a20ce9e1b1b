"""The arithmetic of bench/bench_many.py: request counts from /metrics and the audit log, and each
service's release, sync and Healthy times.

The benchmark runs a real control plane (`make bench`); these pure helpers make its figures, so
they are tested here. The script is loaded from its file (bench/ is not a package), with bench/ on
sys.path for its sibling bench_rollout.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from orchestrator.devenv.controlplane import api_requests
from tests.support.bench_scripts import load_bench

bench = load_bench("bench_many")


def line(
    verb: str,
    user: str,
    *,
    at: str = "2026-12-05T03:00:00.500000Z",
    stage: str = "ResponseComplete",
    resource: str = "applications",
    name: str = "svc-001-c1",
    code: int = 200,
) -> dict[str, Any]:
    """One audit line as kube-apiserver writes it (metadata level)."""
    return {
        "stage": stage,
        "verb": verb,
        "user": {"username": user},
        "objectRef": {"resource": resource, "name": name},
        "responseStatus": {"code": code},
        "stageTimestamp": at,
    }


METRICS = """# HELP apiserver_request_total Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 10
apiserver_request_total{code="201",verb="POST"} 2.5e+01
apiserver_request_duration_seconds_count{verb="GET"} 99
"""


def test_requests_total_sums_every_series_of_the_counter_only() -> None:
    assert api_requests(METRICS) == 35.0


@pytest.mark.parametrize(
    ("audit", "counted"),
    [
        pytest.param(line("get", "u"), True, id="get-answered"),
        pytest.param(line("watch", "u", stage="ResponseStarted"), True, id="watch-started"),
        pytest.param(line("watch", "u"), False, id="watch-ended-not-twice"),
        pytest.param(line("list", "u", stage="ResponseStarted"), False, id="non-watch-started"),
    ],
)
def test_counted_request_counts_each_request_once(audit: dict[str, Any], counted: bool) -> None:
    assert bench.counted_request(audit) is counted


def test_requests_by_user_splits_reads_and_writes_inside_the_window() -> None:
    start = bench.base.audit_time(line("get", "u", at="2026-12-05T03:00:00Z"))
    audit = [
        line("get", "watcher", at="2026-12-05T03:00:01Z"),
        line("watch", "watcher", at="2026-12-05T03:00:01Z", stage="ResponseStarted"),
        line("patch", "watcher", at="2026-12-05T03:00:02Z"),
        line("update", "steps", at="2026-12-05T03:00:03Z"),
        line("get", "steps", at="2026-12-05T03:00:30Z"),  # after the window
    ]
    counts = bench.requests_by_user(audit, start, start + 10)
    assert counts == {"watcher": Counter(read=2, write=1), "steps": Counter(write=1)}


def test_service_times_take_the_last_release_write_and_each_clusters_first_sync() -> None:
    apps = {"svc-001-c1": bench.AppRef("svc-001", "c1"), "svc-001-c2": bench.AppRef("svc-001", "c2")}
    audit = [
        line("patch", "admin", at="2026-12-05T03:00:01Z", name="svc-001-c1"),
        line("patch", "admin", at="2026-12-05T03:00:02Z", name="svc-001-c2"),
        line("patch", "steps", at="2026-12-05T03:00:03Z", name="svc-001-c1"),  # a refresh request
        line("update", "steps", at="2026-12-05T03:00:04Z", name="svc-001-c1"),
        line("update", "steps", at="2026-12-05T03:00:09Z", name="svc-001-c1"),  # a second sync write
        line("update", "steps", at="2026-12-05T03:00:05Z", name="svc-001-c2", code=409),  # lost a race
        line("update", "steps", at="2026-12-05T03:00:06Z", name="svc-001-c2"),
        line("update", "steps", at="2026-12-05T03:00:06Z", name="other-app"),
    ]
    released = bench.base.audit_time(audit[1])
    events = [
        {"event": "healthy", "app": "svc-001-c1", "cluster": "c1", "time": released + 5},
        {"event": "progressing", "app": "svc-001-c2", "cluster": "c2", "time": released + 5},
        {"event": "healthy", "app": "svc-001-c2", "cluster": "c2", "time": released - 60},  # before
    ]
    times, writes = bench.service_times(
        audit, events, apps, releaser="admin", steps_user="steps", since=released - 10
    )
    service = times["svc-001"]
    assert service.released == released
    assert service.sync_at == {"c1": released + 2, "c2": released + 4}
    assert service.healthy_at == {"c1": released + 5}
    assert writes == Counter({"svc-001-c1": 2, "svc-001-c2": 1})


def test_every_service_has_a_canary_then_the_rest_at_max_parallel() -> None:
    canary, rest = bench.stages(5)
    assert (canary["maxTargets"], canary["maxParallel"]) == (1, 1)
    assert (rest["maxTargets"], rest["maxParallel"]) == ("100%", 5)
    assert bench.app_set_name(7) == "svc-007"


def test_heaviest_requests_rank_by_count_with_mean_latency_and_leave_watches_out() -> None:
    def timed(verb: str, user: str, received: str, answered: str, **kw: Any) -> dict[str, Any]:
        return {**line(verb, user, at=answered, **kw), "requestReceivedTimestamp": received}

    audit = [
        timed("list", "steps", "2026-12-05T03:00:01Z", "2026-12-05T03:00:03Z"),
        timed("list", "steps", "2026-12-05T03:00:02Z", "2026-12-05T03:00:06Z"),
        timed("get", "watcher", "2026-12-05T03:00:02Z", "2026-12-05T03:00:03Z"),
        timed("watch", "steps", "2026-12-05T03:00:02Z", "2026-12-05T03:00:02Z", stage="ResponseStarted"),
        timed("watch", "steps", "2026-12-05T03:00:02Z", "2026-12-05T03:00:02Z", stage="ResponseStarted"),
        timed("watch", "steps", "2026-12-05T03:00:02Z", "2026-12-05T03:00:02Z", stage="ResponseStarted"),
    ]
    start = bench.base.audit_time({"stageTimestamp": "2026-12-05T03:00:00Z"})
    assert bench.heaviest_requests(audit, start, start + 60, top=2) == [
        ("steps", "list", "applications", 2, 3.0),
        ("watcher", "get", "applications", 1, 1.0),
    ]


def test_picked_up_counts_sync_starts_after_the_release_only() -> None:
    events = [
        {"event": "sync-start", "app": "a", "time": 5.0},
        {"event": "sync-start", "app": "a", "time": 9.0},
        {"event": "sync-start", "app": "b", "time": 1.0},  # before the release
        {"event": "healthy", "app": "b", "time": 9.0},
    ]
    assert bench.picked_up(events, since=2.0) == Counter({"a": 2})


def test_api_requests_sums_only_the_series_with_the_labels_asked_for() -> None:
    assert api_requests(METRICS, verb="GET") == 10.0
    assert api_requests(METRICS, verb="GET", code="201") == 0.0
