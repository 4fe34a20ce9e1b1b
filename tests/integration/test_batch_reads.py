"""What a `batch` pod reads of its stage's ProgressiveSyncStage records, against the real API server
with the fleet simulator playing Argo CD (issue 30).

A batch lists its stage's records once, when it starts; right before each later cluster it lists
only the records labelled as holding a Failed cluster (`progressivesync.io/failed`, set by the
write that records the failure), which is usually none. So a batch of N clusters reads the whole
stage O(1) times, and a failure another batch recorded still stops it before its next cluster
(`failurePolicy.maxFailedClusters`, exactly as before).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from orchestrator.api.stage_records import FAILED_LABEL
from orchestrator.argocd import appsync
from orchestrator.core.clock import SystemClock
from orchestrator.kube.client import APPLICATIONS, Kube
from orchestrator.planning.sizing import clusters_of_batch
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import SimulatorConfig
from orchestrator.simulator.seed import SeedResult, seed_fleet
from steps.batch import BatchResult, run_batch
from steps.common import RolloutRef, Tuning
from steps.context import StepContext
from steps.select_stage import select_stage
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.builders import make_contract, make_stage
from tests.support.outcomes import record_failed, stage_outcomes
from tests.support.steps_harness import CountingKube, make_progressive_sync, publish_inventory

pytestmark = pytest.mark.integration

FAST = SimulatorConfig.from_yaml("defaults: {syncSeconds: 0.3, healthSeconds: 0.3}")
STAGES = "progressivesyncstages"


@pytest.fixture
def simulator(kube: Kube, namespace: str, tmp_path: Path) -> Iterator[None]:
    """The fleet simulator on the test's namespace (stopped after the test)."""
    simulator = FleetSimulator(
        kube, namespace, FAST, events_log=tmp_path / "sim-events.jsonl", watch_window_seconds=1
    ).start()
    yield
    simulator.stop()
    assert simulator.error is None, simulator.error


def selected(kube: Kube, namespace: str, *, clusters: int, sizing: dict[str, int]) -> tuple[SeedResult, Any]:
    """A fleet of `clusters`, a ProgressiveSync of one stage `rest` that tolerates no failure, and
    its select run: (the fleet, the rollout contract the batch gets)."""
    fleet = seed_fleet(kube, namespace, clusters=clusters, regions=["eu-west-1"], revision=REVISION)
    publish_inventory(kube, namespace)
    make_progressive_sync(
        kube,
        namespace,
        stages=[make_stage("rest", max_parallel=sizing["max_parallel"])],
        max_failed_clusters=0,
    )
    contract = make_contract(["rest"], rollout_id="r1", revisions=[(REVISION,)], sizing={"rest": sizing})
    ctx = StepContext.open(
        kube,
        rollout(namespace),
        contract,
        stage="rest",
        clock=SystemClock(),
        tuning=Tuning(compare_wait_seconds=0),
        taking_over=True,
    )
    assert len(select_stage(kube, ctx).targets) == clusters
    return fleet, contract


def rollout(namespace: str) -> RolloutRef:
    return RolloutRef(namespace=namespace, name="myservice", rollout_id="r1", argocd_namespace=namespace)


def batch(kube: Kube, namespace: str, contract: Any, index: int, tuning: Tuning) -> BatchResult:
    ctx = StepContext.open(
        kube, rollout(namespace), contract, stage="rest", clock=SystemClock(), tuning=tuning
    )
    return run_batch(kube, ctx, index)


def test_a_batch_of_30_clusters_reads_its_stage_s_records_once(
    kube: Kube, namespace: str, simulator: None
) -> None:
    """30 clusters, 5 at a time: one list of the stage's records (the batch's start), then right
    before each later cluster and in each wait's stage check only a list of the failed ones (none
    here); the records are read again only by the sink's writes (one at the end here)."""
    _, contract = selected(kube, namespace, clusters=30, sizing={"batches": 1, "max_parallel": 5})
    counting = CountingKube(kube)
    tuning = Tuning(watch_window_seconds=2, batch_flush_seconds=3600)
    result = batch(cast(Kube, counting), namespace, contract, 0, tuning)
    lists = counting.label_selectors.get(STAGES, [])
    full = [s for s in lists if FAILED_LABEL not in s]
    failed = [s for s in lists if FAILED_LABEL in s]
    gets = counting.calls[("get", STAGES, False)]
    print(
        f"batch of 30: {len(full)} full list(s), {len(failed)} failed-only list(s), {gets} get(s) of a record"
    )
    assert [r.outcome.value for r in result.results] == ["done"] * 30, result.summary
    assert len(full) == 1, lists
    assert len(failed) >= 30 - 5, "each cluster after the first wave checks the stage's failures"
    assert gets == 1 and result.status_writes == 1, (gets, result.status_writes)
    assert len(stage_outcomes(kube, "myservice", namespace, rollout_id="r1")["rest"].completed) == 30


class FailingElsewhere(CountingKube):
    """Behind a CountingKube: the first list of the stage's failed records is answered after
    another batch recorded `cluster` Failed (as if it failed right before this batch's next start)."""

    def __init__(self, kube: Kube, namespace: str, cluster: str) -> None:
        super().__init__(kube)
        self.real, self.namespace, self.cluster = kube, namespace, cluster
        self.failed_first = False

    def list(self, resource: Any, *args: Any, **kwargs: Any) -> Any:
        selector = kwargs.get("label_selector") or ""
        if resource.plural == STAGES and FAILED_LABEL in selector and not self.failed_first:
            self.failed_first = True
            record_failed(
                self.real, self.namespace, "myservice", stage="rest", cluster=self.cluster, reason="x"
            )
        return self.__getattr__("list")(resource, *args, **kwargs)


def test_a_failure_recorded_by_another_batch_stops_this_one_before_its_next_cluster(
    kube: Kube, namespace: str, simulator: None
) -> None:
    """Two batches of one slot each, no failure tolerated: batch 1 records a failure while batch 0
    runs its first cluster; batch 0 sees it right before its next start and starts no other
    cluster (nothing synced), with the reason it gave before its reads changed."""
    sizing = {"batches": 2, "max_parallel": 2}
    fleet, contract = selected(kube, namespace, clusters=6, sizing=sizing)
    targets = stage_outcomes(kube, "myservice", namespace, rollout_id="r1")["rest"].targets
    mine = clusters_of_batch(targets, 2, 0, 2)
    other = clusters_of_batch(targets, 2, 1, 2)[0]
    counting = FailingElsewhere(kube, namespace, other)
    tuning = Tuning(watch_window_seconds=2, stage_check_seconds=3600)
    result = batch(cast(Kube, counting), namespace, contract, 0, tuning)
    assert counting.failed_first
    assert [r.outcome.value for r in result.results] == ["done", "not started", "not started"], result.summary
    assert result.results[1].reason == (
        f"stage 'rest' has failed already (1 failed cluster(s), at most 0 tolerated: {other}); "
        "no new cluster starts"
    )
    for cluster in mine[1:]:
        app = kube.get(APPLICATIONS, namespace, f"{fleet.app_set}-{cluster}")
        assert appsync.sync_started_at(app, "r1") is None, cluster
