"""Benchmark of whole rollouts on the local engine with the fleet simulator (run by `make bench`).

One run, one real control plane (etcd + kube-apiserver from KUBEBUILDER_ASSETS), measured side by
side:

1. **Reaction latency**, from the API server's audit log (write times, microseconds) and the
   simulator's records (when it wrote each Application Healthy):
   - *applied -> first sync*: a ProgressiveSync created -> the first Application sync written, over
     several small ProgressiveSyncs applied one after another;
   - *healthy -> next sync*: a cluster's Application written Healthy -> the sync of the next cluster
     of the same stage written (the cluster that took the freed slot).
2. **Rollout wall time / critical path** for 100 clusters in 3 stages: from the ProgressiveSync's
   creation until it is seen Succeeded, divided by the critical path of the simulated syncs alone
   (per stage, the clusters' measured sync+health times scheduled `maxParallel` at a time in the
   order they started; stages in sequence). 1.00 would be an orchestrator that costs nothing.
3. **Sync writes per Application per rollout**, from the audit log: successful updates of each
   Application by the steps' user (the watcher and the steps run as their own user; the simulator
   as another), for every Application of every rollout above.
4. **Watcher peak RSS with 10,000 Applications**: `progressive-sync watch` as its own process
   (engine argo, so it only watches, plans and writes status) while 10,000 Applications of 20
   ApplicationSets over 500 clusters are created and reconciled; sampled with psutil, and the
   kernel's high-water mark (VmHWM) where there is one.

Targets: ratio <= 1.10, exactly 1 sync write per Application, RSS < 150 MB. Prints the figures and
exits 0 whatever they are: timings on a shared machine are reports, not verdicts. `--help` lists the
knobs (a quick run: `--clusters 20 --sync-seconds 3 --apps 1000`).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import heapq
import json
import math
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

# bench/ is run as scripts; the reader of per-cluster outcomes lives with the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.core.clock import SystemClock
from orchestrator.devenv import tools
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import (
    APPLICATION_SETS,
    APPLICATIONS,
    NAMESPACES,
    PROGRESSIVE_SYNCS,
    SECRETS,
    AlreadyExists,
    Kube,
)
from orchestrator.kube.crds import all_crd_documents, apply_crds
from orchestrator.planning.sizing import resolve_int_or_percent
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import ANNOTATION_PREFIX, Behaviour, SimulatorConfig
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import seed_fleet
from orchestrator.watcher.loop import Watcher
from orchestrator.watcher.settings import Engine, LogFormat, Settings
from tests.support.outcomes import status_with_outcomes

NAMESPACE = "argocd"
REVISION = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"
STEPS_USER = "progressive-sync"
REGIONS = ("eu-west-1", "us-east-1", "ap-south-1", "sa-east-1")
RATIO_TARGET = 1.10
RSS_TARGET_MB = 150.0


# --- pure helpers (tested in tests/unit/test_bench_rollout.py) ----------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between the closest ranks; nan if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def makespan(durations: Sequence[float], parallel: int) -> float:
    """Time to run `durations` in order, at most `parallel` at once, each starting when a slot frees."""
    if not durations:
        return 0.0
    slots = [0.0] * max(1, min(parallel, len(durations)))
    for duration in durations:
        start = heapq.heappop(slots)
        heapq.heappush(slots, start + duration)
    return max(slots)


def critical_path(stages: Iterable[tuple[Sequence[float], int]]) -> float:
    """Stages run one after another; each is the makespan of its clusters' durations."""
    return sum(makespan(durations, parallel) for durations, parallel in stages)


def slot_reactions(syncs: Sequence[float], healthies: Sequence[float], parallel: int) -> list[float]:
    """Healthy -> next sync latencies within one stage.

    `syncs` are the stage's sync write times in order; `healthies` its clusters' Healthy times. The
    first `parallel` syncs start without waiting; each later one took the slot of the most recent
    cluster that turned Healthy before it.
    """
    latencies = []
    done = sorted(healthies)
    for sync in sorted(syncs)[parallel:]:
        before = [t for t in done if t <= sync]
        if before:
            latencies.append(sync - before[-1])
    return latencies


def writes_per_app(audit: Iterable[dict[str, Any]], user: str) -> Counter[str]:
    """Successful updates/patches of each Application by `user` (audit log lines)."""
    counts: Counter[str] = Counter()
    for line in audit:
        ref = line.get("objectRef") or {}
        if ref.get("resource") != "applications" or line.get("verb") not in ("update", "patch"):
            continue
        if (line.get("user") or {}).get("username") != user:
            continue
        if (line.get("responseStatus") or {}).get("code") != 200:
            continue
        counts[str(ref.get("name"))] += 1
    return counts


def audit_time(line: dict[str, Any]) -> float:
    """When the API server answered the request (epoch seconds, microsecond precision)."""
    return datetime.fromisoformat(str(line["stageTimestamp"]).replace("Z", "+00:00")).timestamp()


# --- the run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """What the run measures, from the command line."""

    clusters: int
    sync_seconds: float
    health_seconds: float
    latency_rollouts: int
    latency_clusters: int
    apps: int
    timeout: float


def parse_options(argv: Sequence[str]) -> Options:
    """The command line (defaults: the figures the issue asks for)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=100, help="clusters of the big rollout")
    parser.add_argument("--sync-seconds", type=float, default=25.0, help="simulated sync time")
    parser.add_argument("--health-seconds", type=float, default=5.0, help="simulated time to Healthy")
    parser.add_argument("--latency-rollouts", type=int, default=6, help="small rollouts for the latency")
    parser.add_argument("--latency-clusters", type=int, default=4, help="clusters per small rollout")
    parser.add_argument("--apps", type=int, default=10_000, help="Applications for the RSS figure")
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up a rollout after this long")
    args = parser.parse_args(argv)
    return Options(
        clusters=args.clusters,
        sync_seconds=args.sync_seconds,
        health_seconds=args.health_seconds,
        latency_rollouts=args.latency_rollouts,
        latency_clusters=args.latency_clusters,
        apps=args.apps,
        timeout=args.timeout,
    )


def stage(
    name: str, *, max_targets: int | str, max_parallel: int | str, spread_by: str | None = None
) -> dict[str, Any]:
    """A stage over every cluster (earlier stages take theirs first)."""
    entry: dict[str, Any] = {
        "name": name,
        "targets": {"clusters": {"selector": {}}},
        "maxTargets": max_targets,
        "maxParallel": max_parallel,
    }
    if spread_by:
        entry["spreadBy"] = spread_by
    return entry


def progressive_sync(name: str, stages: list[dict[str, Any]], *, paused: bool = False) -> dict[str, Any]:
    """A ProgressiveSync named after (and rolling out) the ApplicationSet `name`."""
    return {
        "apiVersion": "progressivesync.io/v1alpha1",
        "kind": "ProgressiveSync",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "appSetRef": {"name": name},
            "stages": stages,
            "progressDeadlineSeconds": 600,
            "paused": paused,
        },
    }


BIG_STAGES = [
    stage("canary", max_targets=1, max_parallel=1),
    stage("one per region", max_targets=len(REGIONS), max_parallel=len(REGIONS), spread_by="region"),
    stage("the rest", max_targets="100%", max_parallel="25%"),
]


def read_audit(cluster: DevCluster) -> list[dict[str, Any]]:
    """Every audit line so far (the API server writes them before it answers)."""
    with cluster.audit_log_path.open() as handle:
        return [json.loads(line) for line in handle if line.strip()]


def wait_settled(kube: Kube, name: str, timeout: float) -> tuple[float, dict[str, Any]]:
    """Poll until the ProgressiveSync's rollout ended; (when it was first seen ended, its status with
    every stage's clusters listed from its records: `tests.support.outcomes.status_with_outcomes`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        obj = kube.get(PROGRESSIVE_SYNCS, NAMESPACE, name)
        status = obj.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed", "Cancelled") and (status.get("rollout") or {}).get(
            "finishedAt"
        ):
            return time.time(), status_with_outcomes(kube, NAMESPACE, name)
        time.sleep(0.1)
    raise TimeoutError(f"ProgressiveSync {name} did not finish within {timeout:g}s")


def stage_reactions(
    status: dict[str, Any],
    stages: list[dict[str, Any]],
    sync_at: dict[str, float],
    healthy_at: dict[str, float],
) -> tuple[list[float], list[tuple[list[float], int]]]:
    """(healthy -> next sync latencies, [(durations in start order, parallel)] per stage) of a rollout."""
    reactions: list[float] = []
    per_stage: list[tuple[list[float], int]] = []
    for spec, entry in zip(stages, status.get("stages") or [], strict=False):
        targets = [c for c in entry.get("targets") or [] if c in sync_at and c in healthy_at]
        if not targets:
            continue
        parallel = min(
            resolve_int_or_percent(spec["maxParallel"], len(entry["targets"])), len(entry["targets"])
        )
        reactions += slot_reactions([sync_at[c] for c in targets], [healthy_at[c] for c in targets], parallel)
        ordered = sorted(targets, key=lambda c: sync_at[c])
        per_stage.append(([healthy_at[c] - sync_at[c] for c in ordered], parallel))
    return reactions, per_stage


def cluster_times(
    audit: list[dict[str, Any]],
    events: list[dict[str, Any]],
    app_set: str,
    since: float,
    *,
    user: str = STEPS_USER,
) -> tuple[dict[str, float], dict[str, float]]:
    """Per cluster of `app_set`: when `user` wrote its sync (audit) and it was written Healthy (simulator)."""
    prefix = f"{app_set}-"
    sync_at: dict[str, float] = {}
    for line in audit:
        ref = line.get("objectRef") or {}
        name = str(ref.get("name", ""))
        if ref.get("resource") != "applications" or not name.startswith(prefix):
            continue
        if (line.get("user") or {}).get("username") != user or line.get("verb") != "update":
            continue
        if (line.get("responseStatus") or {}).get("code") != 200 or audit_time(line) < since:
            continue
        sync_at.setdefault(name[len(prefix) :], audit_time(line))
    healthy_at: dict[str, float] = {}
    for event in events:
        if event["event"] == "healthy" and str(event["app"]).startswith(prefix) and event["time"] >= since:
            healthy_at.setdefault(str(event["cluster"]), float(event["time"]))
    return sync_at, healthy_at


def created_at(audit: list[dict[str, Any]], resource: str, name: str) -> float:
    """When the API server created the object (audit time of the successful create)."""
    for line in audit:
        ref = line.get("objectRef") or {}
        is_create = line.get("verb") == "create" and ref.get("resource") == resource
        succeeded = (line.get("responseStatus") or {}).get("code") in (200, 201)
        if is_create and succeeded and ref.get("name") == name:
            return audit_time(line)
    raise LookupError(f"no create of {resource}/{name} in the audit log")


def run_rollouts(
    cluster: DevCluster, admin: Kube, options: Options, workdir: Path, say: Callable[[str], None]
) -> dict[str, Any]:
    """Parts 1-3: the small rollouts, then the 100-cluster one, with the watcher and the simulator."""
    steps_kubeconfig = cluster.mint_user(STEPS_USER, ["system:masters"])
    latency_sets = [f"latency-{i}" for i in range(1, options.latency_rollouts + 1)]
    apps: list[str] = []
    for app_set in latency_sets:
        seeded = seed_fleet(
            admin,
            NAMESPACE,
            clusters=options.latency_clusters,
            regions=REGIONS,
            revision=REVISION,
            app_set=app_set,
        )
        apps += seeded.applications
    fleet = seed_fleet(
        admin, NAMESPACE, clusters=options.clusters, regions=REGIONS, revision=REVISION, app_set="fleet"
    )
    apps += fleet.applications
    # The small rollouts sync fast (the simulator's defaults); the big fleet's Applications carry
    # their own timing in the simulator's annotations (they share clusters with the small ones).
    for app in fleet.applications:
        admin.patch(
            APPLICATIONS,
            NAMESPACE,
            app,
            {
                "metadata": {
                    "annotations": {
                        f"{ANNOTATION_PREFIX}sync-seconds": str(options.sync_seconds),
                        f"{ANNOTATION_PREFIX}health-seconds": str(options.health_seconds),
                    }
                }
            },
        )
    events_log = workdir / "simulator-events.jsonl"
    simulator = FleetSimulator(
        admin,
        NAMESPACE,
        SimulatorConfig(defaults=Behaviour(sync_seconds=1.0, health_seconds=0.5)),
        events_log=events_log,
    )
    steps_kube = Kube.from_kubeconfig(str(steps_kubeconfig))
    watcher = Watcher(
        steps_kube,
        Settings(
            namespaces=(NAMESPACE,),
            kubeconfig=str(steps_kubeconfig),
            engine=Engine.LOCAL,
            log_format=LogFormat.TEXT,
            workers=2,
        ),
    )
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        stack.callback(steps_kube.close)
        stack.enter_context(simulator)
        stack.enter_context(watcher)
        first_sync: list[float] = []
        reactions: list[float] = []
        for app_set in latency_sets:
            admin.create(
                PROGRESSIVE_SYNCS,
                NAMESPACE,
                progressive_sync(app_set, [stage("one by one", max_targets="100%", max_parallel=1)]),
            )
            wait_settled(admin, app_set, options.timeout)
            audit = read_audit(cluster)
            applied = created_at(audit, "progressivesyncs", app_set)
            sync_at, healthy_at = cluster_times(audit, read_events(events_log), app_set, applied)
            first_sync.append(min(sync_at.values()) - applied)
            reactions += slot_reactions(list(sync_at.values()), list(healthy_at.values()), 1)
            say(f"  rollout {app_set}: first sync {first_sync[-1]:.2f}s after apply")
        say(
            f"  rollout fleet: {options.clusters} clusters, {options.sync_seconds:g}s sync + "
            f"{options.health_seconds:g}s to Healthy each ..."
        )
        admin.create(PROGRESSIVE_SYNCS, NAMESPACE, progressive_sync("fleet", BIG_STAGES))
        ended, status = wait_settled(admin, "fleet", options.timeout)
        audit = read_audit(cluster)
        applied = created_at(audit, "progressivesyncs", "fleet")
        sync_at, healthy_at = cluster_times(audit, read_events(events_log), "fleet", applied)
        big_reactions, per_stage = stage_reactions(status, BIG_STAGES, sync_at, healthy_at)
        first_sync.append(min(sync_at.values()) - applied)
        reactions += big_reactions
        wall = ended - applied
        crit = critical_path(per_stage)
        results.update(
            phase=status.get("phase"),
            first_sync=first_sync,
            reactions=reactions,
            wall=wall,
            critical=crit,
            stage_sizes=[len(durations) for durations, _ in per_stage],
            writes=writes_per_app(audit, STEPS_USER),
            apps=apps,
        )
    return results


# --- part 4: the watcher's memory -------------------------------------------------------------------


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def peak_rss_mb(pid: int) -> float | None:
    """The kernel's high-water mark of the process's resident set (VmHWM), in MB, where Linux has it."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run_memory(
    cluster: DevCluster, admin: Kube, options: Options, say: Callable[[str], None]
) -> dict[str, Any]:
    """Part 4: `progressive-sync watch` in its own process while `options.apps` Applications appear."""
    app_sets = 20
    clusters = max(1, options.apps // app_sets)
    log_file = (cluster.workdir / "watcher-rss.log").open("wb")
    watcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.main",
            "watch",
            "-n",
            NAMESPACE,
            "--engine",
            "argo",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--log-format",
            "text",
            "--log-level",
            "warning",
        ],
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    process = psutil.Process(watcher.pid)
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            with contextlib.suppress(psutil.Error):
                samples.append(process.memory_info().rss / 2**20)
            stop.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: _create(admin, SECRETS, _cluster_secret(i)), range(clusters)))
            uids = list(
                pool.map(
                    lambda s: _create(admin, APPLICATION_SETS, _app_set(f"rss-{s}"))["metadata"]["uid"],
                    range(app_sets),
                )
            )
            for s in range(app_sets):
                _create(
                    admin,
                    PROGRESSIVE_SYNCS,
                    progressive_sync(
                        f"rss-{s}", [stage("all", max_targets="100%", max_parallel="10%")], paused=True
                    ),
                )
            jobs = [(s, c) for s in range(app_sets) for c in range(clusters)]
            list(
                pool.map(
                    lambda job: _create(admin, APPLICATIONS, _app(f"rss-{job[0]}", uids[job[0]], job[1])),
                    jobs,
                )
            )
        created = time.monotonic() - started
        say(
            f"  created {len(jobs)} Applications, {clusters} clusters, {app_sets} ApplicationSets "
            f"in {created:.0f}s"
        )
        # Let the watcher list, cache and reconcile everything: its status writes say it has.
        deadline = time.monotonic() + options.timeout
        while time.monotonic() < deadline:
            items, _ = admin.list(PROGRESSIVE_SYNCS, NAMESPACE)
            reconciled = [
                i
                for i in items
                if i["metadata"]["name"].startswith("rss-") and (i.get("status") or {}).get("phase")
            ]
            if len(reconciled) == app_sets:
                break
            time.sleep(0.5)
        stop.wait(10.0)  # and a quiet while after, for the steady state
        hwm = peak_rss_mb(watcher.pid)
    finally:
        stop.set()
        sampler.join(5)
        watcher.terminate()
        try:
            watcher.wait(30)
        except subprocess.TimeoutExpired:
            watcher.kill()
        log_file.close()
    return {
        "apps": len(jobs),
        "peak_sampled": max(samples) if samples else math.nan,
        "peak_hwm": hwm,
        "steady": samples[-1] if samples else math.nan,
        "reconciled": len(reconciled),
    }


def _create(kube: Kube, resource: Any, body: dict[str, Any]) -> dict[str, Any]:
    try:
        return kube.create(resource, NAMESPACE, body)
    except AlreadyExists:
        return kube.get(resource, NAMESPACE, body["metadata"]["name"])


def _cluster_secret(index: int) -> dict[str, Any]:
    name = f"rss-cluster-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": f"cluster-{name}",
            "labels": {"argocd.argoproj.io/secret-type": "cluster", "region": REGIONS[index % len(REGIONS)]},
        },
        "data": {"name": _b64(name), "server": _b64(f"https://{name}.example.test"), "config": _b64("{}")},
    }


def _app_set(name: str) -> dict[str, Any]:
    # Argo CD's own CRD requires the template's project and destination (an empty one is refused).
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": name},
        "spec": {
            "generators": [{"clusters": {"selector": {}}}],
            "template": {
                "metadata": {"name": name + "-{{name}}"},
                "spec": {
                    "project": "default",
                    "destination": {"name": "{{name}}", "namespace": name},
                    "source": {"repoURL": "https://git.example.test/deploy.git", "path": name},
                },
            },
        },
    }


def _app(app_set: str, uid: str, index: int) -> dict[str, Any]:
    cluster = f"rss-cluster-{index}"
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": f"{app_set}-{cluster}",
            "ownerReferences": [
                {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "name": app_set, "uid": uid}
            ],
        },
        "spec": {
            "project": "default",
            "destination": {"name": cluster, "namespace": app_set},
            "source": {
                "repoURL": "https://git.example.test/deploy.git",
                "path": app_set,
                "targetRevision": "main",
            },
        },
        "status": {"sync": {"status": "OutOfSync", "revision": REVISION}, "health": {"status": "Healthy"}},
    }


# --- report --------------------------------------------------------------------------------------


def figure_table(rows: Sequence[tuple[str, str, str]]) -> str:
    """Rows of (figure, value, note) as aligned columns under a FIGURE / VALUE / NOTE header."""
    width = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = ["", "FIGURE".ljust(width[0]) + "  " + "VALUE".ljust(width[1]) + "  NOTE"]
    lines += [f"{a.ljust(width[0])}  {b.ljust(width[1])}  {c}" for a, b, c in rows]
    return "\n".join(lines)


def report(rollouts: dict[str, Any], memory: dict[str, Any], options: Options) -> str:
    """The table of figures."""
    writes: Counter[str] = rollouts["writes"]
    apps = rollouts["apps"]
    per_app = [writes.get(app, 0) for app in apps]
    distribution = Counter(per_app)
    ratio = rollouts["wall"] / rollouts["critical"] if rollouts["critical"] else math.nan
    peak = memory["peak_hwm"] if memory["peak_hwm"] is not None else memory["peak_sampled"]
    rows = [
        (
            "applied -> first sync written",
            f"p50 {percentile(rollouts['first_sync'], 50):.2f}s  "
            f"p95 {percentile(rollouts['first_sync'], 95):.2f}s",
            f"n={len(rollouts['first_sync'])}",
        ),
        (
            "cluster Healthy -> next sync written",
            f"p50 {percentile(rollouts['reactions'], 50):.2f}s  "
            f"p95 {percentile(rollouts['reactions'], 95):.2f}s",
            f"n={len(rollouts['reactions'])}",
        ),
        (
            f"rollout wall / critical path ({options.clusters} clusters)",
            f"{ratio:.3f}  ({rollouts['wall']:.1f}s / {rollouts['critical']:.1f}s)",
            f"target <= {RATIO_TARGET:.2f}; stages {rollouts['stage_sizes']}; {rollouts['phase']}",
        ),
        (
            "sync writes per Application per rollout",
            ", ".join(f"{k} write(s): {v} apps" for k, v in sorted(distribution.items())),
            f"target exactly 1; {len(apps)} Applications in {options.latency_rollouts + 1} rollouts",
        ),
        (
            f"watcher peak RSS, {memory['apps']:,} Applications",
            f"{peak:.1f} MB (sampled peak {memory['peak_sampled']:.1f} MB, steady {memory['steady']:.1f} MB)",
            f"target < {RSS_TARGET_MB:.0f} MB; {memory['reconciled']}/20 ProgressiveSyncs reconciled",
        ),
    ]
    return figure_table(rows)


def main(argv: Sequence[str]) -> int:
    """Run everything on one control plane and print the table."""
    options = parse_options(argv)
    say = lambda text: print(text, flush=True)  # noqa: E731
    say(
        f"bench_rollout: local engine + fleet simulator, local control plane ({SystemClock().now():%H:%M:%S})"
    )
    with DevCluster.start() as cluster:
        admin = Kube.from_kubeconfig(str(cluster.kubeconfig))
        try:
            apply_crds(admin, all_crd_documents(tools.peer_crd_dirs()))
            with contextlib.suppress(AlreadyExists):
                admin.create(
                    NAMESPACES,
                    None,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                )
            say("rollouts:")
            rollouts = run_rollouts(cluster, admin, options, cluster.workdir, say)
            say("watcher memory:")
            memory = run_memory(cluster, admin, options, say)
        finally:
            admin.close()
    print(report(rollouts, memory, options))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
