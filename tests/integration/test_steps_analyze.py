"""The `analyze` step against the real API server with Argo Rollouts' own CRDs: the AnalysisRun it
creates (templates flattened, args from the stage, the release and a cluster's labels, labels,
owner, TTL), adoption by name, a run of another rollout refused, and our reaction to each phase.

What is real: kube-apiserver and etcd, Argo Rollouts' AnalysisTemplate / ClusterAnalysisTemplate /
AnalysisRun CRDs from its module (tests/support/analysis_crds.py), the steps' RBAC (the chart's
rules, tests/support/steps_harness.py), the fleet simulator in place of Argo CD for the stage's
clusters. What is not: the Argo Rollouts controller. These tests set an AnalysisRun's
`status.phase` (and metric results) themselves, only to test how the step reacts to each phase;
the real controller measuring real metrics is exercised by the analysis tier.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from orchestrator.analysis.run import CLUSTER_LABEL, INSTANCE_ID_LABEL, analysis_run_name
from orchestrator.api.analysis import AnalysisWhen, StageAnalysis
from orchestrator.api.metadata import workflow_name
from orchestrator.api.models import StagePhase
from orchestrator.core.clock import SystemClock
from orchestrator.core.errors import PermanentError
from orchestrator.kube.client import ANALYSIS_RUNS, ANALYSIS_TEMPLATES, WORKFLOWS, Kube, NotFound
from orchestrator.planning.contract import RolloutContract
from steps.analyze import TERMINATED_ANNOTATION, AnalyzeResult, Gate, analyze
from steps.common import RolloutRef, Tuning
from steps.context import StepContext
from tests.support.builders import NEW_REVISION, make_contract
from tests.support.outcomes import stage_lists
from tests.support.steps_harness import make_progressive_sync, read_progressive_sync
from tests.support.steps_rig import CANARY, REST, Rig, assert_ok, finish, select_canary
from tests.support.wait import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("rollouts_crds")]

FAST = Tuning(watch_window_seconds=1, stage_check_seconds=0.5, analysis_terminate_wait_seconds=3)
# The tests write each run's status themselves: their runs are labelled for a controller instance
# that does not exist, so the analysis tier's real controller (it may run on the same control
# plane) leaves them alone.
NO_CONTROLLER = "no-controller"
ERRORS = {
    "name": "error-rate",
    "interval": "10s",
    "count": 3,
    "successCondition": "result[0] < 0.05",
    "failureLimit": 0,
    "provider": {
        "prometheus": {
            "address": "http://prometheus:9090",
            "query": "rate(errors{cluster='{{args.cluster}}',region='{{args.region}}'}[1m])",
        }
    },
}


def analysis_template(kube: Kube, namespace: str, name: str = "error-rate", **spec: Any) -> None:
    body = {"metrics": [ERRORS], **spec}
    kube.create(
        ANALYSIS_TEMPLATES,
        namespace,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AnalysisTemplate",
            "metadata": {"name": name},
            "spec": body,
        },
    )


def stage_template(rig: Rig) -> None:
    """The `error-rate` template with the three args STAGE_RUN gives it."""
    analysis_template(
        rig.kube, rig.namespace, args=[{"name": "cluster"}, {"name": "region"}, {"name": "revision"}]
    )


def a_running_gate(
    rig: Rig, steps_kube: Kube, analysis: dict[str, Any]
) -> tuple[Future[AnalyzeResult], dict[str, Any]]:
    """The canary completed, its gate's step started, its run Running (as the controller says)."""
    stage_template(rig)
    completed_canary(rig, analysis)
    future = start(rig, steps_kube, analysis)
    run = run_named(rig)
    set_phase(rig, run, "Running")
    return future, run


def stage_with(analysis: dict[str, Any]) -> dict[str, Any]:
    return {**CANARY, "analysis": analysis}


def contract_with(analysis: dict[str, Any]) -> RolloutContract:
    return make_contract(sizing={"canary": {"analysis": StageAnalysis.model_validate(analysis)}})


def completed_canary(rig: Rig, analysis: dict[str, Any]) -> str:
    """The ProgressiveSync with `analysis` on its canary, the canary selected, synced and healthy."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[stage_with(analysis), REST])
    cluster = select_canary(rig.runner)
    rig.simulate()
    assert_ok(rig.runner.run("cluster", "--stage", "canary", "--cluster", cluster))
    return cluster


@pytest.fixture
def steps_kube(rig: Rig) -> Iterator[Kube]:
    """The steps' own user (the chart's rules), as a step pod has it."""
    client = Kube.from_kubeconfig(str(rig.runner.kubeconfig))
    yield client
    client.close()


def start(
    rig: Rig, steps_kube: Kube, analysis: dict[str, Any], *, cluster: str = "", tuning: Tuning = FAST
) -> Future[AnalyzeResult]:
    contract = contract_with(analysis)
    rollout = RolloutRef(rig.namespace, "myservice", contract.rollout_id, argocd_namespace=rig.namespace)
    ctx = StepContext.open(steps_kube, rollout, contract, stage="canary", clock=SystemClock(), tuning=tuning)
    future: Future[AnalyzeResult] = Future()

    def work() -> None:
        try:
            future.set_result(analyze(steps_kube, ctx, cluster=cluster, instance_id=NO_CONTROLLER))
        except BaseException as exc:
            future.set_exception(exc)

    # A daemon thread: a test that fails while the step still waits does not hold the session.
    threading.Thread(target=work, name="analyze", daemon=True).start()
    return future


def run_named(rig: Rig, cluster: str = "", *, bake: bool = False) -> dict[str, Any]:
    name = analysis_run_name("myservice", "r1", "canary", cluster, bake=bake)
    return wait_for(lambda: _get(rig.kube, rig.namespace, name), timeout=30, what=f"AnalysisRun {name}")


def _get(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.get(ANALYSIS_RUNS, namespace, name)
    except NotFound:
        return None


def set_phase(rig: Rig, run: dict[str, Any], phase: str, *results: dict[str, Any], message: str = "") -> None:
    """What the Argo Rollouts controller would write (AnalysisRun has no status subresource)."""
    filled = [
        {**result, "measurements": [{"phase": result["phase"], **m} for m in result.get("measurements", [])]}
        for result in results
    ]
    status = {"phase": phase, "message": message, "metricResults": filled}
    rig.kube.patch(ANALYSIS_RUNS, rig.namespace, run["metadata"]["name"], {"status": status})


def runs_of(rig: Rig) -> list[dict[str, Any]]:
    items, _ = rig.kube.list(ANALYSIS_RUNS, rig.namespace, label_selector="progressivesync.io/rollout-id=r1")
    return items


STAGE_RUN = {
    "templates": [{"name": "error-rate"}],
    "args": [
        {"name": "cluster", "valueFrom": {"stageName": True}},
        {"name": "region", "value": "all"},
        {"name": "revision", "valueFrom": {"releaseRevision": True}},
    ],
}


def test_a_stage_gate_passes_and_a_second_run_adopts_the_same_analysis_run(
    rig: Rig, steps_kube: Kube
) -> None:
    stage_template(rig)
    completed_canary(rig, STAGE_RUN)
    future = start(rig, steps_kube, STAGE_RUN)
    run = run_named(rig)
    ps = read_progressive_sync(rig.kube, rig.namespace)
    assert run["spec"]["args"] == [
        {"name": "cluster", "value": "canary"},
        {"name": "region", "value": "all"},
        {"name": "revision", "value": NEW_REVISION},
    ]
    assert run["spec"]["metrics"][0]["name"] == "error-rate"
    assert run["spec"]["ttlStrategy"] == {"secondsAfterCompletion": 7 * 24 * 3600}
    assert run["metadata"]["labels"]["progressivesync.io/stage"] == "canary"
    assert run["metadata"]["ownerReferences"][0]["uid"] == ps.metadata.uid
    set_phase(
        rig,
        run,
        "Successful",
        {"name": "error-rate", "phase": "Successful", "measurements": [{"value": "[0.01]"}]},
    )
    result = future.result(timeout=30)
    assert result.gate is Gate.PASSED, result.summary
    entry = read_progressive_sync(rig.kube, rig.namespace).status.stages[0]  # type: ignore[union-attr]
    assert entry.analysis is not None
    assert (entry.analysis.run, entry.analysis.phase) == (run["metadata"]["name"], "Successful")

    again = start(rig, steps_kube, STAGE_RUN).result(timeout=30)
    assert again.gate is Gate.PASSED
    assert len(runs_of(rig)) == 1


def test_a_failed_metric_fails_the_stage_with_its_value_and_record_keeps_it_failed(
    rig: Rig, steps_kube: Kube
) -> None:
    stage_template(rig)
    completed_canary(rig, STAGE_RUN)
    future = start(rig, steps_kube, STAGE_RUN)
    run = run_named(rig)
    set_phase(
        rig,
        run,
        "Failed",
        {
            "name": "error-rate",
            "phase": "Failed",
            "count": 1,
            "failed": 1,
            "measurements": [{"value": "[0.42]"}],
        },
    )
    result = future.result(timeout=30)
    assert result.gate is Gate.FAILED
    assert "metric error-rate = [0.42] (successCondition result[0] < 0.05" in result.message
    entry = read_progressive_sync(rig.kube, rig.namespace).status.stages[0]  # type: ignore[union-attr]
    assert entry.phase is StagePhase.FAILED
    assert "AnalysisFailed" in entry.message

    closed = rig.runner.run("record", "--stage", "canary")
    assert_ok(closed, code=1)
    assert "error-rate = [0.42]" in closed.stdout


def test_a_per_cluster_run_takes_the_cluster_label_and_its_error_fails_that_cluster(
    rig: Rig, steps_kube: Kube
) -> None:
    analysis = {
        "templates": [{"name": "error-rate"}],
        "perCluster": True,
        "args": [
            {"name": "cluster", "valueFrom": {"clusterName": True}},
            {"name": "region", "valueFrom": {"clusterLabel": "region"}},
        ],
    }
    analysis_template(rig.kube, rig.namespace, args=[{"name": "cluster"}, {"name": "region"}])
    cluster = completed_canary(rig, analysis)
    region = next(c.region for c in rig.fleet.clusters if c.name == cluster)
    future = start(rig, steps_kube, analysis, cluster=cluster)
    run = run_named(rig, cluster)
    assert run["spec"]["args"] == [{"name": "cluster", "value": cluster}, {"name": "region", "value": region}]
    assert run["metadata"]["labels"][CLUSTER_LABEL] == cluster
    set_phase(
        rig,
        run,
        "Error",
        {"name": "error-rate", "phase": "Error", "error": 5, "message": "connection refused"},
    )
    result = future.result(timeout=30)
    assert result.gate is Gate.FAILED
    stage = stage_lists(rig.kube, rig.namespace, "myservice", "canary")
    assert [failure.name for failure in stage.failed] == [cluster]
    assert "AnalysisError" in stage.failed[0].reason
    assert "connection refused" in stage.failed[0].reason


@pytest.mark.parametrize(
    ("on_inconclusive", "gate"),
    [
        pytest.param("Approve", Gate.APPROVAL, id="approve-waits-for-a-person"),
        pytest.param("Fail", Gate.FAILED, id="fail"),
    ],
)
def test_inconclusive_follows_on_inconclusive(
    rig: Rig, steps_kube: Kube, on_inconclusive: str, gate: Gate
) -> None:
    analysis = {**STAGE_RUN, "onInconclusive": on_inconclusive}
    stage_template(rig)
    completed_canary(rig, analysis)
    future = start(rig, steps_kube, analysis)
    set_phase(rig, run_named(rig), "Inconclusive", {"name": "error-rate", "phase": "Inconclusive"})
    result = future.result(timeout=30)
    assert result.gate is gate
    assert result.outputs == {"verdict": gate.value}


@pytest.mark.parametrize(
    ("template_args", "analysis", "says"),
    [
        pytest.param(
            [{"name": "cluster"}, {"name": "region"}, {"name": "revision"}, {"name": "token"}],
            STAGE_RUN,
            "AnalysisArgMissing: argument 'token'",
            id="an-argument-without-value",
        ),
        pytest.param(
            None,
            {**STAGE_RUN, "templates": [{"name": "latency"}]},
            "AnalysisTemplateNotFound: AnalysisTemplate latency",
            id="a-template-that-does-not-exist",
        ),
    ],
)
def test_what_cannot_be_built_fails_the_stage_and_creates_nothing(
    rig: Rig,
    steps_kube: Kube,
    template_args: list[dict[str, Any]] | None,
    analysis: dict[str, Any],
    says: str,
) -> None:
    analysis_template(rig.kube, rig.namespace, args=template_args or [])
    completed_canary(rig, analysis)
    result = start(rig, steps_kube, analysis).result(timeout=30)
    assert result.gate is Gate.FAILED
    entry = read_progressive_sync(rig.kube, rig.namespace).status.stages[0]  # type: ignore[union-attr]
    assert entry.phase is StagePhase.FAILED
    assert says in entry.message
    assert runs_of(rig) == []


def test_a_run_of_that_name_for_another_rollout_is_refused(rig: Rig, steps_kube: Kube) -> None:
    stage_template(rig)
    completed_canary(rig, STAGE_RUN)
    name = analysis_run_name("myservice", "r1", "canary")
    rig.kube.create(
        ANALYSIS_RUNS,
        rig.namespace,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AnalysisRun",
            "metadata": {"name": name, "labels": {"progressivesync.io/rollout-id": "someone-else"}},
            "spec": {"metrics": [ERRORS]},
        },
    )
    with pytest.raises(PermanentError, match="AnalysisRunConflict"):
        start(rig, steps_kube, STAGE_RUN).result(timeout=30)


def test_past_its_deadline_a_run_is_terminated_and_never_passes(rig: Rig, steps_kube: Kube) -> None:
    future, run = a_running_gate(rig, steps_kube, {**STAGE_RUN, "timeoutSeconds": 1})
    terminated = wait_for(
        lambda: (
            (r := _get(rig.kube, rig.namespace, run["metadata"]["name"])) and r["spec"].get("terminate") and r
        ),
        timeout=30,
        what="the step to terminate the run",
    )
    assert terminated["metadata"]["annotations"][TERMINATED_ANNOTATION] == "deadline"
    # The controller ends a terminated run Successful (no failure limit breached): not a pass here.
    set_phase(rig, terminated, "Successful", message="Run Terminated")
    result = future.result(timeout=30)
    assert result.gate is Gate.FAILED
    assert "did not end within its deadline" in result.message


def sigterm_once_the_run_exists(rig: Rig, contract: str) -> tuple[dict[str, Any], int, str]:
    """Start the stage's analyze step as a process, SIGTERM it once its run is created; the run,
    the exit code and the output."""
    log = rig.tmp_path / "analyze.log"
    process = rig.runner.start(
        "analyze",
        "--stage",
        "canary",
        log_path=log,
        PROGRESSIVE_SYNC_CONTRACT=contract,
        PROGRESSIVE_SYNC_ROLLOUTS_INSTANCE_ID=NO_CONTROLLER,
    )
    try:
        run = run_named(rig)
        wait_for(lambda: "created AnalysisRun" in log.read_text(), timeout=30, what="the step to log the run")
        process.send_signal(signal.SIGTERM)
        code, output = finish(process, log, timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return run, code, output


def test_the_cli_stopped_by_sigterm_terminates_its_run_when_the_workflow_is_gone(rig: Rig) -> None:
    """`argo stop` (or a deleted Workflow) sends SIGTERM: the open run is terminated, exit 75."""
    stage_template(rig)
    completed_canary(rig, STAGE_RUN)
    contract = contract_with(STAGE_RUN).to_json()
    run, code, output = sigterm_once_the_run_exists(rig, contract)
    assert code == 75, output
    assert "terminated 1 AnalysisRun(s)" in output
    assert run["metadata"]["labels"][INSTANCE_ID_LABEL] == NO_CONTROLLER  # from the environment
    stopped = rig.kube.get(ANALYSIS_RUNS, rig.namespace, run["metadata"]["name"])
    assert stopped["spec"]["terminate"] is True
    assert stopped["metadata"]["annotations"][TERMINATED_ANNOTATION] == "stopped"
    assert json.loads(contract)["stages"][0]["analysis"]["templates"] == [
        {"name": "error-rate", "clusterScope": False}
    ]


def test_a_sigterm_while_the_workflow_goes_on_leaves_the_run_for_the_retry(rig: Rig) -> None:
    """A step pod deleted (its Workflow still running, not stopping): the run keeps measuring, and
    the step's retry adopts it; exit 75 as for any deleted step pod."""
    stage_template(rig)
    completed_canary(rig, STAGE_RUN)
    rig.kube.create(
        WORKFLOWS,
        rig.namespace,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": workflow_name("myservice", "r1")},
            "spec": {"entrypoint": "rollout", "templates": [{"name": "rollout", "suspend": {}}]},
        },
    )
    run, code, output = sigterm_once_the_run_exists(rig, contract_with(STAGE_RUN).to_json())
    assert code == 75, output
    assert "left 1 AnalysisRun(s) running for the step's retry" in output
    assert "terminate" not in rig.kube.get(ANALYSIS_RUNS, rig.namespace, run["metadata"]["name"])["spec"]


def test_during_bake_a_failing_metric_fails_the_stage_that_record_closed(rig: Rig, steps_kube: Kube) -> None:
    """duringBake: the bake is the run; a metric that fails mid-bake fails the stage (closed
    Succeeded by record before the bake) at once, before the bake ends."""
    analysis = {**STAGE_RUN, "when": ["duringBake"]}
    stage_template(rig)
    make_progressive_sync(
        rig.kube, rig.namespace, stages=[{**stage_with(analysis), "bakeSeconds": 3600}, REST]
    )
    cluster = select_canary(rig.runner)
    rig.simulate()
    assert_ok(rig.runner.run("cluster", "--stage", "canary", "--cluster", cluster))
    assert_ok(rig.runner.run("record", "--stage", "canary"))
    contract = contract_with(analysis)
    rollout = RolloutRef(rig.namespace, "myservice", contract.rollout_id, argocd_namespace=rig.namespace)
    ctx = StepContext.open(steps_kube, rollout, contract, stage="canary", clock=SystemClock(), tuning=FAST)
    future: Future[AnalyzeResult] = Future()
    threading.Thread(
        target=lambda: future.set_result(
            analyze(steps_kube, ctx, when=AnalysisWhen.DURING_BAKE, instance_id=NO_CONTROLLER)
        ),
        daemon=True,
    ).start()
    run = run_named(rig, bake=True)
    set_phase(
        rig, run, "Failed", {"name": "error-rate", "phase": "Failed", "measurements": [{"value": "[0.5]"}]}
    )
    result = future.result(timeout=30)
    assert result.gate is Gate.FAILED
    entry = read_progressive_sync(rig.kube, rig.namespace).status.stages[0]  # type: ignore[union-attr]
    assert entry.phase is StagePhase.FAILED
    assert "error-rate = [0.5]" in entry.message


def test_during_bake_the_run_ends_with_the_bake_and_passes(rig: Rig, steps_kube: Kube) -> None:
    analysis = {**STAGE_RUN, "when": ["duringBake"]}
    stage_template(rig)
    make_progressive_sync(rig.kube, rig.namespace, stages=[{**stage_with(analysis), "bakeSeconds": 2}, REST])
    cluster = select_canary(rig.runner)
    rig.simulate()
    assert_ok(rig.runner.run("cluster", "--stage", "canary", "--cluster", cluster))
    contract = contract_with(analysis)
    rollout = RolloutRef(rig.namespace, "myservice", contract.rollout_id, argocd_namespace=rig.namespace)
    ctx = StepContext.open(steps_kube, rollout, contract, stage="canary", clock=SystemClock(), tuning=FAST)
    future: Future[AnalyzeResult] = Future()
    threading.Thread(
        target=lambda: future.set_result(
            analyze(steps_kube, ctx, when=AnalysisWhen.DURING_BAKE, instance_id=NO_CONTROLLER)
        ),
        daemon=True,
    ).start()
    run = run_named(rig, bake=True)
    set_phase(rig, run, "Running")
    ended = wait_for(
        lambda: (
            (r := _get(rig.kube, rig.namespace, run["metadata"]["name"])) and r["spec"].get("terminate") and r
        ),
        timeout=30,
        what="the bake's end to terminate the run",
    )
    assert ended["metadata"]["annotations"][TERMINATED_ANNOTATION] == "bake-ended"
    set_phase(rig, ended, "Successful", message="Run Terminated")  # as the controller ends it
    assert future.result(timeout=30).gate is Gate.PASSED


def test_a_bake_after_its_gate_runs_an_analysis_of_its_own(rig: Rig, steps_kube: Kube) -> None:
    """`when: [afterHealthy, duringBake]`: the bake's run is a second AnalysisRun, not the gate's
    (Successful already): adopting that one by name would end the bake at once, unmeasured."""
    analysis = {**STAGE_RUN, "when": ["afterHealthy", "duringBake"]}
    stage_template(rig)
    make_progressive_sync(
        rig.kube, rig.namespace, stages=[{**stage_with(analysis), "bakeSeconds": 3600}, REST]
    )
    cluster = select_canary(rig.runner)
    rig.simulate()
    assert_ok(rig.runner.run("cluster", "--stage", "canary", "--cluster", cluster))
    gate = start(rig, steps_kube, analysis)
    set_phase(rig, run_named(rig), "Successful", {"name": "error-rate", "phase": "Successful"})
    assert gate.result(timeout=30).gate is Gate.PASSED
    assert_ok(rig.runner.run("record", "--stage", "canary"))
    contract = contract_with(analysis)
    rollout = RolloutRef(rig.namespace, "myservice", contract.rollout_id, argocd_namespace=rig.namespace)
    ctx = StepContext.open(steps_kube, rollout, contract, stage="canary", clock=SystemClock(), tuning=FAST)
    bake: Future[AnalyzeResult] = Future()
    threading.Thread(
        target=lambda: bake.set_result(
            analyze(steps_kube, ctx, when=AnalysisWhen.DURING_BAKE, instance_id=NO_CONTROLLER)
        ),
        daemon=True,
    ).start()
    [ours] = wait_for(
        lambda: [
            r for r in runs_of(rig) if r["metadata"]["name"] != analysis_run_name("myservice", "r1", "canary")
        ],
        timeout=30,
        what="the bake's own AnalysisRun",
        describe=lambda: (
            bake.done() and bake.result().summary,
            [r["metadata"]["name"] for r in runs_of(rig)],
        ),
    )
    assert not bake.done(), bake.result().summary  # it measures the bake, not the gate's verdict
    set_phase(
        rig, ours, "Failed", {"name": "error-rate", "phase": "Failed", "measurements": [{"value": "[0.5]"}]}
    )
    assert bake.result(timeout=30).gate is Gate.FAILED
    assert len(runs_of(rig)) == 2


def test_the_exit_handler_of_a_failed_rollout_terminates_its_running_runs(rig: Rig, steps_kube: Kube) -> None:
    """finalize (the Workflow's exit handler, as after its deadline) does not rely on the analyze
    step's SIGTERM: every run of the rollout still running is terminated and followed to its end;
    a run that ended keeps its verdict untouched."""
    gate, running = a_running_gate(rig, steps_kube, STAGE_RUN)
    meta = {key: running["metadata"][key] for key in ("labels", "annotations", "ownerReferences")}
    ended = {**running, "metadata": {**meta, "name": "an-ended-run"}}
    ended.pop("status", None)
    rig.kube.create(ANALYSIS_RUNS, rig.namespace, ended)
    set_phase(rig, ended, "Successful")
    name = running["metadata"]["name"]

    def end_like_the_controller() -> None:
        run = wait_for(
            lambda: (r := _get(rig.kube, rig.namespace, name)) and r["spec"].get("terminate") and r,
            timeout=30,
            what="finalize to terminate the run",
        )
        set_phase(rig, run, "Successful", message="Run Terminated")

    controller = threading.Thread(target=end_like_the_controller, daemon=True)
    controller.start()
    result = rig.runner.run(
        "finalize", "--workflow-name", workflow_name("myservice", "r1"), "--workflow-status", "Failed"
    )
    controller.join(timeout=30)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"terminated AnalysisRun {name}" in output, output
    assert "still running" not in output, output
    stopped = rig.kube.get(ANALYSIS_RUNS, rig.namespace, name)
    assert stopped["metadata"]["annotations"][TERMINATED_ANNOTATION] == "rollout-ended"
    untouched = rig.kube.get(ANALYSIS_RUNS, rig.namespace, "an-ended-run")
    assert "terminate" not in untouched["spec"] and TERMINATED_ANNOTATION not in (
        untouched["metadata"].get("annotations") or {}
    )
    # The gate's step sees the rollout ended and stops: it never passes.
    assert gate.result(timeout=30).gate is not Gate.PASSED
