"""Rollouts whose analysis gates the real Argo Rollouts analysis controller decides, measuring real
Prometheus metrics, on both engines: the local executor and the real Argo Workflows controller.

Real on both: kube-apiserver + etcd with Argo Rollouts' own analysis CRDs, the Argo Rollouts
analysis controller (`--controllers=analysis`) watching that API server, a real Prometheus
scraping the metrics endpoint this process serves (tests/support/analysis.py), the Workflow as
`build_workflow` makes it (each gated cluster followed by its `analysis-error-rate` node), the
`analyze` step (a subprocess locally, a pod on the real node), the `progressive-sync` CLI.
Simulated: Argo CD (the fleet simulator). On the local engine the stack is the session's
`analysis_stack`; on the real engine one `AnalysisStack` per session on the real stack's API
server (`real_analysis_stack`). The controller measures in its own process, so the pods need no
network path to Prometheus.

Every cluster's Secret carries a label naming its series on the metrics endpoint (unique to the
test), and the template's `cluster` argument takes it (`valueFrom.clusterLabel`): a test makes a
cluster bad by its error rate, and the label is what reaches the PromQL query.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from orchestrator.analysis.run import analysis_run_name
from orchestrator.cli.main import main
from orchestrator.core.clock import parse_time
from orchestrator.devenv.analysis_stack import AnalysisStack
from orchestrator.devenv.argorollouts import RolloutsTools
from orchestrator.devenv.metrics_endpoint import error_rate_query
from orchestrator.devenv.node import PODS
from orchestrator.kube.client import ANALYSIS_RUNS, ANALYSIS_TEMPLATES, SECRETS, WORKFLOWS, NotFound
from orchestrator.simulator.seed import PREVIOUS_REVISION
from orchestrator.workflows import control
from tests.support.analysis import analysis_template, prometheus_metric, set_error_rate
from tests.support.engines import ARGO, LOCAL, RolloutEngine, rollout_engine
from tests.support.rollout_rig import PS_NAME, REVISION, RolloutRig, rollout_rig
from tests.support.steps_harness import publish_inventory
from tests.support.wait import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.analysis, pytest.mark.timeout(600)]

TIMEOUT = 300.0
SERIES_LABEL = "metrics-series"
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"
UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused
BAD, UNDECIDED = 0.5, 0.1  # above the failure condition (0.2); between the conditions (0.05..0.2)


def analysis(**changes: Any) -> dict[str, Any]:
    """The gate of these tests: `error-rate` per cluster, its series from the cluster's label."""
    return {
        "templates": [{"name": "error-rate"}],
        "perCluster": True,
        "args": [{"name": "cluster", "valueFrom": {"clusterLabel": SERIES_LABEL}}],
        **changes,
    }


CANARY = {"name": "canary", "targets": {"clusters": {"selector": {}}}, "maxTargets": 1, "maxParallel": 1}
REST = {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 2}
GATED_CANARY = {**CANARY, "analysis": analysis()}


@pytest.fixture(scope="session")
def real_analysis_stack(
    real_stack_session: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AnalysisStack]:
    """Prometheus, the metrics endpoint and the analysis controller on the real stack's API server,
    in this worker's process (owner or guest: `realstack_analysis`); on the guest the controller
    signs in with the identity the owner minted for it."""
    real = real_stack_session.get(argo=True)
    identity = real.published.analysis_identity if real.published is not None else ""
    stack = AnalysisStack.start(
        real.stack.cluster,
        folder=tmp_path_factory.mktemp("real-analysis"),
        rollouts_tools=RolloutsTools.find(),
        controller_identity=Path(identity) if identity else None,
    )
    try:
        yield stack
    finally:
        stack.stop()


REAL_ENGINE = pytest.param(ARGO, id=ARGO, marks=[pytest.mark.realstack, pytest.mark.realstack_analysis])


@pytest.fixture(params=[pytest.param(LOCAL, id=LOCAL), REAL_ENGINE])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RolloutEngine]:
    with rollout_engine(request, request.param, tmp_path) as running:
        yield running


@pytest.fixture
def stack(request: pytest.FixtureRequest, engine: RolloutEngine) -> AnalysisStack:
    """The analysis stack watching the engine's API server."""
    name = "analysis_stack" if engine.name == LOCAL else "real_analysis_stack"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


class AnalysisRollout:
    """A rollout rig whose clusters each have a series of their own on the stack's endpoint."""

    def __init__(self, rig: RolloutRig, stack: AnalysisStack) -> None:
        self.rig, self.stack = rig, stack
        suffix = uuid.uuid4().hex[:6]
        self.series = {cluster: f"{cluster}-{suffix}" for cluster in rig.all_clusters()}
        for secret in rig.kube.list_cluster_secrets(rig.namespace):
            patch = {"metadata": {"labels": {SERIES_LABEL: self.series[secret.name]}}}
            rig.kube.patch(SECRETS, rig.namespace, secret.secret_name, patch)
        publish_inventory(rig.kube, rig.namespace)  # the steps read the labels from the inventory

    def template(self, *, address: str | None = None, count: int = 2, **metric_fields: Any) -> None:
        """The `error-rate` AnalysisTemplate (Prometheus at `address`, default the stack's; more
        of `prometheus_metric`'s fields in `metric_fields`)."""
        metric = prometheus_metric(
            "error-rate",
            address=address or self.stack.prometheus_url,
            query=error_rate_query("{{args.cluster}}"),
            count=count,
            **metric_fields,
        )
        body = analysis_template("error-rate", [metric], args=[{"name": "cluster"}])
        self.rig.kube.create(ANALYSIS_TEMPLATES, self.rig.namespace, body)

    def rates(self, rates: dict[str, float]) -> None:
        """Every cluster good but those in `rates`; return once Prometheus says so for each."""
        wanted = {cluster: rates.get(cluster, 0.0) for cluster in self.series}
        for cluster, rate in wanted.items():
            self.stack.endpoint.set_error_rate(self.series[cluster], rate)
        for cluster, rate in wanted.items():
            set_error_rate(self.stack, self.series[cluster], rate, timeout=60.0)

    def run_name(self, stage: str, cluster: str, *, bake: bool = False) -> str:
        rollout_id = self.rig.workflow_name.removeprefix(f"{PS_NAME}-")
        return analysis_run_name(PS_NAME, rollout_id, stage, cluster, bake=bake)

    def run(self, stage: str, cluster: str, *, bake: bool = False) -> dict[str, Any] | None:
        try:
            name = self.run_name(stage, cluster, bake=bake)
            return self.rig.kube.get(ANALYSIS_RUNS, self.rig.namespace, name)
        except NotFound:
            return None

    def wait_run_phase(self, stage: str, cluster: str, phases: set[str]) -> dict[str, Any]:
        def phase() -> dict[str, Any] | None:
            run = self.run(stage, cluster)
            return run if run and ((run.get("status") or {}).get("phase") in phases) else None

        return wait_for(
            phase,
            timeout=TIMEOUT,
            interval=0.3,
            what=f"AnalysisRun of {stage}/{cluster} in {sorted(phases)}",
            describe=lambda: (self.run(stage, cluster) or {}).get("status"),
        )

    def runs(self) -> list[dict[str, Any]]:
        items, _ = self.rig.kube.list(ANALYSIS_RUNS, self.rig.namespace)
        return items

    def failures(self, stage: str) -> dict[str, str]:
        status = self.rig.progressive_sync().status
        assert status is not None and status.stages
        [found] = [s for s in status.stages if s.name == stage]
        return {failure.name: failure.reason for failure in found.failed}


@pytest.fixture
def rollout(engine: RolloutEngine, stack: AnalysisStack) -> Iterator[AnalysisRollout]:
    """Three clusters, all good, an `error-rate` template on the stack's Prometheus; engine running."""
    with rollout_rig(engine, clusters=3) as rig:
        rig.simulate()
        rig.run_engine()
        yield AnalysisRollout(rig, stack)


def cli(rig: RolloutRig, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "-n", rig.namespace, "--kubeconfig", str(rig.engine.kubeconfig)])


def test_a_healthy_release_passes_every_gate(rollout: AnalysisRollout) -> None:
    """Every cluster of both stages is gated by a real measurement; all pass; one sync each."""
    rig = rollout.rig
    rollout.template()
    rollout.rates({})
    started = time.monotonic()
    rig.start_rollout([CANARY, REST], deadline_seconds=300, analysis=analysis())
    done = rig.wait_finished(timeout=TIMEOUT)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert rig.sync_starts() == dict.fromkeys(rig.all_clusters(), 1)
    runs = rollout.runs()
    assert len(runs) == 3
    assert {run["status"]["phase"] for run in runs} == {"Successful"}
    for run in runs:  # measured by the controller: values of the real query, under the condition
        [result] = run["status"]["metricResults"]
        assert len(result["measurements"]) == 2 and result["successful"] == 2
    print(f"healthy release, 3 gated clusters: {time.monotonic() - started:.1f}s")


@pytest.mark.parametrize(
    ("address", "rate", "says"),
    [
        pytest.param(None, BAD, "metric error-rate = [0.5", id="healthy-but-bad-canary-fails-its-metric"),
        pytest.param(UNREACHABLE, 0.0, "could not be measured", id="prometheus-unreachable-is-an-error"),
    ],
)
def test_the_canary_gate_stops_the_rollout(
    rollout: AnalysisRollout, address: str | None, rate: float, says: str
) -> None:
    """The canary is Healthy in Argo CD, but its gate fails (a bad metric, or no measurement at
    all): the rollout stops at the canary, nothing beyond it syncs, the reason names why."""
    rig = rollout.rig
    [canary] = rig.planned_targets([GATED_CANARY, REST], "canary")
    rollout.template(address=address)
    rollout.rates({canary: rate})
    rig.start_rollout([GATED_CANARY, REST], deadline_seconds=300)
    run = rollout.wait_run_phase("canary", canary, {"Failed", "Error", "Successful"})
    assert run["status"]["phase"] == ("Failed" if address is None else "Error")
    assert run["spec"]["args"] == [{"name": "cluster", "value": rollout.series[canary]}]
    done = rig.wait_finished(timeout=TIMEOUT)
    assert done["status"]["phase"] == "Failed", done["status"].get("message")
    assert rig.sync_starts() == {canary: 1}  # 0 syncs beyond the canary
    reason = rollout.failures("canary")[canary]
    assert says in reason, reason
    if address is not None:  # the cause is in the run; the reason (cut to 256 characters) names where
        assert "never passes" in reason and "127.0.0.1:9" in reason, reason
        [result] = run["status"]["metricResults"]
        assert "connection refused" in result["measurements"][-1]["message"], result
    assert len(rollout.runs()) == 1


def test_a_failed_gate_rolls_the_canary_back(rollout: AnalysisRollout) -> None:
    """Issue 32 with analysis: the canary is Healthy in Argo CD but its metrics fail the gate;
    `rollback.on: [AnalysisFailed]` syncs it back to the revision it ran (one rollback sync) and the
    rollout ends RolledBack, the trigger named."""
    rig = rollout.rig
    [canary] = rig.planned_targets([GATED_CANARY, REST], "canary")
    rollout.template()
    rollout.rates({canary: BAD})
    rig.start_rollout([GATED_CANARY, REST], deadline_seconds=300, rollback={"on": ["AnalysisFailed"]})
    rig.wait_finished(timeout=TIMEOUT)
    status = rig.progressive_sync().status
    assert status is not None and status.phase == "RolledBack", status.message if status else None
    assert status.rollback is not None and status.rollback.trigger == "AnalysisFailed"
    revisions = [
        str(e.get("revision")) for e in rig.events() if e["event"] == "sync-start" and e["cluster"] == canary
    ]
    assert revisions == [REVISION, PREVIOUS_REVISION], revisions
    assert rig.sync_starts() == {canary: 2}  # nothing beyond the canary either way


@pytest.mark.parametrize("how", ["progressive-sync-approve", "argo-resume"])
def test_inconclusive_waits_for_approval_and_goes_on(rollout: AnalysisRollout, how: str) -> None:
    """The canary's error rate is between the conditions: the run ends Inconclusive, the stage
    (onInconclusive: Approve) waits with nothing beyond the canary synced; `progressive-sync
    approve`, or the real `argo resume` on the Workflow, lets the rollout go on to every cluster."""
    rig = rollout.rig
    stages = [{**CANARY, "analysis": analysis(onInconclusive="Approve")}, REST]
    [canary] = rig.planned_targets(stages, "canary")
    rollout.template()
    rollout.rates({canary: UNDECIDED})
    rig.start_rollout(stages, deadline_seconds=300)
    run = rollout.wait_run_phase("canary", canary, {"Inconclusive", "Failed", "Error", "Successful"})
    assert run["status"]["phase"] == "Inconclusive", run["status"]
    wait_for(
        lambda: rig.nodes(displayName="approve-analysis", phase="Running"),
        timeout=TIMEOUT,
        interval=0.3,
        what="the approve-analysis gate to wait",
        describe=rig.state,
    )
    assert rig.phase() == "Running"
    assert rig.sync_starts() == {canary: 1}  # it waits: nothing beyond the canary
    if how == "argo-resume":
        resumed = rig.engine.argo("resume", rig.workflow_name)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    else:
        approved = cli(rig, "approve", PS_NAME)
        assert approved.exit_code == 0, approved.output
    done = rig.wait_finished(timeout=TIMEOUT)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert rig.sync_starts() == dict.fromkeys(rig.all_clusters(), 1)


def test_cancel_terminates_the_running_analysis(rollout: AnalysisRollout) -> None:
    """`progressive-sync cancel` while the canary's run measures (60 measurements, a minute): the
    step terminates the run (spec.terminate), the controller ends it, nothing beyond the canary."""
    rig = rollout.rig
    [canary] = rig.planned_targets([GATED_CANARY, REST], "canary")
    rollout.template(count=60)
    rollout.rates({})
    rig.start_rollout([GATED_CANARY, REST], deadline_seconds=300)
    rollout.wait_run_phase("canary", canary, {"Running"})
    cancelled = cli(rig, "cancel", PS_NAME)
    assert cancelled.exit_code == 0, cancelled.output
    started = time.monotonic()
    run = rollout.wait_run_phase("canary", canary, {"Successful", "Failed", "Error", "Inconclusive"})
    assert run["spec"].get("terminate") is True, run["spec"]
    assert run["metadata"]["annotations"]["progressivesync.io/terminated"] in ("stopped", "rollout-ended")
    assert len(run["status"]["metricResults"][0].get("measurements") or []) < 60  # ended early
    done = rig.wait_finished(timeout=TIMEOUT)
    assert done["status"]["phase"] in ("Failed", "Error"), done["status"]
    assert rig.sync_starts() == {canary: 1}
    print(f"cancel -> run ended: {time.monotonic() - started:.1f}s")


@pytest.mark.parametrize(
    ("bad", "tolerated"),
    [
        pytest.param(1, True, id="one-bad-cluster-is-tolerated"),
        pytest.param(2, False, id="two-bad-clusters-are-not"),
    ],
)
def test_per_cluster_runs_count_against_max_failed_clusters(
    rollout: AnalysisRollout, bad: int, tolerated: bool
) -> None:
    """Two clusters gated one run each with maxFailedClusters 1: one failed run is tolerated (the
    last cluster syncs), two are not (it never does)."""
    rig = rollout.rig
    first = {**CANARY, "name": "first", "maxTargets": 2, "maxParallel": 2, "analysis": analysis()}
    stages = [first, REST]
    gated = rig.planned_targets(stages, "first")
    [last] = sorted(set(rig.all_clusters()) - set(gated))
    rollout.template()
    rollout.rates(dict.fromkeys(gated[:bad], BAD))
    rig.start_rollout(stages, deadline_seconds=300, max_failed_clusters=1)
    done = rig.wait_finished(timeout=TIMEOUT)
    assert sorted(rollout.failures("first")) == sorted(gated[:bad])
    phases = {run["metadata"]["name"]: run["status"]["phase"] for run in rollout.runs()}
    assert sorted(phases.values()) == sorted(["Failed"] * bad + ["Successful"] * (2 - bad)), phases
    if tolerated:
        assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
        assert rig.sync_starts() == dict.fromkeys(rig.all_clusters(), 1)
    else:
        assert done["status"]["phase"] == "Failed", done["status"].get("message")
        assert rig.sync_starts() == dict.fromkeys(gated, 1)  # never `last`
        assert last not in rig.sync_starts()


def test_a_failed_stage_terminates_the_runs_of_its_other_clusters(rollout: AnalysisRollout) -> None:
    """Three clusters gated one run each, maxFailedClusters 1: once every run measures, two
    clusters turn bad and fail the stage; the good cluster's run, with a minute of measurements to
    go, is terminated then (by its step, which sees the stage failed, or by the exit handler)
    instead of measuring to its end, and the rollout fails well before that minute.

    The clusters turn bad only once all three runs measure: a stage that fails before a cluster's
    gate starts gives that cluster no run at all (its step sees the stage failed), which is right
    but leaves nothing to terminate."""
    rig = rollout.rig
    every = {**CANARY, "name": "all", "maxTargets": 3, "maxParallel": 3, "analysis": analysis()}
    clusters = rig.planned_targets([every], "all")
    good, bad = clusters[0], clusters[1:]
    rollout.template(count=60)  # every run measures for a minute
    rollout.rates({})
    rig.start_rollout([every], deadline_seconds=300, max_failed_clusters=1)
    for cluster in clusters:
        rollout.wait_run_phase("all", cluster, {"Running"})
    rollout.rates(dict.fromkeys(bad, BAD))
    done = rig.wait_finished(timeout=TIMEOUT)
    assert done["status"]["phase"] == "Failed", done["status"].get("message")
    failures = rollout.failures("all")
    assert set(bad) <= set(failures), failures
    # The good cluster never passed its gate: it is stopped, and says why, if it is listed at all.
    assert good not in failures or "stopped" in failures[good] or "ended" in failures[good], failures
    run = rollout.wait_run_phase("all", good, FINAL)
    assert run["spec"].get("terminate") is True, run["spec"]
    why = run["metadata"]["annotations"]["progressivesync.io/terminated"]
    assert why in ("stage-failed", "rollout-ended"), why
    measured = len(run["status"]["metricResults"][0].get("measurements") or [])
    assert measured < 60, measured
    for cluster in bad:
        failed = rollout.run("all", cluster)
        # Ended by its metric, not by us: Failed, or Inconclusive when a measurement fell between
        # the conditions while the error rate rose (onInconclusive: Fail fails the cluster too).
        assert failed is not None and failed["status"]["phase"] in ("Failed", "Inconclusive"), failed
        assert not failed["spec"].get("terminate"), "failed by its metric, not ended by us"
    print(f"good cluster's run terminated ({why}) after {measured} of 60 measurements: {failures}")


def _analyze_pod(rig: RolloutRig) -> dict[str, Any] | None:
    """The running pod of the canary's analysis step (real engine)."""
    pods, _ = rig.kube.list(PODS, rig.namespace, label_selector=f"{WORKFLOW_LABEL}={rig.workflow_name}")
    for pod in pods:
        node = (pod["metadata"].get("annotations") or {}).get(NODE_NAME_ANNOTATION, "")
        if "analysis-error-rate" in node and (pod.get("status") or {}).get("phase") == "Running":
            return pod  # type: ignore[no-any-return]
    return None


def _step_again(rig: RolloutRig, name: str, uid: str) -> str:
    """How the analyze step runs again after its pod `name` (`uid`) was deleted; "" while it does not."""
    attempts = [n for n in rig.nodes(type="Pod") if "analysis-error-rate" in str(n["name"])]
    if len(attempts) > 1:
        return f"retried: {[(n['displayName'], n['phase']) for n in attempts]}"
    try:
        found = rig.kube.get(PODS, rig.namespace, name)
    except NotFound:
        return ""
    return f"pod {name} made again" if found["metadata"]["uid"] != uid else ""


@pytest.mark.parametrize("engine", [REAL_ENGINE], indirect=True)  # a step pod exists there only
def test_a_deleted_step_pod_adopts_its_analysis_run(rollout: AnalysisRollout) -> None:
    """The canary's analyze pod is deleted while its run measures (15 measurements): the Workflow
    is not stopping, so the run keeps going; the step's retry adopts the same run (one
    AnalysisRun, the same uid) and the rollout ends as it would have."""
    rig = rollout.rig
    [canary] = rig.planned_targets([GATED_CANARY, REST], "canary")
    rollout.template(count=15)
    rollout.rates({})
    rig.start_rollout([GATED_CANARY, REST], deadline_seconds=300)
    running = rollout.wait_run_phase("canary", canary, {"Running"})
    pod = wait_for(lambda: _analyze_pod(rig), timeout=60, interval=0.3, what="the canary's analyze pod")
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    rig.kube.delete(PODS, rig.namespace, name)
    # Argo either retries the node (a second attempt) or makes the pod again under the same name
    # (its pod reconciliation, while the node still runs): either way a new step process.
    again = wait_for(
        lambda: _step_again(rig, name, uid),
        timeout=120,
        interval=0.3,
        what=f"a new attempt of the analyze step after pod {name} was deleted",
    )
    done = rig.wait_finished(timeout=TIMEOUT)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert rig.sync_starts() == dict.fromkeys(rig.all_clusters(), 1)
    print(f"deleted analyze pod: {again}")
    [run] = rollout.runs()  # adopted, not made again
    assert run["metadata"]["uid"] == running["metadata"]["uid"], again
    assert run["status"]["phase"] == "Successful" and not run["spec"].get("terminate")


FINAL = {"Successful", "Failed", "Error", "Inconclusive"}
BAKE = 60


def _measured(rollout: AnalysisRollout, stage: str, cluster: str) -> dict[str, Any] | None:
    """The bake's run once the controller took its first measurement."""
    run = rollout.run(stage, cluster, bake=True)
    results = ((run or {}).get("status") or {}).get("metricResults") or []
    return run if results and results[0].get("measurements") else None


def test_a_metric_that_fails_mid_bake_fails_the_stage_before_the_bake_ends(
    rollout: AnalysisRollout,
) -> None:
    """The canary bakes 60 s with a `duringBake` run (a measurement a second, for longer than the
    bake); once it measured good, the canary's error rate turns bad: the run fails, and with it the
    stage, well before the bake would have ended; nothing beyond the canary syncs."""
    rig = rollout.rig
    stages = [{**CANARY, "bakeSeconds": BAKE, "analysis": analysis(when=["duringBake"])}, REST]
    [canary] = rig.planned_targets(stages, "canary")
    # No success condition: a value on its way from good to bad (the query's window holds both)
    # is not Inconclusive; only above the failure condition fails.
    rollout.template(count=2 * BAKE, success=None)
    rollout.rates({})
    rig.start_rollout(stages, deadline_seconds=300)
    good = wait_for(
        lambda: _measured(rollout, "canary", canary),
        timeout=TIMEOUT,
        interval=0.3,
        what="the bake's run to measure",
        describe=rig.state,
    )
    baking = parse_time(good["metadata"]["creationTimestamp"])
    assert baking is not None and good["status"]["phase"] == "Running", good["status"]
    assert good["status"]["metricResults"][0]["measurements"][0]["phase"] == "Successful"
    rollout.rates({canary: BAD})  # mid-bake: measured good first, bad from now on
    flipped = datetime.now(UTC)
    done = rig.wait_finished(timeout=TIMEOUT)
    ended = parse_time(done["status"]["finishedAt"])
    assert ended is not None
    assert done["status"]["phase"] == "Failed", done["status"].get("message")
    run = rollout.run("canary", canary, bake=True)
    assert run is not None and run["status"]["phase"] == "Failed", run and run["status"]
    assert not run["spec"].get("terminate"), "failed by its metric, not ended by us"
    assert (ended - baking).total_seconds() < BAKE - 10, (baking, flipped, ended)  # before the bake's end
    assert rig.sync_starts() == {canary: 1}  # 0 syncs beyond the stage
    reason = rollout.failures("canary")[canary]  # the value may be one on its way up to 0.5
    assert "metric error-rate = [" in reason and "failureCondition result[0] > 0.2" in reason, reason
    assert len(rollout.runs()) == 1
    print(
        f"duringBake: bad at +{(flipped - baking).total_seconds():.1f}s, "
        f"rollout ended at +{(ended - baking).total_seconds():.1f}s of a {BAKE}s bake"
    )


def test_the_workflow_deadline_terminates_the_running_analysis(rollout: AnalysisRollout) -> None:
    """The Workflow's deadline (`activeDeadlineSeconds`, made short once the canary's run measures:
    a minute of measurements) passes: the run is terminated (spec.terminate, our annotation), the
    controller ends it early, the rollout fails with nothing beyond the canary.

    Who terminates it: the step on its SIGTERM, or the exit handler, whichever comes first (Argo
    Workflows signals a step by exec into its container and ignores a failed exec: pod/queue.go,
    signalContainers; the exit handler does not rely on it)."""
    rig = rollout.rig
    [canary] = rig.planned_targets([GATED_CANARY, REST], "canary")
    rollout.template(count=60)
    rollout.rates({})
    rig.start_rollout([GATED_CANARY, REST], deadline_seconds=300)
    rollout.wait_run_phase("canary", canary, {"Running"})
    started = parse_time(rig.workflow()["status"]["startedAt"])
    assert started is not None
    seconds = int((datetime.now(UTC) - started).total_seconds()) + 3
    rig.kube.patch(WORKFLOWS, rig.namespace, rig.workflow_name, {"spec": {"activeDeadlineSeconds": seconds}})
    # Argo Workflows requeues a Workflow at its deadline when it starts it; a deadline lowered
    # later is seen at the Workflow's next operate (v3.7.18 operator.go), which a step measuring
    # quietly does not cause. So, once the new deadline has passed, touch the Workflow: the
    # operate its own requeue would have made (a deadline set at creation, as the watcher does).
    deadline = started + timedelta(seconds=seconds)
    wait_for(lambda: datetime.now(UTC) > deadline, timeout=seconds + 5, interval=0.2, what="the deadline")
    touch = {"metadata": {"annotations": {"tests.progressivesync.io/deadline-passed": "true"}}}
    rig.kube.patch(WORKFLOWS, rig.namespace, rig.workflow_name, touch)
    run = rollout.wait_run_phase("canary", canary, FINAL)
    assert run["spec"].get("terminate") is True, run["spec"]
    why = run["metadata"]["annotations"]["progressivesync.io/terminated"]
    assert why in ("stopped", "rollout-ended"), why
    measured = len(run["status"]["metricResults"][0].get("measurements") or [])
    assert measured < 60  # ended early
    print(f"deadline: run terminated ({why}) after {measured} of 60 measurements")
    done = rig.wait_finished(timeout=TIMEOUT)
    assert done["status"]["phase"] in ("Failed", "Error"), done["status"]
    ended = parse_time(done["status"]["finishedAt"])
    assert ended is not None and (ended - started).total_seconds() < seconds + 30, (started, seconds, ended)
    assert rig.sync_starts() == {canary: 1}
    assert len(rollout.runs()) == 1


def test_a_watcher_killed_during_analysis_leaves_one_run_per_cluster(rollout: AnalysisRollout) -> None:
    """The watcher starts the rollout (every stage gated, one run per cluster) and is SIGKILLed
    while the canary's run measures, then started again: still one Workflow, exactly one
    AnalysisRun per (stage, cluster), every one Successful, each Application synced once."""
    rig = rollout.rig
    rollout.template(count=10)
    rollout.rates({})
    watcher = rig.watcher_process().start()
    stages = [CANARY, REST]
    [canary] = rig.planned_targets(stages, "canary")
    rig.create_ps(stages, deadline_seconds=300, analysis=analysis())
    [workflow] = wait_for(
        rig.workflows, timeout=TIMEOUT, interval=0.3, what="the watcher to start the rollout"
    )
    rig.workflow_name = workflow["metadata"]["name"]
    running = rollout.wait_run_phase("canary", canary, {"Running"})
    watcher.kill()
    assert rollout.run("canary", canary) is not None
    watcher.start()
    done = rig.wait_finished(timeout=TIMEOUT)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    rig.wait_phase("Succeeded", timeout=TIMEOUT)
    assert len(rig.workflows()) == 1
    assert rig.sync_starts() == dict.fromkeys(rig.all_clusters(), 1)
    rest = [cluster for cluster in rig.all_clusters() if cluster != canary]
    expected = {rollout.run_name("canary", canary)} | {rollout.run_name("rest", c) for c in rest}
    runs = rollout.runs()
    assert sorted(run["metadata"]["name"] for run in runs) == sorted(expected)
    assert {run["status"]["phase"] for run in runs} == {"Successful"}
    [kept] = [run for run in runs if run["metadata"]["name"] == running["metadata"]["name"]]
    assert kept["metadata"]["uid"] == running["metadata"]["uid"]
    assert watcher.starts == 2


def _gate_steps(rig: RolloutRig) -> list[dict[str, Any]]:
    """The Workflow's analyze step nodes (one per gated cluster)."""
    return [n for n in rig.nodes(type="Pod") if "analysis-error-rate" in str(n.get("name"))]


def test_a_pause_lets_the_gates_run_finish_and_holds_the_next_stage(rollout: AnalysisRollout) -> None:
    """A pause (as the watcher suspends) while the canary's run measures: the run is never
    terminated and ends Successful on its own, its step ends with it, no cluster of the next stage
    starts while paused; on resume the rollout goes on with that same run (docs/design/CONTRACTS.md,
    "Pause and analysis": a run we terminated could never pass the gate)."""
    rig = rollout.rig
    [canary] = rig.planned_targets([GATED_CANARY, REST], "canary")
    rollout.template(count=10)
    rollout.rates({})
    rig.start_rollout([GATED_CANARY, REST], deadline_seconds=300)
    running = rollout.wait_run_phase("canary", canary, {"Running"})
    rig.kube.patch(WORKFLOWS, rig.namespace, rig.workflow_name, control.suspend_patch(by_watcher=True))

    ended = rollout.wait_run_phase("canary", canary, {"Successful", "Failed", "Error", "Inconclusive"})
    assert ended["status"]["phase"] == "Successful" and "terminate" not in ended["spec"], ended
    wait_for(
        lambda: [n.get("phase") for n in _gate_steps(rig)] == ["Succeeded"],
        timeout=TIMEOUT,
        interval=0.3,
        what="the gate's step to end with its run while paused",
        describe=rig.state,
    )
    assert rig.sync_starts() == {canary: 1}, "no cluster of the next stage starts while paused"
    assert rig.phase() == "Running"

    rig.kube.patch(WORKFLOWS, rig.namespace, rig.workflow_name, control.lift_watcher_suspend_patch())
    done = rig.wait_finished(timeout=TIMEOUT)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert rig.sync_starts() == dict.fromkeys(rig.all_clusters(), 1)
    assert (rollout.run("canary", canary) or {})["metadata"]["uid"] == running["metadata"]["uid"]
    assert (
        len(
            [r for r in rollout.runs() if r["metadata"]["labels"].get("progressivesync.io/stage") == "canary"]
        )
        == 1
    )
