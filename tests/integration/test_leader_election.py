"""Leader election on a real coordination.k8s.io Lease: one watcher acts, a standby takes over within
the lease time when the leader dies, nothing is done twice, and SIGTERM hands over at once.

Real: the control plane (the Lease API, resourceVersion conflicts, the audit log), the elector's
loop, two `progressive-sync watch --leader-elect --engine local` processes (each would run the local
executor in-process, but only the leader does), their HTTP endpoints, the fleet simulator.
The first test drives two electors in this process with their own monotonic clocks (no sleeping).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.clock import parse_time
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import CONFIG_MAPS, EVENTS, LEASES, Kube, NotLeader
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import SimulatorConfig
from orchestrator.watcher.leader import LeaderElector, LeaseSettings
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    LEASE,
    LEASE_SECONDS,
    RETRY,
    WatcherProcess,
    completed_count,
    create_ps,
    leader_elect_args,
    phase_of,
    seed,
    status_of,
    sync_starts,
    workflows_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SLOW_FLEET = "defaults: {syncSeconds: 1.0, healthSeconds: 1.0}"


class Ticks:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(kube: Kube, namespace: str, identity: str, ticks: Ticks) -> LeaderElector:
    settings = LeaseSettings(
        namespace=namespace,
        name=LEASE,
        identity=identity,
        lease_seconds=15,
        renew_deadline_seconds=10,
        retry_seconds=2,
    )
    return LeaderElector(kube, settings, monotonic=ticks)


def test_one_leader_a_takeover_only_after_the_lease_and_no_write_once_the_gate_closes(
    kube: Kube, namespace: str, control_plane: devcluster.DevCluster
) -> None:
    clock_a, clock_b = Ticks(), Ticks()
    a, b = elector(kube, namespace, "a", clock_a), elector(kube, namespace, "b", clock_b)
    assert a.step() and a.holds()
    assert not b.step() and not b.holds()
    for _ in range(10):  # a renews every retry period: b never gets it, however long it waits
        clock_a.now += 2
        clock_b.now += 2
        assert a.step()
        assert not b.step()

    # a stops renewing (hung, partitioned): its own gate closes at the renew deadline...
    clock_a.now += 10
    assert not a.holds()
    gated = kube.gated(a.holds)
    mark = control_plane.audit_mark()
    with pytest.raises(NotLeader):
        gated.create(CONFIG_MAPS, namespace, {"metadata": {"name": "written-after-the-lease-was-lost"}})
    assert [
        e for e in control_plane.audit_events_since(mark) if e.name == "written-after-the-lease-was-lost"
    ] == []
    # ... while b waits a whole lease duration from when *it* last saw the record change.
    clock_b.now += 14
    assert not b.step()
    clock_b.now += 1.5
    assert b.step() and b.holds()
    lease = kube.get(LEASES, namespace, LEASE)["spec"]
    assert (lease["holderIdentity"], lease["leaseTransitions"]) == ("b", 1)

    # a comes back: the record is b's and fresh, so a stands by.
    clock_a.now += 1
    assert not a.step() and not a.holds()

    # b releases (SIGTERM): a takes over at once, without waiting out the lease.
    b.release()
    assert kube.get(LEASES, namespace, LEASE)["spec"]["holderIdentity"] == ""
    clock_a.now += 0.1
    assert a.step() and a.holds()


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:  # not listening (yet, or any more)
        return 0, str(exc)


@pytest.fixture
def admin_kubeconfig(control_plane: devcluster.DevCluster) -> Path:
    return control_plane.mint_user("leader-election-watcher", ["system:masters"])


def replica(kubeconfig: Path, namespace: str, identity: str, port: int, log: Path) -> WatcherProcess:
    return WatcherProcess(
        kubeconfig,
        namespace,
        log,
        extra_args=(
            "--engine=local",
            *leader_elect_args(namespace, identity),
            f"--http-port={port}",
            "--http-address=127.0.0.1",
            "--shutdown-timeout=15",
        ),
    )


@pytest.fixture
def replicas(admin_kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[tuple[WatcherProcess, ...]]:
    made = tuple(
        replica(admin_kubeconfig, namespace, name, devcluster.free_port(), tmp_path / f"{name}.log")
        for name in ("replica-a", "replica-b")
    )
    yield made
    for process in made:
        process.stop()


def _acquired(entry: dict[str, Any]) -> bool:
    return str(entry.get("message", "")).startswith("acquired the lease")


def port_of(process: WatcherProcess) -> int:
    return int(next(a for a in process.extra_args if a.startswith("--http-port=")).split("=")[1])


@pytest.mark.timeout(900)
def test_the_leader_killed_mid_rollout_the_standby_takes_over_and_every_app_is_synced_once(
    kube: Kube, namespace: str, replicas: tuple[WatcherProcess, WatcherProcess], tmp_path: Path
) -> None:
    a, b = replicas
    fleet = seed(kube, namespace, clusters=3)
    events = tmp_path / "simulator.jsonl"
    simulator = FleetSimulator(
        kube, namespace, SimulatorConfig.from_yaml(SLOW_FLEET), events_log=events
    ).start()
    try:
        a.start()
        a.wait_logged(_acquired, what="a to lead")
        a.wait_logged(lambda e: "watching ProgressiveSyncs" in str(e.get("message")), what="a's watcher")
        b.start()
        b.wait_logged(lambda e: "standing by" in str(e.get("message")), what="b to stand by")
        wait_for(lambda: get(port_of(b), "/readyz")[0] == 200, what="b ready")
        assert "standing by" in get(port_of(b), "/readyz")[1]
        assert "progressive_sync_leader 0.0" in get(port_of(b), "/metrics")[1]
        assert "progressive_sync_leader 1.0" in get(port_of(a), "/metrics")[1]
        assert get(port_of(a), "/healthz")[0] == 200 and get(port_of(a), "/readyz")[0] == 200

        create_ps(kube, namespace, "web", fleet.app_set)
        wait_for(
            lambda: completed_count(status_of(kube, namespace, "web")) >= 1, timeout=240, what="canary done"
        )
        a.kill()
        last_renewal = parse_time(kube.get(LEASES, namespace, LEASE)["spec"]["renewTime"])
        b.wait_logged(_acquired, timeout=60, what="b to take over")
        lease = kube.get(LEASES, namespace, LEASE)["spec"]
        acquired = parse_time(lease["acquireTime"])
        assert lease["holderIdentity"] == "replica-b"
        assert last_renewal is not None and acquired is not None
        takeover = (acquired - last_renewal).total_seconds()
        print(f"takeover {takeover:.2f}s after the dead leader's last renewal (lease {LEASE_SECONDS}s)")
        # b may take it only a lease duration after it last saw a renewal, and does at its next tries
        # (the upper bound leaves room for a loaded machine: well below two lease durations).
        assert LEASE_SECONDS - RETRY <= takeover <= LEASE_SECONDS + 2 * RETRY + 4, takeover

        assert "progressive_sync_leader 1.0" in get(port_of(b), "/metrics")[1]

        # SIGTERM mid-rollout: b drains, leaves a consistent status, hands the Lease over, exits 0.
        wait_for(lambda: completed_count(status_of(kube, namespace, "web")) >= 2, timeout=240, what="2 done")
        started = time.monotonic()
        assert b.terminate(timeout=30) == 0
        print(f"SIGTERM to exit: {time.monotonic() - started:.2f}s")
        assert kube.get(LEASES, namespace, LEASE)["spec"]["holderIdentity"] == ""
        assert any(e.get("message") == "stopped" for e in b.log_entries(current_run_only=True))
        [workflow] = workflows_of(kube, namespace, "web")
        assert status_of(kube, namespace, "web")["rollout"]["workflow"] == workflow["metadata"]["name"]

        # A replica started now leads at once (the Lease was released) and finishes the rollout.
        a.start()
        a.wait_logged(_acquired, timeout=10 * RETRY + 10, what="a to lead again at once")
        wait_for(lambda: phase_of(kube, namespace, "web") == "Succeeded", timeout=300, what="Succeeded")
        wait_for(  # a's cache sees the end a moment after the test does
            lambda: 'progressive_sync_rollouts{phase="Succeeded"} 1.0' in get(port_of(a), "/metrics")[1],
            what="a's metrics to count the rollout Succeeded",
        )
    finally:
        simulator.stop()

    assert len(workflows_of(kube, namespace, "web")) == 1
    assert sync_starts(events) == dict.fromkeys(fleet.apps, 1), "every Application synced exactly once"
    reasons = [e["reason"] for e in kube.list(EVENTS, namespace)[0] if e["involvedObject"]["name"] == "web"]
    # Once each across two hand-overs: a stage that ended while no replica led is replayed by the
    # next leader, and what its predecessor recorded is not recorded twice.
    expected = {"RolloutStarted": 1, "StageSucceeded": 2, "RolloutSucceeded": 1}
    assert {reason: reasons.count(reason) for reason in expected} == expected, reasons
    print(json.dumps({"events": sorted(set(reasons))}))
