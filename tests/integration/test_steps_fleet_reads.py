"""How often the steps read the fleet, counted on the real API server (steps called in process with a
counting adapter): a batch reads it once and syncs each Application once, a cluster step once for
its sync and its wait, the existence check of a waiting cluster shares the batch's read, and an
Application created after the read is still found.

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import pytest

import steps.batch
from orchestrator.argocd import appsync
from orchestrator.argocd.inventory import INVENTORY_NAME, clusters_from_configmap, inventory_configmap
from orchestrator.core.clock import SystemClock
from orchestrator.kube.client import (
    APPLICATIONS,
    CONFIG_MAPS,
    Kube,
)
from steps.batch import BatchResult, run_batch
from steps.cluster import ClusterResult, run_cluster
from steps.common import FleetLookup, RolloutRef, Tuning, load_progressive_sync
from tests.support.clock import ManualClock
from tests.support.steps_harness import (
    CountingKube,
    make_progressive_sync,
    read_progressive_sync,
)
from tests.support.steps_rig import (
    REST,
    Rig,
    assert_ok,
    opened,
    rollout_r1,
    select_canary,
)

pytestmark = pytest.mark.integration
# What a step returns, for `counted`.
Outcome = TypeVar("Outcome")


# --- batch: the fleet read once per batch -----------------------------------------------------


def counted(rig: Rig, step: Callable[[Kube], Outcome]) -> tuple[CountingKube, Outcome]:
    """Run `step` on the rig's Kube behind a CountingKube: (what it called, what it returned)."""
    counting = CountingKube(rig.kube)
    return counting, step(cast(Kube, counting))


@pytest.mark.parametrize(
    "max_parallel",
    [pytest.param(1, id="one-after-another"), pytest.param(3, id="all-three-at-once")],
)
def test_a_batch_reads_the_fleet_once_and_syncs_each_application_once(
    rig: Rig, max_parallel: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three clusters in one batch: the inventory and the ApplicationSet are read once for the batch
    (before: twice per cluster), the Applications by name from the stage's records, never listed
    (tests/integration/test_steps_read_by_name.py), each Application is synced exactly once, and the
    batch run again (a retried pod) writes no sync. The clusters of the first wave start on the
    batch's own read of the ProgressiveSync; each later one reads it again right before it starts."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    assert_ok(rig.runner.run("select", "--stage", "rest"))
    targets = rig.stage("rest").targets
    assert len(targets) == 3
    rig.simulate()
    reads: list[str] = []

    def load(kube: Kube, rollout: RolloutRef) -> Any:
        reads.append(rollout.name)
        return load_progressive_sync(kube, rollout)

    monkeypatch.setattr(steps.batch, "load_progressive_sync", load)

    def batch() -> tuple[CountingKube, BatchResult]:
        return counted(
            rig,
            lambda kube: run_batch(
                kube,
                opened(
                    rig,
                    kube,
                    "rest",
                    sizing={"rest": {"batches": 1, "max_parallel": max_parallel}},
                    tuning=Tuning(watch_window_seconds=2),
                    ps=load(kube, rollout_r1(rig)),  # the batch's own read, counted as before
                ),
                0,
            ),
        )

    counting, result = batch()
    assert [r.outcome.value for r in result.results] == ["done", "done", "done"], result.summary
    assert len(reads) == 1 + len(targets) - max_parallel, "one read per cluster after the first wave"
    calls = counting.calls
    assert calls[("list", "applications", False)] == 0, calls  # read by name (spec.targetApps)
    assert calls[("get", "configmaps", False)] == 1, calls
    assert calls[("get", "applicationsets", False)] == 1, calls
    assert calls[("replace", "applications", False)] == 3, calls  # one sync write per Application
    for cluster in targets:
        assert appsync.sync_started_at(rig.app(cluster), "r1") is not None, cluster

    again, rerun = batch()
    assert [r.reason for r in rerun.results] == ["recorded as completed already"] * 3
    assert again.calls[("replace", "applications", False)] == 0, again.calls


def test_a_cluster_step_reads_the_fleet_once_for_its_sync_and_its_wait(rig: Rig) -> None:
    """A `cluster` pod reads the fleet once for its sync and its wait (before: once for each; a list
    of the Applications was ~15 MB at 10,000 clusters, and is now no list at all: they are read by
    name from the stage's records), writes one sync, and run again writes none."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.simulate()

    def one_cluster() -> tuple[CountingKube, ClusterResult]:
        return counted(
            rig,
            lambda kube: run_cluster(
                kube, opened(rig, kube, "canary", tuning=Tuning(watch_window_seconds=2)), cluster
            ),
        )

    counting, result = one_cluster()
    assert result.outcome.value == "done", result.summary
    assert counting.calls[("list", "applications", False)] == 0, counting.calls
    assert counting.calls[("replace", "applications", False)] == 1, counting.calls
    again, rerun = one_cluster()
    assert rerun.reason == "recorded as completed already"
    assert again.calls[("replace", "applications", False)] == 0, again.calls


@pytest.mark.parametrize(
    "cached", [pytest.param(True, id="a-batch"), pytest.param(False, id="a-cluster-pod")]
)
def test_the_check_that_a_waiting_cluster_still_exists_shares_its_read_only_in_a_batch(
    rig: Rig, cached: bool
) -> None:
    """A batch's clusters look at the inventory while they wait: one read serves them for the age
    given, then a removed cluster is seen; a lookup of one cluster pod reads it every time."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    ps = read_progressive_sync(rig.kube, rig.namespace)
    clock = ManualClock(datetime(2026, 12, 1, tzinfo=UTC))
    counting = CountingKube(rig.kube)
    lookup = FleetLookup(
        cast(Kube, counting), rollout_r1(rig), ps, clock=clock, max_age_seconds=3600 if cached else 0
    )

    def reads() -> int:
        return counting.calls[("get", "configmaps", False)]

    assert lookup.still_exists(cluster, max_age_seconds=5)
    assert lookup.still_exists(cluster, max_age_seconds=5)
    assert reads() == (1 if cached else 2)
    inventory = rig.kube.get(CONFIG_MAPS, rig.namespace, INVENTORY_NAME)
    left = [c for c in clusters_from_configmap(inventory) if c.name != cluster]
    rig.kube.replace(
        CONFIG_MAPS,
        rig.namespace,
        inventory_configmap(rig.namespace, left) | {"metadata": inventory["metadata"]},
    )
    assert lookup.still_exists(cluster, max_age_seconds=5) is cached  # the batch's read is 0 s old
    clock.advance(5)
    assert not lookup.still_exists(cluster, max_age_seconds=5)
    assert reads() == (2 if cached else 4)


def test_a_batch_finds_an_application_created_after_it_read_the_fleet(rig: Rig) -> None:
    """The lookup is read once; a cluster it knew without Applications is looked up again before it fails."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    ps = read_progressive_sync(rig.kube, rig.namespace)
    rollout = rollout_r1(rig)
    app = rig.app(cluster)
    rig.kube.delete(APPLICATIONS, rig.namespace, app["metadata"]["name"])
    counting = CountingKube(rig.kube)
    lookup = FleetLookup(cast(Kube, counting), rollout, ps, clock=SystemClock(), max_age_seconds=3600)
    found, clusters = lookup.find(cluster)
    assert found is not None
    assert lookup.apps_of(found, clusters) == []
    kept = ("name", "namespace", "labels", "ownerReferences")
    app["metadata"] = {k: v for k, v in app["metadata"].items() if k in kept}
    app.pop("status", None)
    rig.kube.create(APPLICATIONS, rig.namespace, app)
    assert [a["metadata"]["name"] for a in lookup.apps_of(found, clusters)] == [app["metadata"]["name"]]
    assert lookup.reads == 3  # the first read, then once more for each time the cluster had none
