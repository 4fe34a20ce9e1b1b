"""No lost updates: real 409 Conflicts from the API server, retried and correct.

The racing writer is real: `RacingKube` is the project's adapter, unchanged, except that just
before its first write of a kind it lets another client (admin) change the same object, so the
write it then sends carries a stale resourceVersion and the API server answers 409. And fifty
cluster writers record their outcomes in one stage's record at once, each a merge patch of its
own key: no conflict at all, and none of them writes the ProgressiveSync (issue 30).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.models import StageCounts
from orchestrator.api.rollout_status import apply_summary
from orchestrator.api.stage_records import ClusterRecord, ClusterState, StageOutcomes, StageSummary, summarize
from orchestrator.argocd import appsync
from orchestrator.core.clock import SystemClock
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import APPLICATIONS, PROGRESSIVE_SYNCS, Kube, Resource
from orchestrator.kube.status_writer import update_status
from orchestrator.simulator.seed import seed_fleet
from steps.common import RolloutRef
from steps.context import StepContext
from steps.status_sink import BatchedSink, DirectSink, completed, failed, read_stage_records, syncing
from steps.sync import sync_cluster
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.builders import foreign_operation, make_contract
from tests.support.outcomes import seed_progressive_sync, stage_outcomes
from tests.support.steps_harness import (
    STEPS_USER,
    describe,
    make_progressive_sync,
    publish_inventory,
    read_progressive_sync,
    steps_kubeconfig,
    writes_by,
)

pytestmark = pytest.mark.integration


class RacingKube(Kube):
    """The adapter, with another writer that gets in just before our first write to `resource`."""

    race_on: Resource | None = None
    race: Callable[[], None] = staticmethod(lambda: None)
    raced = False

    def replace(self, resource: Resource, namespace: str | None, body: dict[str, Any], **kwargs: Any) -> Any:
        if resource == self.race_on and not self.raced:
            self.raced = True
            self.race()
        return super().replace(resource, namespace, body, **kwargs)


@pytest.fixture(scope="module")
def steps_config(control_plane: DevCluster, kube: Kube) -> Path:
    return steps_kubeconfig(control_plane, kube)


def opened(client: Kube, namespace: str, stage: str) -> StepContext:
    """The `sync` step's opening for rollout r1 of `myservice`, as its entrypoint makes it."""
    return StepContext.open(
        client,
        RolloutRef(namespace, "myservice", "r1", namespace),
        make_contract(rollout_id="r1", revisions=[(REVISION,)]),
        stage=stage,
        clock=SystemClock(),
    )


def racing(steps_config: Path, resource: Resource, race: Callable[[], None]) -> RacingKube:
    client = RacingKube.from_kubeconfig(str(steps_config))
    assert isinstance(client, RacingKube)
    client.race_on, client.race = resource, race
    return client


def test_a_409_on_the_application_is_retried_and_keeps_the_other_writers_change(
    kube: Kube, namespace: str, control_plane: DevCluster, steps_config: Path
) -> None:
    fleet = seed_fleet(kube, namespace, clusters=1, regions=["eu-west-1"], revision=REVISION)
    publish_inventory(kube, namespace)
    cluster, app_name = fleet.clusters[0].name, fleet.applications[0]
    seed_progressive_sync(
        kube,
        namespace,
        status=seeded_status({"name": "canary", "phase": "Progressing", "targets": [cluster]}),
    )

    def argo_cd_refreshes() -> None:
        app = kube.get(APPLICATIONS, namespace, app_name)
        app["status"]["reconciledAt"] = "2030-01-01T00:00:00Z"
        app["metadata"].setdefault("labels", {})["touched-by"] = "argocd"
        kube.replace(APPLICATIONS, namespace, app)

    client = racing(steps_config, APPLICATIONS, argo_cd_refreshes)
    mark = control_plane.audit_mark()
    try:
        result = sync_cluster(client, opened(client, namespace, "canary"), cluster)
    finally:
        client.close()
    assert not result.failed and result.requested == (app_name,)
    app_writes = [w for w in writes_by(control_plane, mark) if w.resource == "applications"]
    assert [w.code for w in app_writes] == [409, 200], describe(app_writes)
    app = kube.get(APPLICATIONS, namespace, app_name)
    assert app["operation"]["sync"]["revision"] == REVISION
    assert app["metadata"]["labels"] == {"touched-by": "argocd"}, "the other writer's change survived"
    assert app["status"]["reconciledAt"] == "2030-01-01T00:00:00Z"


def test_a_409_caused_by_someone_starting_an_operation_never_overwrites_it(
    kube: Kube, namespace: str, control_plane: DevCluster, steps_config: Path
) -> None:
    fleet = seed_fleet(kube, namespace, clusters=1, regions=["eu-west-1"], revision=REVISION)
    publish_inventory(kube, namespace)
    cluster, app_name = fleet.clusters[0].name, fleet.applications[0]
    seed_progressive_sync(
        kube,
        namespace,
        deadline_seconds=1,
        status=seeded_status({"name": "canary", "phase": "Progressing", "targets": [cluster]}),
    )

    def alice_syncs_in_the_ui() -> None:
        app = kube.get(APPLICATIONS, namespace, app_name)
        app["operation"] = foreign_operation("alice")
        kube.replace(APPLICATIONS, namespace, app)

    client = racing(steps_config, APPLICATIONS, alice_syncs_in_the_ui)
    try:
        result = sync_cluster(client, opened(client, namespace, "canary"), cluster)
    finally:
        client.close()
    assert result.failed and "started by alice" in result.failure
    app = kube.get(APPLICATIONS, namespace, app_name)
    assert app["operation"] == foreign_operation("alice")
    assert not appsync.synced_by_rollout(app, "r1")


def test_a_409_on_the_status_is_retried_and_both_updates_are_kept(
    kube: Kube, namespace: str, control_plane: DevCluster, steps_config: Path
) -> None:
    # The steps that own a stage (select, record, finalize) still write the status under optimistic
    # concurrency (another stage's select, or the watcher, may write it meanwhile).
    make_progressive_sync(kube, namespace, stages=[CANARY, REST])

    def another_step_records_its_stage() -> None:
        update_status(
            kube, namespace, "myservice", lambda s: apply_summary(s, "rest", summary_of("rest")), what="other"
        )

    client = racing(steps_config, PROGRESSIVE_SYNCS, another_step_records_its_stage)
    mark = control_plane.audit_mark()
    try:
        update = update_status(
            client,
            namespace,
            "myservice",
            lambda s: apply_summary(s, "canary", summary_of("canary")),
            what="mine",
        )
    finally:
        client.close()
    assert update.written and update.attempts == 2
    status_writes = writes_by(control_plane, mark)
    assert [w.code for w in status_writes] == [409, 200], describe(status_writes)
    status = read_progressive_sync(kube, namespace).status
    assert status is not None
    assert sorted((s.name, s.tally().completed) for s in status.stages or []) == [("canary", 1), ("rest", 1)]


def summary_of(stage: str) -> StageSummary:
    done = ClusterRecord(state=ClusterState.COMPLETED)
    return summarize(StageOutcomes(stage=stage, targets=(f"{stage}-1",), clusters={f"{stage}-1": done}))


WRITERS = 50


def test_fifty_concurrent_cluster_writers_of_one_stage_record_each_outcome_once_without_a_conflict(
    kube: Kube, namespace: str, control_plane: DevCluster, steps_config: Path
) -> None:
    """Issue 30: fifty cluster steps finishing together each merge-patch their own key of the
    stage's record: every outcome recorded exactly once, no 409 anywhere, and none of them writes
    the ProgressiveSync."""
    clusters = [f"cluster-{i:02d}" for i in range(WRITERS)]
    seed_progressive_sync(
        kube,
        namespace,
        stages=[CANARY],
        status=seeded_status({"name": "canary", "phase": "Progressing", "targets": clusters}),
    )
    ps = read_progressive_sync(kube, namespace)
    rollout = RolloutRef(namespace, "myservice", "r1", namespace)
    where = read_stage_records(kube, rollout, ps, "canary")
    start = threading.Barrier(WRITERS)
    errors: list[BaseException] = []
    now = SystemClock().now()

    def writer(cluster: str) -> None:
        client = Kube.from_kubeconfig(str(steps_config))
        try:
            start.wait()
            sink = DirectSink(client, where)
            sink.record(cluster, syncing(now), what=f"{cluster} syncing")
            sink.record(cluster, completed(now), what=f"{cluster} completed")
            sink.record(cluster, completed(now), what=f"{cluster} completed again")  # a step run again
        except BaseException as exc:  # reported below, with every other failure
            errors.append(exc)
        finally:
            client.close()

    mark = control_plane.audit_mark()
    threads = [threading.Thread(target=writer, args=(cluster,)) for cluster in clusters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    outcomes = stage_outcomes(kube, "myservice", namespace)["canary"]
    assert sorted(outcomes.completed) == clusters, "every writer's cluster is there"
    assert outcomes.counts() == StageCounts(targets=WRITERS, completed=WRITERS)
    writes = writes_by(control_plane, mark, user=STEPS_USER)
    assert {(w.resource, w.verb) for w in writes} == {("progressivesyncstages", "patch")}, describe(writes)
    codes = [w.code for w in writes]
    assert 409 not in codes, "no writer ever conflicts with another"
    # Two writes per cluster (syncing, completed; the third changes nothing), each at least once: on
    # a loaded machine the API server may answer a patch late and the adapter send it again.
    assert codes.count(200) >= 2 * WRITERS, describe(writes)
    assert not [w for w in writes if w.resource == "progressivesyncs"], (
        "no cluster writes the ProgressiveSync"
    )


def test_a_batch_gathers_its_clusters_changes_into_one_write_and_sends_a_failure_at_once(
    kube: Kube, namespace: str, control_plane: DevCluster, steps_config: Path
) -> None:
    # Issue 15: a batch pod's writes grow with batches, not clusters; a failure is written before
    # `record` returns (other batches read it before they start a cluster).
    clusters = [f"cluster-{i:02d}" for i in range(WRITERS)]
    seed_progressive_sync(
        kube,
        namespace,
        stages=[CANARY],
        status=seeded_status({"name": "canary", "phase": "Progressing", "targets": clusters}),
    )
    ps = read_progressive_sync(kube, namespace)
    where = read_stage_records(kube, RolloutRef(namespace, "myservice", "r1", namespace), ps, "canary")
    client = Kube.from_kubeconfig(str(steps_config))
    now = SystemClock().now()
    mark = control_plane.audit_mark()
    try:
        with BatchedSink(client, where, flush_seconds=3600) as sink:
            for cluster in clusters[:-1]:
                sink.record(cluster, syncing(now), what=f"{cluster} syncing")
                sink.record(cluster, completed(now), what=f"{cluster} done")
            outcomes = stage_outcomes(kube, "myservice", namespace)["canary"]
            assert outcomes.completed == (), "nothing written before a failure or the end"
            failing = clusters[-1]
            sink.record(failing, failed(now, "Degraded"), what=f"{failing} failed", urgent=True)
            outcomes = stage_outcomes(kube, "myservice", namespace)["canary"]
            assert outcomes.failed == (failing,), "the failure is there"
            assert sorted(outcomes.completed) == clusters[:-1], "with everything gathered before it"
            assert sink.writes == 1
    finally:
        client.close()
    writes = writes_by(control_plane, mark, user=STEPS_USER)
    assert [(w.resource, w.verb, w.code) for w in writes] == [("progressivesyncstages", "patch", 200)], (
        describe(writes)
    )


CANARY = {"name": "canary", "targets": {"clusters": {"selector": {}}}}
REST = {"name": "rest", "targets": {"clusters": {"selector": {}}}}


def seeded_status(*stages: dict[str, Any]) -> dict[str, Any]:
    return {
        "phase": "Progressing",
        "rollout": {"id": "r1", "startedAt": "2026-11-30T12:00:00Z"},
        "stages": list(stages),
    }
