"""The fault suite (issue 18), its network and API server rows: streams cut every 2 s, a half-open
stall, chunks truncated mid-way, a 20 s outage, the API server restarted on the same etcd, etcd
compacted every 500 ms. Every actor talks to the API server through `tests/support/tcp_proxy.py`.

Each row runs one rollout under its fault and the same three checks (the phase and one Workflow,
every Application synced at most once, recovery within the row's bound): tests/support/fault_rig.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import (
    Kube,
)
from tests.support import etcd
from tests.support.fault_rig import (
    ROLLOUT_SECONDS,
    Fault,
    Heal,
    Rig,
    no_heal,
    survives,
)
from tests.support.tcp_proxy import Mode
from tests.support.wait import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


# --- what each fault showed: asserted (the fault really happened), returned for the report -------


def showed_cuts(rig: Rig) -> str:
    assert rig.proxy.counts["cut"] >= 3 and rig.watch_failures() >= 1
    return f"{rig.proxy.counts['cut']} connections cut, {rig.watch_failures()} watcher streams resumed"


def showed_stall(rig: Rig) -> str:
    assert rig.watch_failures() >= 1, "the read timeout fired on a stalled stream"
    return f"{rig.watch_failures()} stalled watcher streams ended by their read timeout"


def showed_truncation(rig: Rig) -> str:
    assert rig.proxy.counts["truncated"] >= 1
    return f"{rig.proxy.counts['truncated']} responses truncated mid-chunk"


def showed_outage(rig: Rig) -> str:
    assert rig.watch_failures() >= 1
    return f"{rig.watch_failures()} failed watcher attempts during the outage, none gave up"


def showed_restart(rig: Rig) -> str:
    assert rig.cluster.pids != rig.apiserver_pids, "kube-apiserver is a new process"
    return f"kube-apiserver restarted; {rig.watch_failures()} failed watcher attempts"


def showed_compactions(rig: Rig) -> str:
    assert len(rig.compactions) >= 3
    assert rig.watcher is not None
    relists = sum(informer.stats.relists_after_gone for informer in rig.watcher.informers)
    # With the watch cache on (the default), a resume point the cache still holds is served from
    # it: the 410s reach clients only when a stream resumes from before the cache's window
    # (test_watcher_gone runs the same rollout with the cache off, where every resume meets them).
    return f"{len(rig.compactions)} compactions, {relists} watcher re-lists after 410"


# --- the faults: each starts one and returns what ends it ----------------------------------------


def cut_streams_every_2s(rig: Rig) -> Heal:
    return rig.every(2.0, rig.proxy.cut)


def half_open_stall(rig: Rig) -> Heal:
    """Every connection open now (watch streams, requests in flight) goes silent, never closing."""
    assert rig.proxy.stall_open() > 0, "there were connections to stall"
    return no_heal


def truncate_mid_chunk_every_3s(rig: Rig) -> Heal:
    return rig.every(3.0, rig.proxy.truncate_open)


def outage_20s(rig: Rig) -> Heal:
    rig.proxy.set_mode(Mode.REFUSE)
    until = time.monotonic() + 20.0
    wait_for(lambda: time.monotonic() >= until, timeout=25.0, interval=0.5, what="the outage's end")
    rig.proxy.set_mode(Mode.PASS)
    return no_heal


def apiserver_restart(rig: Rig) -> Heal:
    """kube-apiserver stopped (SIGTERM) and started again on the same etcd and port."""
    rig.cluster.restart_apiserver()
    return no_heal


def etcd_compaction_every_500ms(rig: Rig) -> Heal:
    """etcd's history compacted to its current revision twice a second, for the whole rollout."""

    def compact() -> None:
        rig.compactions.append(etcd.compact(rig.cluster.etcd_url))

    return rig.every(0.5, compact)


FAULTS = [
    pytest.param(
        Fault(cut_streams_every_2s, "start", ROLLOUT_SECONDS, lasting=True, showed=showed_cuts),
        id="network-streams-cut-every-2s",
    ),
    # A stalled stream is noticed by its read timeout: the watcher's watches (20 s windows) at 25 s,
    # the simulator's (5 s) at 10 s, requests in flight at their 30 s read timeout; then the rollout.
    pytest.param(
        Fault(half_open_stall, "first-sync", 30.0 + ROLLOUT_SECONDS, showed=showed_stall),
        id="network-half-open-stall",
    ),
    pytest.param(
        Fault(truncate_mid_chunk_every_3s, "start", ROLLOUT_SECONDS, lasting=True, showed=showed_truncation),
        id="network-truncated-mid-chunk",
    ),
    # Refused for 20 s mid-sync: every loop waits (backoff capped at 5 s) and resumes.
    pytest.param(
        Fault(outage_20s, "first-sync", ROLLOUT_SECONDS, showed=showed_outage), id="network-outage-20s"
    ),
    pytest.param(
        Fault(apiserver_restart, "first-sync", ROLLOUT_SECONDS, showed=showed_restart),
        id="apiserver-restart-same-etcd",
    ),
    pytest.param(
        Fault(etcd_compaction_every_500ms, "start", ROLLOUT_SECONDS, lasting=True, showed=showed_compactions),
        id="apiserver-etcd-compaction",
    ),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", FAULTS)
def test_a_rollout_survives(
    fault: Fault, plane: tuple[devcluster.DevCluster, Kube], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    survives(fault, plane, request, tmp_path)
