"""The real analysis controller measures real metrics: what each outcome of an AnalysisRun takes.

Each test creates a standalone AnalysisRun (as a least-privileged user) and waits, with a deadline,
for the phase the real controller gives it after asking the real Prometheus (or the `web` endpoint)
about a cluster whose service the test made good or bad. Intervals are 1 s, so a run ends in a few
seconds. These are the outcomes the analysis gates act on (docs/design/CONTRACTS.md): Successful passes a
stage, Failed and Error fail it, Inconclusive waits for a person, `spec.terminate` ends a run.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.analysis.run import INSTANCE_ID_LABEL
from orchestrator.devenv.controlplane import free_port
from orchestrator.kube.client import ANALYSIS_RUNS
from tests.support.analysis import (
    ERROR,
    FAILED,
    FINAL_PHASES,
    INCONCLUSIVE,
    RUNNING,
    SUCCESSFUL,
    AnalysisEnv,
    analysis_run,
    metric_results,
    prometheus_metric,
    web_metric,
)
from tests.support.wait import wait_for

# One worker runs the tier (`make test`: --dist loadgroup): one analysis stack per run, not per worker.
pytestmark = [pytest.mark.analysis, pytest.mark.xdist_group("analysis")]

CLUSTER_ARG = [{"name": "cluster"}]


def error_rate_metric(env: AnalysisEnv, **kwargs: object) -> dict[str, object]:
    """The error-rate metric over the run's `cluster` arg, against the stack's Prometheus."""
    query = env.error_rate_query("{{args.cluster}}")
    return prometheus_metric("error-rate", address=env.prometheus_url, query=query, **kwargs)  # type: ignore[arg-type]


def measured(result: dict[str, Any]) -> float:
    """The last measurement's value: a Prometheus vector's first sample ("[0.5]")."""
    return float(json.loads(result["measurements"][-1]["value"])[0])


@pytest.mark.parametrize(
    ("error_rate", "phase"),
    [
        pytest.param(0.0, SUCCESSFUL, id="good-cluster-is-successful"),
        pytest.param(0.5, FAILED, id="bad-cluster-fails"),
        pytest.param(0.1, INCONCLUSIVE, id="neither-condition-is-inconclusive"),
    ],
)
def test_a_prometheus_error_rate_decides_the_run(
    analysis_env: AnalysisEnv, error_rate: float, phase: str
) -> None:
    env = analysis_env
    env.set_error_rate(env.cluster, error_rate)
    args = [{"name": "cluster", "value": env.cluster}]
    env.create_run(analysis_run("error-rate", [error_rate_metric(env, count=2)], args=args))

    run = env.wait_for_phase("error-rate", FINAL_PHASES)

    assert run["status"]["phase"] == phase, run["status"]
    result = metric_results(run)["error-rate"]
    assert result["phase"] == phase
    # The value the controller measured is the error rate the test set, as Prometheus computed it.
    assert measured(result) == pytest.approx(error_rate, abs=0.001), result["measurements"]
    # The run's message names the metric and the limit it broke; the value is in the measurement.
    if phase == FAILED:
        assert (
            run["status"]["message"]
            == 'Metric "error-rate" assessed Failed due to failed (1) > failureLimit (0)'
        )
    if phase == INCONCLUSIVE:
        assert run["status"]["message"] == (
            'Metric "error-rate" assessed Inconclusive due to inconclusive (1) > inconclusiveLimit (0)'
        )


def test_a_cluster_turning_bad_fails_a_running_analysis_before_its_count(analysis_env: AnalysisEnv) -> None:
    env = analysis_env
    args = [{"name": "cluster", "value": env.cluster}]
    # Only a success condition: while the error rate climbs through the query's window, a value
    # between a success and a failure condition is Inconclusive (with no inconclusiveLimit: the end).
    metric = error_rate_metric(env, count=60, failure=None)
    env.create_run(analysis_run("bake", [metric], args=args))
    wait_for(
        lambda: metric_results(env.wait_for_phase("bake", {RUNNING})).get("error-rate", {}).get("successful"),
        timeout=20.0,
        what="a successful measurement",
    )

    env.endpoint.set_error_rate(env.cluster, 0.5)
    run = env.wait_for_phase("bake", FINAL_PHASES)

    assert run["status"]["phase"] == FAILED, run["status"]
    assert metric_results(run)["error-rate"]["count"] < 60


@pytest.mark.parametrize(
    ("error_rate", "phase"),
    [
        pytest.param(0.0, SUCCESSFUL, id="good-cluster-is-successful"),
        pytest.param(0.5, FAILED, id="bad-cluster-fails"),
    ],
)
def test_the_web_provider_reads_the_cluster_state(
    analysis_env: AnalysisEnv, error_rate: float, phase: str
) -> None:
    env = analysis_env
    env.endpoint.set_error_rate(env.cluster, error_rate)
    url = env.endpoint.url + "/clusters/{{args.cluster}}"
    args = [{"name": "cluster", "value": env.cluster}]
    env.create_run(analysis_run("web", [web_metric("state", url=url)], args=args))

    run = env.wait_for_phase("web", FINAL_PHASES)

    assert run["status"]["phase"] == phase, run["status"]
    assert metric_results(run)["state"]["measurements"][-1]["value"] == f"{error_rate:g}"


def test_prometheus_unreachable_is_an_error_that_says_so(analysis_env: AnalysisEnv) -> None:
    env = analysis_env
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    metric = prometheus_metric("error-rate", address=nobody, query=env.error_rate_query())
    env.create_run(analysis_run("unreachable", [metric]))

    run = env.wait_for_phase("unreachable", FINAL_PHASES)

    assert run["status"]["phase"] == ERROR, run["status"]
    result = metric_results(run)["error-rate"]
    assert "connection refused" in result["measurements"][-1]["message"], result


def test_terminate_ends_a_running_analysis(analysis_env: AnalysisEnv) -> None:
    env = analysis_env
    args = [{"name": "cluster", "value": env.cluster}]
    env.create_run(analysis_run("endless", [error_rate_metric(env, count=None)], args=args))
    wait_for(
        lambda: metric_results(env.wait_for_phase("endless", {RUNNING})).get("error-rate", {}).get("count"),
        timeout=20.0,
        what="a first measurement",
    )

    env.runner.patch(ANALYSIS_RUNS, env.namespace, "endless", {"spec": {"terminate": True}})
    run = env.wait_for_phase("endless", FINAL_PHASES)

    # Terminated without a failure: it ends Successful, and says it was terminated.
    assert run["status"]["phase"] == SUCCESSFUL, run["status"]
    assert "terminated" in run["status"].get("message", "").lower(), run["status"]


def test_a_run_labelled_for_another_controller_instance_is_left_alone(analysis_env: AnalysisEnv) -> None:
    """Our INSTANCE_ID_LABEL is the key the real controller filters on: this stack's controller runs
    without `--instance-id`, so it reconciles only runs without the label."""
    env = analysis_env
    url = env.endpoint.url + "/clusters/{{args.cluster}}"
    args = [{"name": "cluster", "value": env.cluster}]
    other = {INSTANCE_ID_LABEL: "another-controller"}
    env.create_run(analysis_run("elsewhere", [web_metric("state", url=url)], args=args, labels=other))
    env.create_run(analysis_run("here", [web_metric("state", url=url)], args=args))

    # The run created second is measured to its end, so the controller has been through its queue.
    assert env.wait_for_phase("here", FINAL_PHASES)["status"]["phase"] == SUCCESSFUL
    elsewhere = env.kube.get(ANALYSIS_RUNS, env.namespace, "elsewhere")
    assert "status" not in elsewhere or not elsewhere["status"].get("phase"), elsewhere["status"]
