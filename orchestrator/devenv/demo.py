"""`progressive-sync demo`: the whole product on one machine, in about a minute.

`run_demo` starts the real local control plane (`orchestrator.devenv.controlplane`), installs the CRDs,
seeds a simulated fleet (12 clusters in 3 regions, one ApplicationSet, 12 Applications OutOfSync at
a new revision; `orchestrator.simulator.appcontroller.seed_fleet`), labels one cluster Secret
`canary: "true"`,
starts the fleet simulator and the watcher (both as threads of this process), applies the 3-stage
ProgressiveSync of
`examples/demo.yaml`, shows the rollout live, and returns how it ended and how long each stage
took. Everything it started is stopped, in reverse order, however it ends (Ctrl-C included).

Two engines run the rollout Workflow. `local` (the default, `make demo`): the local executor, in
the watcher's process, runs each step as a subprocess. `argo`: the real stack
(`orchestrator.devenv.stack`: a real node, the real Argo Workflows controller) runs each step as a
pod of the locally built step image, under the chart's steps service account and RBAC; the
simulator still plays Argo CD. The argo engine needs root and takes the machine's node lock.

Why threads and not processes for the watcher and the simulator: one process owns everything, so
Ctrl-C, SIGTERM and an error all unwind through one `ExitStack`, and nothing outlives the demo
(the step subprocesses are killed by the executor's stop; etcd and kube-apiserver die with their
parent even on SIGKILL).

Why a label picks the canary: the planner orders clusters by a stable hash of (ProgressiveSync,
cluster), so which cluster of a region comes first is fixed but not chosen. Labelling one cluster
Secret `canary: "true"` and selecting that label in the first stage is what platform teams do, and
lets `--fail-cluster NAME` make exactly the named cluster the canary.

On the argo engine the demo prints where the Argo UI (served by the stack's `argo server`, on
loopback) shows the rollout's Workflow, once the watcher has created it. `hold` (what `demo --ui`
passes) runs after the rollout has ended, with everything still up, and returns when the person is
done looking (Ctrl-C); the demo then stops everything as usual.

With `argocd=ArgoCDMode.REAL` (`demo --argocd real`) the real Argo CD plays Argo CD instead of
the simulator: `orchestrator.devenv.demo_argocd` starts it on the demo's control plane (six clusters
on three destination kube-apiservers, a Git repository, release 1 deployed) and commits release 2;
the rest is the same, with either engine.

With `analysis` (`demo --analysis`) or `bad_metrics` (`demo --bad-metrics NAME`, which implies it)
the ProgressiveSync gets an error-rate analysis gate on every cluster of every stage, and the demo
starts what answers it: a metrics endpoint per cluster, a real Prometheus, the real Argo Rollouts
analysis controller (`orchestrator.devenv.demo_analysis`). `bad_metrics` makes that cluster the
canary, Healthy in Argo CD but serving errors; the summary then names the metric that failed, its
value and its condition. Not in the default demo: the gates make it ~45 % slower (docs/analysis.md).

Callers: `orchestrator.cli.demo_cmd`, the e2e tests, the benchmarks (which reuse the fleet
helpers).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from orchestrator.api.metadata import NAME_LABEL, label_value
from orchestrator.api.models import API_VERSION, RolloutPhase, StagePhase
from orchestrator.core.clock import Clock
from orchestrator.devenv import demo_analysis, tools
from orchestrator.devenv.analysis_stack import AnalysisStack
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.devenv.demo_argocd import RealFleet, real_cluster_names, start_real_fleet
from orchestrator.devenv.stack import DevStack, StackOptions
from orchestrator.kube.client import NAMESPACES, PROGRESSIVE_SYNCS, SECRETS, WORKFLOWS, AlreadyExists, Kube
from orchestrator.kube.crds import all_crd_documents, apply_crds
from orchestrator.ops import actions as ops_actions
from orchestrator.ops import tables
from orchestrator.ops import view as ops_view
from orchestrator.ops.live import LiveDisplay
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import Behaviour, SimulatorConfig
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import seed_clusters, seed_fleet
from orchestrator.watcher.loop import Watcher
from orchestrator.watcher.settings import Engine, LogFormat, Settings
from workflow_templates.settings import WorkflowSettings

log = logging.getLogger(__name__)

NAMESPACE = "argocd"
NAME = "myservice"
REGIONS = ("eu-west-1", "us-east-1", "ap-south-1")
CLUSTER_COUNT = 12
# The release the fleet is out of date with (what a push to the deploy repo would produce).
NEW_REVISION = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"
CANARY_LABEL = "canary"
EXAMPLE_FILE = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"


class ArgoCDMode(StrEnum):
    """Who plays Argo CD in the demo."""

    SIMULATED = "simulated"  # the fleet simulator (seconds, no Argo CD needed)
    REAL = "real"  # the real Argo CD dev stack (`make tools` builds it)


def demo_cluster_names(argocd: ArgoCDMode = ArgoCDMode.SIMULATED) -> list[str]:
    """The names of the demo's clusters, in seeding order."""
    if argocd == ArgoCDMode.REAL:
        return real_cluster_names(REGIONS)
    return [cluster.name for cluster in seed_clusters(CLUSTER_COUNT, REGIONS)]


def demo_progressive_sync(*, analysis: bool = False) -> dict[str, Any]:
    """The ProgressiveSync the demo applies (committed as examples/demo.yaml; a test keeps them equal);
    with `analysis`, plus the error-rate gate on every cluster (`demo_analysis.analysis_block`)."""
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "ProgressiveSync",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "appSetRef": {"name": NAME},
            "stages": [
                {
                    "name": "canary",
                    "targets": {"clusters": {"selector": {"matchLabels": {CANARY_LABEL: "true"}}}},
                    "maxTargets": 1,
                    "maxParallel": 1,
                },
                {
                    "name": "one per region",
                    "targets": {"clusters": {"selector": {}}},
                    "maxTargets": len(REGIONS),
                    "maxParallel": len(REGIONS),
                    "spreadBy": "region",
                },
                {
                    "name": "the rest",
                    "targets": {"clusters": {"selector": {}}},
                    "maxTargets": "100%",
                    "maxParallel": "50%",
                },
            ],
            "progressDeadlineSeconds": 120,
            "failurePolicy": {"maxFailedClusters": 0},
        },
    }
    if analysis:
        body["spec"]["analysis"] = demo_analysis.analysis_block()
    return body


@dataclass(frozen=True)
class DemoSettings:
    """What one demo run does; built by the command from its flags."""

    tools_dir: Path | None = None
    workdir: Path | None = None  # where the simulator's events log goes (the caller removes it)
    sync_seconds: float = 2.0
    health_seconds: float = 1.0
    fail_cluster: str | None = None
    # The simulated Applications' `spec.syncPolicy.retry` (None: none, so a sync retries as Argo CD's
    # automated syncers do, 5 times backing off 5 s to 80 s: a failing canary takes ~2.5 min to fail).
    sync_retry: Mapping[str, Any] | None = None
    timeout_seconds: float = 300.0
    tty: bool = False
    engine: Engine = Engine.LOCAL
    argocd: ArgoCDMode = ArgoCDMode.SIMULATED
    # The error-rate analysis gate on every cluster (`demo_analysis`); `bad_metrics` implies it and
    # names the cluster (made the canary) that is Healthy in Argo CD but serves errors.
    analysis: bool = False
    bad_metrics: str | None = None

    @property
    def with_analysis(self) -> bool:
        """True when the ProgressiveSync has an analysis gate (and the analysis stack runs)."""
        return self.analysis or self.bad_metrics is not None


@dataclass
class DemoResult:
    """How the demo ended: phase, the final view, timings, and which clusters got a sync."""

    phase: RolloutPhase | None
    view: ops_view.RolloutView | None
    canary: str
    wall_seconds: float
    rollout_seconds: float
    cluster_count: int = CLUSTER_COUNT
    synced_clusters: list[str] = field(default_factory=list)
    syncs_per_app: dict[str, int] = field(default_factory=dict)
    # The metrics that failed in the rollout's AnalysisRuns (with an analysis gate).
    failed_metrics: list[demo_analysis.FailedMetric] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when the rollout Succeeded, 1 otherwise."""
        return 0 if self.phase == RolloutPhase.SUCCEEDED else 1

    @property
    def in_stage_order(self) -> bool:
        """True when no cluster of a stage got its sync before every cluster of the stage before."""
        if self.view is None:
            return False
        position = {cluster: index for index, cluster in enumerate(self.synced_clusters)}
        last_of_previous = -1
        for stage in self.view.stages:
            targets = [c.name for c in self.view.clusters or () if c.stage == stage.name]
            started = [position[c] for c in targets if c in position]
            if not started:
                continue
            if min(started) < last_of_previous:
                return False
            last_of_previous = max(started)
        return True


class DemoError(Exception):
    """The demo could not run (a bad flag value, tools missing, the rollout did not end in time)."""


def _crd_documents(*, analysis: bool = False) -> list[dict[str, Any]]:
    """Ours and the peers' CRDs (from the tools folder; with `analysis`, Argo Rollouts' analysis
    CRDs too, in the same batch), or a DemoError saying what to build."""
    try:
        dirs = tools.peer_crd_dirs() + ([tools.rollouts_crd_dir()] if analysis else [])
        # Argo's minimal Workflow CRD, as an installation has it (the full schema doubles the API
        # server's start-up work: docs/design/dev-stack.md); the tests check our Workflows against
        # the full one.
        return all_crd_documents(dirs, workflow_crd_dir=tools.minimal_workflow_crd_dir())
    except tools.ToolsMissing as exc:
        raise DemoError(str(exc)) from exc


def run_demo(
    settings: DemoSettings,
    write: Callable[[str], None],
    clock: Clock,
    *,
    hold: Callable[[], None] | None = None,
) -> DemoResult:
    """Run the demo end to end and clean up; `write` prints, `clock` times the live display.

    `hold`, when given, is called once the rollout has ended, before anything is stopped (the
    Argo UI stays open while it runs).
    """
    names = demo_cluster_names(settings.argocd)
    canary = _canary(settings, names)
    started = time.monotonic()
    events_log = (settings.workdir / "simulator-events.jsonl") if settings.workdir else None
    real_fleet = None
    with contextlib.ExitStack() as stack:
        cluster, workflow, ui_url, analysis = _start_engine(settings, stack, write, names)
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        stack.callback(kube.close)
        if settings.engine == Engine.LOCAL:
            apply_crds(kube, _crd_documents(analysis=settings.with_analysis))
            if settings.with_analysis:
                analysis = demo_analysis.start_analysis(stack, cluster, names, write)
        real_fleet = _start_fleet(
            stack,
            cluster,
            kube,
            settings=settings,
            canary=canary,
            events_log=events_log,
            clock=clock,
            write=write,
        )
        if analysis is not None:
            demo_analysis.prepare_gate(analysis, kube, namespace=NAMESPACE, bad_cluster=settings.bad_metrics)
        watcher = Watcher(
            kube, watcher_settings(cluster.kubeconfig, settings.engine, workflow), clock=clock
        ).start()
        stack.callback(watcher.stop)
        _announce(settings, canary, write)
        if analysis is not None and settings.bad_metrics:
            demo_analysis.wait_until_bad(analysis, settings.bad_metrics)
        applied = time.monotonic()
        kube.create(PROGRESSIVE_SYNCS, NAMESPACE, demo_progressive_sync(analysis=settings.with_analysis))
        page = workflow_page(ui_url, _wait_for_workflow(kube, settings.timeout_seconds)) if ui_url else ""
        if page:
            write(f"Follow the rollout in the Argo UI: {page}\n\n")
        target = ops_actions.Target(NAMESPACE, NAME)
        try:
            with LiveDisplay(write, clock, tty=settings.tty) as display:
                view = ops_actions.follow(
                    kube, target, clock=clock, timeout=settings.timeout_seconds, on_view=display.show
                )
        except ops_actions.FollowTimeout as exc:
            raise DemoError(
                f"the rollout did not finish within {settings.timeout_seconds:g}s "
                f"(it is {ops_view.phase_text(exc.view)}: {exc.view.message})"
            ) from exc
        rollout_seconds = time.monotonic() - applied
        # The last view with every cluster (from the rollout's records): which stage took which.
        view = ops_actions.read_view(kube, target, clusters=True)
        if real_fleet is not None:
            real_fleet.sync_log.stop()
            synced = [real_fleet.cluster_of(app) for app in real_fleet.sync_log.requested]
            syncs_per_app = real_fleet.sync_log.starts()
        else:
            synced, syncs_per_app = _simulated_syncs(read_events(events_log) if events_log else [])
        failed_metrics = demo_analysis.read_failed_metrics(kube, NAMESPACE, NAME) if analysis else []
        if hold is not None:
            if page:
                write(
                    f"\nThe rollout {view.phase.value if view.phase else 'ended'}; the Argo UI stays open at "
                    f"{page}\nuntil Ctrl-C, then everything the demo started is stopped and removed.\n"
                )
            hold()
    return DemoResult(
        phase=view.phase,
        view=view,
        canary=canary,
        wall_seconds=time.monotonic() - started,
        rollout_seconds=rollout_seconds,
        cluster_count=len(names),
        synced_clusters=synced,
        syncs_per_app=syncs_per_app,
        failed_metrics=failed_metrics,
    )


def _canary(settings: DemoSettings, names: Sequence[str]) -> str:
    """The demo's canary: the failing or bad cluster when one is named, else the first."""
    for flag, named in (("--fail-cluster", settings.fail_cluster), ("--bad-metrics", settings.bad_metrics)):
        if named is not None and named not in names:
            raise DemoError(f"{flag} {named!r} is not a demo cluster; pick one of: {', '.join(names)}")
    if settings.fail_cluster and settings.bad_metrics and settings.fail_cluster != settings.bad_metrics:
        raise DemoError("--fail-cluster and --bad-metrics both pick the canary: name one cluster")
    return settings.fail_cluster or settings.bad_metrics or names[0]


def _start_fleet(
    stack: contextlib.ExitStack,
    cluster: DevCluster,
    kube: Kube,
    *,
    settings: DemoSettings,
    canary: str,
    events_log: Path | None,
    clock: Clock,
    write: Callable[[str], None],
) -> RealFleet | None:
    """Who plays Argo CD: the real Argo CD (its fleet returned) or the simulator (None); both
    stopped by `stack`."""
    if settings.argocd == ArgoCDMode.REAL:
        return start_real_fleet(
            stack,
            cluster,
            app_set=NAME,
            namespace=NAMESPACE,
            regions=REGIONS,
            canary=canary,
            fail_cluster=settings.fail_cluster,
            workdir=settings.workdir,
            write=write,
        )
    _seed(kube, canary, write, settings.sync_retry)
    simulator = FleetSimulator(
        kube, NAMESPACE, _simulator_config(settings), clock=clock, events_log=events_log
    ).start()
    stack.callback(simulator.stop)
    return None


def _announce(settings: DemoSettings, canary: str, write: Callable[[str], None]) -> None:
    real = settings.argocd == ArgoCDMode.REAL
    write(
        f"{'Argo CD' if real else 'Simulator'} and watcher ({settings.engine.value} engine) are running; "
        f"applying the ProgressiveSync {NAMESPACE}/{NAME} (examples/demo.yaml):\n"
    )
    for line in _describe_stages(canary):
        write(f"  {line}\n")
    if settings.with_analysis:
        for line in demo_analysis.describe(settings.bad_metrics):
            write(f"  {line}\n")
    if settings.fail_cluster:
        who = "Its API server refuses the release" if real else "The simulator will fail every sync"
        write(f"  {who} on {canary}, the canary.\n")
    write("\n")


def _simulated_syncs(events: list[dict[str, Any]]) -> tuple[list[str], dict[str, int]]:
    """(clusters in the order their first sync started, syncs per Application) from the events log."""
    starts = [event for event in events if event["event"] == "sync-start"]
    synced: list[str] = []
    for event in starts:
        if event["cluster"] not in synced:
            synced.append(event["cluster"])
    return synced, dict(Counter(str(event["app"]) for event in starts))


def _start_engine(
    settings: DemoSettings, stack: contextlib.ExitStack, write: Callable[[str], None], names: Sequence[str]
) -> tuple[DevCluster, WorkflowSettings, str, AnalysisStack | None]:
    """Start what the engine needs (stopped by `stack`): its control plane, the Workflow settings for
    it, the Argo Server's URL ("" on the local engine) and, on the argo engine with analysis, the
    stack's analysis components (the local engine starts them once the CRDs are in)."""
    if settings.engine != Engine.ARGO:
        write("Starting a local control plane (etcd + kube-apiserver)...\n")
        cluster = DevCluster.start(settings.tools_dir)
        stack.callback(cluster.stop)
        return cluster, WorkflowSettings(), "", None
    write(
        "Starting a local control plane, a real node and the real Argo Workflows controller "
        "(about half a minute)...\n"
    )
    dev_stack = DevStack.start(
        StackOptions(
            argo_workflows=True,
            namespaces=(NAMESPACE,),
            tools_dir=settings.tools_dir,
            argo_rollouts=settings.with_analysis,
            metrics_clusters=tuple(names) if settings.with_analysis else (),
        )
    )
    stack.callback(dev_stack.stop)
    assert dev_stack.cluster is not None and dev_stack.steps_image is not None
    workflow = WorkflowSettings(image=dev_stack.steps_image.reference, image_pull_policy="Never")
    server = dev_stack.argo.server_url if dev_stack.argo is not None else None
    return dev_stack.cluster, workflow, server or "", dev_stack.analysis


def workflow_page(server_url: str, workflow: str) -> str:
    """The Argo UI's page of the demo's rollout Workflow `workflow`."""
    return f"{server_url.rstrip('/')}/workflows/{NAMESPACE}/{workflow}"


def _wait_for_workflow(kube: Kube, timeout: float) -> str:
    """The name of the rollout Workflow the watcher creates for the demo's ProgressiveSync."""
    deadline = time.monotonic() + timeout
    selector = f"{NAME_LABEL}={label_value(NAME)}"
    while True:
        items, _ = kube.list(WORKFLOWS, NAMESPACE, label_selector=selector)
        if items:
            return str(items[0]["metadata"]["name"])
        if time.monotonic() >= deadline:
            raise DemoError(f"the watcher created no Workflow for {NAMESPACE}/{NAME} within {timeout:g}s")
        time.sleep(0.25)


def watcher_settings(
    kubeconfig: Path, engine: Engine = Engine.LOCAL, workflow: WorkflowSettings | None = None
) -> Settings:
    """The watcher of the demo: one namespace, the engine asked for, plain-text logs."""
    return Settings(
        namespaces=(NAMESPACE,),
        kubeconfig=str(kubeconfig),
        engine=engine,
        log_format=LogFormat.TEXT,
        workers=2,
        workflow=workflow or WorkflowSettings(),
    )


def _simulator_config(settings: DemoSettings) -> SimulatorConfig:
    defaults = Behaviour(sync_seconds=settings.sync_seconds, health_seconds=settings.health_seconds)
    failing: tuple[tuple[str, dict[str, Any]], ...] = ()
    if settings.fail_cluster:
        failing = ((settings.fail_cluster, {"fail": True}),)
    return SimulatorConfig(defaults=defaults, clusters=failing)


def _seed(
    kube: Kube, canary: str, write: Callable[[str], None], sync_retry: Mapping[str, Any] | None = None
) -> None:
    with contextlib.suppress(AlreadyExists):
        kube.create(
            NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
    seeded = seed_fleet(
        kube,
        NAMESPACE,
        clusters=CLUSTER_COUNT,
        regions=REGIONS,
        revision=NEW_REVISION,
        app_set=NAME,
        sync_policy={"retry": dict(sync_retry)} if sync_retry is not None else None,
    )
    secret = next(f"cluster-{c.name}" for c in seeded.clusters if c.name == canary)
    kube.patch(SECRETS, NAMESPACE, secret, {"metadata": {"labels": {CANARY_LABEL: "true"}}})
    per_region = Counter(c.region for c in seeded.clusters)
    regions = ", ".join(f"{region} ({count})" for region, count in per_region.items())
    write(
        f"Seeded a simulated fleet: {len(seeded.clusters)} clusters in {regions}, ApplicationSet {NAME}, "
        f"{len(seeded.applications)} Applications OutOfSync at revision {NEW_REVISION[:12]}; "
        f"cluster {canary} is labelled {CANARY_LABEL}=true.\n"
    )


def _describe_stages(canary: str) -> Iterator[str]:
    spec = demo_progressive_sync()["spec"]
    yield f"1. canary: the cluster labelled {CANARY_LABEL}=true ({canary})"
    yield f"2. one per region: {spec['stages'][1]['maxTargets']} clusters, one in each region, in parallel"
    yield "3. the rest: every other cluster, half of them at a time"


# --- the closing summary -------------------------------------------------------------------------


def summary(result: DemoResult, now: datetime) -> str:
    """What the demo prints at the end: the final status, stage timings and what it means."""
    view = result.view
    if view is None:
        return "The rollout did not report a status.\n"
    lines = [tables.render_table(view, now).rstrip("\n"), ""]
    phase = view.phase.value if view.phase else "unknown"
    lines.append(
        f"Rollout {phase} in {result.rollout_seconds:.1f}s (demo wall time {result.wall_seconds:.1f}s)."
    )
    lines.append("How long each stage took:")
    lines.append(tables.to_text(tables.stage_durations(view, now)).rstrip("\n"))
    total = result.cluster_count
    twice = sorted(app for app, count in result.syncs_per_app.items() if count > 1)
    if result.exit_code == 0:
        order = "in stage order" if result.in_stage_order else "NOT in stage order"
        once = "each exactly once" if not twice else f"more than once: {', '.join(twice)}"
        lines.append(f"{len(result.synced_clusters)} of {total} clusters synced {order}, {once}.")
    else:
        lines.extend(_failure_explanation(result, view, total))
    return "\n".join(lines) + "\n"


def _failure_explanation(result: DemoResult, view: ops_view.RolloutView, total: int) -> Sequence[str]:
    failed_stage = next((stage for stage in view.stages if stage.phase == StagePhase.FAILED), None)
    lines = []
    if failed_stage is not None:
        reasons = "; ".join(f"{f.name}: {f.reason}" if f.reason else f.name for f in failed_stage.failed)
        lines.append(f"Stage {failed_stage.name!r} failed ({reasons or failed_stage.message}).")
        later = [stage.name for stage in view.stages[view.stages.index(failed_stage) + 1 :]]
        if later:
            lines.append(f"The rollout stopped before stage {later[0]!r}: no later stage started.")
    untouched = total - len(result.synced_clusters)
    lines.append(
        f"{len(result.synced_clusters)} of {total} clusters received a sync "
        f"({', '.join(result.synced_clusters) or 'none'}); the other {untouched} kept the old revision."
    )
    if result.failed_metrics:
        failed = result.failed_metrics
        lines.extend(demo_analysis.explain_failed_metrics(failed, namespace=NAMESPACE, name=NAME))
        return lines
    lines.append(
        "That is what a canary is for. Fix the release and push a new revision, or run "
        f"`progressive-sync retry {NAME} -n {NAMESPACE}` to try the same one again."
    )
    return lines
