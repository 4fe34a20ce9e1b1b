"""The `analyze` step: run a stage's analysis gate on the real Argo Rollouts controller.

The stage's effective analysis comes from the rollout contract (`StageContract.analysis`). In order:

1. which runs: `--cluster C` (perCluster, the node after C's `cluster` in the fan-out) runs one
   for C once its record says Completed; without `--cluster`, one run for the stage, or with
   perCluster one per Completed cluster (a stage in batches, and every `duringBake` run). A stage
   that has failed already (`steps.common.stage_failure`) starts no run;
2. each run's templates are read (AnalysisTemplate in the ProgressiveSync's namespace,
   ClusterAnalysisTemplate with clusterScope, nested `spec.templates` too) and its AnalysisRun is
   built by `orchestrator.analysis.run.build_analysis_run` with the cluster's facts (name, Secret
   labels, server, its Applications) from the inventory the watcher publishes. A template that
   does not exist or an argument without a value fails the run's cluster (or the stage) with the
   catalog's reason, as a failed metric would: nothing is created;
3. create, or adopt the run of that name (a retried step, a restarted watcher: AlreadyExists →
   get). A run of that name labelled for another rollout is `AnalysisRunConflict` (exit 2);
4. follow the runs (list → watch, `orchestrator.kube.follow`) to a final phase: the deadline is
   the run's creation plus the analysis' timeoutSeconds (else its metrics' interval x count,
   `run_deadline_seconds`); past it the run is terminated (`spec.terminate: true`) and counts
   Failed (`AnalysisTimedOut`). A `duringBake` run is terminated when the bake ends (then
   Successful unless a metric failed). Every `Tuning.stage_check_seconds` the ProgressiveSync is
   read again: another rollout took over, or the rollout ended (cancel), and every open run is
   terminated; with perCluster, a stage whose failures exceed maxFailedClusters terminates the rest;
5. the outcome (`orchestrator.analysis.verdict.assess_analysis_run`): Successful passes; Failed and
   Error fail (a per-cluster run fails its cluster's record, which `maxFailedClusters` counts; a
   stage's run fails the stage, which `record` then keeps); Inconclusive fails with `onInconclusive:
   Fail`, and with `Approve` the step writes `verdict` = `Inconclusive` and exits 0: the Workflow's
   `approve-analysis` gate, which runs only then, waits for `progressive-sync approve` / `argo resume`.
   A stage's run is in `status.stages[].analysis` (name, phase, each metric's phase and value or
   the failing metric's message); a cluster's in its record's note or failure reason.

SIGTERM: `argo stop`, the Workflow's deadline or a cancel terminate the open runs and wait
(`Tuning.analysis_terminate_wait_seconds`) for them to end (`OpenRuns.stop_before_exit`); a step
pod merely deleted (the Workflow is not stopping) leaves them running for its retry to adopt. A
run we terminated carries `progressivesync.io/terminated: <why>`, so a terminated run that the
controller ends Successful is never read as a pass, unless it was the end of a bake.

Caller: `python -m steps analyze` (steps.cli); tests call `analyze` directly too.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from orchestrator.analysis.check import gather_templates
from orchestrator.analysis.run import (
    AnalysisBuildError,
    AppRef,
    ArgContext,
    FetchedTemplate,
    build_analysis_run,
    run_deadline_seconds,
)
from orchestrator.analysis.verdict import AnalysisVerdict, Outcome, assess_analysis_run, metric_lines
from orchestrator.api.analysis import AnalysisWhen, OnInconclusive, StageAnalysis
from orchestrator.api.metadata import ROLLOUT_ID_LABEL, workflow_name
from orchestrator.api.models import ProgressiveSyncStatus, StagePhase
from orchestrator.api.reasons import Reason
from orchestrator.api.rollout_status import close_stage, find_stage, note_analysis
from orchestrator.api.stage_records import ClusterState
from orchestrator.core.clock import Clock, parse_time
from orchestrator.core.errors import PermanentError
from orchestrator.kube.client import (
    ANALYSIS_RUNS,
    ANALYSIS_TEMPLATES,
    CLUSTER_ANALYSIS_TEMPLATES,
    WORKFLOWS,
    AlreadyExists,
    Kube,
    NotFound,
)
from orchestrator.kube.follow import follow_objects
from orchestrator.kube.status_writer import update_status
from steps import status_sink as sinks
from steps.common import (
    FleetLookup,
    Superseded,
    UsageProblem,
    check_rollout,
    load_progressive_sync,
    read_stage_failures,
    rollout_ended,
    stage_failure,
)
from steps.context import StepContext
from steps.status_sink import DirectSink, read_stage_records

log = logging.getLogger(__name__)

VERDICT_OUTPUT = "verdict"
TERMINATED_ANNOTATION = "progressivesync.io/terminated"


class Why(StrEnum):
    """Why we terminated a run (its `progressivesync.io/terminated` annotation)."""

    DEADLINE = "deadline"
    STOPPED = "stopped"  # the step's SIGTERM: argo stop, the Workflow's deadline, a cancel
    ROLLOUT_ENDED = "rollout-ended"  # the exit handler: the rollout failed or was cancelled
    BAKE_ENDED = "bake-ended"
    STAGE_FAILED = "stage-failed"


class Gate(StrEnum):
    """How the step ended."""

    PASSED = "Passed"
    FAILED = "Failed"
    APPROVAL = "Inconclusive"  # waits for a person (onInconclusive: Approve)
    SKIPPED = "Skipped"


@dataclass(frozen=True)
class AnalyzeResult:
    """The gate's outcome and what it says."""

    stage: str
    gate: Gate
    message: str
    runs: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """True when a run failed (exit 1)."""
        return self.gate is Gate.FAILED

    @property
    def summary(self) -> str:
        """One line for people."""
        return f"analyze: stage {self.stage!r}: {self.gate.value}: {self.message}"

    @property
    def outputs(self) -> dict[str, str]:
        """The `verdict` output: `Inconclusive` opens the Workflow's approve-analysis gate."""
        return {VERDICT_OUTPUT: self.gate.value}


# --- reading and writing the runs ------------------------------------------------------------


def fetch_templates(kube: Kube, namespace: str, analysis: StageAnalysis) -> list[FetchedTemplate]:
    """The analysis' templates, each followed by those it includes; AnalysisBuildError
    (AnalysisTemplateNotFound) naming the first one missing (`orchestrator.analysis.check`)."""

    def lookup(name: str, cluster_scope: bool) -> dict[str, Any] | None:
        resource = CLUSTER_ANALYSIS_TEMPLATES if cluster_scope else ANALYSIS_TEMPLATES
        try:
            return kube.get(resource, None if cluster_scope else namespace, name)
        except NotFound:
            return None

    return gather_templates(analysis, namespace, lookup)


def create_or_adopt(kube: Kube, manifest: Mapping[str, Any], rollout_id: str) -> dict[str, Any]:
    """Create the run, or the one of its name this rollout made already; PermanentError
    (AnalysisRunConflict) for one of another rollout."""
    meta = manifest["metadata"]
    try:
        created = kube.create(ANALYSIS_RUNS, meta["namespace"], dict(manifest))
        log.info("created AnalysisRun %s", meta["name"])
        return created
    except AlreadyExists:
        existing = kube.get(ANALYSIS_RUNS, meta["namespace"], meta["name"])
    theirs = ((existing.get("metadata") or {}).get("labels") or {}).get(ROLLOUT_ID_LABEL)
    if theirs != rollout_id:
        raise PermanentError(
            f"{Reason.ANALYSIS_RUN_CONFLICT.value}: AnalysisRun {meta['name']} exists for rollout "
            f"{theirs!r}, "
            f"not {rollout_id} ({Reason.ANALYSIS_RUN_CONFLICT.fix})"
        )
    log.info("adopted AnalysisRun %s (made by an earlier attempt of this step)", meta["name"])
    return existing


def terminate_run(kube: Kube, namespace: str, name: str, why: Why) -> None:
    """`spec.terminate: true`, with why we did it (a run already gone is fine)."""
    patch = {"metadata": {"annotations": {TERMINATED_ANNOTATION: why.value}}, "spec": {"terminate": True}}
    try:
        kube.patch(ANALYSIS_RUNS, namespace, name, patch)
        log.info("terminated AnalysisRun %s (%s)", name, why.value)
    except NotFound:
        log.info("AnalysisRun %s is gone already", name)


def verdict_of(run: Mapping[str, Any]) -> AnalysisVerdict:
    """The run's verdict, where a run we terminated (but for a bake's end) never passes."""
    verdict = assess_analysis_run(run)
    why = ((run.get("metadata") or {}).get("annotations") or {}).get(TERMINATED_ANNOTATION)
    if verdict.outcome is not Outcome.PASSED or why in (None, Why.BAKE_ENDED.value):
        return verdict
    name = (run.get("metadata") or {}).get("name", "?")
    if why == Why.DEADLINE.value:
        lines = "; ".join(metric_lines(run)) or "no measurement"
        return AnalysisVerdict(
            Outcome.FAILED,
            verdict.phase,
            f"analysis {name} did not end within its deadline and was terminated ({lines})",
            Reason.ANALYSIS_TIMED_OUT,
        )
    return AnalysisVerdict(
        Outcome.FAILED, verdict.phase, f"analysis {name} was terminated ({why}) before it decided"
    )


def workflow_stopping(kube: Kube, namespace: str, name: str, now: datetime) -> bool:
    """True when the step's SIGTERM comes from its Workflow ending (argo stop/terminate, its
    deadline, deleted), False when only the pod was deleted (the retry goes on)."""
    try:
        workflow = kube.get(WORKFLOWS, namespace, name)
    except NotFound:
        return True
    spec, status = workflow.get("spec") or {}, workflow.get("status") or {}
    if spec.get("shutdown") or status.get("phase") in ("Succeeded", "Failed", "Error"):
        return True
    started, deadline = parse_time(status.get("startedAt")), spec.get("activeDeadlineSeconds")
    return bool(started and deadline and started + timedelta(seconds=int(deadline)) <= now)


class OpenRuns:
    """The runs a step waits on, so that its SIGTERM handler can terminate them (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.kube: Kube | None = None
        self.namespace = ""
        self.workflow = ""
        self.clock: Clock | None = None
        self.names: list[str] = []

    def hold(self, kube: Kube, namespace: str, workflow: str, clock: Clock, names: Sequence[str]) -> None:
        """The runs now open."""
        with self._lock:
            self.kube, self.namespace, self.workflow, self.clock = kube, namespace, workflow, clock
            self.names = list(names)

    def add(self, name: str) -> None:
        """A run about to be created: open from before its create, so that a SIGTERM arriving
        between the create and the wait still terminates it (a name not created yet is skipped)."""
        with self._lock:
            if name not in self.names:
                self.names.append(name)

    def stop_before_exit(self, seconds: float) -> str:
        """Terminate the open runs when the Workflow is stopping, and wait at most `seconds`."""
        with self._lock:
            kube, clock, names = self.kube, self.clock, list(self.names)
        if kube is None or clock is None or not names:
            return "no AnalysisRun open"
        if not workflow_stopping(kube, self.namespace, self.workflow, clock.now()):
            return f"left {len(names)} AnalysisRun(s) running for the step's retry (the Workflow goes on)"
        running = [name for name in names if _still_running(kube, self.namespace, name)]
        still_open = terminate_and_wait(
            kube, self.namespace, running, Why.STOPPED, clock=clock, seconds=seconds
        )
        left = f"; {len(still_open)} still running at the bound" if still_open else ""
        return f"terminated {len(names)} AnalysisRun(s){left}"


def _still_running(kube: Kube, namespace: str, name: str) -> bool:
    """True when the run exists and has not ended (a run that ended keeps its verdict untouched)."""
    try:
        return not assess_analysis_run(kube.get(ANALYSIS_RUNS, namespace, name)).final
    except NotFound:
        return False


def end_rollout_runs(kube: Kube, namespace: str, rollout_id: str, *, clock: Clock, seconds: float) -> str:
    """The exit handler's part: every AnalysisRun of the rollout still running is terminated
    (`Why.ROLLOUT_ENDED`) and followed until it ended, at most `seconds`; what it did, in words
    ("" when none ran). It does not rely on the steps' SIGTERM, which Argo delivers by exec into the
    container and does not retry when that fails."""
    runs, _ = kube.list(ANALYSIS_RUNS, namespace, label_selector=f"{ROLLOUT_ID_LABEL}={rollout_id}")
    running = sorted(run["metadata"]["name"] for run in runs if not assess_analysis_run(run).final)
    if not running:
        return ""
    still_open = terminate_and_wait(kube, namespace, running, Why.ROLLOUT_ENDED, clock=clock, seconds=seconds)
    left = f" ({', '.join(still_open)} still running after {seconds:g} s)" if still_open else ""
    return f"terminated AnalysisRun {', '.join(running)}{left}"


def terminate_and_wait(
    kube: Kube, namespace: str, names: Sequence[str], why: Why, *, clock: Clock, seconds: float
) -> list[str]:
    """Terminate the named runs (the caller passes those still running: a run that ended keeps its
    verdict untouched) and follow them until each has ended or `seconds` passed; the names still
    running then."""
    for name in names:
        terminate_run(kube, namespace, name, why)
    if not names:
        return []
    until = clock.now() + timedelta(seconds=seconds)

    def window() -> int:
        return max(1, math.ceil((until - clock.now()).total_seconds()))

    snapshots = follow_objects(kube, ANALYSIS_RUNS, namespace, names, window_seconds=window)
    still_open = list(names)
    try:
        for snapshot in snapshots:
            still_open = [
                name
                for name in names
                if (obj := snapshot.objects.get(name)) is not None and not assess_analysis_run(obj).final
            ]
            if not still_open or clock.now() >= until:
                break
    finally:
        snapshots.close()
    return still_open


# --- the step --------------------------------------------------------------------------------


@dataclass
class _Run:
    """One run the step follows."""

    cluster: str  # "" for the stage's run
    name: str
    deadline: datetime
    verdict: AnalysisVerdict | None = None
    said: str = ""  # the last phase line written for it
    obj: dict[str, Any] = field(default_factory=dict)


def _release_revision(ctx: StepContext, recorded: Sequence[str] | None) -> tuple[str, str]:
    """The one release revision an argument may take, or "" and why there is none."""
    if recorded and len(set(recorded)) == 1:
        return recorded[0], ""
    revisions = {revision for revisions in ctx.release for revision in revisions}
    if len(revisions) == 1:
        return next(iter(revisions)), ""
    return "", f"the release has {len(revisions)} revisions ({', '.join(sorted(revisions))})"


def _context(
    ctx: StepContext, fleet: FleetLookup | None, cluster: str, recorded: Sequence[str] | None
) -> ArgContext:
    revision, why = _release_revision(ctx, recorded)
    if not cluster or fleet is None:
        return ArgContext(stage=ctx.stage_name, release_revision=revision, why_no_revision=why)
    found, clusters = fleet.find(cluster)
    if found is None:
        return ArgContext(
            stage=ctx.stage_name, release_revision=revision, cluster=cluster, why_no_revision=why
        )
    apps = []
    for app in fleet.apps_of(found, clusters):
        dest = (app.get("spec") or {}).get("destination") or {}
        meta = app.get("metadata") or {}
        apps.append(
            AppRef(
                name=str(meta.get("name", "")),
                namespace=str(meta.get("namespace", "")),
                destination_server=str(dest.get("server") or ""),
                destination_name=str(dest.get("name") or ""),
                destination_namespace=str(dest.get("namespace") or ""),
            )
        )
    return ArgContext(
        stage=ctx.stage_name,
        release_revision=revision,
        cluster=cluster,
        cluster_labels=dict(found.labels),
        cluster_server=found.server,
        applications=tuple(apps),
        why_no_revision=why,
    )


def analyze(
    kube: Kube,
    ctx: StepContext,
    *,
    cluster: str = "",
    when: AnalysisWhen = AnalysisWhen.AFTER_HEALTHY,
    open_runs: OpenRuns | None = None,
    instance_id: str = "",
) -> AnalyzeResult:
    """Run the stage's (or the cluster's) analysis gate and record its outcome (see the module).

    `instance_id`: the Argo Rollouts controller's `--instance-id` its runs are labelled for ("": a
    controller started without one)."""
    analysis, stage, ps = ctx.stage.analysis, ctx.stage_name, ctx.ps
    if analysis is None:
        raise UsageProblem(f"stage {stage!r} has no analysis in the rollout contract (nothing to analyze)")
    if when not in analysis.when:
        raise UsageProblem(
            f"the analysis of stage {stage!r} does not run {when.value} (its when: {analysis.when})"
        )
    if cluster and not analysis.per_cluster:
        raise UsageProblem(f"--cluster given, but the analysis of stage {stage!r} runs once per stage")
    where = read_stage_records(kube, ctx.rollout, ps, stage)
    outcomes = where.outcomes
    refused = stage_failure(ps, stage, outcomes)
    if refused and when is AnalysisWhen.AFTER_HEALTHY:
        return AnalyzeResult(stage, Gate.SKIPPED, f"no analysis: {refused}")
    completed = [name for name, record in outcomes.clusters.items() if record.state == ClusterState.COMPLETED]
    if cluster:
        targets = [cluster] if cluster in completed else []
    elif analysis.per_cluster:
        targets = [name for name in outcomes.targets if name in completed]
    else:
        targets = [""] if completed else []
    if not targets:
        scope = f"cluster {cluster} is not Completed" if cluster else "no cluster of the stage completed"
        return AnalyzeResult(stage, Gate.SKIPPED, f"no analysis: {scope}")

    sink = DirectSink(kube, where)
    namespace = ctx.rollout.namespace
    now = ctx.clock.now()
    failures: dict[str, tuple[Reason | None, str]] = {}
    runs: list[_Run] = []
    try:
        templates = fetch_templates(kube, namespace, analysis)
    except AnalysisBuildError as exc:
        failures = {target: (exc.reason, str(exc)) for target in targets}
        templates = []
    fleet = (
        FleetLookup(kube, ctx.rollout, ps, clock=ctx.clock, max_age_seconds=60.0, planned=outcomes.apps)
        if analysis.per_cluster
        else None
    )
    bake = next((s.bake_seconds for s in ps.spec.stages if s.name == stage), None) or 0
    opened = open_runs or OpenRuns()
    workflow = workflow_name(ps.metadata.name, ctx.rollout.rollout_id)
    opened.hold(kube, namespace, workflow, ctx.clock, [])
    for target in targets if templates else []:
        record = outcomes.clusters.get(target)
        try:
            manifest = build_analysis_run(
                ps_name=ps.metadata.name,
                ps_uid=ps.metadata.uid or "",
                namespace=namespace,
                rollout_id=ctx.rollout.rollout_id,
                analysis=analysis,
                templates=templates,
                context=_context(ctx, fleet, target, record.revisions if record else None),
                bake=when is AnalysisWhen.DURING_BAKE,
                instance_id=instance_id,
            )
        except AnalysisBuildError as exc:
            failures[target] = (exc.reason, str(exc))
            continue
        opened.add(manifest["metadata"]["name"])
        run = create_or_adopt(kube, manifest, ctx.rollout.rollout_id)
        created = parse_time((run.get("metadata") or {}).get("creationTimestamp")) or now
        seconds = (
            bake
            if when is AnalysisWhen.DURING_BAKE
            else run_deadline_seconds(analysis, manifest["spec"]["metrics"])
        )
        runs.append(
            _Run(
                cluster=target,
                name=manifest["metadata"]["name"],
                deadline=created + timedelta(seconds=seconds),
            )
        )
    opened.hold(kube, namespace, workflow, ctx.clock, [r.name for r in runs])
    stopped = _follow(kube, ctx, runs, when=when, sink=sink)
    opened.hold(kube, namespace, "", ctx.clock, [])
    return _conclude(
        kube, ctx, analysis=analysis, when=when, runs=runs, failures=failures, sink=sink, stopped=stopped
    )


def _note(kube: Kube, ctx: StepContext, run: _Run, line: str, sink: DirectSink) -> None:
    """Say where the run stands: the stage's `analysis` entry, or the cluster's record note."""
    if line == run.said:
        return
    run.said = line
    phase = str((run.obj.get("status") or {}).get("phase") or "Pending")
    if run.cluster:
        sink.record(run.cluster, sinks.completed(ctx.clock.now(), line), what=f"analysis of {run.cluster}")
        return

    def mutation(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        if status.rollout is None or status.rollout.id != ctx.rollout.rollout_id:
            return status
        return note_analysis(status, stage=ctx.stage_name, run=run.name, phase=phase, message=line)

    update_status(
        kube,
        ctx.rollout.namespace,
        ctx.rollout.name,
        mutation,
        what=f"analysis of stage {ctx.stage_name!r}",
        settings=ctx.tuning.status,
    )


def _follow(kube: Kube, ctx: StepContext, runs: list[_Run], *, when: AnalysisWhen, sink: DirectSink) -> str:
    """Follow the runs (list → watch) until each is final; "" or why the step stopped them all.

    A snapshot comes with every change to one of the runs and at least every
    `Tuning.watch_window_seconds`; the watch window also ends at the next thing the step looks at
    its clock for (a run's deadline, a terminated run's wait, the next read of the stage)."""
    namespace, clock, tuning = ctx.rollout.namespace, ctx.clock, ctx.tuning
    last_check = clock.now()
    terminated: dict[str, datetime] = {}
    max_failed = ctx.ps.spec.failure_policy.max_failed_clusters
    if all(run.verdict is not None for run in runs):
        return ""

    def window() -> int:
        now = clock.now()
        due = [tuning.stage_check_seconds - (now - last_check).total_seconds()]
        for run in runs:
            if run.verdict is None and run.name in terminated:
                waited = (now - terminated[run.name]).total_seconds()
                due.append(tuning.analysis_terminate_wait_seconds - waited)
            elif run.verdict is None:
                due.append((run.deadline - now).total_seconds())
        return tuning.watch_window_for(min(due))

    snapshots = follow_objects(
        kube,
        ANALYSIS_RUNS,
        namespace,
        [run.name for run in runs if run.verdict is None],
        window_seconds=window,
        label_selector=f"{ROLLOUT_ID_LABEL}={ctx.rollout.rollout_id}",
    )
    try:
        for snapshot in snapshots:
            now = clock.now()
            for run in runs:
                if run.verdict is None:
                    _look_at(
                        kube,
                        ctx,
                        run,
                        snapshot.objects.get(run.name),
                        now=now,
                        terminated=terminated,
                        when=when,
                        sink=sink,
                    )
            if all(run.verdict is not None for run in runs):
                return ""
            failed_clusters = [
                r
                for r in runs
                if r.cluster
                and r.verdict is not None
                and r.verdict.outcome in (Outcome.FAILED, Outcome.ERROR)
            ]
            if (now - last_check).total_seconds() >= tuning.stage_check_seconds or len(
                failed_clusters
            ) > max_failed:
                last_check = now
                kind, stop = _why_stop(kube, ctx, failed_over=len(failed_clusters) > max_failed)
                if stop:
                    for run in runs:
                        if run.verdict is None:
                            terminate_run(kube, namespace, run.name, kind)
                            run.verdict = AnalysisVerdict(
                                Outcome.FAILED, "", f"analysis {run.name} stopped: {stop}"
                            )
                    return stop
    finally:
        snapshots.close()
    return ""  # not reached: the follow ends only when the caller leaves it


def _look_at(
    kube: Kube,
    ctx: StepContext,
    run: _Run,
    obj: dict[str, Any] | None,
    *,
    now: datetime,
    terminated: dict[str, datetime],
    when: AnalysisWhen,
    sink: DirectSink,
) -> None:
    """One open run as last seen: note its phase, take its verdict when final, terminate it at its
    deadline, give up on it when it does not end after we terminated it."""
    namespace, tuning = ctx.rollout.namespace, ctx.tuning
    if obj is None:
        run.verdict = AnalysisVerdict(
            Outcome.ERROR, "", f"AnalysisRun {run.name} was deleted before it ended", Reason.ANALYSIS_ERROR
        )
        return
    run.obj = obj
    verdict = verdict_of(obj)
    lines = "; ".join(metric_lines(obj))
    _note(
        kube,
        ctx,
        run,
        f"analysis {run.name} {verdict.phase}" + (f": {lines}" if lines and not verdict.final else ""),
        sink,
    )
    if verdict.final:
        run.verdict = verdict
    elif now >= run.deadline and run.name not in terminated:
        why = Why.BAKE_ENDED if when is AnalysisWhen.DURING_BAKE else Why.DEADLINE
        terminate_run(kube, namespace, run.name, why)
        terminated[run.name] = now
    elif (
        run.name in terminated
        and (now - terminated[run.name]).total_seconds() > tuning.analysis_terminate_wait_seconds
    ):
        run.verdict = AnalysisVerdict(
            Outcome.ERROR,
            verdict.phase,
            f"analysis {run.name} was terminated but did not end within "
            f"{tuning.analysis_terminate_wait_seconds:g} s "
            "(is the Argo Rollouts controller running?)",
            Reason.ANALYSIS_TIMED_OUT,
        )


def _why_stop(kube: Kube, ctx: StepContext, *, failed_over: bool) -> tuple[Why, str]:
    """Why every open run is stopped now (the text "" to go on): the rollout superseded or ended
    (cancel: `Why.STOPPED`), or the stage failed (`Why.STAGE_FAILED`)."""
    ps = load_progressive_sync(kube, ctx.rollout)
    try:
        check_rollout(ps, ctx.rollout.rollout_id)
    except Superseded as exc:
        return Why.STOPPED, f"the rollout was superseded: {exc}"
    ended = rollout_ended(ps)
    if ended:
        return Why.STOPPED, ended
    if failed_over:
        return Why.STAGE_FAILED, (
            f"stage {ctx.stage_name!r} failed: more clusters failed their analysis than maxFailedClusters"
        )
    failed = stage_failure(ps, ctx.stage_name, read_stage_failures(kube, ctx.rollout, ps, ctx.stage_name))
    return Why.STAGE_FAILED, failed


def _conclude(
    kube: Kube,
    ctx: StepContext,
    *,
    analysis: StageAnalysis,
    when: AnalysisWhen,
    runs: list[_Run],
    failures: dict[str, tuple[Reason | None, str]],
    sink: DirectSink,
    stopped: str,
) -> AnalyzeResult:
    """Record each run's outcome (see the module) and say how the gate ended."""
    stage, now = ctx.stage_name, ctx.clock.now()
    approval: list[str] = []
    for run in runs:
        verdict = run.verdict
        assert verdict is not None
        if verdict.outcome is Outcome.PASSED:
            _note(kube, ctx, run, verdict.message, sink)
        elif verdict.outcome is Outcome.INCONCLUSIVE and analysis.on_inconclusive is OnInconclusive.APPROVE:
            approval.append(run.cluster)
            _note(kube, ctx, run, f"{verdict.message}; waiting for approval (progressive-sync approve)", sink)
        else:
            failures[run.cluster] = (verdict.reason, verdict.message)
            if not run.cluster:
                _note(kube, ctx, run, verdict.message, sink)
    names = tuple(run.name for run in runs)
    for target, (reason, message) in failures.items():
        words = f"{reason.value}: {message}" if reason else message
        if target:
            sink.record(
                target,
                sinks.failed(now, f"cluster {target}: {words}"),
                what=f"analysis of {target}",
                urgent=True,
            )
        else:
            _close_failed(kube, ctx, f"analysis gate failed: {words}")
    if failures:
        if when is AnalysisWhen.DURING_BAKE and "" not in failures:
            _close_if_over(kube, ctx)
        first = next(iter(failures.values()))
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        return AnalyzeResult(stage, Gate.FAILED, (stopped + "; " if stopped else "") + first[1] + more, names)
    if approval:
        return AnalyzeResult(
            stage, Gate.APPROVAL, f"{len(approval)} run(s) Inconclusive: waiting for approval", names
        )
    return AnalyzeResult(
        stage, Gate.PASSED, f"{len(runs)} AnalysisRun(s) Successful ({analysis.label})", names
    )


def _close_failed(kube: Kube, ctx: StepContext, message: str) -> None:
    """The stage closed Failed (a stage closed Succeeded before its bake too)."""
    now = ctx.clock.now()

    def mutation(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        if status.rollout is None or status.rollout.id != ctx.rollout.rollout_id:
            return status
        entry = find_stage(status, ctx.stage_name)
        if entry is not None and entry.phase is StagePhase.FAILED:
            return status
        return close_stage(status, stage=ctx.stage_name, phase=StagePhase.FAILED, message=message, now=now)

    update_status(
        kube,
        ctx.rollout.namespace,
        ctx.rollout.name,
        mutation,
        what=f"fail stage {ctx.stage_name!r}",
        settings=ctx.tuning.status,
    )


def _close_if_over(kube: Kube, ctx: StepContext) -> None:
    """After its bake's per-cluster runs: the stage fails when its failures now exceed the tolerance."""
    ps = load_progressive_sync(kube, ctx.rollout)
    failed = stage_failure(ps, ctx.stage_name, read_stage_failures(kube, ctx.rollout, ps, ctx.stage_name))
    if failed:
        _close_failed(kube, ctx, f"analysis during bake: {failed}")
