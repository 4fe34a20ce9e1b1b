"""The fleet simulator against the real API server: `simulate seed` builds a fleet the planner and the
steps accept, and the simulated controllers move Applications the way Argo CD does (pick up,
Running, Succeeded/Failed with `.operation` removed, then the comparison: Synced, Progressing ->
Healthy/Degraded), with behaviour per cluster; the ApplicationSet controller takes annotations back;
the Git refs and the refresh annotation move `status.sync`; terminate and deletion end what they end.

Requests are written the way Argo CD's API server writes them (`.operation` set and the finished
`operationState` dropped in one update), not through progressive-sync's own code: these tests are
about the simulator, not about what we send.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.clock import parse_time
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import APPLICATION_SETS, APPLICATIONS, SECRETS, Kube, NotFound
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import ANNOTATION_PREFIX, SimulatorConfig
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import publish_refs, seed_fleet
from tests.support.app_requests import REVISION, annotate, change, request_sync, settled
from tests.support.simulator_events import logged_events, max_in_flight, sync_order, sync_starts
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "orchestrator.cli.main"]

OLD = "9d2b7e4a1c3f5e7d9b0a2c4e6f8a1b3d5e7f9c0b"
SYNC_EVENTS = ("sync-start", "sync-finish", "healthy", "degraded")


def events_of(log: Path, app: str, kinds: tuple[str, ...] = SYNC_EVENTS) -> list[str]:
    return [e["event"] for e in read_events(log) if e["app"] == app and e["event"] in kinds]


@pytest.fixture
def simulator(kube: Kube, namespace: str, tmp_path: Path) -> Iterator[FleetSimulator]:
    config = SimulatorConfig.from_yaml(
        """
defaults: {syncSeconds: 0.4, healthSeconds: 0.4}
clusters:
  "*-us-east-1?": {fail: true}
  "*-ap-south-1?": {health: Degraded}
"""
    )
    sim = FleetSimulator(
        kube, namespace, config, events_log=tmp_path / "events.jsonl", watch_window_seconds=1
    )
    yield sim.start()
    sim.stop()
    assert sim.error is None


def test_seed_through_the_cli_builds_a_fleet(kube: Kube, namespace: str, control_plane: DevCluster) -> None:
    args = [
        *CLI,
        "simulate",
        "seed",
        "--namespace",
        namespace,
        "--kubeconfig",
        str(control_plane.kubeconfig),
        "--clusters",
        "6",
        "--regions",
        "eu-west-1,us-east-1",
        "--revision",
        REVISION,
    ]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "seeded 6 clusters across 2 regions" in result.stdout

    secrets, _ = kube.list(SECRETS, namespace, label_selector="argocd.argoproj.io/secret-type=cluster")
    assert len(secrets) == 6
    labels = {s["metadata"]["labels"]["zone"] for s in secrets}
    assert labels == {"eu-west-1a", "eu-west-1b", "eu-west-1c", "us-east-1a", "us-east-1b", "us-east-1c"}
    assert all(s["metadata"]["labels"]["env"] == "prod" and s["data"]["config"] for s in secrets)
    app_set = kube.get(APPLICATION_SETS, namespace, "myservice")
    apps, _ = kube.list(APPLICATIONS, namespace)
    assert len(apps) == 6
    for app in apps:
        assert app["metadata"]["ownerReferences"][0]["uid"] == app_set["metadata"]["uid"]
        assert app["status"]["sync"] == {"status": "OutOfSync", "revision": REVISION}
        assert "automated" not in app["spec"]["syncPolicy"]
    forms = {next(iter(k for k in app["spec"]["destination"] if k != "namespace")) for app in apps}
    assert forms == {"server", "name"}

    again = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 0 and "0 created, 13 already there" in again.stdout, again.stdout


def test_the_simulator_plays_success_failure_and_degradation(
    kube: Kube, namespace: str, simulator: FleetSimulator, tmp_path: Path
) -> None:
    fleet = seed_fleet(
        kube, namespace, clusters=3, regions=["eu-west-1", "us-east-1", "ap-south-1"], revision=REVISION
    )
    for name in fleet.applications:
        request_sync(kube, namespace, name)
    ok, failed, degraded = (
        wait_for(lambda n=name: settled(kube, namespace, n), timeout=30, what=f"{name} to settle")
        for name in fleet.applications
    )

    state = ok["status"]["operationState"]
    assert "operation" not in ok
    assert state["phase"] == "Succeeded" and state["syncResult"]["revision"] == REVISION
    assert state["operation"]["info"] == [{"name": "rollout-id", "value": "r1"}]
    assert ok["status"]["sync"]["status"] == "Synced" and ok["status"]["sync"]["revision"] == REVISION
    assert ok["status"]["health"]["status"] == "Healthy"
    assert parse_time(ok["status"]["reconciledAt"]) >= parse_time(state["finishedAt"])  # type: ignore[operator]
    assert ok["status"]["history"][-1]["revision"] == REVISION

    assert failed["status"]["operationState"]["phase"] == "Failed" and "operation" not in failed
    assert failed["status"]["sync"]["status"] == "OutOfSync"
    assert degraded["status"]["health"]["status"] == "Degraded"

    clusters = [c.name for c in fleet.clusters]

    expected = {
        clusters[0]: ["sync-start", "sync-finish", "healthy"],
        clusters[1]: ["sync-start", "sync-finish"],
        clusters[2]: ["sync-start", "sync-finish", "degraded"],
    }
    events = logged_events(
        tmp_path / "events.jsonl",
        lambda events: sum(e["event"] in SYNC_EVENTS for e in events) >= 8,
        what="the settled writes' events",
    )
    by_cluster = {
        cluster: [e["event"] for e in events if e["cluster"] == cluster and e["event"] in SYNC_EVENTS]
        for cluster in clusters
    }
    assert by_cluster == expected
    assert all(e["revision"] == REVISION for e in events if e["event"] in ("sync-start", "sync-finish"))
    assert max_in_flight(events) == 3, "all three were synced at once"


def test_an_empty_revision_resolves_to_whatever_argo_cd_compared_against(
    kube: Kube, namespace: str, simulator: FleetSimulator
) -> None:
    """The trap the sync step refuses to walk into, played faithfully."""
    fleet = seed_fleet(kube, namespace, clusters=1, regions=["eu-west-1"], revision="f00dcafe")
    request_sync(kube, namespace, fleet.applications[0], revision="")
    app = wait_for(lambda: settled(kube, namespace, fleet.applications[0]), timeout=30)
    assert app["status"]["operationState"]["syncResult"]["revision"] == "f00dcafe"


def test_hang_stays_running_until_terminated_and_a_new_simulator_resumes_an_operation(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    fleet = seed_fleet(kube, namespace, clusters=2, regions=["eu-west-1"], revision=REVISION)
    hung, resumed = fleet.applications
    annotate(kube, namespace, hung, {f"{ANNOTATION_PREFIX}hang": "true"})
    annotate(kube, namespace, resumed, {f"{ANNOTATION_PREFIX}sync-seconds": "3600"})
    log = tmp_path / "events.jsonl"
    with FleetSimulator(kube, namespace, events_log=log, watch_window_seconds=1) as first:
        for name in fleet.applications:
            request_sync(kube, namespace, name)
        wait_for(
            lambda: sync_starts(read_events(log)) == {hung: 1, resumed: 1}, timeout=30, what="both starts"
        )
    assert first.error is None
    for name in fleet.applications:
        assert kube.get(APPLICATIONS, namespace, name)["status"]["operationState"]["phase"] == "Running"

    # The slow one gets fast; a new simulator (a restarted controller) finishes it; the hung one stays
    # Running until terminated (what `argocd app terminate-op` does).
    annotate(kube, namespace, resumed, {f"{ANNOTATION_PREFIX}sync-seconds": "0.2"})
    config = SimulatorConfig.from_yaml("defaults: {healthSeconds: 0.2}")
    with FleetSimulator(kube, namespace, config, events_log=log, watch_window_seconds=1) as second:
        wait_for(
            lambda: settled(kube, namespace, resumed), timeout=30, what="the resumed operation to finish"
        )
        assert kube.get(APPLICATIONS, namespace, hung)["status"]["operationState"]["phase"] == "Running"
        change(kube, namespace, hung, lambda app: app["status"]["operationState"].update(phase="Terminating"))
        ended = wait_for(lambda: settled(kube, namespace, hung), timeout=30, what="the terminated operation")
    assert second.error is None
    state = ended["status"]["operationState"]
    assert (state["phase"], state["message"]) == ("Failed", "Operation terminated")
    assert events_of(log, resumed) == ["sync-start", "sync-finish", "healthy"]
    assert events_of(log, hung) == ["sync-start", "sync-finish"]
    assert sorted(sync_order(read_events(log))) == sorted(c.name for c in fleet.clusters)


def test_the_applicationset_controller_takes_annotations_back(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    fleet = seed_fleet(
        kube,
        namespace,
        clusters=2,
        regions=["eu-west-1"],
        revision=REVISION,
        app_set_template_metadata={"labels": {"team": "payments"}},
    )
    rewritten, untouched = fleet.applications
    config = SimulatorConfig.from_yaml(
        f"""
defaults: {{syncSeconds: 0.2, healthSeconds: 0.2}}
clusters:
  {fleet.clusters[0].name}: {{appSetController: true}}
"""
    )
    log = tmp_path / "events.jsonl"
    with FleetSimulator(kube, namespace, config, events_log=log, watch_window_seconds=1) as sim:
        for name in fleet.applications:
            annotate(kube, namespace, name, {"progressivesync.io/rollout-id": "r1"})

        def ours_gone() -> dict[str, Any] | None:
            app = kube.get(APPLICATIONS, namespace, rewritten)
            return (
                None if "progressivesync.io/rollout-id" in (app["metadata"].get("annotations") or {}) else app
            )

        app = wait_for(ours_gone, timeout=30, what="the ApplicationSet controller to rewrite")
        assert app["metadata"]["labels"] == {"team": "payments"}
        # Any annotation change requeues it: a second write is undone too, the operation is kept.
        request_sync(kube, namespace, rewritten)
        annotate(kube, namespace, rewritten, {"progressivesync.io/stage": "canary"})
        wait_for(lambda: settled(kube, namespace, rewritten), timeout=30, what="the sync to finish")
        wait_for(ours_gone, timeout=30, what="the second rewrite")
        assert "progressivesync.io/stage" not in (
            kube.get(APPLICATIONS, namespace, rewritten)["metadata"].get("annotations") or {}
        )
    assert sim.error is None
    other = kube.get(APPLICATIONS, namespace, untouched)
    assert other["metadata"]["annotations"]["progressivesync.io/rollout-id"] == "r1"
    assert any(e["event"] == "appset-rewrite" and e["app"] == rewritten for e in read_events(log))


def test_a_release_reaches_applications_one_by_one_and_a_refresh_at_once(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    fleet = seed_fleet(kube, namespace, clusters=2, regions=["eu-west-1"], revision=OLD, synced=True)
    fast, slow = fleet.applications
    publish_refs(kube, namespace, {"main": OLD})
    config = SimulatorConfig.from_yaml(
        f"""
defaults: {{refreshSeconds: 1}}
clusters:
  {fleet.clusters[1].name}: {{refreshSeconds: 3600}}
"""
    )
    log = tmp_path / "events.jsonl"
    with FleetSimulator(kube, namespace, config, events_log=log, watch_window_seconds=1) as sim:

        def sync_of(name: str) -> dict[str, Any]:
            return dict(kube.get(APPLICATIONS, namespace, name)["status"]["sync"])

        publish_refs(kube, namespace, {"main": REVISION})  # the push
        wait_for(
            lambda: sync_of(fast)["status"] == "OutOfSync" and sync_of(fast)["revision"] == REVISION,
            timeout=30,
            what="the fast-refreshing Application to see the release",
        )
        assert sync_of(slow)["status"] == "Synced" and sync_of(slow)["revision"] == OLD, "not refreshed yet"
        annotate(kube, namespace, slow, {"argocd.argoproj.io/refresh": "normal"})
        wait_for(
            lambda: sync_of(slow)["revision"] == REVISION and sync_of(slow)["status"] == "OutOfSync",
            timeout=30,
            what="the refresh annotation to be honoured",
        )
        slow_app = kube.get(APPLICATIONS, namespace, slow)
        assert "argocd.argoproj.io/refresh" not in (slow_app["metadata"].get("annotations") or {})
        # A pin written as a tag or short SHA is stored resolved.
        publish_refs(kube, namespace, {"main": REVISION, "v2.0.0": REVISION})
        request_sync(kube, namespace, slow, revision="v2.0.0")
        synced = wait_for(lambda: settled(kube, namespace, slow), timeout=30, what="the tag sync")
    assert sim.error is None
    assert synced["status"]["operationState"]["syncResult"]["revision"] == REVISION
    assert synced["status"]["sync"]["revision"] == REVISION and synced["status"]["sync"]["status"] == "Synced"


def test_a_new_chart_version_reaches_helm_applications_one_by_one_as_the_version_itself(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """A fleet of a Helm chart from a chart repository (`1.2.*`): publishing 1.2.4 makes each
    Application OutOfSync at "1.2.4" at its next comparison; a sync pinned to the version applies it."""
    charts_url = "http://charts.example.test"
    source = {"repoURL": charts_url, "chart": "web", "targetRevision": "1.2.*"}
    fleet = seed_fleet(
        kube, namespace, clusters=2, regions=["eu-west-1"], revision="1.2.3", synced=True, source=source
    )
    publish_refs(kube, namespace, {}, {charts_url: {"web": ["1.2.3"]}})
    config = SimulatorConfig.from_yaml("defaults: {refreshSeconds: 1, syncSeconds: 0.2, healthSeconds: 0.2}")
    log = tmp_path / "events.jsonl"
    with FleetSimulator(kube, namespace, config, events_log=log, watch_window_seconds=1) as sim:

        def sync_of(name: str) -> dict[str, Any]:
            return dict(kube.get(APPLICATIONS, namespace, name)["status"]["sync"])

        publish_refs(kube, namespace, {}, {charts_url: {"web": ["1.2.3", "1.2.4"]}})  # the chart published
        wait_for(
            lambda: all(
                sync_of(a) == {**sync_of(a), "status": "OutOfSync", "revision": "1.2.4"}
                for a in fleet.applications
            ),
            timeout=30,
            what="every Application to see chart 1.2.4",
        )
        first = fleet.applications[0]
        request_sync(kube, namespace, first, revision="1.2.4")
        synced = wait_for(lambda: settled(kube, namespace, first), timeout=30, what="the sync of 1.2.4")
    assert sim.error is None
    assert synced["status"]["operationState"]["syncResult"]["revision"] == "1.2.4"
    assert synced["status"]["sync"]["revision"] == "1.2.4" and synced["status"]["sync"]["status"] == "Synced"


def test_a_deleted_application_is_not_created_again_unlike_argo_cds_application_set_controller(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """Pins a difference (docs/simulator.md): Argo CD's ApplicationSet controller creates a deleted
    generated Application again within a second, a new object (tests/argocd_real/
    test_fault_suite_argocd.py, argocd-application-recreated-new-uid); the simulator generates no
    Applications, so on the fast tier that fault is a deletion only (the rollout fails the same way:
    the cluster's Application was deleted). The simulator's rewrite of the other Application (its
    ApplicationSet reconciled after the deletion) shows it had its chance."""
    fleet = seed_fleet(kube, namespace, clusters=2, regions=["eu-west-1"], revision=REVISION)
    deleted, other = fleet.applications
    config = SimulatorConfig.from_yaml(
        """
defaults: {syncSeconds: 0.2, healthSeconds: 0.2}
clusters:
  "*": {appSetController: true}
"""
    )
    log = tmp_path / "events.jsonl"
    with FleetSimulator(kube, namespace, config, events_log=log, watch_window_seconds=1) as sim:
        kube.delete(APPLICATIONS, namespace, deleted)
        annotate(kube, namespace, other, {"progressivesync.io/rollout-id": "r1"})
        wait_for(
            lambda: any(e["event"] == "appset-rewrite" and e["app"] == other for e in read_events(log)),
            timeout=30,
            what="the simulated ApplicationSet controller to reconcile after the deletion",
        )
        with pytest.raises(NotFound):
            kube.get(APPLICATIONS, namespace, deleted)
    assert sim.error is None
    assert not [e for e in read_events(log) if e["app"] == deleted]


def test_an_application_being_deleted_keeps_argo_cds_finalizer_for_deletion_seconds(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    fleet = seed_fleet(kube, namespace, clusters=1, regions=["eu-west-1"], revision=REVISION)
    name = fleet.applications[0]
    change(
        kube,
        namespace,
        name,
        lambda app: app["metadata"].update(finalizers=["resources-finalizer.argocd.argoproj.io"]),
    )
    config = SimulatorConfig.from_yaml("defaults: {deletionSeconds: 2}")
    log = tmp_path / "events.jsonl"
    with FleetSimulator(kube, namespace, config, events_log=log, watch_window_seconds=1) as sim:
        kube.delete(APPLICATIONS, namespace, name)
        assert kube.get(APPLICATIONS, namespace, name)["metadata"]["deletionTimestamp"]

        def gone() -> bool:
            try:
                kube.get(APPLICATIONS, namespace, name)
            except NotFound:
                return True
            return False

        wait_for(gone, timeout=30, what="the finalizer to be removed")
    assert sim.error is None
    assert [e["event"] for e in read_events(log)] == ["finalized"]


def test_simulate_run_on_the_command_line_stops_on_sigterm(
    kube: Kube, namespace: str, control_plane: DevCluster, tmp_path: Path
) -> None:
    fleet = seed_fleet(kube, namespace, clusters=1, regions=["eu-west-1"], revision=REVISION)
    config = tmp_path / "sim.yaml"
    config.write_text("defaults: {syncSeconds: 0.2, healthSeconds: 0.2}\n")
    log = tmp_path / "events.jsonl"
    process = subprocess.Popen(
        [
            *CLI,
            "simulate",
            "run",
            "--namespace",
            namespace,
            "--config",
            str(config),
            "--events-log",
            str(log),
        ],
        env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        request_sync(kube, namespace, fleet.applications[0])
        wait_for(lambda: settled(kube, namespace, fleet.applications[0]), timeout=60)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "playing Argo CD's application controller" in stdout
    assert events_of(log, fleet.applications[0]) == ["sync-start", "sync-finish", "healthy"]
