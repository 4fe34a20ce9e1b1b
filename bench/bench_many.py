"""Benchmark: many ProgressiveSyncs released together on one watcher (issue 33; run by `make bench`).

Platform teams run hundreds of services, each with its own ProgressiveSync, and one shared change
(a base chart, a policy) releases all of them at once. This bench seeds one simulated fleet of
`--clusters` clusters (the fleet simulator plays Argo CD) and `--rollouts` services, each with its
own ApplicationSet, Applications (one per cluster, Synced at the old revision) and ProgressiveSync
(a canary of 1, then the rest `--max-parallel` at a time). Once the one watcher process has found
every service up to date, the release: every Application of every service turns OutOfSync at the
new revision at once (merge patches from a pool of threads, service after service, as Argo CD's
comparison would report a shared base chart's new version). Then it waits for every rollout to end.

Per engine (`--engines local,argo`):

- **local**: a local control plane; `progressive-sync watch --engine argo` as its own process (it
  only watches, plans and writes status) and `progressive-sync executor` as another (it runs the
  Workflows, each step a local process: the local engine split in two so that the watcher's memory
  and requests are its own), each with a user of its own. The API server's audit policy logs every
  request (reads too, metadata only), so requests are counted per user.
- **argo**: the dev stack with a real node and the real Argo Workflows controller
  (`orchestrator.devenv.stack`); the watcher as its own process; the steps are pods under the
  steps' service account. The stack's audit policy logs writes only: reads are counted in total.
  Needs root and the machine's node (it waits for its turn on the node queue, or runs at once
  under `flock -w 7200 /tmp/progressive-sync-realstack.lock`).

Measured: the release's spread (first to last OutOfSync write); per ProgressiveSync, its release
(the last of its Applications written OutOfSync) -> its first sync written (p50, p95, max, how many
within 60 s); cluster Healthy -> next sync written within a stage (the hand-off: p50, p95); the
steps' updates per Application (the sync write, plus a withdrawal where a step gave up on a sync
not picked up: the audit log has no bodies to tell them apart) and the syncs the simulated Argo CD
picked up per Application (its `sync-start` events: must be 1); the watcher's peak RSS (VmHWM of
its process); API requests per second over the release -> last rollout ended window
(`apiserver_request_total` read before and after, all clients; and per user from the audit log
where it logs reads); how the rollouts ended. Figures are reports, not verdicts:
exits 0 and prints the table whatever they are. `--help` lists the knobs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_rollout as base  # bench/ is the script's folder, so it is on sys.path
import yaml

from orchestrator.core.clock import SystemClock
from orchestrator.devenv import tools
from orchestrator.devenv.controlplane import AUDIT_POLICY, DevCluster, api_requests
from orchestrator.kube.client import (
    APPLICATIONS,
    CONFIG_MAPS,
    NAMESPACES,
    PROGRESSIVE_SYNCS,
    AlreadyExists,
    Kube,
    KubeError,
)
from orchestrator.kube.crds import all_crd_documents, apply_crds
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import Behaviour, SimulatorConfig
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import seed_fleet
from tests.support.outcomes import status_with_outcomes

NAMESPACE = base.NAMESPACE
OLD_REVISION = "1111111111111111111111111111111111111111"
NEW_REVISION = base.REVISION
REGIONS = ("eu-west-1", "us-east-1", "ap-south-1", "sa-east-1")
WATCHER_USER = "progressive-sync-watcher"
STEPS_USER = base.STEPS_USER
ADMIN_USER = "admin"
START_TARGET_SECONDS = 60.0
RSS_TARGET_MB = 300.0
ENDED = ("Succeeded", "Failed", "Cancelled")
# The local leg's audit policy: every request, reads and watches too, metadata only (no bodies).
AUDIT_EVERY_REQUEST = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


# --- pure helpers (tested in tests/unit/test_bench_many.py) --------------------------------------


def app_set_name(index: int) -> str:
    """The `index`-th service's ApplicationSet and ProgressiveSync (`svc-007`)."""
    return f"svc-{index:03d}"


def stages(max_parallel: int) -> list[dict[str, Any]]:
    """Every service's stages: a canary of one cluster, then the rest `max_parallel` at a time."""
    return [
        base.stage("canary", max_targets=1, max_parallel=1),
        base.stage("the rest", max_targets="100%", max_parallel=max_parallel),
    ]


def counted_request(line: dict[str, Any]) -> bool:
    """One audit line per request: a watch when its stream started, anything else when answered."""
    stage = line.get("stage")
    return stage == "ResponseStarted" if line.get("verb") == "watch" else stage == "ResponseComplete"


def requests_by_user(audit: Sequence[dict[str, Any]], start: float, end: float) -> dict[str, Counter[str]]:
    """Requests per user between `start` and `end` (epoch seconds), split into reads and writes."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for line in audit:
        if not counted_request(line) or not start <= base.audit_time(line) <= end:
            continue
        user = str((line.get("user") or {}).get("username", ""))
        kind = (
            "write"
            if line.get("verb") in ("create", "update", "patch", "delete", "deletecollection")
            else "read"
        )
        counts[user][kind] += 1
    return dict(counts)


def heaviest_requests(
    audit: Sequence[dict[str, Any]], start: float, end: float, top: int = 3
) -> list[tuple[str, str, str, int, float]]:
    """The `top` most frequent (user, verb, resource) between `start` and `end`, each with its count
    and mean seconds from received to answered (watches left out: they last)."""
    seconds: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for line in audit:
        if line.get("verb") == "watch" or not counted_request(line):
            continue
        answered = base.audit_time(line)
        if not start <= answered <= end:
            continue
        received = base.audit_time(
            {"stageTimestamp": line.get("requestReceivedTimestamp", line["stageTimestamp"])}
        )
        key = (
            str((line.get("user") or {}).get("username", "")),
            str(line.get("verb", "")),
            str((line.get("objectRef") or {}).get("resource", "")),
        )
        seconds[key].append(answered - received)
    ranked = sorted(seconds.items(), key=lambda item: -len(item[1]))[:top]
    return [(*key, len(values), sum(values) / len(values)) for key, values in ranked]


@dataclass(frozen=True)
class AppRef:
    """Which service and cluster an Application belongs to."""

    app_set: str
    cluster: str


@dataclass
class ServiceTimes:
    """One service's times from the audit log and the simulator's events (epoch seconds)."""

    released: float = 0.0  # the last of its Applications written OutOfSync
    sync_at: dict[str, float] | None = None  # cluster -> its first sync written after the release
    healthy_at: dict[str, float] | None = None  # cluster -> written Healthy after its sync


def service_times(
    audit: Sequence[dict[str, Any]],
    events: Sequence[dict[str, Any]],
    apps: dict[str, AppRef],
    *,
    releaser: str,
    steps_user: str,
    since: float,
) -> tuple[dict[str, ServiceTimes], Counter[str]]:
    """(per service: its release, its clusters' sync and Healthy times; sync writes per Application),
    all after `since`, in one pass over the audit log and one over the events."""
    times: dict[str, ServiceTimes] = defaultdict(ServiceTimes)
    sync_writes: Counter[str] = Counter()
    for line in audit:
        ref = line.get("objectRef") or {}
        app = apps.get(str(ref.get("name", "")))
        if ref.get("resource") != "applications" or app is None or line.get("stage") != "ResponseComplete":
            continue
        if (line.get("responseStatus") or {}).get("code") != 200 or base.audit_time(line) < since:
            continue
        user, verb, when = (line.get("user") or {}).get("username"), line.get("verb"), base.audit_time(line)
        entry = times[app.app_set]
        if user == releaser and verb == "patch":
            entry.released = max(entry.released, when)
        elif user == steps_user and verb == "update":
            sync_writes[str(ref["name"])] += 1
            entry.sync_at = entry.sync_at or {}
            entry.sync_at.setdefault(app.cluster, when)
    for event in events:
        app = apps.get(str(event.get("app", "")))
        if app is None or event.get("event") != "healthy" or float(event["time"]) < since:
            continue
        entry = times[app.app_set]
        entry.healthy_at = entry.healthy_at or {}
        entry.healthy_at.setdefault(app.cluster, float(event["time"]))
    return dict(times), sync_writes


def picked_up(events: Sequence[dict[str, Any]], since: float) -> Counter[str]:
    """Sync operations the simulated Argo CD picked up per Application after `since` (its
    `sync-start` events): the syncs themselves, whatever updates requested or withdrew them."""
    return Counter(
        str(e["app"]) for e in events if e.get("event") == "sync-start" and float(e["time"]) >= since
    )


# --- the run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """What the run measures, from the command line."""

    rollouts: int
    clusters: int
    engines: tuple[str, ...]
    max_parallel: int
    sync_seconds: float
    health_seconds: float
    watcher_workers: int
    release_threads: int
    requeue_time: str
    controller_args: tuple[str, ...]
    parallelism: int
    timeout: float


def parse_options(argv: Sequence[str]) -> Options:
    """The command line (defaults: the figures the issue asks for)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rollouts", type=int, default=200, help="ProgressiveSyncs (services) released together"
    )
    parser.add_argument("--clusters", type=int, default=20, help="clusters every service deploys to")
    parser.add_argument("--engines", default="local,argo", help="comma-separated: local, argo")
    parser.add_argument(
        "--max-parallel", type=int, default=5, help="maxParallel of the stage after the canary"
    )
    parser.add_argument("--sync-seconds", type=float, default=5.0, help="simulated sync time")
    parser.add_argument("--health-seconds", type=float, default=2.0, help="simulated time to Healthy")
    parser.add_argument("--watcher-workers", type=int, default=4, help="the watcher's --workers")
    parser.add_argument("--release-threads", type=int, default=16, help="threads writing the release")
    parser.add_argument("--requeue-time", default="10s", help="the Argo controller's DEFAULT_REQUEUE_TIME")
    parser.add_argument(
        "--controller-args",
        default="--workflow-workers=32 --qps=100 --burst=200",
        help="flags for the Argo controller after the dev stack's own (--workflow-workers=8 and Argo's "
        "--qps 20 --burst 30): space-separated; '' for the stack's",
    )
    parser.add_argument(
        "--parallelism",
        type=int,
        default=0,
        help="the Argo controller's namespaceParallelism (Workflows running at once; 0: unlimited)",
    )
    parser.add_argument(
        "--timeout", type=float, default=2400.0, help="give up waiting for the rollouts after this long"
    )
    args = parser.parse_args(argv)
    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    unknown = set(engines) - {"local", "argo"}
    if unknown:
        parser.error(f"--engines: unknown {sorted(unknown)}; known: local, argo")
    return Options(
        rollouts=args.rollouts,
        clusters=args.clusters,
        engines=engines,
        max_parallel=args.max_parallel,
        sync_seconds=args.sync_seconds,
        health_seconds=args.health_seconds,
        watcher_workers=args.watcher_workers,
        release_threads=args.release_threads,
        requeue_time=args.requeue_time,
        controller_args=tuple(args.controller_args.split()),
        parallelism=args.parallelism,
        timeout=args.timeout,
    )


def seed_services(admin: Kube, options: Options) -> dict[str, AppRef]:
    """Every service's ApplicationSet and Applications (Synced at the old revision) and its
    ProgressiveSync; Application name -> (service, cluster)."""
    with contextlib.suppress(AlreadyExists):
        admin.create(
            NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )

    def one(index: int) -> dict[str, AppRef]:
        name = app_set_name(index)
        seeded = seed_fleet(
            admin,
            NAMESPACE,
            clusters=options.clusters,
            regions=REGIONS,
            revision=OLD_REVISION,
            app_set=name,
            synced=True,
        )
        with contextlib.suppress(AlreadyExists):
            admin.create(
                PROGRESSIVE_SYNCS, NAMESPACE, base.progressive_sync(name, stages(options.max_parallel))
            )
        return {
            app: AppRef(name, cluster.name)
            for app, cluster in zip(seeded.applications, seeded.clusters, strict=True)
        }

    # The first service creates the cluster Secrets; the others find them.
    apps = one(1)
    with ThreadPoolExecutor(8) as pool:
        for part in pool.map(one, range(2, options.rollouts + 1)):
            apps.update(part)
    return apps


def wait_all(
    admin: Kube,
    names: set[str],
    *,
    ready: Callable[[dict[str, Any]], bool],
    timeout: float,
    what: str,
    say: Callable[[str], None],
) -> tuple[float, dict[str, dict[str, Any]]]:
    """Poll the ProgressiveSyncs (one list every 2 s) until `ready` holds for every one of `names`;
    (when it did, their statuses). On timeout: what was seen, said."""
    deadline = time.monotonic() + timeout
    last_said = 0.0
    statuses: dict[str, dict[str, Any]] = {}
    while True:
        try:
            items, _ = admin.list(PROGRESSIVE_SYNCS, NAMESPACE)
        except KubeError as exc:  # an API server too busy to answer: look again, within the timeout
            say(f"    {what}: the list failed ({exc}); looking again")
            items = [{"metadata": {"name": name}, "status": status} for name, status in statuses.items()]
        statuses = {
            i["metadata"]["name"]: i.get("status") or {} for i in items if i["metadata"]["name"] in names
        }
        done = sum(1 for name in names if ready(statuses.get(name, {})))
        if done == len(names):
            return time.time(), statuses
        if time.monotonic() > deadline:
            say(f"    {what}: {done}/{len(names)} after {timeout:g}s; going on with what is there")
            return time.time(), statuses
        if time.monotonic() - last_said > 30:
            phases = Counter(str(s.get("phase")) for s in statuses.values())
            say(f"    {what}: {done}/{len(names)} ({dict(phases)})")
            last_said = time.monotonic()
        time.sleep(2.0)


def up_to_date(status: dict[str, Any]) -> bool:
    """The watcher found the service's fleet up to date (Ready, reason UpToDate)."""
    return any(c.get("reason") == "UpToDate" for c in status.get("conditions") or [])


def rollout_ended(status: dict[str, Any]) -> bool:
    """The service's rollout of the release ended (any outcome)."""
    return status.get("phase") in ENDED and bool((status.get("rollout") or {}).get("finishedAt"))


def release(admin: Kube, apps: dict[str, AppRef], threads: int) -> None:
    """Every Application OutOfSync at the new revision, service after service, `threads` at a time."""
    body = {"status": {"sync": {"status": "OutOfSync", "revision": NEW_REVISION}}}
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda name: admin.patch(APPLICATIONS, NAMESPACE, name, body), sorted(apps)))


def peak_rss_mb(pid: int) -> float:
    """VmHWM of a live process, in MB (nan when unreadable)."""
    value = base.peak_rss_mb(pid)
    return float("nan") if value is None else value


@contextlib.contextmanager
def child(argv: Sequence[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child process writing to `log`; terminated (then killed) at the end."""
    with log.open("wb") as handle:
        process = subprocess.Popen(list(argv), stdout=handle, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def seed_and_say(admin: Kube, options: Options, say: Callable[[str], None]) -> dict[str, AppRef]:
    """`seed_services`, saying how long it took."""
    started = time.monotonic()
    apps = seed_services(admin, options)
    seconds = time.monotonic() - started
    say(f"    seeded {options.rollouts} services x {options.clusters} clusters in {seconds:.0f}s")
    return apps


def watcher_argv(kubeconfig: Path, options: Options, extra: Sequence[str] = ()) -> list[str]:
    """`progressive-sync watch` over the bench's namespace, as the argo engine (watch, plan, write)."""
    return [
        sys.executable,
        "-m",
        "orchestrator.cli.main",
        "watch",
        "-n",
        NAMESPACE,
        "--engine",
        "argo",
        "--kubeconfig",
        str(kubeconfig),
        "--workers",
        str(options.watcher_workers),
        "--log-format",
        "text",
        "--log-level",
        "warning",
        *extra,
    ]


def measure(
    admin: Kube,
    options: Options,
    *,
    metrics: Callable[[], str],
    audit_mark: Callable[[], int],
    audit_since: Callable[[int], list[dict[str, Any]]],
    watcher_pid: int,
    steps_user: str,
    workdir: Path,
    say: Callable[[str], None],
    apps: dict[str, AppRef],
    other_pids: dict[str, int] | None = None,
) -> dict[str, Any]:
    """With the watcher and the engine running: the simulator, the release, the wait; the figures."""
    names = {app_set_name(i) for i in range(1, options.rollouts + 1)}
    events_log = workdir / "many-simulator-events.jsonl"
    simulator = FleetSimulator(
        admin,
        NAMESPACE,
        SimulatorConfig(
            defaults=Behaviour(sync_seconds=options.sync_seconds, health_seconds=options.health_seconds)
        ),
        events_log=events_log,
    )
    with simulator:
        began = time.monotonic()
        wait_all(admin, names, ready=up_to_date, timeout=options.timeout, what="up to date", say=say)
        say(
            f"    every service up to date ({time.monotonic() - began:.0f}s); "
            f"releasing {len(apps)} Applications"
        )
        mark = audit_mark()
        before = api_requests(metrics())
        release_start = time.time()
        release(admin, apps, options.release_threads)
        release_end = time.time()
        say(f"    released in {release_end - release_start:.1f}s; waiting for {len(names)} rollouts")
        ended, statuses = wait_all(
            admin, names, ready=rollout_ended, timeout=options.timeout, what="rollouts ended", say=say
        )
        after = api_requests(metrics())
        hwm = peak_rss_mb(watcher_pid)
        others = {name: peak_rss_mb(pid) for name, pid in (other_pids or {}).items()}
    audit = audit_since(mark)
    events = read_events(events_log)
    times, sync_writes = service_times(
        audit, events, apps, releaser=ADMIN_USER, steps_user=steps_user, since=release_start - 1.0
    )
    first_sync: list[float] = []
    reactions: list[float] = []
    spec = stages(options.max_parallel)
    started = sorted(name for name in names if times.get(name, ServiceTimes()).sync_at)
    with ThreadPoolExecutor(8) as pool:  # one GET and one list each, on a busy API server
        outcomes = dict(
            zip(started, pool.map(lambda n: status_with_outcomes(admin, NAMESPACE, n), started), strict=True)
        )
    for name in started:
        entry = times[name]
        assert entry.sync_at is not None
        first_sync.append(min(entry.sync_at.values()) - entry.released)
        stage_reactions, _ = base.stage_reactions(outcomes[name], spec, entry.sync_at, entry.healthy_at or {})
        reactions += stage_reactions
    never_started = len(names) - len(started)
    window = ended - release_start
    return {
        "release_spread": release_end - release_start,
        "first_sync": first_sync,
        "never_started": never_started,
        "reactions": reactions,
        "sync_writes": Counter(sync_writes.get(app, 0) for app in apps),
        "picked_up": Counter(picked_up(events, release_start).get(app, 0) for app in apps),
        "rss": hwm,
        "other_rss": others,
        "window": window,
        "requests": (after - before) / window if window > 0 else float("nan"),
        "by_user": requests_by_user(audit, release_start, ended),
        "heaviest": heaviest_requests(audit, release_start, ended),
        "phases": Counter(str(statuses.get(n, {}).get("phase")) for n in names),
        "steps_user": steps_user,
    }


def run_local(options: Options, say: Callable[[str], None]) -> dict[str, Any]:
    """The local engine: a local control plane auditing every request, the watcher and the
    executor as processes of their own."""
    with tempfile.TemporaryDirectory(prefix="bench-many-") as scratch:
        policy = Path(scratch) / "audit-every-request.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_EVERY_REQUEST))
        # The flag given last wins over DevCluster's own (writes-only) policy.
        assert AUDIT_POLICY["rules"], "DevCluster has an audit policy of its own to override"
        with DevCluster.start(extra_apiserver_args=[f"--audit-policy-file={policy}"]) as cluster:
            admin = Kube.from_kubeconfig(str(cluster.kubeconfig))
            try:
                apply_crds(admin, all_crd_documents(tools.peer_crd_dirs()))
                apps = seed_and_say(admin, options, say)
                watcher_kubeconfig = cluster.mint_user(WATCHER_USER, ["system:masters"])
                steps_kubeconfig = cluster.mint_user(STEPS_USER, ["system:masters"])
                executor_argv = [
                    sys.executable,
                    "-m",
                    "orchestrator.cli.main",
                    "executor",
                    "-n",
                    NAMESPACE,
                    "--kubeconfig",
                    str(steps_kubeconfig),
                    "--log-level",
                    "warning",
                ]
                with (
                    child(
                        watcher_argv(watcher_kubeconfig, options), cluster.workdir / "many-watcher.log"
                    ) as watcher,
                    child(executor_argv, cluster.workdir / "many-executor.log") as executor,
                ):
                    figures = measure(
                        admin,
                        options,
                        metrics=cluster.metrics_text,
                        audit_mark=cluster.audit_mark,
                        audit_since=cluster.audit_lines_since,
                        watcher_pid=watcher.pid,
                        steps_user=STEPS_USER,
                        workdir=cluster.workdir,
                        say=say,
                        apps=apps,
                        other_pids={"executor": executor.pid},
                    )
            finally:
                admin.close()
    return {**figures, "engine": "local", "settings": "executor: every step a local process"}


def run_argo(options: Options, say: Callable[[str], None]) -> dict[str, Any]:
    """The real Argo Workflows controller on the dev stack with a real node."""
    from orchestrator.devenv import machine  # noqa: PLC0415 - the argo leg only

    with machine.queue_turn(say=say):
        return _run_argo(options, say)


def _run_argo(options: Options, say: Callable[[str], None]) -> dict[str, Any]:
    from orchestrator.devenv.stack import DevStack, StackOptions  # noqa: PLC0415 - the argo leg only

    stack = DevStack.start(
        StackOptions(
            argo_workflows=True,
            requeue_time=options.requeue_time,
            namespaces=(NAMESPACE,),
            controller_args=options.controller_args,
        )
    )
    try:
        assert stack.cluster is not None and stack.steps_image is not None
        say(f"    stack started in {stack.timings['stack_start']:.1f}s")
        cluster = stack.cluster
        admin = Kube.from_kubeconfig(str(cluster.kubeconfig))
        try:
            if options.parallelism:
                # The controller watches its ConfigMap and takes a change without a restart.
                body = {"data": {"namespaceParallelism": str(options.parallelism)}}
                admin.patch(CONFIG_MAPS, "argo", "workflow-controller-configmap", body)
            apps = seed_and_say(admin, options, say)
            watcher_kubeconfig = cluster.mint_user(WATCHER_USER, ["system:masters"])
            extra = ["--step-image", stack.steps_image.reference, "--step-image-pull-policy", "Never"]
            with child(
                watcher_argv(watcher_kubeconfig, options, extra), cluster.workdir / "many-watcher.log"
            ) as watcher:
                figures = measure(
                    admin,
                    options,
                    metrics=cluster.metrics_text,
                    audit_mark=cluster.audit_mark,
                    audit_since=cluster.audit_lines_since,
                    watcher_pid=watcher.pid,
                    steps_user=f"system:serviceaccount:{NAMESPACE}:progressive-sync-steps",
                    workdir=cluster.workdir,
                    say=say,
                    apps=apps,
                    other_pids=argo_pids(stack),
                )
            settings = argo_settings(stack, admin, options)
        finally:
            admin.close()
        return {**figures, "engine": "argo", "settings": settings}
    finally:
        stack.stop()


def argo_pids(stack: Any) -> dict[str, int]:
    """The workflow-controller's process id."""
    return {"workflow-controller": int(stack.argo.controller_pid)}


def argo_settings(stack: Any, admin: Kube, options: Options) -> str:
    """The Argo controller's flags and configuration and the node's pod capacity this run had."""
    from orchestrator.devenv.node import NODES  # noqa: PLC0415 - the argo leg only

    argv = Path(f"/proc/{stack.argo.controller_pid}/cmdline").read_bytes().decode().split("\0")
    flags = [a for a in argv if re.match(r"--(workflow-workers|qps|burst|pod-cleanup-workers)", a)]
    config = admin.get(CONFIG_MAPS, "argo", "workflow-controller-configmap").get("data") or {}
    limits = {k: v for k, v in config.items() if "arallelism" in k}
    nodes, _ = admin.list(NODES, None)
    pods = [str((n.get("status") or {}).get("capacity", {}).get("pods")) for n in nodes]
    return (
        f"controller {' '.join(flags)} (qps/burst: Argo's defaults unless listed); "
        f"configmap parallelism {limits or 'unset (unlimited)'}; "
        f"DEFAULT_REQUEUE_TIME={options.requeue_time}; node pods capacity {', '.join(pods)}"
    )


# --- report --------------------------------------------------------------------------------------


def report(runs: list[dict[str, Any]], options: Options) -> str:
    """The table: one column per engine."""

    def p(values: list[float], q: float) -> str:
        return f"{base.percentile(values, q):.2f}s" if values else "-"

    def within(run: dict[str, Any]) -> str:
        inside = sum(1 for v in run["first_sync"] if v <= START_TARGET_SECONDS)
        return f"{inside}/{options.rollouts} ({run['never_started']} never started)"

    def writes(run: dict[str, Any], key: str = "sync_writes") -> str:
        return ", ".join(f"{k}: {v}" for k, v in sorted(run[key].items()))

    def users(run: dict[str, Any]) -> str:
        by_user, window = run["by_user"], run["window"]
        if not any(c["read"] for c in by_user.values()):
            return "writes only: " + ", ".join(
                f"{short(u, run)} {c['write'] / run['window']:.1f}" for u, c in sorted(by_user.items())
            )
        return ", ".join(
            f"{short(u, run)} {(c['read'] + c['write']) / window:.1f} ({c['write'] / window:.1f} w)"
            for u, c in sorted(by_user.items())
        )

    def short(user: str, run: dict[str, Any]) -> str:
        names = {WATCHER_USER: "watcher", run["steps_user"]: "steps", ADMIN_USER: "bench+simulator"}
        return names.get(user, user.rsplit(":", 1)[-1])

    def heaviest(run: dict[str, Any]) -> str:
        return ", ".join(
            f"{short(user, run)} {verb} {resource} {count} ({mean:.2f}s)"
            for user, verb, resource, count, mean in run["heaviest"]
        )

    def rss(run: dict[str, Any]) -> str:
        others = ", ".join(f"{k} {v:.0f} MB" for k, v in run["other_rss"].items())
        return f"{run['rss']:.1f} MB" + (f" ({others})" if others else "")

    header = ["FIGURE", *(f"{run['engine'].upper()}" for run in runs)]
    rows = [
        header,
        ["release: first -> last OutOfSync write", *(f"{r['release_spread']:.1f}s" for r in runs)],
        ["release -> first sync written, p50", *(p(r["first_sync"], 50) for r in runs)],
        ["release -> first sync written, p95", *(p(r["first_sync"], 95) for r in runs)],
        ["release -> first sync written, max", *(p(r["first_sync"], 100) for r in runs)],
        [f"rollouts started within {START_TARGET_SECONDS:g}s", *(within(r) for r in runs)],
        ["cluster Healthy -> next sync, p50", *(p(r["reactions"], 50) for r in runs)],
        ["cluster Healthy -> next sync, p95", *(p(r["reactions"], 95) for r in runs)],
        ["steps' Application updates per app (count: apps)", *(writes(r) for r in runs)],
        ["syncs picked up per Application (count: apps)", *(writes(r, "picked_up") for r in runs)],
        [f"watcher peak RSS (VmHWM; target < {RSS_TARGET_MB:.0f} MB)", *(rss(r) for r in runs)],
        ["API requests/s, all clients (apiserver_request_total)", *(f"{r['requests']:.1f}" for r in runs)],
        ["API requests/s by user (of them writes)", *(users(r) for r in runs)],
        ["most frequent requests (count, mean latency)", *(heaviest(r) for r in runs)],
        ["release -> last rollout ended (or the wait gave up)", *(f"{r['window']:.0f}s" for r in runs)],
        ["rollouts by phase", *(", ".join(f"{k} {v}" for k, v in sorted(r["phases"].items())) for r in runs)],
        ["engine settings", *(r["settings"] for r in runs)],
    ]
    width = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["", *("  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)).rstrip() for row in rows)]
    lines.append(
        f"({options.rollouts} ProgressiveSyncs x {options.clusters} clusters = "
        f"{options.rollouts * options.clusters} "
        f"Applications, one watcher (--workers {options.watcher_workers}); stages: canary 1, then the rest "
        f"maxParallel {options.max_parallel}; simulated sync {options.sync_seconds:g}s + "
        f"{options.health_seconds:g}s to Healthy; targets: all started within {START_TARGET_SECONDS:g}s, "
        "hand-off p50 < 1s and p95 < 3s, 1 sync write per Application)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """Each engine in turn, then the table."""
    options = parse_options(argv)
    say = lambda text: print(text, flush=True)  # noqa: E731
    say(
        f"bench_many: {options.rollouts} ProgressiveSyncs x {options.clusters} clusters released together, "
        f"engines {', '.join(options.engines)} ({SystemClock().now():%H:%M:%S})"
    )
    runs = []
    for engine in options.engines:
        say(f"  {engine}:")
        try:
            runs.append(run_local(options, say) if engine == "local" else run_argo(options, say))
        except Exception as exc:  # a report whatever happens: say what broke
            say(f"    {engine} did not complete: {type(exc).__name__}: {exc}")
    if runs:
        print(report(runs, options))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
