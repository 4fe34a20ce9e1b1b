"""Benchmark: Argo CD's own RollingSync and progressive-sync, side by side on the real Argo CD (issue 33).

One real Argo CD dev stack (`orchestrator.devenv.argocd`: repo-server, application controller and
ApplicationSet controller with progressive syncs enabled, redis, a `file://` Git repository per
leg, destination kube-apiservers behind cluster Secrets) carries a fleet of 12 clusters labelled
with their `region` and the `wave` they belong to. The same release (a commit adding a HealthProbe
that stays Progressing for `--ready-seconds` after Argo CD creates it, then turns Healthy: a workload
that takes a moment to become ready) is rolled out by each leg in turn, over its own ApplicationSet
and repository, with the same waves:

- **rollingsync**: the ApplicationSet has `strategy.type: RollingSync`, one step per wave
  (`matchExpressions` on the Applications' `wave` label, `maxUpdate` = our `maxParallel`); the
  ApplicationSet controller writes every sync. Once per `--refresh-grace-seconds` (30, Argo CD's
  default, then 0): how long after an Application changed the controller waits for Argo CD's own
  comparison before it lets a step start (the controller is restarted between);
- **local**: a ProgressiveSync with one stage per wave (cluster selector on the same label,
  `maxParallel` as above) run by the watcher with the local executor playing Argo Workflows, as
  tests/argocd_real do;
- **argo**: the same ProgressiveSync run by the watcher with `--engine argo`: the real Argo
  Workflows controller runs every step as a pod of the locally built step image on a real node.
  Then the one stack is a `DevStack` with a node and this Argo CD (root, the machine's node: the run
  waits for its turn on the node queue, `/tmp/progressive-sync-realstack.lock`); the controller is
  started only before this leg, since it serves every namespace and would otherwise also run the
  local leg's Workflows. Once per `--requeue-times` (10s, Argo's default, then the tests' 1s: how
  soon the controller looks at a Workflow again; restarted between). Without root or the node's
  tools the leg is left out, saying why.

Every leg starts with release 1 deployed everywhere; the clock starts when the release commit is
pushed, and a refresh of every Application follows at once (what a Git webhook does; Argo CD's timed
refresh is off, as in the real-Argo-CD tests). Times come from one watch stream on the Applications
(`tests/support/app_recorder`: states in resourceVersion order, each with the moment it was seen):
when a sync request first appeared on each Application, and when it was first seen Synced and
Healthy at the release after an operation of the leg's writer Succeeded at it (so no Healthy from
before the release's workload existed; RollingSync itself reads only sync and health). Per run:
wall time (pushed -> last Application Healthy), pushed -> first sync written, each wave boundary
(last Healthy of a wave -> first sync of the next; negative would be a wave started early),
per-cluster hand-off (a cluster Healthy -> the sync that took its slot), sync requests written and
sync operations started per Application (exactly one each expected), and wall / critical path
(each wave's own sync -> Healthy times scheduled `maxParallel` at a time: 1.00 is an orchestrator
that costs nothing).

Figures are reports, not verdicts: the script exits 0 whatever they are, and skips (exit 0, one
line) when the tools are missing (`make tools`). Only the argo leg needs root and the node. The
measured table and what it says: docs/comparison.md, "RollingSync, side by side".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_rollout as base  # bench/ is the script's folder, so it is on sys.path

from orchestrator.core.clock import SystemClock
from orchestrator.devenv import controlplane as devcluster
from orchestrator.devenv import machine, starter_app, tools
from orchestrator.devenv.argocd import ArgoCDStack
from orchestrator.devenv.argocd_settings import (
    NAMES_PER_SERVER,
    ArgoCDSettings,
    ArgoCDStackError,
    ArgoCDTools,
    ClusterSpec,
)
from orchestrator.devenv.argoworkflows import ArgoTools
from orchestrator.devenv.node import NodeTools
from orchestrator.devenv.stack import DevStack, StackOptions
from orchestrator.kube.client import APPLICATION_SETS, WORKFLOWS, Kube, NotFound
from orchestrator.kube.crds import all_crd_documents, apply_crds
from orchestrator.watcher.loop import Watcher
from orchestrator.watcher.settings import Engine, LogFormat, Settings
from tests.support.app_recorder import AppState, Seen, recording
from tests.support.argocd_harness import ProbeDriver, Scenario, rollout_actors, scenario_of
from tests.support.wait import wait_for
from tests.support.watcher_harness import phase_of
from workflow_templates.settings import WorkflowSettings

NAMESPACE = "argocd"
REGIONS = ("eu", "us", "ap")
# Who writes the syncs of each leg (`.operation.initiatedBy.username`).
ROLLINGSYNC_USER = "applicationset-controller"
OUR_USER = "progressive-sync"
LEGS = ("rollingsync", "local", "argo")


@dataclass(frozen=True)
class Wave:
    """One wave of the rollout: a RollingSync step and a ProgressiveSync stage alike."""

    name: str
    label: str  # the value of the `wave` label of its clusters (and their Applications)
    parallel: int | str  # maxUpdate of the step, maxParallel of the stage

    def slots(self, size: int) -> int:
        """How many of its `size` clusters run at once (a percentage rounds down, at least 1)."""
        if isinstance(self.parallel, int):
            return max(1, min(self.parallel, size))
        return max(1, size * int(self.parallel.rstrip("%")) // 100)


# The demo's waves: a canary, one cluster per region, the rest half at a time.
WAVES = (Wave("canary", "canary", 1), Wave("one per region", "regions", 3), Wave("the rest", "rest", "50%"))


def fleet(count: int) -> tuple[ClusterSpec, ...]:
    """`count` clusters `<region>-<n>` round-robin over REGIONS: the first is the canary, the next
    one per region form the regional wave, the others the rest."""
    specs = []
    for index in range(count):
        region = REGIONS[index % len(REGIONS)]
        wave = WAVES[0] if index == 0 else WAVES[1] if index <= len(REGIONS) else WAVES[2]
        specs.append(
            ClusterSpec(f"{region}-{index // len(REGIONS) + 1}", {"region": region, "wave": wave.label})
        )
    return tuple(specs)


def rolling_sync_strategy(waves: Sequence[Wave]) -> dict[str, Any]:
    """The ApplicationSet's `spec.strategy`: one RollingSync step per wave."""
    steps = [
        {
            "matchExpressions": [{"key": "wave", "operator": "In", "values": [wave.label]}],
            "maxUpdate": wave.parallel,
        }
        for wave in waves
    ]
    return {"type": "RollingSync", "rollingSync": {"steps": steps}}


def stages(waves: Sequence[Wave]) -> list[dict[str, Any]]:
    """The ProgressiveSync's stages: one per wave, all its clusters, `maxParallel` as the step's."""
    return [
        {
            "name": wave.name,
            "targets": {"clusters": {"selector": {"matchLabels": {"wave": wave.label}}}},
            "maxTargets": "100%",
            "maxParallel": wave.parallel,
        }
        for wave in waves
    ]


# --- what the watch stream says (pure) -------------------------------------------------------------


@dataclass
class AppMarks:
    """One Application's rollout, from the recorded states: when each sync request by the leg's
    writer appeared, the operations it started, when the first of them was seen Succeeded at the
    release, and when it was first Healthy at the release after that."""

    requests: list[float] = field(default_factory=list)
    started: set[str] = field(default_factory=set)
    applied: float | None = None
    healthy: float | None = None


def applied_at(state: AppState, writer: str, release: str) -> bool:
    """An operation `writer` asked for Succeeded at the release."""
    return state.phase == "Succeeded" and state.started_by == writer and state.applied == release


def healthy_at(state: AppState, release: str) -> bool:
    """Synced and Healthy at the release (whatever operation runs: RollingSync reads only these)."""
    return state.sync == "Synced" and state.sync_revision == release and state.health == "Healthy"


def marks_of(seen: Iterable[Seen], writer: str, release: str, since: float) -> dict[str, AppMarks]:
    """Per Application, what the states seen from `since` on (monotonic) say: a sync request by
    `writer` is a state carrying its `.operation` after one without; Healthy at the release counts
    only once an operation of `writer` Succeeded at it (no Healthy from before the release's
    workload was there), whatever runs after (RollingSync may sync it once more meanwhile)."""
    marks: dict[str, AppMarks] = {}
    requested: dict[str, bool] = {}
    for entry in seen:
        mark = marks.setdefault(entry.app, AppMarks())
        state = entry.state
        if entry.monotonic < since:
            requested[entry.app] = state.requested_by == writer
            continue
        if state.requested_by == writer and not requested.get(entry.app, False):
            mark.requests.append(entry.monotonic)
        requested[entry.app] = state.requested_by == writer
        if state.started_at and state.started_by == writer:
            mark.started.add(state.started_at)
        if mark.applied is None and mark.requests and applied_at(state, writer, release):
            mark.applied = entry.monotonic
        if mark.healthy is None and mark.applied is not None and healthy_at(state, release):
            mark.healthy = entry.monotonic
    return marks


@dataclass(frozen=True)
class LegFigures:
    """The figures of one leg (seconds)."""

    wall: float
    first_sync: float
    boundaries: list[float]
    handoffs: list[float]
    critical: float
    requests: dict[str, int]
    started: dict[str, int]


def figures(
    marks: Mapping[str, AppMarks], waves: Sequence[Sequence[str]], slots: Sequence[int], pushed: float
) -> LegFigures:
    """The leg's figures from its Applications' marks; `waves` the Applications of each wave in
    order and `slots` how many of each run at once; `pushed` when the release was pushed."""
    missing = [
        app
        for wave in waves
        for app in wave
        if not marks.get(app) or not marks[app].requests or marks[app].healthy is None
    ]
    if missing:
        raise ValueError(f"no sync request or no Healthy at the release seen for {sorted(missing)}")
    first = {app: marks[app].requests[0] for wave in waves for app in wave}
    healthy = {app: float(marks[app].healthy or 0.0) for wave in waves for app in wave}
    boundaries = [
        min(first[app] for app in after) - max(healthy[app] for app in before)
        for before, after in itertools.pairwise(waves)
        if before and after
    ]
    handoffs: list[float] = []
    per_wave: list[tuple[list[float], int]] = []
    for wave, parallel in zip(waves, slots, strict=True):
        handoffs += base.slot_reactions([first[a] for a in wave], [healthy[a] for a in wave], parallel)
        per_wave.append(([healthy[a] - first[a] for a in sorted(wave, key=first.__getitem__)], parallel))
    return LegFigures(
        wall=max(healthy.values()) - pushed,
        first_sync=min(first.values()) - pushed,
        boundaries=boundaries,
        handoffs=handoffs,
        critical=base.critical_path(per_wave),
        requests={app: len(mark.requests) for app, mark in marks.items()},
        started={app: len(mark.started) for app, mark in marks.items()},
    )


# --- the run -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """What the run measures."""

    clusters: int
    ready_seconds: float
    legs: tuple[str, ...]
    refresh_graces: tuple[int, ...]
    requeue_times: tuple[str, ...]
    timeout: float


def parse_options(argv: Sequence[str]) -> Options:
    """The command line (defaults: the figures the issue asks for)."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"Legs: {', '.join(LEGS)} (in that order, one after the other; argo needs root and the "
        "machine's node, and waits for its turn on the node queue).",
    )
    parser.add_argument("--clusters", type=int, default=12, help="clusters of the fleet (default 12)")
    parser.add_argument(
        "--ready-seconds",
        type=float,
        default=5.0,
        help="how long the release's HealthProbe stays Progressing after Argo CD creates it (default 5)",
    )
    parser.add_argument("--legs", default=",".join(LEGS), help="comma-separated legs to run (default all)")
    parser.add_argument(
        "--refresh-grace-seconds",
        default="30,0",
        help="the ApplicationSet controller's --refresh-grace-period-seconds, one RollingSync run each "
        "(comma-separated; default 30,0: Argo CD's own default, then none)",
    )
    parser.add_argument(
        "--requeue-times",
        default="10s,1s",
        help="the Argo Workflows controller's DEFAULT_REQUEUE_TIME, one argo run each (comma-separated; "
        "default 10s,1s: Argo's own default, then the tests')",
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="give up a leg's rollout after this long"
    )
    args = parser.parse_args(argv)
    legs = tuple(leg.strip() for leg in args.legs.split(",") if leg.strip())
    unknown = [leg for leg in legs if leg not in LEGS]
    if unknown:
        parser.error(f"unknown legs {unknown}: use {', '.join(LEGS)}")
    return Options(
        clusters=args.clusters,
        ready_seconds=args.ready_seconds,
        legs=legs,
        refresh_graces=tuple(int(g) for g in args.refresh_grace_seconds.split(",") if g.strip()),
        requeue_times=tuple(t.strip() for t in args.requeue_times.split(",") if t.strip()),
        timeout=args.timeout,
    )


def argocd_settings(options: Options) -> ArgoCDSettings:
    """The Argo CD of the run: progressive syncs on, the fleet's clusters, no timed refresh."""
    clusters = fleet(options.clusters)
    return ArgoCDSettings(
        namespace=NAMESPACE,
        clusters=clusters,
        servers=-(-len(clusters) // NAMES_PER_SERVER),
        reconciliation_seconds=0,  # no timed refresh: the release is announced by a refresh
        app_set=None,
        progressive_syncs=True,
        progressive_sync_refresh_grace_seconds=options.refresh_graces[0],
        ready_timeout_seconds=300.0,
    )


@dataclass(frozen=True)
class Run:
    """One rollout of the bench: a leg, with the RollingSync refresh grace or the Argo requeue time."""

    leg: str
    grace: int = 0
    requeue_time: str = ""

    @property
    def title(self) -> str:
        """The run's column in the table."""
        if self.leg == "rollingsync":
            return f"ROLLINGSYNC grace {self.grace}s"
        if self.leg == "local":
            return "OURS local engine"
        return f"OURS real Argo requeue {self.requeue_time}"


def runs(options: Options) -> list[Run]:
    """The runs of the bench, in order: each leg once per variant it is measured with."""
    planned: list[Run] = []
    for leg in options.legs:
        if leg == "rollingsync":
            planned += [Run(leg, grace=grace) for grace in options.refresh_graces]
        elif leg == "argo":
            planned += [Run(leg, requeue_time=requeue) for requeue in options.requeue_times]
        else:
            planned.append(Run(leg))
    return planned


@dataclass
class Rig:
    """The one stack every leg runs on: the real Argo CD, and for the argo leg a node under it."""

    argocd: ArgoCDStack
    dev: DevStack | None = None
    requeue_time: str = ""  # the running Argo Workflows controller's ("": none runs)

    def actors(self, run: Run, workdir: Path) -> contextlib.AbstractContextManager[Any]:
        """What rolls the release out besides Argo CD: nothing for RollingSync (its controller set
        to the run's refresh grace), else our watcher."""
        if run.leg == "rollingsync":
            if self.argocd.settings.progressive_sync_refresh_grace_seconds != run.grace:
                self.argocd.set_progressive_sync_refresh_grace(run.grace)
            return contextlib.nullcontext()
        if run.leg == "local":
            return rollout_actors(self.argocd, workdir / run.leg)
        return self._argo_watcher(run.requeue_time)

    @contextlib.contextmanager
    def _argo_watcher(self, requeue_time: str) -> Iterator[Watcher]:
        assert self.dev is not None and self.dev.cluster is not None and self.dev.steps_image is not None
        if self.requeue_time and self.requeue_time != requeue_time:
            self.dev.restart_argo_workflows(requeue_time=requeue_time)
            self.requeue_time = requeue_time
        # Started now, not with the stack: it serves every namespace (orchestrator.devenv.argoworkflows),
        # so the local leg's Workflows (ended, their ProgressiveSync gone) go first.
        kube = self.argocd.kube
        for workflow in kube.list(WORKFLOWS, NAMESPACE)[0]:
            with contextlib.suppress(NotFound):
                kube.delete(WORKFLOWS, NAMESPACE, workflow["metadata"]["name"])
        if not self.requeue_time:
            self.dev.add_argo_workflows(requeue_time=requeue_time, server=False)
            self.requeue_time = requeue_time
        settings = Settings(
            namespaces=(NAMESPACE,),
            kubeconfig=str(self.dev.cluster.kubeconfig),
            engine=Engine.ARGO,
            log_format=LogFormat.TEXT,
            workers=2,
            workflow=WorkflowSettings(image=self.dev.steps_image.reference, image_pull_policy="Never"),
        )
        watcher = Watcher(self.argocd.kube, settings).start()
        try:
            yield watcher
        finally:
            watcher.stop(timeout=15)


@contextlib.contextmanager
def rig(options: Options, say: Callable[[str], None]) -> Iterator[Rig]:
    """The stack: a control plane with the real Argo CD; with a node under it for the argo leg."""
    if "argo" in options.legs:
        with machine.queue_turn(say=say):
            dev = DevStack.start(
                StackOptions(node=True, namespaces=(NAMESPACE,), argocd=argocd_settings(options))
            )
            try:
                assert dev.argocd is not None
                yield Rig(dev.argocd, dev)
            finally:
                dev.stop()
        return
    argocd_tools = ArgoCDTools.find()
    assets = devcluster.find_tools_dir()
    crds = all_crd_documents(tools.peer_crd_dirs(), workflow_crd_dir=tools.minimal_workflow_crd_dir())
    cluster = devcluster.DevCluster.start(assets)
    try:
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        apply_crds(kube, crds)
        kube.close()
        stack = ArgoCDStack.start(cluster, argocd_tools, argocd_settings(options))
        try:
            yield Rig(stack)
        finally:
            stack.stop()
    finally:
        cluster.stop()


def missing_for_argo() -> str:
    """Why the argo leg cannot run here ("" when it can)."""
    if os.geteuid() != 0:
        return "it needs root (a real node)"
    try:
        NodeTools.find()
        ArgoTools.find()
    except (devcluster.ControlPlaneError, tools.ToolsMissing) as exc:
        return str(exc)
    return ""


def app_set_status(scenario: Scenario) -> list[dict[str, Any]]:
    """The ApplicationSet's `status.applicationStatus` (RollingSync's per-Application record)."""
    app_set = scenario.kube.get(APPLICATION_SETS, scenario.namespace, scenario.name)
    return list((app_set.get("status") or {}).get("applicationStatus") or [])


def enable_rolling_sync(scenario: Scenario, timeout: float) -> None:
    """Give the scenario's ApplicationSet the RollingSync strategy (release 1 deployed everywhere)
    and wait until the controller records every Application Healthy."""
    scenario.kube.patch(
        APPLICATION_SETS,
        scenario.namespace,
        scenario.name,
        {"spec": {"strategy": rolling_sync_strategy(WAVES)}},
    )

    def all_healthy() -> bool:
        statuses = {entry.get("application"): entry.get("status") for entry in app_set_status(scenario)}
        return all(statuses.get(app) == "Healthy" for app in scenario.apps)

    wait_for(all_healthy, timeout=timeout, interval=0.5, what="RollingSync to record release 1 Healthy")


def triggered_syncs(stack: ArgoCDStack, apps: Sequence[str]) -> dict[str, int]:
    """How often the ApplicationSet controller logged "triggering sync for application: APP" per
    Application (a second source for RollingSync's sync count, beside the watch stream)."""
    lines = (
        stack.supervisor.log_path("argocd-applicationset-controller").read_text(errors="replace").splitlines()
    )
    return {
        app: sum(1 for line in lines if f"triggering sync for application: {app}," in line) for app in apps
    }


def run_leg(rig: Rig, run: Run, options: Options, workdir: Path, say: Callable[[str], None]) -> LegFigures:
    """One rollout of release 2 by `run`'s leg over an ApplicationSet and repository of its own."""
    stack = rig.argocd
    leg = run.leg
    labels = {"region": "{{metadata.labels.region}}", "wave": "{{metadata.labels.wave}}"}
    writer = ROLLINGSYNC_USER if leg == "rollingsync" else OUR_USER
    started = time.monotonic()
    with scenario_of(stack, prefix=leg[:5], app_set_changes={"labels": labels}) as scenario:
        say(
            f"    {scenario.name}: release 1 on {len(scenario.apps)} Applications "
            f"in {time.monotonic() - started:.0f}s"
        )
        if leg == "rollingsync":
            enable_rolling_sync(scenario, timeout=120)
        with rig.actors(run, workdir):
            if leg != "rollingsync":
                scenario.create_progressive_sync(stages(WAVES), deadline_seconds=int(options.timeout))
                wait_for(
                    lambda: phase_of(stack.kube, stack.namespace, scenario.name) == "Pending",
                    timeout=60,
                    interval=0.3,
                    what=f"{scenario.name} up to date before the release",
                )
            scripts: dict[str, list[tuple[str, float | None]]] = {
                cluster: [("Progressing", options.ready_seconds), ("Healthy", 0.0)]
                for cluster in scenario.clusters
            }
            with (
                recording(stack.kube, stack.namespace, keep=lambda name: name in scenario.apps) as recorder,
                ProbeDriver(scenario, scripts),
            ):
                release = scenario.release({"probe.yaml": starter_app.probe_manifest("probe")})
                pushed = time.monotonic()
                scenario.refresh()

                def rolled_out() -> bool:
                    marks = marks_of(list(recorder.seen), writer, release, pushed)
                    return all(
                        marks.get(app) is not None and marks[app].healthy is not None for app in scenario.apps
                    )

                wait_for(
                    rolled_out,
                    timeout=options.timeout,
                    interval=0.5,
                    what=f"{leg}: release 2 Healthy everywhere",
                )
                if leg != "rollingsync":
                    phase = scenario.wait_rollout_ended(timeout=60)
                    if phase != "Succeeded":
                        raise RuntimeError(f"{leg}: the rollout ended {phase}: {scenario.explain()}")
                marks = marks_of(list(recorder.seen), writer, release, pushed)
        by_wave = [
            [scenario.app(c.name) for c in stack.clusters if c.labels.get("wave") == wave.label]
            for wave in WAVES
        ]
        result = figures(
            marks, by_wave, [w.slots(len(apps)) for w, apps in zip(WAVES, by_wave, strict=True)], pushed
        )
        if leg == "rollingsync":
            steps = sorted({(e.get("step"), e.get("status")) for e in app_set_status(scenario)})
            say(f"    ApplicationSet applicationStatus (step, status): {steps}")
            triggered = triggered_syncs(stack, scenario.apps)
            say(
                "    reconciles that put a sync into an Application's desired state (the controller's "
                "'triggering sync' log lines; a write only when the live one has none): "
                + " or ".join(str(n) for n in sorted(set(triggered.values())))
            )
        say(f"    {leg}: release 2 Healthy everywhere {result.wall:.1f}s after the push")
        return result


def report(results: Sequence[tuple[Run, LegFigures, float]], options: Options) -> str:
    """The table: one column per run (with the machine's 1-minute load average at its push)."""

    def p(values: list[float], q: float) -> str:
        return f"{base.percentile(values, q):.2f}s" if values else "-"

    def counts(values: Mapping[str, int]) -> str:
        return " or ".join(str(c) for c in sorted(set(values.values())))

    columns = [figures for _, figures, _ in results]
    rows = [
        ["FIGURE", *(run.title for run, _, _ in results)],
        [f"wall: pushed -> last Healthy, {options.clusters} clusters", *(f"{c.wall:.1f}s" for c in columns)],
        ["pushed -> first sync written", *(f"{c.first_sync:.2f}s" for c in columns)],
        *(
            [
                f"last Healthy -> next wave's first sync, {i + 1}->{i + 2}",
                *(f"{c.boundaries[i]:.2f}s" if i < len(c.boundaries) else "-" for c in columns),
            ]
            for i in range(len(WAVES) - 1)
        ),
        ["cluster Healthy -> next sync (hand-off), p50", *(p(c.handoffs, 50) for c in columns)],
        ["cluster Healthy -> next sync (hand-off), max", *(p(c.handoffs, 100) for c in columns)],
        ["wall / critical path", *(f"{c.wall / c.critical:.2f} ({c.critical:.0f}s)" for c in columns)],
        ["sync requests written per Application", *(counts(c.requests) for c in columns)],
        ["sync operations started per Application", *(counts(c.started) for c in columns)],
        ["load average (1 min) at the push", *(f"{load:.1f}" for _, _, load in results)],
    ]
    width = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["", *("  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)).rstrip() for row in rows)]
    lines.append(
        f"(waves {', '.join(f'{w.name} x{w.parallel}' for w in WAVES)}; the release's probe Progressing "
        f"{options.ready_seconds:g}s; grace: the ApplicationSet controller's refresh grace, 30s by "
        "default; requeue: the Argo Workflows controller's DEFAULT_REQUEUE_TIME, 10s by default; "
        f"{os.cpu_count()} cores)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """Every leg on one stack, one after the other, then the table."""
    options = parse_options(argv)
    say = lambda text: print(text, flush=True)  # noqa: E731
    load = os.getloadavg()
    say(
        f"bench_rollingsync: {options.clusters}-cluster rollout on real Argo CD, "
        f"legs {', '.join(options.legs)} "
        f"({SystemClock().now():%H:%M:%S}, load {load[0]:.2f})"
    )
    try:
        ArgoCDTools.find()
        devcluster.find_tools_dir()
    except (ArgoCDStackError, devcluster.ControlPlaneError, tools.ToolsMissing) as exc:
        say(f"bench_rollingsync: skipped, the real Argo CD is not built ({exc}); `make tools` builds it")
        return 0
    if "argo" in options.legs and (why := missing_for_argo()):
        say(f"bench_rollingsync: the argo leg is left out: {why}")
        options = dataclasses.replace(options, legs=tuple(leg for leg in options.legs if leg != "argo"))
    started = time.monotonic()
    results: list[tuple[Run, LegFigures, float]] = []
    with rig(options, say) as running:
        say(
            f"  stack with {len(running.argocd.clusters)} clusters started "
            f"in {time.monotonic() - started:.0f}s"
        )
        for run in runs(options):
            say(f"  {run.title}:")
            at_push = os.getloadavg()[0]
            results.append(
                (run, run_leg(running, run, options, running.argocd.workdir / "legs", say), at_push)
            )
    print(report(results, options))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
