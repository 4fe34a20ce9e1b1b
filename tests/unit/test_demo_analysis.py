"""The demo's analysis gate: its ProgressiveSync and AnalysisTemplate are valid and say what the
docs say, the closing explanation names the failed metric, its value and condition, and the
flags that pick the bad cluster are checked before anything starts."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.api.analysis import AnalysisWhen
from orchestrator.api.models import ProgressiveSync
from orchestrator.cli.main import main
from orchestrator.devenv.demo import demo_cluster_names, demo_progressive_sync
from orchestrator.devenv.demo_analysis import (
    FailedMetric,
    error_rate_template,
    explain_failed_metrics,
    failed_metrics,
)


def test_the_demo_with_analysis_is_a_valid_progressive_sync_gating_every_cluster() -> None:
    ps = ProgressiveSync.model_validate(demo_progressive_sync(analysis=True))
    analysis = ps.spec.analysis
    assert analysis is not None
    assert analysis.per_cluster is True
    assert [t.name for t in analysis.templates or []] == ["error-rate"]
    assert [(a.name, a.value_from.source if a.value_from else None) for a in analysis.args or []] == [
        ("cluster", "clusterName")
    ]
    assert analysis.when is None or list(analysis.when) == [AnalysisWhen.AFTER_HEALTHY]
    assert all(stage.analysis is None for stage in ps.spec.stages)  # the spec's block: every stage


def test_the_default_demo_has_no_analysis() -> None:
    assert "analysis" not in demo_progressive_sync()["spec"]


def test_the_template_ends_on_the_first_error_and_measures_the_clusters_arg() -> None:
    template = error_rate_template("argocd", "http://127.0.0.1:9090")
    (metric,) = template["spec"]["metrics"]
    assert template["spec"]["args"] == [{"name": "cluster"}]
    assert metric["consecutiveErrorLimit"] == 0
    assert (metric["interval"], metric["count"]) == ("1s", 3)
    assert "failureCondition" not in metric  # no gap between two conditions to be Inconclusive in
    assert 'cluster="{{args.cluster}}"' in metric["provider"]["prometheus"]["query"]


def run(phase: str, results: list[dict[str, Any]], cluster: str = "c1") -> dict[str, Any]:
    return {
        "metadata": {"name": f"ps-r-canary-{cluster}", "labels": {"progressivesync.io/cluster": cluster}},
        "spec": {"metrics": [{"name": "error-rate", "successCondition": "result[0] < 0.05"}]},
        "status": {"phase": phase, "metricResults": results},
    }


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        pytest.param(
            [
                run(
                    "Successful",
                    [{"name": "error-rate", "phase": "Successful", "measurements": [{"value": "[0]"}]}],
                )
            ],
            [],
            id="a-passed-run-names-nothing",
        ),
        pytest.param(
            [
                run(
                    "Failed",
                    [
                        {
                            "name": "error-rate",
                            "phase": "Failed",
                            "measurements": [{"value": "[0.3500002507]"}],
                        }
                    ],
                )
            ],
            [
                FailedMetric(
                    "ps-r-canary-c1",
                    "c1",
                    "error-rate",
                    "Failed",
                    "0.35",
                    "successCondition result[0] < 0.05",
                )
            ],
            id="a-failed-metric-with-its-value-rounded-and-its-condition",
        ),
        pytest.param(
            [
                run(
                    "Error",
                    [
                        {
                            "name": "error-rate",
                            "phase": "Error",
                            "message": "connection refused",
                            "measurements": [],
                        }
                    ],
                )
            ],
            [
                FailedMetric(
                    "ps-r-canary-c1",
                    "c1",
                    "error-rate",
                    "Error",
                    "(no value)",
                    "successCondition result[0] < 0.05",
                    "connection refused",
                )
            ],
            id="an-errored-metric-with-its-message",
        ),
    ],
)
def test_failed_metrics(runs: list[dict[str, Any]], expected: list[FailedMetric]) -> None:
    assert failed_metrics(runs) == expected


def test_the_explanation_names_the_metric_its_value_the_condition_and_what_to_do() -> None:
    failed = failed_metrics(
        [run("Failed", [{"name": "error-rate", "phase": "Failed", "measurements": [{"value": "[0.35]"}]}])]
    )
    text = "\n".join(explain_failed_metrics(failed, namespace="argocd", name="myservice"))
    assert "Analysis gate on c1: metric 'error-rate' measured 0.35, which fails its successCondition" in text
    assert "kubectl get analysisrun -n argocd -l progressivesync.io/name=myservice" in text
    assert "progressive-sync retry myservice -n argocd" in text
    assert explain_failed_metrics([], namespace="argocd", name="myservice") == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(
            ["--bad-metrics", "nowhere"], "Invalid value for --bad-metrics", id="not-a-demo-cluster"
        ),
        pytest.param(
            ["--bad-metrics", demo_cluster_names()[1], "--fail-cluster", demo_cluster_names()[2]],
            "both pick the canary",
            id="two-different-canaries",
        ),
    ],
)
def test_the_bad_cluster_is_checked_before_anything_starts(args: list[str], says: str) -> None:
    result = CliRunner().invoke(main, ["demo", *args])
    assert result.exit_code == 2
    assert says in result.output
