"""A whole rollout while the API server closes every watch stream and etcd is compacted under it.

Real: a control plane of its own, started with `--watch-cache=false` so every watch is served by
etcd and a resume from a compacted resourceVersion answers 410 Gone; etcd compacted every half
second through its JSON gateway; the watcher's streams end every 2 s (`timeoutSeconds`). The
watcher, the local executor (real steps) and the simulator run in this process. The simulator
holds every sync in flight until the watch loops have met 410s, so the rollout spans them however
fast the machine is.

What must hold: the rollout still ends Succeeded with one Workflow and every Application synced
once (no missed transition, no duplicate side effect), and the watcher did re-list after 410s.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.devenv import tools
from orchestrator.kube.client import APPLICATIONS, NAMESPACES, Kube
from orchestrator.kube.crds import all_crd_documents, apply_crds
from orchestrator.simulator.config import ANNOTATION_PREFIX
from tests.support import etcd
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    create_ps,
    in_process_watcher,
    phase_of,
    running_actors,
    seed,
    status_of,
    sync_starts,
    workflows_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

HANG = f"{ANNOTATION_PREFIX}hang"


@pytest.fixture(scope="module")
def uncached() -> Iterator[tuple[devcluster.DevCluster, Kube]]:
    with devcluster.running(extra_apiserver_args=["--watch-cache=false"]) as cluster:
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        apply_crds(kube, all_crd_documents(tools.peer_crd_dirs()))
        yield cluster, kube
        kube.close()


@pytest.mark.timeout(900)
def test_rollout_survives_closed_streams_and_410s(
    uncached: tuple[devcluster.DevCluster, Kube], tmp_path: Path
) -> None:
    cluster, kube = uncached
    namespace = "gone"
    kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    fleet = seed(kube, namespace, clusters=3)
    steps_kubeconfig = cluster.mint_user("steps", ["system:masters"])
    events_log = tmp_path / "simulator.jsonl"

    # Every Application hangs in its sync until the watch loops have met 410s mid-rollout; only
    # then is the hang lifted. The rollout's length is thereby set by events, not by timing.
    for app in fleet.apps:
        kube.patch(APPLICATIONS, namespace, app, {"metadata": {"annotations": {HANG: "true"}}})

    stop_compacting = threading.Event()
    compactions: list[int] = []

    def compact_forever() -> None:
        while not stop_compacting.wait(0.5):
            try:
                compactions.append(etcd.compact(cluster.etcd_url))
            except OSError:
                continue  # "required revision has been compacted": nothing new since the last one

    def relists_after_gone() -> int:
        return sum(informer.stats.relists_after_gone for informer in watcher.informers)

    compactor = threading.Thread(target=compact_forever, daemon=True)
    with (
        running_actors(kube, namespace, steps_kubeconfig, events_log),
        in_process_watcher(kube, namespace, watch_timeout_seconds=2) as watcher,
    ):
        compactor.start()
        try:
            create_ps(kube, namespace, "web", fleet.app_set)
            wait_for(lambda: sync_starts(events_log), timeout=120, what="the first sync to start")
            relists_at_start = relists_after_gone()
            wait_for(
                lambda: relists_after_gone() >= relists_at_start + 2 and len(compactions) >= 10,
                timeout=120,
                what="the watch loops to meet 410 twice while a sync is in flight",
            )
            for app in fleet.apps:
                kube.patch(APPLICATIONS, namespace, app, {"metadata": {"annotations": {HANG: None}}})
            wait_for(
                lambda: phase_of(kube, namespace, "web") == "Succeeded",
                timeout=300,
                what="the rollout to succeed",
            )
        finally:
            stop_compacting.set()
            compactor.join(timeout=10)
        stats = [informer.stats for informer in watcher.informers]

    print(  # the figures, for -s runs
        f"compactions={len(compactions)} relists_after_gone={sum(s.relists_after_gone for s in stats)} "
        f"watches={sum(s.watches for s in stats)} lists={sum(s.lists for s in stats)}"
    )
    assert len(workflows_of(kube, namespace, "web")) == 1
    assert status_of(kube, namespace, "web")["progress"] == "3/3"
    assert sync_starts(events_log) == dict.fromkeys(fleet.apps, 1)
    assert sum(s.relists_after_gone for s in stats) >= 2, "the watch loops met 410 and re-listed"
    assert sum(s.watches for s in stats) >= 10, "the server closed streams and the loops resumed them"
