"""Benchmark: a rollout's wall time under a steady network fault, beside the same rollout without it.

One run, one real control plane (etcd + kube-apiserver from KUBEBUILDER_ASSETS). Each rollout has
its own namespace and fleet, its own fault-injecting TCP proxy (tests/support/tcp_proxy.py) in front
of the API server, and the watcher, the local executor (real steps) and the fleet simulator all
talking through it. The two kinds alternate (clean, faulted, clean, faulted, ...) so that load on the
shared machine falls on both alike:

- *clean*: the proxy passes everything;
- *streams cut*: the proxy resets every open connection every `--cut-seconds` (watch streams and
  requests in flight alike) for the whole rollout.

Measured: ProgressiveSync created → seen Succeeded, per rollout; the ratio of the medians (faulted
over clean). Also checked, because a fast wrong rollout is no figure: every Application synced
exactly once (the simulator's events log) and no watch loop gave up. Prints the figures and exits 0
whatever they are (timings on a shared machine are reports); exits 1 only if a rollout went wrong.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

# bench/ is run as scripts; the fault proxy and the fleet harness live with the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.devenv import tools
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import NAMESPACES, Kube
from orchestrator.kube.crds import all_crd_documents, apply_crds
from tests.support.builders import make_stage
from tests.support.tcp_proxy import FaultProxy, kubeconfig_via
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    Actors,
    create_ps,
    in_process_watcher,
    phase_of,
    seed,
    sync_starts,
)

PS = "web"


def one_rollout(cluster: DevCluster, kube: Kube, index: int, args: argparse.Namespace, *, cut: bool) -> float:
    """Seconds from the ProgressiveSync's creation until it is seen Succeeded."""
    namespace = f"bench-faults-{index}"
    kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    fleet = seed(kube, namespace, clusters=args.clusters)
    workdir = Path(tempfile.mkdtemp(prefix=f"{namespace}-"))
    host, _, port = cluster.api_url.removeprefix("https://").rpartition(":")
    proxy = FaultProxy(host, int(port)).start()
    through_proxy = kubeconfig_via(proxy, cluster.kubeconfig, workdir / "proxied.kubeconfig")
    steps = kubeconfig_via(
        proxy, cluster.mint_user(f"steps-{namespace}", ["system:masters"]), workdir / "steps"
    )
    actors_kube = Kube.from_kubeconfig(str(through_proxy))
    watcher_kube = Kube.from_kubeconfig(str(through_proxy))
    events = workdir / "simulator.jsonl"
    fleet_config = f"defaults: {{syncSeconds: {args.sync_seconds}, healthSeconds: {args.sync_seconds / 2}}}"
    stop_cutting = threading.Event()
    actors = Actors(actors_kube, namespace, steps, events, fleet_config).start()
    try:
        with in_process_watcher(watcher_kube, namespace) as watcher:
            if cut:

                def cut_forever() -> None:
                    while not stop_cutting.wait(args.cut_seconds):
                        proxy.cut()

                threading.Thread(target=cut_forever, daemon=True).start()
            stages = [
                make_stage("canary", region="eu", max_targets=1, max_parallel=1),
                make_stage("rest", max_parallel=args.max_parallel),
            ]
            started = time.monotonic()
            create_ps(kube, namespace, PS, fleet.app_set, stages=stages)
            wait_for(
                lambda: phase_of(kube, namespace, PS) in ("Succeeded", "Failed"),
                timeout=args.timeout,
                interval=0.1,
                what="the rollout to end",
            )
            took = time.monotonic() - started
            stop_cutting.set()
            phase = phase_of(kube, namespace, PS)
            gave_up = list(watcher.failed)
    finally:
        stop_cutting.set()
        actors.stop()
        proxy.stop()
        actors_kube.close()
        watcher_kube.close()
    starts = sync_starts(events)
    if phase != "Succeeded" or starts != dict.fromkeys(fleet.apps, 1) or gave_up:
        raise SystemExit(f"{namespace}: phase {phase}, syncs {starts}, gave up {gave_up}")
    return took


def main(argv: Sequence[str]) -> int:
    """Alternate clean and faulted rollouts; print their wall times and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=8)
    parser.add_argument("--max-parallel", type=int, default=2)
    parser.add_argument("--sync-seconds", type=float, default=1.0)
    parser.add_argument("--cut-seconds", type=float, default=3.0, help="reset every connection this often")
    parser.add_argument("--pairs", type=int, default=2, help="clean/faulted pairs, alternating")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)

    clean: list[float] = []
    faulted: list[float] = []
    with DevCluster.start() as cluster:
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        apply_crds(kube, all_crd_documents(tools.peer_crd_dirs()))
        for pair in range(args.pairs):
            clean.append(one_rollout(cluster, kube, 2 * pair, args, cut=False))
            faulted.append(one_rollout(cluster, kube, 2 * pair + 1, args, cut=True))
        kube.close()
    print(
        f"rollout of {args.clusters} clusters (canary, then {args.max_parallel} at a time; syncs "
        f"{args.sync_seconds}s), watcher + executor + simulator through the fault proxy:"
    )
    print(f"  clean:                 {', '.join(f'{t:.1f}s' for t in clean)}")
    print(f"  streams cut every {args.cut_seconds:g}s: {', '.join(f'{t:.1f}s' for t in faulted)}")
    ratio = statistics.median(faulted) / statistics.median(clean)
    print(f"  median cut / clean:    {ratio:.2f}  (every Application synced exactly once in each)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
