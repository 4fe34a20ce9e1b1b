"""Benchmark of one rollout over 10,000 clusters (issue 15; run by `make bench`; not a test).

The issue's bar, measured side by side in one run:

1. `plan` and `render` of a 10,000-cluster fleet file, parse included, as a user runs them (the
   CLI in a fresh process), for the file as YAML (`kubectl get -o yaml`) and as JSON
   (`kubectl get -o json`). Target < 2 s.
2. The Workflow `render` gives for it: bytes, nominal node count, and whether `argo lint
   --offline` accepts it (the argo CLI `make tools` builds; skipped when absent).
3. The ProgressiveSync status at 10,000 clusters once every cluster is recorded (the status the
   steps would write: `orchestrator.api.rollout_status`), in bytes, beside the same status in the
   shape before issue 15 (every cluster listed). Target < 256 KiB. And the steps' status writes a
   10,000-cluster rollout makes (counted from its stages and batches), beside the count before.
4. A real rollout on the local engine with the fleet simulator (a control plane on loopback), in
   batch mode, with the same number of batches per stage and the same node kinds as the
   10,000-cluster Workflow (`--batch-clusters` per batch, raised where needed so that the large
   stages run in batches and "one per region" a pod per cluster, as there): the stored
   Workflow's size at every change seen by a watch (max over the run, status included), the
   ProgressiveSync status's size (max), the steps' status writes and sync writes per Application
   (API server audit log), and wall time / critical path of the simulated syncs. Target < 1 MiB,
   exactly one sync write per Application, status writes growing with stages and batches,
   ratio <= 1.10. The control plane gets Argo's Workflow CRD as Argo's install manifests apply it
   (the minimal variant); the same rollout runs again with the full variant the tests install
   (every Workflow write validated against each field's schema), and once with one pod per
   cluster.

Prints the figures; exits 0 whatever they are (timings on a shared machine are reports). `--help`
lists the knobs; `--skip-rollout` does parts 1-3 only (no control plane).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Siblings in bench/ (the script's folder is first on sys.path): bench_rollout's pure helpers and
# control-plane plumbing, and the synthetic fleet.
import bench_rollout
import psutil
import scale_fleet

from orchestrator.api.models import ProgressiveSync, ProgressiveSyncStatus
from orchestrator.api.release import Release, spec_hash
from orchestrator.api.rollout_status import start_rollout, start_stage
from orchestrator.api.stage_records import ClusterRecord, ClusterState, StageOutcomes, summarize
from orchestrator.argocd.fleet import load_fleet
from orchestrator.devenv import tools
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import (
    APPLICATION_SETS,
    APPLICATIONS,
    NAMESPACES,
    PROGRESSIVE_SYNCS,
    SECRETS,
    WORKFLOWS,
    AlreadyExists,
    Kube,
)
from orchestrator.kube.crds import all_crd_documents, apply_crds
from orchestrator.planning.planner import plan_fleet, planned_sizes
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import Behaviour, SimulatorConfig
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import seed_fleet
from orchestrator.watcher.loop import Watcher
from orchestrator.watcher.settings import Engine, LogFormat, Settings
from steps.common import Tuning
from workflow_templates.builder import (
    batch_count,
    build_workflow,
    estimate_nodes,
    workflow_object,
)
from workflow_templates.settings import WorkflowSettings

TIME_TARGET_S = 2.0
CLI_RUNS = 3
WORKFLOW_TARGET = 1024 * 1024
STATUS_TARGET = 256 * 1024
CLI = [sys.executable, "-m", "orchestrator.cli.main"]


def timed_cli(args: Sequence[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Run the CLI in a fresh process; its wall and CPU (user + system) seconds, interpreter start
    and imports included."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, check=False, timeout=900)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, result


def import_baseline() -> float:
    """The same fresh process doing nothing but importing the CLI (what any command costs)."""
    started = time.perf_counter()
    subprocess.run([*CLI, "--help"], capture_output=True, check=False, timeout=300)
    return time.perf_counter() - started


def write_fleet_files(workdir: Path, clusters: int) -> tuple[Path, Path, Path]:
    """The ProgressiveSync, the fleet as YAML and the same fleet as one JSON List."""
    ps, as_yaml, as_json = workdir / "ps.yaml", workdir / "fleet.yaml", workdir / "fleet.json"
    scale_fleet.write_progressive_sync(ps)
    scale_fleet.write_fleet(as_yaml, clusters)
    objects = scale_fleet.fleet_objects(clusters)
    items = [item for obj in objects for item in (obj["items"] if obj["kind"] == "List" else [obj])]
    as_json.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return ps, as_yaml, as_json


def status_at_scale(ps_path: Path, fleet_path: Path) -> tuple[int, int, int]:
    """The status once every target of every stage is recorded completed: its bytes as the steps
    write it (each stage's summary; every cluster's record is in the stage's ProgressiveSyncStage
    objects, issue 30), the bytes of the same status in the shape before issue 15 (every cluster
    listed in `targets` and `completed`), and the number of targets."""
    ps = ProgressiveSync.model_validate(json.loads(ps_path.read_text()))
    fleet = load_fleet(fleet_path.read_text())
    plan = plan_fleet(ps.spec, fleet, ps_name=ps.metadata.name)
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    status = start_rollout(
        ProgressiveSyncStatus(),
        rollout_id="602c4d4c1d",
        stage_names=[s.name for s in ps.spec.stages],
        now=now,
        revision=scale_fleet.NEW,
    )
    total = 0
    done = ClusterRecord(state=ClusterState.COMPLETED, started_at=now, finished_at=now)
    old_shape = status.to_api()
    for stage in plan.stages:
        targets = tuple(stage.targets)
        total += len(targets)
        outcomes = StageOutcomes(stage=stage.name, targets=targets, clusters=dict.fromkeys(targets, done))
        status = start_stage(status, stage=stage.name, summary=summarize(outcomes), message="", now=now)
    old_shape = status.to_api()
    old_shape.pop("counts", None)
    for entry, stage in zip(old_shape.get("stages") or [], plan.stages, strict=False):
        for key in ("counts", "more", "records"):
            entry.pop(key, None)
        entry["targets"] = entry["completed"] = list(stage.targets)
    return compact_bytes(status.to_api()), compact_bytes(old_shape), total


def compact_bytes(value: Any) -> int:
    """Bytes of `value` as compact JSON (what the API server stores and sends)."""
    return len(json.dumps(value, separators=(",", ":")).encode())


def steps_status_writes(batches: dict[str, tuple[int, int, int]]) -> tuple[int, int]:
    """The steps' writes of the ProgressiveSync status in a rollout without failures, from the
    stages' (targets, maxParallel, batches): now (select and record per stage; a cluster's outcome
    goes into its stage's ProgressiveSyncStage records, issue 30, and the watcher's live summary is
    at most one write per `--summary-interval`, not counted here) and before issue 15 (two per
    cluster), each with finalize's one."""
    now = before = 1
    for targets, _, _ in batches.values():
        now += 2
        before += 2 + 2 * targets
    return now, before


def part_cli(options: argparse.Namespace, workdir: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Parts 1-3."""
    ps, as_yaml, as_json = write_fleet_files(workdir, options.clusters)
    sizes_mib = [path.stat().st_size / 2**20 for path in (as_yaml, as_json)]
    say(f"  fleet files: YAML {sizes_mib[0]:.1f} MiB, JSON {sizes_mib[1]:.1f} MiB")
    figures: dict[str, Any] = {"baseline": import_baseline() if options.cli_timing else 0.0}
    for label, fleet in (("yaml", as_yaml), ("json", as_json)) if options.cli_timing else ():
        for command in ("plan", "render"):
            args = [command, "-f", str(ps), "--fleet", str(fleet)]
            args += ["-o", "json"]
            # The median of a few runs: other work on a shared machine moves a single one by seconds.
            timings = [timed_cli(args) for _ in range(CLI_RUNS)]
            seconds = statistics.median(wall for wall, _, _ in timings)
            cpu = statistics.median(used for _, used, _ in timings)
            # The first run that failed, if one did (its code and message are reported).
            result = next((r for _, _, r in timings if r.returncode != 0), timings[-1][2])
            figures[f"{command}-{label}"] = (seconds, cpu, result.returncode, os.getloadavg()[0])
            if result.returncode != 0:
                say(f"  {command} ({label}) exited {result.returncode}: {result.stderr.strip()[-300:]}")
            if command == "render" and label == "json" and result.returncode == 0:
                rendered = workdir / "workflow.json"
                rendered.write_text(result.stdout)
                figures["workflow-bytes"] = len(result.stdout.encode())
            code = result.returncode
            say(f"  {command} --fleet {fleet.name}: {seconds:.2f}s, CPU {cpu:.2f}s (exit {code})")
    ps_model = ProgressiveSync.model_validate(json.loads(ps.read_text()))
    fleet_model = load_fleet(as_json.read_text())
    plan = plan_fleet(ps_model.spec, fleet_model, ps_name="checkout")
    sizes = planned_sizes(ps_model.spec, plan)
    settings = WorkflowSettings()
    figures["nodes"] = estimate_nodes(ps_model, sizes, settings)
    figures["batches"] = {
        name: (size.targets, size.max_parallel, batch_count(size, settings)) for name, size in sizes.items()
    }
    if "workflow-bytes" not in figures:  # no CLI timing: the same Workflow, built in this process
        workflow = build_workflow(
            ps_model,
            release=Release.of(generation=1, spec_hash=spec_hash(ps_model.spec), revisions=plan.revisions),
            plan=plan,
            settings=settings,
        )
        (workdir / "workflow.json").write_text(json.dumps(workflow_object(workflow)))
        figures["workflow-bytes"] = (workdir / "workflow.json").stat().st_size
    figures["lint"] = argo_lint(workdir / "workflow.json")
    figures["status-bytes"], figures["status-bytes-before"], figures["status-clusters"] = status_at_scale(
        ps, as_json
    )
    figures["status-writes"], figures["status-writes-before"] = steps_status_writes(figures["batches"])
    return figures


def argo_lint(path: Path) -> str:
    """`argo lint --offline` of the rendered Workflow: its verdict in a few words."""
    try:
        argo = tools.binary("argo")
    except tools.ToolsMissing as exc:
        return f"skipped ({exc})"
    result = subprocess.run(
        [str(argo), "lint", "--offline", str(path)], capture_output=True, text=True, check=False, timeout=300
    )
    text = (result.stdout + result.stderr).strip().splitlines()
    return f"exit {result.returncode}: {text[-1] if text else ''}"


# --- part 4: a rollout in batch mode on the local engine ------------------------------------------

REGIONS = tuple(f"region-{i:02d}" for i in range(20))


def rollout_stages(ten_percent: int, rest: int, rest_parallel: int) -> list[dict[str, Any]]:
    """The shape of the 10,000-cluster rollout: a canary, one per region (19), then two big stages."""
    return [
        bench_rollout.stage("canary", max_targets=1, max_parallel=1),
        bench_rollout.stage(
            "one per region", max_targets=len(REGIONS) - 1, max_parallel=len(REGIONS) - 1, spread_by="region"
        ),
        bench_rollout.stage("ten percent", max_targets=ten_percent, max_parallel=max(1, ten_percent // 4)),
        bench_rollout.stage("the rest", max_targets=rest, max_parallel=rest_parallel),
    ]


class SizeSampler:
    """Watches one kind of object in a namespace and keeps the largest serialized size seen."""

    def __init__(self, kube: Any, resource: Any, namespace: str, *, part: str | None = None) -> None:
        self.kube, self.resource, self.namespace, self.part = kube, resource, namespace, part
        self.peak = 0
        self.events = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _size(self, obj: dict[str, Any]) -> int:
        value = obj.get(self.part) if self.part else obj
        return len(json.dumps(value or {}, separators=(",", ":")).encode())

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                items, version = self.kube.list(self.resource, self.namespace)
                for item in items:
                    self.peak = max(self.peak, self._size(item))
                for event in self.kube.watch(
                    self.resource, self.namespace, resource_version=version, timeout_seconds=5
                ):
                    if event.type in ("ADDED", "MODIFIED"):
                        self.events += 1
                        self.peak = max(self.peak, self._size(event.object))
                    if self._stop.is_set():
                        break

    def __enter__(self) -> SizeSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


def rollout_crds(workflow_crd: str) -> list[dict[str, Any]]:
    """The CRDs the rollout's control plane gets: ours and the peers', with Argo's Workflow CRD in
    its `minimal` variant (what Argo's install manifests apply: spec and status kept as they are
    written) or `full` (every field's schema, which the tests' own control plane installs to catch a
    malformed Workflow; the API server validates every write of the Workflow against it)."""
    try:
        minimal = tools.minimal_workflow_crd_dir() if workflow_crd == "minimal" else None
    except tools.ToolsMissing as exc:
        raise SystemExit(str(exc)) from exc
    return all_crd_documents(tools.peer_crd_dirs(), workflow_crd_dir=minimal)


def part_rollout(
    options: argparse.Namespace,
    big: dict[str, Any],
    say: Callable[[str], None],
    *,
    batched: bool = True,
    workflow_crd: str = "minimal",
) -> dict[str, Any]:
    """A rollout with the 10,000-cluster Workflow's batch counts, on a real control plane.

    `batched=False` runs the same fleet and stages with one pod per cluster, for comparison;
    `workflow_crd` picks the Workflow CRD's variant (`rollout_crds`).
    """

    # The same batch count per stage as the big Workflow: stage 3 and 4 of the 10,000 plan.
    _, _, ten_batches = big["batches"]["ten percent"]
    _, _, rest_batches = big["batches"]["the rest"]
    # The 10,000-cluster Workflow runs "one per region" (19) as a pod per cluster and the two large
    # stages in batches, so the threshold sits at 19 and each large stage needs more targets than
    # that: at least ceil(20 / batches) clusters per batch (10 for the two batches of "ten percent").
    threshold = len(REGIONS) - 1
    per_batch = max(options.batch_clusters, -(-(threshold + 1) // min(ten_batches, rest_batches)))
    ten, rest = ten_batches * per_batch, rest_batches * per_batch
    stages = rollout_stages(ten, rest, max(rest_batches, rest // 4))
    clusters = 1 + (len(REGIONS) - 1) + ten + rest
    settings = WorkflowSettings(
        batch_threshold=threshold if batched else clusters,
        batch_clusters=per_batch,
        argocd_namespace=bench_rollout.NAMESPACE,
    )
    namespace = bench_rollout.NAMESPACE
    shape = (
        f"then {ten} in {ten_batches} batches and {rest} in {rest_batches} batches ({per_batch} per batch)"
        if batched
        else f"then {ten} and {rest}, one pod per cluster"
    )
    say(
        f"  {clusters} clusters: canary 1, one per region {len(REGIONS) - 1}, {shape}; "
        f"{options.sync_seconds:g}s sync + {options.health_seconds:g}s to Healthy; "
        f"Argo's {workflow_crd} Workflow CRD"
    )
    crds = rollout_crds(workflow_crd)
    with DevCluster.start() as cluster:
        admin = Kube.from_kubeconfig(str(cluster.kubeconfig))
        try:
            apply_crds(admin, crds)
            with contextlib.suppress(AlreadyExists):
                admin.create(
                    NAMESPACES,
                    None,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                )
            steps_kubeconfig = cluster.mint_user(bench_rollout.STEPS_USER, ["system:masters"])
            seeded = seed_fleet(
                admin,
                namespace,
                clusters=clusters,
                regions=REGIONS,
                revision=bench_rollout.REVISION,
                app_set="fleet",
            )
            events_log = cluster.workdir / "simulator-events.jsonl"
            simulator = FleetSimulator(
                admin,
                namespace,
                SimulatorConfig(
                    defaults=Behaviour(
                        sync_seconds=options.sync_seconds, health_seconds=options.health_seconds
                    )
                ),
                events_log=events_log,
            )
            steps_kube = Kube.from_kubeconfig(str(steps_kubeconfig))
            watcher = Watcher(
                steps_kube,
                Settings(
                    namespaces=(namespace,),
                    kubeconfig=str(steps_kubeconfig),
                    engine=Engine.LOCAL,
                    log_format=LogFormat.TEXT,
                    workers=2,
                    workflow=settings,
                ),
            )
            with contextlib.ExitStack() as stack:
                stack.callback(steps_kube.close)
                workflows = stack.enter_context(SizeSampler(admin, WORKFLOWS, namespace))
                statuses = stack.enter_context(
                    SizeSampler(admin, PROGRESSIVE_SYNCS, namespace, part="status")
                )
                stack.enter_context(simulator)
                stack.enter_context(watcher)
                admin.create(PROGRESSIVE_SYNCS, namespace, bench_rollout.progressive_sync("fleet", stages))
                ended, status = bench_rollout.wait_settled(admin, "fleet", options.timeout)
                time.sleep(2.0)  # the last status writes reach the samplers' watches
            audit = bench_rollout.read_audit(cluster)
            applied = bench_rollout.created_at(audit, "progressivesyncs", "fleet")
            sync_at, healthy_at = bench_rollout.cluster_times(
                audit, read_events(events_log), "fleet", applied
            )
            _, per_stage = bench_rollout.stage_reactions(status, stages, sync_at, healthy_at)
            [workflow] = admin.list(WORKFLOWS, namespace)[0]
            nodes = len((workflow.get("status") or {}).get("nodes") or {})
        finally:
            admin.close()
    sync_writes = app_writes(audit, "update")  # a sync is an update of the whole Application
    refreshes = app_writes(audit, "patch")  # a refresh request is a patch of one annotation
    status_writes = Counter(
        (line.get("user") or {}).get("username")
        for line in audit
        if (line.get("objectRef") or {}).get("resource") == "progressivesyncs"
        and (line.get("objectRef") or {}).get("subresource") == "status"
        and line.get("verb") in ("update", "patch")
        and (line.get("responseStatus") or {}).get("code") == 200
    )
    return {
        "clusters": clusters,
        "phase": status.get("phase"),
        "workflow-peak": workflows.peak,
        "workflow-events": workflows.events,
        "nodes": nodes,
        "status-peak": statuses.peak,
        "sync-writes": Counter(sync_writes.get(app, 0) for app in seeded.applications),
        "refreshes": sum(refreshes.values()),
        "status-writes": dict(status_writes),
        "wall": ended - applied,
        "critical": bench_rollout.critical_path(per_stage),
    }


# --- part 5: the watcher's memory with 10,000 Applications and 10,000 cluster Secrets --------------


def part_memory(options: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    """`progressive-sync watch` (engine argo: it watches, plans and writes status) in its own process
    while `options.clusters` cluster Secrets and as many Applications of one ApplicationSet appear,
    with a paused ProgressiveSync over all of them; peak RSS sampled and the kernel's VmHWM."""
    namespace = bench_rollout.NAMESPACE
    with DevCluster.start() as cluster:
        admin = Kube.from_kubeconfig(str(cluster.kubeconfig))
        log_file = (cluster.workdir / "watcher-rss.log").open("wb")
        watcher: subprocess.Popen[bytes] | None = None
        samples: list[float] = []
        stop = threading.Event()
        try:
            apply_crds(admin, all_crd_documents(tools.peer_crd_dirs()))
            with contextlib.suppress(AlreadyExists):
                admin.create(
                    NAMESPACES,
                    None,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                )
            watcher = subprocess.Popen(
                [
                    *CLI,
                    *("watch", "-n", namespace, "--engine", "argo", "--kubeconfig", str(cluster.kubeconfig)),
                    *("--log-format", "text", "--log-level", "warning"),
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
            process = psutil.Process(watcher.pid)

            def sample() -> None:
                while not stop.is_set():
                    with contextlib.suppress(psutil.Error):
                        samples.append(process.memory_info().rss / 2**20)
                    stop.wait(0.2)

            threading.Thread(target=sample, daemon=True).start()
            started = time.monotonic()
            create = bench_rollout._create
            with ThreadPoolExecutor(16) as pool:
                list(
                    pool.map(
                        lambda i: create(admin, SECRETS, bench_rollout._cluster_secret(i)),
                        range(options.clusters),
                    )
                )
                uid = create(admin, APPLICATION_SETS, bench_rollout._app_set("rss"))["metadata"]["uid"]
                create(
                    admin,
                    PROGRESSIVE_SYNCS,
                    bench_rollout.progressive_sync(
                        "rss",
                        [bench_rollout.stage("all", max_targets="100%", max_parallel="10%")],
                        paused=True,
                    ),
                )
                list(
                    pool.map(
                        lambda i: create(admin, APPLICATIONS, bench_rollout._app("rss", uid, i)),
                        range(options.clusters),
                    )
                )
            created = time.monotonic() - started
            say(f"  created {options.clusters:,} cluster Secrets and Applications in {created:.0f}s")
            deadline = time.monotonic() + options.timeout
            while time.monotonic() < deadline:
                status = admin.get(PROGRESSIVE_SYNCS, namespace, "rss").get("status") or {}
                if status.get("phase"):
                    break
                time.sleep(0.5)
            stop.wait(10.0)  # a quiet while after, for the steady state
            hwm = bench_rollout.peak_rss_mb(watcher.pid)
        finally:
            stop.set()
            if watcher is not None:
                watcher.terminate()
                try:
                    watcher.wait(30)
                except subprocess.TimeoutExpired:
                    watcher.kill()
            log_file.close()
            admin.close()
    return {"hwm": hwm, "sampled": max(samples, default=float("nan")), "phase": status.get("phase")}


# --- the report ----------------------------------------------------------------------------------------


def app_writes(audit: list[dict[str, Any]], verb: str) -> Counter[str]:
    """Successful writes (`verb`: update or patch) of each Application by the steps' user."""
    counts: Counter[str] = Counter()
    for line in audit:
        ref = line.get("objectRef") or {}
        if ref.get("resource") != "applications" or line.get("verb") != verb or ref.get("subresource"):
            continue
        if (line.get("user") or {}).get("username") != bench_rollout.STEPS_USER:
            continue
        if (line.get("responseStatus") or {}).get("code") == 200:
            counts[str(ref.get("name"))] += 1
    return counts


def verdict(ok: bool) -> str:
    """Words for a target met or missed."""
    return "meets the target" if ok else "MISSES the target"


def report(
    options: argparse.Namespace,
    big: dict[str, Any],
    runs: dict[str, dict[str, Any]],
    memory: dict[str, Any] | None,
) -> str:
    """The table of figures."""
    rows: list[tuple[str, str, str]] = []
    base = big["baseline"]
    for command in ("plan", "render") if options.cli_timing else ():
        for label in ("yaml", "json"):
            seconds, cpu, code, load = big[f"{command}-{label}"]
            rows.append(
                (
                    f"{command} --fleet ({label}), {options.clusters:,} clusters",
                    f"{seconds:.2f}s wall, {cpu:.2f}s CPU, median of {CLI_RUNS} "
                    f"(exit {code}; load {load:.1f})",
                    f"target < {TIME_TARGET_S:g}s: {verdict(seconds < TIME_TARGET_S and code == 0)}; "
                    f"a bare `--help` costs {base:.2f}s here",
                )
            )
    rows.append(
        (
            "rendered Workflow (spec, no status)",
            f"{big.get('workflow-bytes', 0):,} bytes, {big['nodes']} nominal nodes",
            "stages (targets, maxParallel, batches): "
            + "; ".join(f"{name} {t}" for name, t in big["batches"].items()),
        )
    )
    rows.append(("argo lint --offline of it", big["lint"], ""))
    rows.append(
        (
            f"ProgressiveSync status, {big['status-clusters']:,} clusters recorded",
            f"{big['status-bytes']:,} bytes",
            f"target < {STATUS_TARGET:,}: {verdict(big['status-bytes'] < STATUS_TARGET)}; "
            f"{big['status-bytes-before']:,} bytes in the shape before issue 15 (every cluster listed)",
        )
    )
    rows.append(
        (
            f"steps' status writes per rollout, {big['status-clusters']:,} clusters, no failure",
            f"{big['status-writes']:,} + the watcher's live summary (one per --summary-interval)",
            f"{big['status-writes-before']:,} before issue 15 (two per cluster); grows with stages only: "
            "each cluster's outcome is a merge patch of its stage's record (one per batch per "
            f"{Tuning().batch_flush_seconds:g}s it runs, or one per cluster pod's sync and end)",
        )
    )
    for mode, run in runs.items():
        ratio = run["wall"] / run["critical"] if run["critical"] else float("nan")
        rows += [
            (
                f"[{mode}] stored Workflow, max over the run ({run['clusters']} clusters)",
                f"{run['workflow-peak']:,} bytes, {run['nodes']} nodes at the end",
                f"target < {WORKFLOW_TARGET:,}: {verdict(run['workflow-peak'] < WORKFLOW_TARGET)}; "
                f"{run['workflow-events']} versions seen; rollout {run['phase']}",
            ),
            (f"[{mode}] ProgressiveSync status, max over the run", f"{run['status-peak']:,} bytes", ""),
            (
                f"[{mode}] sync writes per Application",
                ", ".join(f"{k} write(s): {v} apps" for k, v in sorted(run["sync-writes"].items())),
                f"target exactly 1; besides, {run['refreshes']} refresh request(s) (a patch of the "
                "refresh annotation when only a new comparison can tell the health after the sync)",
            ),
            (
                f"[{mode}] status writes per rollout, by user",
                ", ".join(f"{user}: {n}" for user, n in sorted(run["status-writes"].items())),
                "target: grows with stages and batches, not clusters",
            ),
            (
                f"[{mode}] rollout wall / critical path",
                f"{ratio:.3f} ({run['wall']:.1f}s / {run['critical']:.1f}s)",
                f"target <= 1.10: {verdict(ratio <= 1.10)}",
            ),
        ]
    if memory is not None:
        peak = memory["hwm"] if memory["hwm"] is not None else memory["sampled"]
        rows.append(
            (
                f"watcher peak RSS, {options.clusters:,} Applications + {options.clusters:,} cluster Secrets",
                f"{peak:.1f} MB (sampled peak {memory['sampled']:.1f} MB)",
                f"target < 200 MB: {verdict(peak < 200)}; ProgressiveSync {memory['phase']}",
            )
        )
    return bench_rollout.figure_table(rows)


def main(argv: Sequence[str]) -> int:
    """Parts 1-3 from the fleet file, then the rollout; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=10_000, help="clusters of the fleet file")
    parser.add_argument("--skip-rollout", action="store_true", help="parts 1-3 only (no control plane)")
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the watcher's RSS")
    parser.add_argument(
        "--no-cli-timing", dest="cli_timing", action="store_false", help="skip timing plan/render (part 1)"
    )
    parser.add_argument(
        "--batch-clusters",
        type=int,
        default=5,
        help="clusters per batch in the rollout (raised where a large stage would not exceed the threshold)",
    )
    parser.add_argument("--sync-seconds", type=float, default=2.0, help="simulated sync time")
    parser.add_argument("--health-seconds", type=float, default=1.0, help="simulated time to Healthy")
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up the rollout after this long")
    options = parser.parse_args(argv)
    say = lambda text: print(text, flush=True)  # noqa: E731
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        say(f"bench_scale: {options.clusters:,}-cluster fleet file")
        big = part_cli(options, workdir, say)
        runs: dict[str, dict[str, Any]] = {}
        if not options.skip_rollout:
            say("rollout in batch mode (local engine, fleet simulator):")
            runs["batches"] = part_rollout(options, big, say)
            say("the same rollout with Argo's full Workflow CRD (every Workflow write validated):")
            runs["batches, full Workflow CRD"] = part_rollout(options, big, say, workflow_crd="full")
            say("the same rollout with one pod per cluster:")
            runs["pod per cluster"] = part_rollout(options, big, say, batched=False)
        memory = None
        if options.memory:
            say("watcher memory:")
            try:
                memory = part_memory(options, say)
            except Exception as exc:
                say(f"  the memory run failed: {exc}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(report(options, big, runs, memory))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
