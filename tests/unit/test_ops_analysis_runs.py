"""`progressive-sync status` shows the rollout's AnalysisRuns: each run, and per metric its phase and
last value (orchestrator/ops/analysis_runs.py), in the table and in `-o json|yaml`.

No cluster: AnalysisRun objects as the Argo Rollouts controller leaves them, `now` fixed.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from orchestrator.analysis.run import CLUSTER_ANNOTATION, STAGE_ANNOTATION
from orchestrator.ops import tables
from orchestrator.ops import view as ops_view
from orchestrator.ops.analysis_runs import analysis_run_view, run_rows, run_selector
from tests.unit.test_ops import NOW, ps, running_stages

WEB = {"web": {"url": "http://metrics.invalid/"}}


def run(name: str, stage: str, cluster: str = "", status: dict[str, Any] | None = None) -> dict[str, Any]:
    annotations = {STAGE_ANNOTATION: stage, **({CLUSTER_ANNOTATION: cluster} if cluster else {})}
    obj: dict[str, Any] = {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"metrics": [{"name": name, "provider": WEB} for name in ("error-rate", "latency")]},
    }
    if status is not None:
        obj["status"] = status
    return obj


FAILED = {
    "phase": "Failed",
    "message": 'Metric "error-rate" assessed Failed due to failed (1) > failureLimit (0)',
    "metricResults": [
        {
            "name": "error-rate",
            "phase": "Failed",
            "measurements": [
                {"phase": "Successful", "value": "[0.01]"},
                {"phase": "Failed", "value": "[0.3]"},
            ],
            "message": "",
        },
        {
            "name": "latency",
            "phase": "Successful",
            "measurements": [{"phase": "Successful", "value": "[120]"}],
        },
    ],
}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            run("r-canary", "canary", status=FAILED),
            [
                ("canary", "-", "r-canary", "Failed", "error-rate", "Failed", "[0.3]"),
                ("canary", "-", "r-canary", "Failed", "latency", "Successful", "[120]"),
            ],
            id="failed-run-last-values",
        ),
        pytest.param(
            run("r-eu-1", "one per region", cluster="eu-1"),
            [
                ("one per region", "eu-1", "r-eu-1", "Pending", "error-rate", "Pending", "-"),
                ("one per region", "eu-1", "r-eu-1", "Pending", "latency", "Pending", "-"),
            ],
            id="not-yet-measured-lists-its-metrics-pending",
        ),
        pytest.param(
            {"metadata": {"name": "bare"}},
            [("-", "-", "bare", "Pending", "-", "-", "-")],
            id="a-run-without-metrics-is-one-row",
        ),
    ],
)
def test_run_rows(obj: dict[str, Any], expected: list[tuple[str, ...]]) -> None:
    assert run_rows([analysis_run_view(obj)]) == expected


def test_selector_is_the_runs_labels() -> None:
    assert run_selector("myservice", "7f3c2a1") == (
        "progressivesync.io/name=myservice,progressivesync.io/rollout-id=7f3c2a1"
    )


def test_status_table_and_data_show_each_run_and_its_metrics() -> None:
    runs = [run("r-eu-1", "one per region", cluster="eu-1"), run("r-canary", "canary", status=FAILED)]
    view = ops_view.rollout_view(ps(phase="Progressing", stage_status=running_stages()), None, None, runs)
    assert [r.name for r in view.analysis_runs or ()] == ["r-canary", "r-eu-1"]  # in stage order
    text = tables.render_table(view, NOW)
    assert "ANALYSISRUN" in text and "LAST VALUE" in text
    assert re.search(r"canary\s+-\s+r-canary\s+Failed\s+error-rate\s+Failed\s+\[0\.3\]", text), text
    data = ops_view.render_data(view, NOW)
    assert data["analysisRuns"][0] == {
        "name": "r-canary",
        "stage": "canary",
        "cluster": None,
        "phase": "Failed",
        "message": FAILED["message"],
        "metrics": [
            {"name": "error-rate", "phase": "Failed", "lastValue": "[0.3]", "message": ""},
            {"name": "latency", "phase": "Successful", "lastValue": "[120]", "message": ""},
        ],
    }


def test_without_runs_read_the_data_form_has_no_run_list() -> None:
    view = ops_view.rollout_view(ps(phase="Progressing", stage_status=running_stages()))
    assert "analysisRuns" not in ops_view.render_data(view, NOW)
    assert "ANALYSISRUN" not in tables.render_table(view, NOW)
