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

from orchestrator.api.rollout_status import find_stage, mark_completed
from orchestrator.argocd import appsync
from orchestrator.core.clock import SystemClock
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import APPLICATIONS, PROGRESSIVE_SYNCS, Kube, Resource
from orchestrator.kube.status_writer import update_status
from orchestrator.simulator.seed import seed_fleet
from steps.common import RolloutRef
from steps.sync import sync_cluster
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.builders import foreign_operation
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
        result = sync_cluster(
            client,
            RolloutRef(namespace, "myservice", "r1", namespace),
            stage="canary",
            cluster=cluster,
            revisions=[(REVISION,)],
            clock=SystemClock(),
        )
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
        result = sync_cluster(
            client,
            RolloutRef(namespace, "myservice", "r1", namespace),
            stage="canary",
            cluster=cluster,
            revisions=[(REVISION,)],
            clock=SystemClock(),
        )
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
