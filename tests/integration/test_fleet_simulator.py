"""The fleet simulator against the real API server: `simulate seed` builds a fleet the planner and
the steps accept, and the simulated controller moves Applications through an operation the way
Argo CD does (pick up, Running, Succeeded/Failed, `.operation` removed, Synced, Progressing ->
Healthy/Degraded, `reconciledAt` after `finishedAt`), with behaviour per cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.argocd import appsync
from orchestrator.core.clock import SystemClock, parse_time
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import APPLICATION_SETS, APPLICATIONS, SECRETS, Kube
from orchestrator.simulator.appcontroller import (
    FleetSimulator,
    SimulatorConfig,
    max_in_flight,
    read_events,
    seed_fleet,
    sync_order,
)
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "orchestrator.cli.main"]


def request_sync(kube: Kube, namespace: str, name: str, *, revision: str = REVISION) -> None:
    app = kube.get(APPLICATIONS, namespace, name)
    body = appsync.build_sync_request(
        app,
        revisions=[revision or "placeholder"],
        rollout_id="r1",
        stage="canary",
        prune=False,
        sync_options=[],
        now=SystemClock().now(),
    )
    if not revision:  # what a careless caller sends; the steps never do
        body["operation"]["sync"]["revision"] = ""
    kube.replace(APPLICATIONS, namespace, body)


def settled(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    app = kube.get(APPLICATIONS, namespace, name)
    state = appsync.operation_state(app) or {}
    health = (app.get("status") or {}).get("health", {}).get("status")
    if state.get("phase") == "Failed" or (
        health in ("Healthy", "Degraded") and state.get("phase") == "Succeeded"
    ):
        return app
    return None


@pytest.fixture
def simulator(kube: Kube, namespace: str, tmp_path: Path) -> Iterator[FleetSimulator]:
    config = SimulatorConfig.from_yaml(
        """
defaults: {syncSeconds: 0.4, healthSeconds: 0.4}
clusters:
  "*-us-east-1?": {fail: true}
  "*-ap-south-1?": {degrade: true}
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
    assert "operation" not in ok and appsync.REFRESH_ANNOTATION not in ok["metadata"].get("annotations", {})
    assert (state["phase"], state["syncResult"]) == ("Succeeded", {"revision": REVISION})
    assert appsync.operation_is_ours(state["operation"], "r1")
    assert ok["status"]["sync"] == {"status": "Synced", "revision": REVISION}
    assert ok["status"]["health"] == {"status": "Healthy"}
    assert parse_time(ok["status"]["reconciledAt"]) >= parse_time(state["finishedAt"])  # type: ignore[operator]

    assert failed["status"]["operationState"]["phase"] == "Failed" and "operation" not in failed
    assert failed["status"]["sync"]["status"] == "OutOfSync"
    assert degraded["status"]["health"]["status"] == "Degraded"

    events = read_events(tmp_path / "events.jsonl")
    by_cluster: dict[str, list[str]] = {}
    for event in events:
        by_cluster.setdefault(event["cluster"], []).append(event["event"])
    clusters = [c.name for c in fleet.clusters]
    assert by_cluster == {
        clusters[0]: ["sync-start", "sync-finish", "healthy"],
        clusters[1]: ["sync-start", "sync-finish"],
        clusters[2]: ["sync-start", "sync-finish", "degraded"],
    }
    assert all(e["revision"] == REVISION for e in events if e["event"].startswith("sync"))
    assert max_in_flight(events) == 3, "all three were synced at once"


def test_an_empty_revision_resolves_to_whatever_argo_cd_compared_against(
    kube: Kube, namespace: str, simulator: FleetSimulator
) -> None:
    """The trap the sync step refuses to walk into, played faithfully."""
    fleet = seed_fleet(kube, namespace, clusters=1, regions=["eu-west-1"], revision="f00dcafe")
    request_sync(kube, namespace, fleet.applications[0], revision="")
    app = wait_for(lambda: settled(kube, namespace, fleet.applications[0]), timeout=30)
    assert app["status"]["operationState"]["syncResult"] == {"revision": "f00dcafe"}


def test_hang_stays_running_and_a_new_simulator_resumes_a_picked_up_operation(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    fleet = seed_fleet(kube, namespace, clusters=2, regions=["eu-west-1"], revision=REVISION)
    hung, resumed = fleet.applications
    app = kube.get(APPLICATIONS, namespace, hung)
    app["metadata"]["annotations"] = {"simulator.progressivesync.io/hang": "true"}
    kube.replace(APPLICATIONS, namespace, app)
    app = kube.get(APPLICATIONS, namespace, resumed)
    app["metadata"]["annotations"] = {"simulator.progressivesync.io/sync-seconds": "3600"}
    kube.replace(APPLICATIONS, namespace, app)
    log = tmp_path / "events.jsonl"
    with FleetSimulator(kube, namespace, events_log=log, watch_window_seconds=1):
        for name in fleet.applications:
            request_sync(kube, namespace, name)
        wait_for(lambda: len(read_events(log)) == 2, timeout=30, what="both syncs to start")
    for name in fleet.applications:
        assert kube.get(APPLICATIONS, namespace, name)["status"]["operationState"]["phase"] == "Running"

    # The slow one gets fast; a new simulator (a restarted controller) finishes it; the hung one stays.
    app = kube.get(APPLICATIONS, namespace, resumed)
    app["metadata"]["annotations"] = {"simulator.progressivesync.io/sync-seconds": "0.2"}
    kube.replace(APPLICATIONS, namespace, app)
    config = SimulatorConfig.from_yaml("defaults: {healthSeconds: 0.2}")
    with FleetSimulator(kube, namespace, config, events_log=log, watch_window_seconds=1):
        wait_for(
            lambda: settled(kube, namespace, resumed), timeout=30, what="the resumed operation to finish"
        )
    assert kube.get(APPLICATIONS, namespace, hung)["status"]["operationState"]["phase"] == "Running"
    assert [(e["app"], e["event"]) for e in read_events(log) if e["event"] != "sync-start"] == [
        (resumed, "sync-finish"),
        (resumed, "healthy"),
    ]
    assert sorted(sync_order(read_events(log))) == sorted(c.name for c in fleet.clusters)


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
    assert [e["event"] for e in read_events(log)] == ["sync-start", "sync-finish", "healthy"]
