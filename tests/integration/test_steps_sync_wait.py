"""The sync and wait-healthy steps through their entrypoint, against the real API server with the
fleet simulator playing Argo CD: one pinned sync and never someone else's operation; wait-healthy
follows the sync to done, its traps (a healthy read before the sync was reconciled, the deadline,
Degraded, an Application or cluster Secret deleted mid-wait), several Applications on one cluster,
and the deadline read from the clock passed in. Each step is run twice: the second run must end the
same and write nothing.

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.argocd import appsync
from orchestrator.core.clock import format_time
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import (
    APPLICATIONS,
    SECRETS,
    Kube,
)
from orchestrator.simulator.seed import SeedResult
from steps.wait_healthy import wait_healthy
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.builders import foreign_operation
from tests.support.clock import ManualClock
from tests.support.outcomes import stage_lists
from tests.support.steps_harness import (
    StepRunner,
    describe,
    make_progressive_sync,
    publish_inventory,
    writes_by,
)
from tests.support.steps_rig import (
    Rig,
    add_second_app,
    app_of,
    assert_ok,
    finish,
    hang,
    opened,
    select_canary,
    settle_events,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration


# --- sync ------------------------------------------------------------------------------------


def test_sync_writes_one_pinned_update_and_a_second_run_writes_nothing(
    kube: Kube, namespace: str, fleet: SeedResult, runner: StepRunner, control_plane: DevCluster
) -> None:
    make_progressive_sync(kube, namespace)
    cluster = select_canary(runner)
    before = app_of(kube, namespace, fleet, cluster)
    mark = control_plane.audit_mark()
    result = runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(result)
    writes = writes_by(control_plane, mark)
    assert sorted((w.resource, w.subresource, w.verb, w.code) for w in writes) == [
        ("applications", "", "update", 200),
        ("progressivesyncstages", "", "patch", 200),  # its record: Syncing (never the ProgressiveSync)
    ], describe(writes)

    app = app_of(kube, namespace, fleet, cluster)
    assert app["operation"]["sync"]["revision"] == REVISION
    assert app["operation"]["initiatedBy"] == {"username": "progressive-sync", "automated": True}
    assert appsync.info_value(app["operation"], "rollout-id") == "r1"
    assert "operationState" not in app["status"], "the finished operationState is cleared"
    # The ApplicationSet controller owns the annotations: the sync leaves them as they were.
    assert app["metadata"].get("annotations") == before["metadata"].get("annotations")
    assert stage_lists(kube, namespace, "myservice", "canary").syncing == [cluster]

    mark = control_plane.audit_mark()
    again = runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(again)
    assert "already synced by this rollout" in again.stdout
    assert writes_by(control_plane, mark) == []


def contract_with_release(release: object) -> str:
    """A rollout contract for r1's stages whose `release` is `release` (valid or not), as JSON."""
    body = {
        "rolloutId": "r1",
        "release": release,
        "stages": [{"name": name, "targets": 1, "maxParallel": 1} for name in ("canary", "rest")],
    }
    return json.dumps(body)


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        pytest.param(("--contract", ""), {}, "no rollout contract", id="empty-flag"),
        pytest.param((), {"PROGRESSIVE_SYNC_CONTRACT": ""}, "no rollout contract", id="missing"),
        pytest.param(
            ("--contract", contract_with_release(REVISION)),
            {},
            "field release",
            id="a-bare-string-is-not-data",
        ),
        pytest.param(
            ("--contract", contract_with_release([[]])), {}, "field release", id="an-empty-revision-set"
        ),
        pytest.param(("--contract", contract_with_release([])), {}, "field release", id="no-revision-set"),
    ],
)
def test_sync_never_sends_an_empty_or_unfit_revision(
    rig: Rig, args: tuple[str, ...], env: dict[str, str], named: str
) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = rig.fleet.clusters[0].name
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("sync", "--stage", "canary", "--cluster", cluster, *args, **env)
    assert_ok(result, 2)
    assert result.stdout.startswith("--contract: ") and named in result.stdout
    assert writes_by(rig.control_plane, mark) == []
    assert "operation" not in rig.app(cluster)


def test_sync_never_overwrites_someone_elses_operation(
    kube: Kube, namespace: str, fleet: SeedResult, runner: StepRunner, control_plane: DevCluster
) -> None:
    make_progressive_sync(kube, namespace, deadline_seconds=2)
    cluster = select_canary(runner)
    app = app_of(kube, namespace, fleet, cluster)
    app["operation"] = foreign_operation("alice")
    kube.replace(APPLICATIONS, namespace, app)

    mark = control_plane.audit_mark()
    result = runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(result, 1)
    assert "started by alice is in progress" in result.stdout
    assert app_of(kube, namespace, fleet, cluster)["operation"] == foreign_operation("alice")
    writes = writes_by(control_plane, mark)
    assert [(w.resource, w.subresource) for w in writes] == [("progressivesyncstages", "")], describe(writes)
    failed = stage_lists(kube, namespace, "myservice", "canary").failed
    assert [f.name for f in failed] == [cluster] and "alice" in failed[0].reason


def test_sync_waits_for_someone_elses_operation_to_end_then_syncs(
    kube: Kube, namespace: str, fleet: SeedResult, runner: StepRunner, tmp_path: Path
) -> None:
    make_progressive_sync(kube, namespace, deadline_seconds=60)
    cluster = select_canary(runner)
    app = app_of(kube, namespace, fleet, cluster)
    app["operation"] = foreign_operation("alice")
    kube.replace(APPLICATIONS, namespace, app)

    log = tmp_path / "sync.log"
    process = runner.start("sync", "--stage", "canary", "--cluster", cluster, log_path=log)
    try:
        wait_for(
            lambda: "not overwriting it" in log.read_text(), timeout=30, what="sync to see alice's operation"
        )
        assert process.poll() is None
        # Alice's operation ends (what Argo CD does: operationState terminal, .operation removed).
        app = app_of(kube, namespace, fleet, cluster)
        del app["operation"]
        app["status"]["operationState"] = {
            "phase": "Succeeded",
            "operation": foreign_operation("alice"),
            "startedAt": "2030-01-01T11:59:00Z",  # Argo CD's CRD requires it
        }
        kube.replace(APPLICATIONS, namespace, app)
        assert process.wait(timeout=30) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
    app = app_of(kube, namespace, fleet, cluster)
    assert appsync.operation_is_ours(app["operation"], "r1")
    assert app["operation"]["sync"]["revision"] == REVISION


# --- wait-healthy ----------------------------------------------------------------------------


def test_wait_healthy_follows_the_simulated_sync_to_done_and_a_second_run_writes_nothing(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.simulate()
    assert_ok(rig.runner.run("sync", "--stage", "canary", "--cluster", cluster))
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("wait-healthy", "--stage", "canary", "--cluster", cluster)
    assert_ok(result)
    assert f"cluster {cluster} done" in result.stdout
    writes = writes_by(rig.control_plane, mark)
    # Besides its record's write, at most a refresh request: when the simulated Argo CD compared in
    # the second the sync finished, only a new comparison tells whether the health is the new one.
    assert [(w.resource, w.subresource) for w in writes if w.resource != "applications"] == [
        ("progressivesyncstages", "")
    ], describe(writes)
    assert {(w.verb, w.name) for w in writes if w.resource == "applications"} <= {
        ("patch", f"myservice-{cluster}")
    }, describe(writes)
    stage = rig.stage()
    assert (stage.completed, stage.syncing, stage.failed) == ([cluster], [], [])
    assert settle_events(rig, cluster) == ["sync-start", "sync-finish", "healthy"]

    mark = rig.control_plane.audit_mark()
    again = rig.runner.run("wait-healthy", "--stage", "canary", "--cluster", cluster)
    assert_ok(again)
    assert "already recorded" in again.stdout
    assert writes_by(rig.control_plane, mark) == []


# --- wait-healthy: the traps -----------------------------------------------------------------


def sync_and_start_waiting(rig: Rig, cluster: str, **env: str) -> tuple[Any, Path]:
    assert_ok(rig.runner.run("sync", "--stage", "canary", "--cluster", cluster))
    log = rig.tmp_path / "wait-healthy.log"
    process = rig.runner.start(
        "wait-healthy",
        "--stage",
        "canary",
        "--cluster",
        cluster,
        log_path=log,
        **env,
    )
    return process, log


def summary_of(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("wait-healthy:"))


def test_a_healthy_read_before_reconciled_at_passes_finished_at_is_not_done(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    assert_ok(rig.runner.run("sync", "--stage", "canary", "--cluster", cluster))
    # Play the controller by hand: the operation Succeeded just now, but the Healthy on the object
    # was computed a minute before (the previous revision's health).
    finished = datetime.now(UTC)

    def operation_succeeded_with_stale_health(app: dict[str, Any]) -> None:
        op = app.pop("operation")
        app["status"].update(
            operationState={
                "operation": op,
                "phase": "Succeeded",
                "startedAt": format_time(finished - timedelta(seconds=5)),
                "finishedAt": format_time(finished),
                "syncResult": {"revision": REVISION},
            },
            sync={"status": "Synced", "revision": REVISION},
            health={"status": "Healthy"},
            reconciledAt=format_time(finished - timedelta(seconds=60)),
        )

    rig.update_app(cluster, operation_succeeded_with_stale_health)

    log = rig.tmp_path / "wait-healthy.log"
    process = rig.runner.start("wait-healthy", "--stage", "canary", "--cluster", cluster, log_path=log)
    try:
        wait_for(lambda: "health not observed since the sync finished" in log.read_text(), timeout=30)
        assert process.poll() is None, log.read_text()
        assert rig.stage().completed == []
        # wait-healthy asks for a refresh (a patch of the Application) right about now: conflict-safe.
        rig.update_app(
            cluster,
            lambda app: app["status"].update(reconciledAt=format_time(finished + timedelta(seconds=1))),
        )
        code, output = finish(process, log)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, output
    assert rig.stage().completed == [cluster]


def test_deadline_fails_the_cluster_naming_it_and_what_it_waited_for(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, deadline_seconds=3)
    cluster = select_canary(rig.runner)
    rig.update_app(cluster, hang)
    rig.simulate()
    process, log = sync_and_start_waiting(rig, cluster)
    code, output = finish(process, log, timeout=30)
    assert code == 1, output
    reason = f"cluster {cluster}: progress deadline of 3s passed"
    assert reason in summary_of(output)
    assert f"still waiting for myservice-{cluster}: sync operation Running" in summary_of(output)
    failed = rig.stage().failed
    assert [f.name for f in failed] == [cluster] and reason in failed[0].reason
    assert rig.stage().syncing == []


def test_degraded_after_the_sync_fails_the_cluster(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, degraded_grace_seconds=0)
    cluster = select_canary(rig.runner)
    # Behaviour from the cluster Secret's annotation this time.
    secret = rig.kube.get(SECRETS, rig.namespace, f"cluster-{cluster}")
    secret["metadata"]["annotations"] = {"simulator.progressivesync.io/degrade": "true"}
    rig.kube.replace(SECRETS, rig.namespace, secret)
    rig.simulate()
    process, log = sync_and_start_waiting(rig, cluster)
    code, output = finish(process, log)
    assert code == 1, output
    assert (
        "health Degraded after the sync, past the grace of 0s: Deployment has exceeded its progress deadline"
        in (summary_of(output))
    )
    assert "Degraded" in rig.stage().failed[0].reason


def test_an_application_deleted_mid_wait_fails_the_cluster(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.update_app(cluster, hang)
    rig.simulate()
    process, log = sync_and_start_waiting(rig, cluster)
    wait_for(lambda: "sync operation Running" in log.read_text(), timeout=30, what="the sync to be Running")
    rig.kube.delete(APPLICATIONS, rig.namespace, f"myservice-{cluster}")
    code, output = finish(process, log)
    assert code == 1, output
    assert f"Application myservice-{cluster} was deleted" in summary_of(output)
    assert "was deleted" in rig.stage().failed[0].reason


def test_a_cluster_secret_deleted_mid_wait_fails_the_cluster(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.update_app(cluster, hang)
    rig.simulate()
    process, log = sync_and_start_waiting(rig, cluster, PROGRESSIVE_SYNC_WATCH_WINDOW_SECONDS="1")
    wait_for(lambda: "sync operation Running" in log.read_text(), timeout=30, what="the sync to be Running")
    rig.kube.delete(SECRETS, rig.namespace, f"cluster-{cluster}")
    publish_inventory(rig.kube, rig.namespace)  # what the watcher does on the Secret's deletion
    code, output = finish(process, log)
    assert code == 1, output
    assert f"cluster {cluster}: its Argo CD cluster Secret was deleted" in summary_of(output)


# --- several Applications on one cluster, and time passed in -----------------------------------


def test_every_application_of_the_cluster_is_synced_and_followed(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    worker = add_second_app(rig, cluster)
    rig.simulate()
    sync = rig.runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(sync)
    assert f"myservice-{cluster}" in sync.stdout and worker in sync.stdout
    result = rig.runner.run("wait-healthy", "--stage", "canary", "--cluster", cluster)
    assert_ok(result)
    assert "2 Applications Synced and Healthy" in result.stdout
    for name in (f"myservice-{cluster}", worker):
        app = rig.kube.get(APPLICATIONS, rig.namespace, name)
        assert app["status"]["operationState"]["syncResult"]["revision"] == REVISION
        assert app["status"]["health"]["status"] == "Healthy"


def test_wait_healthy_reads_the_deadline_from_the_clock_it_is_given(rig: Rig, steps_config: Path) -> None:
    """In process, with a clock an hour ahead: the deadline has passed at the first look."""
    make_progressive_sync(rig.kube, rig.namespace, deadline_seconds=600)
    cluster = select_canary(rig.runner)
    assert_ok(rig.runner.run("sync", "--stage", "canary", "--cluster", cluster))
    client = Kube.from_kubeconfig(str(steps_config))
    try:
        later = ManualClock(datetime.now(UTC) + timedelta(hours=1))
        result = wait_healthy(client, opened(rig, client, "canary", clock=later), cluster)
    finally:
        client.close()
    assert result.failed
    assert f"cluster {cluster}: progress deadline of 600s passed" in result.reason
    assert "sync operation not picked up by Argo CD yet" in result.reason
