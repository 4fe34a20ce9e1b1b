"""Benchmark: one 12-cluster rollout on the local engine and on the real Argo Workflows controller.

Run by `make bench` right after bench_rollout.py (the name sorts after it), whose measuring
helpers it reuses. The same rollouts, the same simulated fleet timings, measured the same way, side
by side in one run:

1. **local**: the watcher with the local executor (steps as subprocesses) on a local control plane;
2. **argo**: the watcher with `--engine argo` on the dev stack with a real node: the real
   workflow-controller runs every step as a pod of the locally built step image, under the chart's
   steps service account (`orchestrator.devenv.stack`), once with the `DEFAULT_REQUEUE_TIME` that
   `dev-cluster up` and Argo use by default (10 s) and once with the tests' 1 s (the controller is
   restarted between; `--requeue-times`), each with the rollout follower (steps/follow.py) on
   (`--followers on,off` adds a run without it) and with a small stage's cluster pods started
   maxParallel at a time and all together (`--pods-at-once`, steps/turn.py).

Per engine: *applied -> first sync written* over a few small rollouts and the big one;
*cluster Healthy -> next sync written* (the freed slot taken) within stages; *last Healthy ->
next stage's first sync* at each boundary of the big rollout; *sync writes per Application* (the
updates that set `.operation`, apart from the refresh requests); *wall / critical path*
of the 12-cluster rollout, to the ProgressiveSync saying how it ended (the simulated syncs' own
times scheduled `maxParallel` at a time: 1.00 would be an orchestrator that costs nothing), and how
much later its Workflow ended (the last cluster records a success itself: steps/rollout_end.py);
and the stack's start time. The fleet simulator plays
Argo CD in both. Figures are reports, not verdicts: the script exits 0 whatever they are. The argo
half needs root and the machine's node: it waits for its turn on the node queue (or runs at once
under `flock -w 7200 /tmp/progressive-sync-realstack.lock`); a node started outside the queue makes
it fail at once, naming the holder.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_rollout as base  # bench/ is the script's folder, so it is on sys.path

from orchestrator.core.clock import SystemClock
from orchestrator.devenv import machine, tools
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.devenv.node import PODS
from orchestrator.devenv.stack import DevStack, StackOptions
from orchestrator.kube.client import (
    APPLICATIONS,
    NAMESPACES,
    PROGRESSIVE_SYNCS,
    WORKFLOWS,
    AlreadyExists,
    Kube,
)
from orchestrator.kube.crds import all_crd_documents, apply_crds
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import ANNOTATION_PREFIX, Behaviour, SimulatorConfig
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import seed_fleet
from orchestrator.watcher.loop import Watcher
from orchestrator.watcher.settings import Engine, LogFormat, Settings
from workflow_templates.settings import WorkflowSettings

NAMESPACE = base.NAMESPACE
STEPS_SERVICE_ACCOUNT = "progressive-sync-steps"


def stages(rest_parallel: int | str) -> list[dict[str, Any]]:
    """The demo's stages: a canary, one cluster per region, the rest `rest_parallel` at a time."""
    return [
        base.stage("canary", max_targets=1, max_parallel=1),
        base.stage("one per region", max_targets=3, max_parallel=3, spread_by="region"),
        base.stage("the rest", max_targets="100%", max_parallel=rest_parallel),
    ]


REGIONS = ("eu-west-1", "us-east-1", "ap-south-1")
# `--pods-at-once on`: every stage of one pod per cluster below the batch threshold starts its pods together.
PODS_AT_ONCE_LIMIT = 50


@dataclass(frozen=True)
class Options:
    """What the run measures."""

    clusters: int
    sync_seconds: float
    health_seconds: float
    latency_rollouts: int
    requeue_times: tuple[str, ...]
    followers: tuple[bool, ...]
    pods_at_once: tuple[bool, ...]
    rest_parallel: int | str
    pods: int
    timeout: float


def parse_options(argv: Sequence[str]) -> Options:
    """The command line (defaults: the figures the issue asks for)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=12, help="clusters of the big rollout")
    parser.add_argument("--sync-seconds", type=float, default=5.0, help="simulated sync time")
    parser.add_argument("--health-seconds", type=float, default=2.0, help="simulated time to Healthy")
    parser.add_argument("--latency-rollouts", type=int, default=3, help="small rollouts for the latency")
    parser.add_argument(
        "--requeue-times",
        default="10s,1s",
        help="the Argo controller's DEFAULT_REQUEUE_TIME, one run each (comma-separated; the first is also "
        "the stack's at start)",
    )
    parser.add_argument(
        "--followers",
        default="on",
        help="the rollout follower (steps/follow.py) on and/or off on the real controller, one run each per "
        "requeue time (comma-separated; the local engine runs with it on)",
    )
    parser.add_argument(
        "--pods-at-once",
        default="off,on",
        help="a small stage's cluster pods all started together (steps/turn.py, "
        "WorkflowSettings.pods_at_once_limit 50) and/or maxParallel at a time, one run each per requeue time "
        "and follower (comma-separated: on,off)",
    )
    parser.add_argument(
        "--rest-parallel",
        default="50%",
        help="maxParallel of the big rollout's last stage (an int or N%%): fewer means more waves",
    )
    parser.add_argument("--pods", type=int, default=10, help="pods run one by one for the pod round trip")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up a rollout after this long")
    args = parser.parse_args(argv)
    return Options(
        clusters=args.clusters,
        sync_seconds=args.sync_seconds,
        health_seconds=args.health_seconds,
        latency_rollouts=args.latency_rollouts,
        requeue_times=tuple(t.strip() for t in args.requeue_times.split(",") if t.strip()),
        followers=tuple(f.strip() == "on" for f in args.followers.split(",") if f.strip()),
        pods_at_once=tuple(f.strip() == "on" for f in args.pods_at_once.split(",") if f.strip()),
        rest_parallel=int(args.rest_parallel) if args.rest_parallel.isdigit() else args.rest_parallel,
        pods=args.pods,
        timeout=args.timeout,
    )


def seed(admin: Kube, options: Options, prefix: str) -> tuple[list[str], list[str]]:
    """The small fleets (fast syncs) and the big one (the options' timings); (latency sets, apps)."""
    with contextlib.suppress(AlreadyExists):
        admin.create(
            NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
    latency_sets = [f"{prefix}latency-{i}" for i in range(1, options.latency_rollouts + 1)]
    for app_set in latency_sets:
        seed_fleet(admin, NAMESPACE, clusters=2, regions=REGIONS, revision=base.REVISION, app_set=app_set)
    fleet = seed_fleet(
        admin,
        NAMESPACE,
        clusters=options.clusters,
        regions=REGIONS,
        revision=base.REVISION,
        app_set=f"{prefix}fleet",
    )
    timing = {
        f"{ANNOTATION_PREFIX}sync-seconds": str(options.sync_seconds),
        f"{ANNOTATION_PREFIX}health-seconds": str(options.health_seconds),
    }
    for app in fleet.applications:
        admin.patch(APPLICATIONS, NAMESPACE, app, {"metadata": {"annotations": timing}})
    return latency_sets, list(fleet.applications)


def measure(
    cluster: DevCluster,
    admin: Kube,
    watcher: Watcher,
    *,
    steps_user: str,
    options: Options,
    workdir: Path,
    say: Callable[[str], None],
    prefix: str = "",
) -> dict[str, Any]:
    """Run the small rollouts then the big one with `watcher`; the figures of this engine."""
    latency_sets, _ = seed(admin, options, prefix)
    fleet = f"{prefix}fleet"
    events_log = workdir / f"{prefix}simulator-events.jsonl"
    simulator = FleetSimulator(
        admin,
        NAMESPACE,
        SimulatorConfig(defaults=Behaviour(sync_seconds=1.0, health_seconds=0.5)),
        events_log=events_log,
    )
    first_sync: list[float] = []
    reactions: list[float] = []
    with simulator, watcher:
        for app_set in latency_sets:
            admin.create(
                PROGRESSIVE_SYNCS,
                NAMESPACE,
                base.progressive_sync(
                    app_set, [base.stage("one by one", max_targets="100%", max_parallel=1)]
                ),
            )
            _, status = base.wait_settled(admin, app_set, options.timeout)
            audit = base.read_audit(cluster)
            applied = base.created_at(audit, "progressivesyncs", app_set)
            sync_at, healthy_at = base.cluster_times(
                audit, read_events(events_log), app_set, applied, user=steps_user
            )
            if not sync_at:
                raise RuntimeError(f"rollout {app_set} ended {status.get('phase')} without a sync: {status}")
            first_sync.append(min(sync_at.values()) - applied)
            reactions += base.slot_reactions(list(sync_at.values()), list(healthy_at.values()), 1)
            say(f"    {app_set}: {status.get('phase')}, first sync {first_sync[-1]:.2f}s after apply")
        big = stages(options.rest_parallel)
        admin.create(PROGRESSIVE_SYNCS, NAMESPACE, base.progressive_sync(fleet, big))
        ended, status = base.wait_settled(admin, fleet, options.timeout)
        audit = base.read_audit(cluster)
        applied = base.created_at(audit, "progressivesyncs", fleet)
        sync_at, healthy_at = base.cluster_times(
            audit, read_events(events_log), fleet, applied, user=steps_user
        )
        big_reactions, per_stage = base.stage_reactions(status, big, sync_at, healthy_at)
        boundaries = stage_boundaries(status, sync_at, healthy_at)
        first_sync.append(min(sync_at.values()) - applied)
        reactions += big_reactions
        wall = ended - applied
        workflow_wall = (
            workflow_ended(admin, (status.get("rollout") or {}).get("workflow", ""), options.timeout)
            - applied
        )
        say(
            f"    fleet: {status.get('phase')} in {wall:.1f}s; "
            f"its Workflow ended {workflow_wall - wall:.1f}s later"
        )
    return {
        "phase": status.get("phase"),
        "first_sync": first_sync,
        "reactions": reactions,
        "boundaries": boundaries,
        "wall": wall,
        "workflow_wall": workflow_wall,
        "critical": base.critical_path(per_stage),
        "writes": base.writes_per_app(audit, steps_user),
        "sync_writes": sync_writes_per_app(audit, steps_user),
    }


def workflow_ended(kube: Kube, name: str, timeout: float) -> float:
    """When the rollout's Workflow was first seen ended (both engines write the Workflow object);
    the ProgressiveSync may say how the rollout ended before it does (steps/rollout_end.py)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        phase = (kube.get(WORKFLOWS, NAMESPACE, name).get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Error"):
            return time.time()
        time.sleep(0.1)
    raise TimeoutError(f"Workflow {name} did not end within {timeout:g}s")


def sync_writes_per_app(audit: list[dict[str, Any]], user: str) -> dict[str, int]:
    """Successful sync writes (`update`: the PUT that sets `.operation`) of each Application by
    `user`; `base.writes_per_app` also counts the refresh requests (a `patch` of an annotation)."""
    counts: dict[str, int] = {}
    for line in audit:
        ref = line.get("objectRef") or {}
        ok = (line.get("responseStatus") or {}).get("code") == 200
        mine = (line.get("user") or {}).get("username") == user
        if ref.get("resource") == "applications" and line.get("verb") == "update" and ok and mine:
            counts[str(ref.get("name"))] = counts.get(str(ref.get("name")), 0) + 1
    return counts


def stage_boundaries(
    status: dict[str, Any], sync_at: dict[str, float], healthy_at: dict[str, float]
) -> list[float]:
    """Seconds from the last cluster of a stage turning Healthy to the first sync written in the next
    stage, per boundary between two stages that both synced something (the rollout's status order)."""
    stages = [
        [c for c in entry.get("targets") or [] if c in sync_at and c in healthy_at]
        for entry in status.get("stages") or []
    ]
    stages = [targets for targets in stages if targets]
    return [
        min(sync_at[c] for c in after) - max(healthy_at[c] for c in before)
        for before, after in itertools.pairwise(stages)
    ]


def pod_round_trips(kube: Kube, image: str, count: int, timeout: float = 120.0) -> list[float]:
    """Seconds from creating a pod (step image, `python -c pass`) to seeing it Succeeded, one at a time."""
    durations = []
    for index in range(count):
        name = f"bench-pod-{index}"
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "command": ["python", "-c", "pass"],
                    }
                ],
            },
        }
        started = time.monotonic()
        kube.create(PODS, NAMESPACE, body)
        deadline = started + timeout
        while (kube.get(PODS, NAMESPACE, name).get("status") or {}).get("phase") != "Succeeded":
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {name} did not succeed within {timeout:g}s")
            time.sleep(0.05)
        durations.append(time.monotonic() - started)
        kube.delete(PODS, NAMESPACE, name)
    return durations


def run_local(options: Options, say: Callable[[str], None]) -> dict[str, Any]:
    """The local engine on a local control plane."""
    started = time.monotonic()
    with DevCluster.start() as cluster:
        admin = Kube.from_kubeconfig(str(cluster.kubeconfig))
        steps_kubeconfig = cluster.mint_user(base.STEPS_USER, ["system:masters"])
        steps_kube = Kube.from_kubeconfig(str(steps_kubeconfig))
        try:
            apply_crds(admin, all_crd_documents(tools.peer_crd_dirs()))
            stack_seconds = time.monotonic() - started
            settings = Settings(
                namespaces=(NAMESPACE,),
                kubeconfig=str(steps_kubeconfig),
                engine=Engine.LOCAL,
                log_format=LogFormat.TEXT,
                workers=2,
            )
            figures = measure(
                cluster,
                admin,
                Watcher(steps_kube, settings),
                steps_user=base.STEPS_USER,
                options=options,
                workdir=cluster.workdir,
                say=say,
            )
        finally:
            steps_kube.close()
            admin.close()
    return {**figures, "stack": stack_seconds}


def run_argo(options: Options, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The real Argo Workflows controller on the dev stack with a real node, per requeue time."""
    with machine.queue_turn(say=say):
        return _run_argo(options, say)


def _run_argo(options: Options, say: Callable[[str], None]) -> list[dict[str, Any]]:
    first = options.requeue_times[0]
    stack = DevStack.start(StackOptions(argo_workflows=True, requeue_time=first, namespaces=(NAMESPACE,)))
    runs = []
    try:
        assert stack.cluster is not None and stack.steps_image is not None
        timings = dict(stack.timings)
        say(f"    stack started in {timings['stack_start']:.1f}s")
        admin = Kube.from_kubeconfig(str(stack.cluster.kubeconfig))
        try:
            pods = pod_round_trips(admin, stack.steps_image.reference, options.pods)
            say(f"    {len(pods)} pods create -> Succeeded: p50 {base.percentile(pods, 50):.2f}s")
            steps_user = f"system:serviceaccount:{NAMESPACE}:{STEPS_SERVICE_ACCOUNT}"
            for requeue_time in options.requeue_times:
                if requeue_time != first:
                    stack.restart_argo_workflows(requeue_time=requeue_time)
                for follower, together in itertools.product(options.followers, options.pods_at_once):
                    word, at_once = ("on" if follower else "off"), ("on" if together else "off")
                    say(f"    DEFAULT_REQUEUE_TIME={requeue_time}, follower {word}, pods at once {at_once}:")
                    settings = Settings(
                        namespaces=(NAMESPACE,),
                        kubeconfig=str(stack.cluster.kubeconfig),
                        engine=Engine.ARGO,
                        log_format=LogFormat.TEXT,
                        workers=2,
                        workflow=WorkflowSettings(
                            image=stack.steps_image.reference,
                            image_pull_policy="Never",
                            follower=follower,
                            pods_at_once_limit=PODS_AT_ONCE_LIMIT if together else 0,
                        ),
                    )
                    figures = measure(
                        stack.cluster,
                        admin,
                        Watcher(admin, settings),
                        steps_user=steps_user,
                        options=options,
                        workdir=stack.cluster.workdir,
                        say=say,
                        prefix=f"r{requeue_time}-f{word}-t{at_once}-",
                    )
                    runs.append(
                        {
                            **figures,
                            "requeue": requeue_time,
                            "follower": word,
                            "together": at_once,
                            "stack": timings["stack_start"],
                            "pods": pods,
                        }
                    )
        finally:
            admin.close()
        runs[0]["timings"] = timings
        return runs
    finally:
        stack.stop()


def report(local: dict[str, Any], argo: list[dict[str, Any]], options: Options) -> str:
    """The table: one column per engine (real Argo once per DEFAULT_REQUEUE_TIME)."""

    def p(values: list[float], q: float) -> str:
        return f"{base.percentile(values, q):.2f}s"

    def ratio(figures: dict[str, Any]) -> str:
        value = figures["wall"] / figures["critical"] if figures["critical"] else float("nan")
        return f"{value:.2f} ({figures['wall']:.0f}s / {figures['critical']:.0f}s)"

    def writes(figures: dict[str, Any], key: str = "writes") -> str:
        counts = sorted(set(figures[key].values()))
        return " or ".join(str(c) for c in counts)

    columns = [local, *argo]
    header = [
        "FIGURE",
        "LOCAL ENGINE",
        *(
            f"REAL ARGO (requeue {run['requeue']}, follower {run['follower']}, "
            f"pods at once {run['together']})"
            for run in argo
        ),
    ]
    rows = [
        header,
        ["applied -> first sync written, p50", *(p(c["first_sync"], 50) for c in columns)],
        ["applied -> first sync written, p95", *(p(c["first_sync"], 95) for c in columns)],
        ["cluster Healthy -> next sync, p50", *(p(c["reactions"], 50) for c in columns)],
        ["cluster Healthy -> next sync, p95", *(p(c["reactions"], 95) for c in columns)],
        ["last Healthy -> next stage's first sync, p50", *(p(c["boundaries"], 50) for c in columns)],
        ["last Healthy -> next stage's first sync, max", *(p(c["boundaries"], 100) for c in columns)],
        [f"wall / critical path, {options.clusters} clusters", *(ratio(c) for c in columns)],
        [
            "the Workflow ended, after the rollout's end",
            *(f"{c['workflow_wall'] - c['wall']:.1f}s" for c in columns),
        ],
        ["rollout phase", *(str(c["phase"]) for c in columns)],
        ["sync writes per Application", *(writes(c, "sync_writes") for c in columns)],
        ["Application writes (sync + refresh requests)", *(writes(c) for c in columns)],
        ["stack start", *(f"{c['stack']:.1f}s" for c in columns)],
        [
            "pod create -> Succeeded, p50 / p95",
            "-",
            *(f"{p(c['pods'], 50)} / {p(c['pods'], 95)}" for c in argo),
        ],
    ]
    width = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["", *("  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)).rstrip() for row in rows)]
    lines.append(
        f"(samples per column: {len(local['first_sync'])} first syncs, "
        f"{len(local['reactions'])} slot reactions, {len(local['boundaries'])} stage boundaries; "
        f"simulated sync "
        f"{options.sync_seconds:g}s + {options.health_seconds:g}s to Healthy; 'requeue' is the Argo "
        "controller's DEFAULT_REQUEUE_TIME, 10s by default and in dev-cluster up)"
    )
    timings = argo[0]["timings"]
    parts = (
        "control_plane",
        "crds",
        "node_join",
        "node_start",
        "images_build",
        "import steps",
        "import argoexec",
        "argo_start",
    )
    lines.append("real stack start: " + ", ".join(f"{k} {timings[k]:.1f}s" for k in parts if k in timings))
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """Both engines, one after the other, then the table."""
    options = parse_options(argv)
    say = lambda text: print(text, flush=True)  # noqa: E731
    say(
        f"bench_real_argo: {options.clusters}-cluster rollout, local engine vs real Argo "
        f"({SystemClock().now():%H:%M:%S})"
    )
    say("  local engine:")
    local = run_local(options, say)
    say("  real Argo Workflows controller, real node:")
    argo = run_argo(options, say)
    print(report(local, argo, options))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
