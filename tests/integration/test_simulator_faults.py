"""The fleet simulator rides out what Argo CD rides out, and its events log stays exact.

Real: the API server and etcd; a fault-injecting TCP proxy (tests/support/tcp_proxy.py) between the
simulator and the API server refuses connections for tens of seconds, or lets a write through and
drops its answer. The test's own client talks to the API server directly. Every wait has a deadline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import APPLICATIONS, Kube, KubeSettings
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import SimulatorConfig
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import seed_fleet
from tests.support.app_requests import REVISION, request_sync, settled
from tests.support.simulator_events import sync_starts
from tests.support.tcp_proxy import FaultProxy, Mode, kubeconfig_via, proxied
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

OUTAGE_SECONDS = 20.0
# After the API server is back, everything pending is done within this (backoff is capped at 3 s).
RECOVERY_SECONDS = 20.0


@pytest.fixture
def proxy(control_plane: DevCluster) -> Iterator[FaultProxy]:
    with proxied(control_plane.api_url) as running:
        yield running


@pytest.fixture
def proxied_kube(proxy: FaultProxy, control_plane: DevCluster, tmp_path: Path) -> Iterator[Kube]:
    """A client that talks through the proxy, with short timeouts (the simulator retries itself)."""
    path = kubeconfig_via(proxy, control_plane.kubeconfig, tmp_path / "proxied.kubeconfig")
    client = Kube.from_kubeconfig(str(path), settings=KubeSettings(read_timeout=5.0, retry_backoffs=(0.2,)))
    yield client
    client.close()


def test_an_outage_of_tens_of_seconds_loses_nothing_and_syncs_once(
    kube: Kube, namespace: str, proxy: FaultProxy, proxied_kube: Kube, tmp_path: Path
) -> None:
    fleet = seed_fleet(kube, namespace, clusters=3, regions=["eu", "us", "ap"], revision=REVISION)
    before, during, _ = fleet.applications
    log = tmp_path / "events.jsonl"
    config = SimulatorConfig.from_yaml("defaults: {syncSeconds: 2, healthSeconds: 0.2}")
    with FleetSimulator(proxied_kube, namespace, config, events_log=log, watch_window_seconds=2) as sim:
        request_sync(kube, namespace, before)
        wait_for(lambda: sync_starts(read_events(log)).get(before) == 1, timeout=30, what="the first pick-up")
        proxy.set_mode(Mode.REFUSE)  # the API server is gone for the simulator, mid-sync
        outage_ends = time.monotonic() + OUTAGE_SECONDS
        request_sync(kube, namespace, during)  # a request it cannot see yet
        # The fault lasts OUTAGE_SECONDS; the simulator must neither crash nor give up meanwhile.
        wait_for(lambda: time.monotonic() >= outage_ends or sim.error is not None, timeout=OUTAGE_SECONDS + 5)
        assert sim.error is None, sim.error
        assert kube.get(APPLICATIONS, namespace, during)["status"].get("operationState") is None, (
            "nothing moved"
        )
        proxy.set_mode(Mode.PASS)
        for name in (before, during):
            wait_for(
                lambda n=name: settled(kube, namespace, n), timeout=RECOVERY_SECONDS, what=f"{name} after"
            )
    assert sim.error is None
    assert sync_starts(read_events(log)) == {before: 1, during: 1}
    finishes = [e["app"] for e in read_events(log) if e["event"] == "sync-finish"]
    assert sorted(finishes) == sorted([before, during])


def test_a_pick_up_whose_answer_was_lost_is_logged_once(
    kube: Kube, namespace: str, proxy: FaultProxy, proxied_kube: Kube, tmp_path: Path
) -> None:
    fleet = seed_fleet(kube, namespace, clusters=1, regions=["eu"], revision=REVISION)
    name = fleet.applications[0]
    log = tmp_path / "events.jsonl"
    # The controller's queue holds the operation for 2 s: time to start dropping answers to writes.
    config = SimulatorConfig.from_yaml("defaults: {pickUpSeconds: 2, syncSeconds: 0.2, healthSeconds: 0.2}")
    with FleetSimulator(proxied_kube, namespace, config, events_log=log, watch_window_seconds=30) as sim:
        wait_for(lambda: proxy.bytes_to_client > 0, timeout=30, what="the simulator's list")
        seen = proxy.bytes_to_client
        request_sync(kube, namespace, name)
        wait_for(
            lambda: proxy.bytes_to_client > seen, timeout=30, what="the watch event to reach the simulator"
        )
        proxy.set_mode(Mode.LOSE_WRITE_ANSWERS)
        wait_for(
            lambda: (
                (kube.get(APPLICATIONS, namespace, name)["status"].get("operationState") or {}).get("phase")
                == "Running"
            ),
            timeout=30,
            what="the pick-up to land while its answer is dropped",
        )
        assert sync_starts(read_events(log)) == {}, "no answer came back: not logged yet"
        proxy.set_mode(Mode.PASS)
        wait_for(lambda: settled(kube, namespace, name), timeout=RECOVERY_SECONDS, what="the sync to end")
    assert sim.error is None
    assert sync_starts(read_events(log)) == {name: 1}
    assert [e["event"] for e in read_events(log) if e["event"].startswith("sync")] == [
        "sync-start",
        "sync-finish",
    ]


def test_simulate_run_keeps_running_through_an_outage(
    kube: Kube, namespace: str, proxy: FaultProxy, control_plane: DevCluster, tmp_path: Path
) -> None:
    """The old simulator exited 75 after ~8 s of retries; this one waits for the API server."""
    fleet = seed_fleet(kube, namespace, clusters=1, regions=["eu"], revision=REVISION)
    config = tmp_path / "sim.yaml"
    config.write_text("defaults: {syncSeconds: 0.2, healthSeconds: 0.2}\n")
    log = tmp_path / "events.jsonl"
    kubeconfig = kubeconfig_via(proxy, control_plane.kubeconfig, tmp_path / "proxied.kubeconfig")
    cli = [sys.executable, "-m", "orchestrator.cli.main", "simulate", "run", "--namespace", namespace]
    process = subprocess.Popen(
        [*cli, "--config", str(config), "--events-log", str(log)],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: proxy.bytes_to_client > 0, timeout=60, what="the simulator to list")
        proxy.set_mode(Mode.REFUSE)
        down_until = time.monotonic() + 12.0
        wait_for(lambda: time.monotonic() >= down_until or process.poll() is not None, timeout=20)
        assert process.poll() is None, f"simulate run exited {process.returncode} during the outage"
        proxy.set_mode(Mode.PASS)
        request_sync(kube, namespace, fleet.applications[0])
        wait_for(lambda: settled(kube, namespace, fleet.applications[0]), timeout=RECOVERY_SECONDS)
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert sync_starts(read_events(log)) == {fleet.applications[0]: 1}
