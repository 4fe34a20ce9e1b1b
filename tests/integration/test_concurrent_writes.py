"""No lost updates: real 409 Conflicts from the API server, retried and correct.

The racing writer is real: `RacingKube` is the project's adapter, unchanged, except that just
before its first write of a kind it lets another client (admin) change the same object, so the
write it then sends carries a stale resourceVersion and the API server answers 409. And fifty
threads write one ProgressiveSync's status at once, each adding its own cluster.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.rollout_status import find_stage, mark_completed, mark_failed, mark_syncing
from orchestrator.argocd import appsync
from orchestrator.core.clock import SystemClock
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import APPLICATIONS, PROGRESSIVE_SYNCS, Kube, Resource
from orchestrator.kube.status_writer import StatusWriterSettings, update_status
from orchestrator.simulator.seed import seed_fleet
from steps.common import RolloutRef
from steps.context import StepContext
from steps.status_sink import BatchedSink
from steps.sync import sync_cluster
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.builders import foreign_operation, make_contract
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
    make_progressive_sync(kube, namespace)
    cluster, app_name = fleet.clusters[0].name, fleet.applications[0]

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
    make_progressive_sync(kube, namespace, deadline_seconds=1)
    cluster, app_name = fleet.clusters[0].name, fleet.applications[0]

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
    make_progressive_sync(kube, namespace)

    def another_step_records_its_cluster() -> None:
        update_status(
            kube,
            namespace,
            "myservice",
            lambda s: mark_completed(s, stage="canary", cluster="other"),
            what="other",
        )

    client = racing(steps_config, PROGRESSIVE_SYNCS, another_step_records_its_cluster)
    mark = control_plane.audit_mark()
    try:
        update = update_status(
            client,
            namespace,
            "myservice",
            lambda s: mark_completed(s, stage="canary", cluster="mine"),
            what="mine",
        )
    finally:
        client.close()
    assert update.written and update.attempts == 2
    status_writes = writes_by(control_plane, mark)
    assert [w.code for w in status_writes] == [409, 200], describe(status_writes)
    stage = find_stage(read_progressive_sync(kube, namespace).status, "canary")
    assert stage is not None and sorted(stage.completed) == ["mine", "other"]


WRITERS = 50


def test_fifty_concurrent_status_writers_lose_nothing(
    kube: Kube, namespace: str, control_plane: DevCluster, steps_config: Path
) -> None:
    make_progressive_sync(kube, namespace)
    clusters = [f"cluster-{i:02d}" for i in range(WRITERS)]
    start = threading.Barrier(WRITERS)
    errors: list[BaseException] = []
    attempts: list[int] = []

    def writer(cluster: str) -> None:
        client = Kube.from_kubeconfig(str(steps_config))
        try:
            start.wait()
            update = update_status(
                client,
                namespace,
                "myservice",
                lambda s: mark_completed(s, stage="canary", cluster=cluster),
                what=f"{cluster} completed",
            )
            attempts.append(update.attempts)
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
    stage = find_stage(read_progressive_sync(kube, namespace).status, "canary")
    assert stage is not None
    assert sorted(stage.completed) == clusters, "every writer's cluster is there"
    writes = [w for w in writes_by(control_plane, mark, user=STEPS_USER) if w.subresource == "status"]
    codes = [w.code for w in writes]
    assert codes.count(200) == WRITERS, "exactly one successful write per writer"
    assert codes.count(409) > 0, "the writers really raced"
    assert max(attempts) > 1
    print(f"50 writers: {codes.count(409)} conflicts, attempts max {max(attempts)}")


def test_a_batch_gathers_its_clusters_changes_into_one_write_and_sends_a_failure_at_once(
    kube: Kube, namespace: str, control_plane: DevCluster, steps_config: Path
) -> None:
    # Issue 15: a batch pod's status writes grow with batches, not clusters; a failure is written
    # before `record` returns (other batches read it before they start a cluster).
    make_progressive_sync(kube, namespace)
    clusters = [f"cluster-{i:02d}" for i in range(WRITERS)]
    client = Kube.from_kubeconfig(str(steps_config))
    mark = control_plane.audit_mark()
    try:
        with BatchedSink(client, namespace, "myservice", StatusWriterSettings(), flush_seconds=3600) as sink:
            for cluster in clusters[:-1]:
                sink.record(
                    lambda s, c=cluster: mark_syncing(s, stage="canary", cluster=c), what=f"{cluster} syncing"
                )
                sink.record(
                    lambda s, c=cluster: mark_completed(s, stage="canary", cluster=c), what=f"{cluster} done"
                )
            stage = find_stage(read_progressive_sync(kube, namespace).status, "canary")
            assert stage is None or stage.completed == [], "nothing written before a failure or the end"
            failing = clusters[-1]
            sink.record(
                lambda s: mark_failed(s, stage="canary", cluster=failing, reason="Degraded"),
                what=f"{failing} failed",
                urgent=True,
            )
            stage = find_stage(read_progressive_sync(kube, namespace).status, "canary")
            assert stage is not None and [f.name for f in stage.failed] == [failing], "the failure is there"
            assert sorted(stage.completed) == clusters[:-1], "with everything gathered before it"
            assert sink.writes == 1
    finally:
        client.close()
    writes = [w for w in writes_by(control_plane, mark, user=STEPS_USER) if w.subresource == "status"]
    assert [w.code for w in writes] == [200], describe(writes)


OLD_SHAPE_STATUS = {
    "phase": "Progressing",
    "progress": "1/3",
    "rollout": {"id": "602c4d4c1d", "startedAt": "2026-11-30T12:00:00Z"},
    "stages": [
        {
            "name": "canary",
            "phase": "Progressing",
            "targets": ["eu-1", "eu-2", "eu-3"],
            "syncing": ["eu-2"],
            "completed": ["eu-1"],
            "failed": [],
            "notes": [{"name": "eu-2", "note": "Suspended"}],
        }
    ],
}


def test_a_status_stored_in_the_shape_before_the_ledger_is_read_and_written_back_compact(
    kube: Kube, namespace: str, control_plane: DevCluster, steps_config: Path
) -> None:
    # Objects written by an earlier version list every cluster in `targets` and `completed`; the
    # CRD still accepts those fields, every reader takes them, and the next write is compact.
    make_progressive_sync(kube, namespace, status=OLD_SHAPE_STATUS)
    stored = kube.get(PROGRESSIVE_SYNCS, namespace, "myservice")["status"]["stages"][0]
    assert stored["targets"] == ["eu-1", "eu-2", "eu-3"], "the API server kept the old fields"
    stage = find_stage(read_progressive_sync(kube, namespace).status, "canary")
    assert stage is not None and (stage.targets, stage.syncing, stage.completed) == (
        ["eu-1", "eu-2", "eu-3"],
        ["eu-2"],
        ["eu-1"],
    )
    update_status(
        kube, namespace, "myservice", lambda s: mark_completed(s, stage="canary", cluster="eu-2"), what="eu-2"
    )
    written = kube.get(PROGRESSIVE_SYNCS, namespace, "myservice")["status"]["stages"][0]
    assert "targets" not in written and "completed" not in written
    assert written["counts"] == {"targets": 3, "syncing": 0, "completed": 2, "failed": 0}
    stage = find_stage(read_progressive_sync(kube, namespace).status, "canary")
    assert stage is not None and (stage.targets, stage.completed) == (
        ["eu-1", "eu-2", "eu-3"],
        ["eu-1", "eu-2"],
    )
