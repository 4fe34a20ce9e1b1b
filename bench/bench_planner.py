"""Benchmark of the planner: 5,000 clusters and 10 stages (run by `make bench`; not a test).

Builds a synthetic fleet (5,000 cluster Secrets over 20 regions and 3 zones each, one OutOfSync
Application per cluster, some up to date, some with two Applications), then measures, in this one
process:

- reading the 5,000 Application objects into views (`app_view_from_object`),
- `plan_rollout` with 10 stages (canary, spreads by region and zone, ints and percentages),
- the peak memory planning allocates (tracemalloc) and the process's peak RSS,
- a baseline measured in the same run (sha256 + sort of the fleet's names, the least any
  per-service order costs), so the ratio says something on any machine.

Targets: planning under 1 s and under 200 MB. Prints the figures; exits 0 whatever they are,
because timings on a shared machine are reports, not verdicts.
"""

from __future__ import annotations

import base64
import gc
import hashlib
import os
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from orchestrator.api.models import ProgressiveSyncSpec
from orchestrator.argocd.fleet import AppSetView, Cluster, app_view_from_object, cluster_from_secret
from orchestrator.kube.cluster_secrets import cluster_secret_from_object
from orchestrator.planning.planner import plan_rollout

CLUSTERS = 5_000
REGIONS = [f"region-{i:02d}" for i in range(20)]
ZONES = "abc"
REPEATS = 5
TIME_TARGET_S = 1.0
MEMORY_TARGET_MB = 200.0
NEW = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def build_secrets() -> list[dict[str, Any]]:
    """Cluster Secret objects as the API server lists them."""
    secrets = []
    for i in range(CLUSTERS):
        region = REGIONS[i % len(REGIONS)]
        name = f"cell-{i:05d}-{region}{ZONES[i % 3]}"
        secrets.append(
            {
                "kind": "Secret",
                "metadata": {
                    "name": f"cluster-{name}",
                    "labels": {
                        "argocd.argoproj.io/secret-type": "cluster",
                        "region": region,
                        "zone": f"{region}{ZONES[i % 3]}",
                        "tier": "gold" if i % 10 == 0 else "standard",
                        "cluster-id": f"{i:05d}",  # unique per cluster, as many fleets have
                    },
                },
                "data": {"name": _b64(name), "server": _b64(f"https://{name}:6443"), "config": _b64("{}")},
            }
        )
    return secrets


def build_apps(clusters: list[Cluster]) -> list[dict[str, Any]]:
    """One Application per cluster (two on every 50th); every 7th is already up to date."""
    apps = []
    for i, cluster in enumerate(clusters):
        for suffix in ("web", "worker") if i % 50 == 0 else ("web",):
            fresh = i % 7 == 0
            apps.append(
                {
                    "kind": "Application",
                    "metadata": {
                        "name": f"myservice-{suffix}-{cluster.name}",
                        "namespace": "argocd",
                        "ownerReferences": [
                            {
                                "apiVersion": "argoproj.io/v1alpha1",
                                "kind": "ApplicationSet",
                                "name": "myservice",
                            }
                        ],
                    },
                    "spec": {"destination": {"server": cluster.server, "namespace": "myservice"}},
                    "status": {
                        "sync": {"status": "Synced" if fresh else "OutOfSync", "revision": NEW},
                        "health": {"status": "Healthy"},
                    },
                }
            )
    return apps


def build_spec() -> ProgressiveSyncSpec:
    """Ten stages of the kinds people write."""

    def stage(name: str, selector: dict[str, Any], **sizes: Any) -> dict[str, Any]:
        return {"name": name, "targets": {"clusters": {"selector": selector}}, **sizes}

    not_first = {"matchExpressions": [{"key": "region", "operator": "NotIn", "values": [REGIONS[0]]}]}
    return ProgressiveSyncSpec.model_validate(
        {
            "appSetRef": {"name": "myservice"},
            "stages": [
                stage("canary", {"matchLabels": {"region": REGIONS[0]}}, maxTargets=1),
                stage("one per region", not_first, maxTargets=19, maxParallel=19, spreadBy="region"),
                stage("one per zone", {}, maxTargets=60, maxParallel=20, spreadBy="zone"),
                stage("gold 10", {"matchLabels": {"tier": "gold"}}, maxTargets="10%", maxParallel="50%"),
                stage("gold rest", {"matchLabels": {"tier": "gold"}}, maxTargets="100%", maxParallel="25%"),
                stage(
                    "first regions",
                    {"matchExpressions": [{"key": "region", "operator": "In", "values": REGIONS[:5]}]},
                    maxTargets="50%",
                    maxParallel=25,
                ),
                stage("5 percent", {}, maxTargets="5%", maxParallel="20%", spreadBy="region"),
                stage("25 percent", {}, maxTargets="25%", maxParallel="10%"),
                stage(
                    "half of rest",
                    {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
                    maxTargets="50%",
                ),
                stage("everything else", {}, maxTargets="100%", maxParallel="10%"),
            ],
        }
    )


def best_and_median(fn: Callable[[], object]) -> tuple[float, float]:
    """Seconds of the fastest and the median of REPEATS runs."""
    timings = []
    for _ in range(REPEATS):
        gc.collect()
        start = time.perf_counter()
        fn()
        timings.append(time.perf_counter() - start)
    return min(timings), statistics.median(timings)


def peak_traced_mb(fn: Callable[[], object]) -> float:
    """Peak memory allocated while `fn` runs, in MB (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 1e6


def verdict(ok: bool) -> str:
    """How a figure compares with its target."""
    return "within target" if ok else "OVER TARGET"


def main() -> int:
    """Build the fleet, measure, print."""
    secrets = build_secrets()
    clusters = [cluster_from_secret(cluster_secret_from_object(s)) for s in secrets]
    app_objects = build_apps(clusters)
    spec = build_spec()
    app_set = AppSetView(name="myservice", namespace="argocd")
    apps = [app_view_from_object(obj) for obj in app_objects]

    def plan() -> object:
        return plan_rollout(spec, ps_name="myservice", appset=app_set, clusters=clusters, apps=apps)

    def read_and_plan() -> object:
        views = [app_view_from_object(obj) for obj in app_objects]
        return plan_rollout(spec, ps_name="myservice", appset=app_set, clusters=clusters, apps=views)

    def baseline() -> object:
        return sorted(hashlib.sha256(f"myservice\x00{c.name}".encode()).hexdigest() for c in clusters)

    result = plan_rollout(spec, ps_name="myservice", appset=app_set, clusters=clusters, apps=apps)
    plan_best, plan_median = best_and_median(plan)
    read_best, _ = best_and_median(lambda: [app_view_from_object(obj) for obj in app_objects])
    base_best, _ = best_and_median(baseline)
    plan_peak = peak_traced_mb(plan)
    total_peak = peak_traced_mb(read_and_plan)
    max_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB

    targets = sum(len(s.targets) for s in result.stages)
    print(
        f"planner: {len(clusters)} clusters, {len(apps)} Applications, {len(spec.stages)} stages, "
        f"{targets} targets, {len(result.warnings)} warnings, {len(result.errors)} errors"
    )
    print(f"  plan_rollout          best {plan_best * 1000:7.1f} ms   median {plan_median * 1000:7.1f} ms")
    print(f"  read 5,000 apps       best {read_best * 1000:7.1f} ms")
    print(f"  baseline (hash+sort)  best {base_best * 1000:7.1f} ms   ratio {plan_best / base_best:.1f}x")
    print(f"  peak allocated (tracemalloc): plan {plan_peak:.1f} MB, read+plan {total_peak:.1f} MB")
    print(f"  process peak RSS: {max_rss_mb:.1f} MB (includes the fleet fixtures and the interpreter)")
    memory_ok = total_peak < MEMORY_TARGET_MB and max_rss_mb < MEMORY_TARGET_MB
    print(
        f"  target: < {TIME_TARGET_S:.0f} s: {verdict(plan_median < TIME_TARGET_S)}; "
        f"< {MEMORY_TARGET_MB:.0f} MB: {verdict(memory_ok)}"
    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"  machine: {os.cpu_count()} CPUs, load average {load} (timings grow with the load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
