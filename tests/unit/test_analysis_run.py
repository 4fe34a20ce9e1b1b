"""The pure analysis core: the AnalysisRun built from templates, its name, its deadline, its verdict.

Pure functions on dicts (orchestrator/analysis); the real Argo Rollouts controller reads what
these build in the analysis tier.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.analysis.run import (
    CLUSTER_LABEL,
    OPEN_ENDED_SECONDS,
    RUN_NAME_MAX,
    AnalysisBuildError,
    AppRef,
    ArgContext,
    FetchedTemplate,
    analysis_run_name,
    build_analysis_run,
    duration_seconds,
    run_deadline_seconds,
)
from orchestrator.analysis.verdict import Outcome, assess_analysis_run, metric_lines
from orchestrator.api.analysis import StageAnalysis
from orchestrator.api.reasons import Reason

ERRORS = {
    "name": "error-rate",
    "interval": "10s",
    "count": 3,
    "failureLimit": 0,
    "successCondition": "result[0] < 0.05",
    "provider": {
        "prometheus": {"address": "http://p:9090", "query": "rate(errors{cluster='{{args.cluster}}'}[1m])"}
    },
}
LATENCY = {"name": "latency", "successCondition": "result[0] < 300", "provider": {"web": {"url": "http://x"}}}


def template(
    name: str, *metrics: dict[str, Any], args: list[dict[str, Any]] | None = None, **spec: Any
) -> FetchedTemplate:
    body: dict[str, Any] = {"metrics": list(metrics), **spec}
    if args is not None:
        body["args"] = args
    return FetchedTemplate(name=name, cluster_scope=False, obj={"metadata": {"name": name}, "spec": body})


def analysis(**fields: Any) -> StageAnalysis:
    fields.setdefault("templates", [{"name": "t"}])
    return StageAnalysis.model_validate(fields)


CLUSTER = ArgContext(
    stage="canary",
    release_revision="4f1c2e9",
    cluster="eu-1",
    cluster_labels={"region": "eu-west-1"},
    cluster_server="https://eu-1:6443",
    applications=(AppRef(name="checkout-eu-1", namespace="argocd", destination_namespace="shop"),),
)


def build(
    stage_analysis: StageAnalysis, templates: list[FetchedTemplate], ctx: ArgContext = CLUSTER
) -> dict[str, Any]:
    return build_analysis_run(
        ps_name="checkout",
        ps_uid="uid-1",
        namespace="argocd",
        rollout_id="7f3c2a1",
        analysis=stage_analysis,
        templates=templates,
        context=ctx,
    )


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        pytest.param(
            {"name": "cluster", "valueFrom": {"clusterName": True}}, {"value": "eu-1"}, id="cluster-name"
        ),
        pytest.param(
            {"name": "cluster", "valueFrom": {"clusterLabel": "region"}}, {"value": "eu-west-1"}, id="label"
        ),
        pytest.param(
            {"name": "cluster", "valueFrom": {"applicationName": True}}, {"value": "checkout-eu-1"}, id="app"
        ),
        pytest.param(
            {"name": "cluster", "valueFrom": {"applicationNamespace": True}}, {"value": "argocd"}, id="app-ns"
        ),
        pytest.param(
            {"name": "cluster", "valueFrom": {"destinationServer": True}},
            {"value": "https://eu-1:6443"},
            id="destination-server-falls-back-to-the-cluster's",
        ),
        pytest.param(
            {"name": "cluster", "valueFrom": {"destinationName": True}}, {"value": "eu-1"}, id="dest-name"
        ),
        pytest.param(
            {"name": "cluster", "valueFrom": {"destinationNamespace": True}}, {"value": "shop"}, id="dest-ns"
        ),
        pytest.param({"name": "cluster", "valueFrom": {"stageName": True}}, {"value": "canary"}, id="stage"),
        pytest.param(
            {"name": "cluster", "valueFrom": {"releaseRevision": True}}, {"value": "4f1c2e9"}, id="revision"
        ),
        pytest.param({"name": "cluster", "value": "literal"}, {"value": "literal"}, id="literal"),
        pytest.param(
            {"name": "cluster", "valueFrom": {"secretKeyRef": {"name": "prom", "key": "token"}}},
            {"valueFrom": {"secretKeyRef": {"name": "prom", "key": "token"}}},
            id="secret-passed-on-for-the-controller",
        ),
    ],
)
def test_an_argument_reaches_the_run(arg: dict[str, Any], expected: dict[str, Any]) -> None:
    run = build(analysis(args=[arg], perCluster=True), [template("t", ERRORS, args=[{"name": "cluster"}])])
    assert run["spec"]["args"] == [{"name": "cluster", **expected}]


@pytest.mark.parametrize(
    ("stage_analysis", "templates", "ctx", "reason", "says"),
    [
        pytest.param(
            analysis(),
            [template("t", ERRORS, args=[{"name": "cluster"}])],
            CLUSTER,
            Reason.ANALYSIS_ARG_MISSING,
            "argument 'cluster': a template declares it without a default",
            id="declared-without-value",
        ),
        pytest.param(
            analysis(args=[{"name": "r", "valueFrom": {"clusterLabel": "zone"}}], perCluster=True),
            [template("t", ERRORS, args=[{"name": "r"}])],
            CLUSTER,
            Reason.ANALYSIS_ARG_MISSING,
            "cluster eu-1 has no label 'zone'",
            id="cluster-without-the-label",
        ),
        pytest.param(
            analysis(args=[{"name": "a", "valueFrom": {"applicationName": True}}], perCluster=True),
            [template("t", ERRORS, args=[{"name": "a"}])],
            ArgContext(stage="canary", cluster="eu-1", applications=(AppRef("x", "n"), AppRef("y", "n"))),
            Reason.ANALYSIS_ARG_MISSING,
            "has 2 Applications",
            id="application-ambiguous",
        ),
        pytest.param(
            analysis(args=[{"name": "v", "valueFrom": {"releaseRevision": True}}]),
            [template("t", ERRORS, args=[{"name": "v"}])],
            ArgContext(stage="canary"),
            Reason.ANALYSIS_ARG_MISSING,
            "no single release revision",
            id="release-of-several-revisions",
        ),
        pytest.param(
            analysis(),
            [template("a", ERRORS), template("b", ERRORS)],
            CLUSTER,
            Reason.ANALYSIS_METRIC_DUPLICATE,
            "metric 'error-rate' is defined by AnalysisTemplate a and by AnalysisTemplate b",
            id="metric-twice",
        ),
        pytest.param(
            analysis(),
            [
                template("a", ERRORS, args=[{"name": "x", "value": "1"}]),
                template("b", LATENCY, args=[{"name": "x", "value": "2"}]),
            ],
            CLUSTER,
            Reason.ANALYSIS_ARG_MISSING,
            "give it different defaults",
            id="defaults-disagree",
        ),
        pytest.param(
            analysis(),
            [template("t")],
            CLUSTER,
            Reason.ANALYSIS_TEMPLATE_NOT_FOUND,
            "define no metric",
            id="no-metric",
        ),
    ],
)
def test_what_cannot_be_built(
    stage_analysis: StageAnalysis,
    templates: list[FetchedTemplate],
    ctx: ArgContext,
    reason: Reason,
    says: str,
) -> None:
    with pytest.raises(AnalysisBuildError) as caught:
        build(stage_analysis, templates, ctx)
    assert caught.value.reason is reason
    assert says in str(caught.value)


def test_templates_flatten_and_args_merge() -> None:
    run = build(
        analysis(
            args=[{"name": "threshold", "value": "0.01"}, {"name": "unused", "value": "x"}], perCluster=True
        ),
        [
            template(
                "errors",
                ERRORS,
                args=[{"name": "threshold", "value": "0.05"}, {"name": "cluster", "value": "any"}],
                dryRun=[{"metricName": "error-rate"}],
            ),
            template(
                "latency",
                LATENCY,
                args=[{"name": "cluster"}],
                measurementRetention=[{"metricName": "latency", "limit": 5}],
            ),
        ],
    )
    spec = run["spec"]
    assert [m["name"] for m in spec["metrics"]] == ["error-rate", "latency"]
    # Our value over the template's default; a declared default kept; ours no template declares dropped.
    assert spec["args"] == [{"name": "threshold", "value": "0.01"}, {"name": "cluster", "value": "any"}]
    assert spec["dryRun"] == [{"metricName": "error-rate"}]
    assert spec["measurementRetention"] == [{"metricName": "latency", "limit": 5}]
    assert spec["ttlStrategy"] == {"secondsAfterCompletion": 7 * 24 * 3600}
    meta = run["metadata"]
    assert meta["name"] == analysis_run_name("checkout", "7f3c2a1", "canary", "eu-1")
    assert meta["labels"][CLUSTER_LABEL] == "eu-1"
    assert meta["labels"]["progressivesync.io/rollout-id"] == "7f3c2a1"
    assert meta["ownerReferences"][0]["uid"] == "uid-1"
    assert run["kind"] == "AnalysisRun"


names = st.text(alphabet="abcXYZ09 .-_", min_size=1, max_size=80)


@given(
    ps=names,
    rollout=st.text(alphabet="0123456789abcdef-", min_size=1, max_size=16),
    stage=names,
    cluster=st.one_of(st.just(""), names),
)
def test_run_name_is_stable_short_and_valid(ps: str, rollout: str, stage: str, cluster: str) -> None:
    name = analysis_run_name(ps, rollout, stage, cluster)
    assert name == analysis_run_name(ps, rollout, stage, cluster)
    assert len(name) <= RUN_NAME_MAX
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)


@given(st.lists(st.tuples(names, names), min_size=2, max_size=20, unique=True))
def test_run_names_are_unique_per_stage_and_cluster(pairs: list[tuple[str, str]]) -> None:
    made = {analysis_run_name("checkout", "7f3c2a1", stage, cluster) for stage, cluster in pairs}
    assert len(made) == len(pairs)


@given(stage=names, cluster=st.one_of(st.just(""), names))
def test_a_stage_bake_run_is_named_apart_from_its_gate_run(stage: str, cluster: str) -> None:
    baked = analysis_run_name("checkout", "7f3c2a1", stage, cluster, bake=True)
    assert baked != analysis_run_name("checkout", "7f3c2a1", stage, cluster)
    assert baked == analysis_run_name("checkout", "7f3c2a1", stage, cluster, bake=True)
    assert len(baked) <= RUN_NAME_MAX and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", baked)


@pytest.mark.parametrize(
    ("fields", "metrics", "seconds"),
    [
        pytest.param({"timeoutSeconds": 42}, [ERRORS], 42, id="timeout-wins"),
        pytest.param({}, [ERRORS], 30 + 60, id="interval-times-count-plus-slack"),
        pytest.param({}, [{**ERRORS, "initialDelay": "1m"}], 90 + 60, id="initial-delay"),
        pytest.param({}, [LATENCY], 60, id="one-measurement"),
        pytest.param({}, [{**ERRORS, "count": None}], OPEN_ENDED_SECONDS, id="no-count-measures-for-ever"),
        pytest.param({}, [{**ERRORS, "count": "{{args.n}}"}], OPEN_ENDED_SECONDS, id="count-from-an-arg"),
    ],
)
def test_deadline(fields: dict[str, Any], metrics: list[dict[str, Any]], seconds: int) -> None:
    metrics = [{k: v for k, v in m.items() if v is not None} for m in metrics]
    assert run_deadline_seconds(analysis(**fields), metrics) == seconds


def test_durations() -> None:
    assert duration_seconds("1h30m") == 5400
    assert duration_seconds("500ms") == 0.5
    assert duration_seconds(7) == 7
    with pytest.raises(ValueError, match="not a duration"):
        duration_seconds("soon")


def run_with(phase: str, *results: dict[str, Any], message: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": "r"},
        "spec": {"metrics": [ERRORS, LATENCY]},
        "status": {"phase": phase, "message": message, "metricResults": list(results)},
    }


@pytest.mark.parametrize(
    ("run", "outcome", "reason", "says"),
    [
        pytest.param(run_with(""), Outcome.RUNNING, None, "analysis r Pending", id="no-status-yet"),
        pytest.param(run_with("Running"), Outcome.RUNNING, None, "Running", id="running"),
        pytest.param(run_with("Successful"), Outcome.PASSED, None, "Successful", id="successful"),
        pytest.param(
            run_with(
                "Failed",
                {
                    "name": "error-rate",
                    "phase": "Failed",
                    "count": 2,
                    "failed": 1,
                    "measurements": [{"value": "[0.31]"}],
                },
            ),
            Outcome.FAILED,
            Reason.ANALYSIS_FAILED,
            "metric error-rate = [0.31] (successCondition result[0] < 0.05, failureLimit 0; "
            "1 of 2 measurements failed)",
            id="failed-names-metric-value-and-condition",
        ),
        pytest.param(
            run_with("Failed", message="Metric assessed Failed"),
            Outcome.FAILED,
            Reason.ANALYSIS_FAILED,
            "Metric assessed Failed",
            id="failed-without-results",
        ),
        pytest.param(
            run_with(
                "Error",
                {
                    "name": "error-rate",
                    "phase": "Error",
                    "error": 5,
                    "message": "dial tcp: connection refused",
                },
            ),
            Outcome.ERROR,
            Reason.ANALYSIS_ERROR,
            "metric error-rate could not be measured: dial tcp: connection refused (5 error(s))",
            id="error-says-why",
        ),
        pytest.param(
            run_with(
                "Inconclusive",
                {"name": "latency", "phase": "Inconclusive", "measurements": [{"value": "300"}]},
            ),
            Outcome.INCONCLUSIVE,
            Reason.ANALYSIS_INCONCLUSIVE,
            "metric latency = 300 (successCondition result[0] < 300)",
            id="inconclusive",
        ),
    ],
)
def test_verdict(run: dict[str, Any], outcome: Outcome, reason: Reason | None, says: str) -> None:
    verdict = assess_analysis_run(run)
    assert verdict.outcome is outcome
    assert verdict.reason is reason
    assert says in verdict.message
    assert verdict.final == (outcome is not Outcome.RUNNING)


def test_metric_lines() -> None:
    run = run_with(
        "Running",
        {"name": "error-rate", "phase": "Running", "measurements": [{"value": "0.01"}]},
        {"name": "latency"},
    )
    assert metric_lines(run) == ["error-rate Running (0.01)", "latency Pending"]
