"""The AnalysisRuns of a rollout as `progressive-sync status` shows them: each run, its metrics.

`read_view` (orchestrator.ops.actions) lists the AnalysisRuns labelled for the ProgressiveSync and
its current rollout (`run_selector`); this module turns them into `AnalysisRunView`s (the stage and
cluster they belong to, from the annotations the builder writes; the run's phase and message; per
metric its phase, last measured value and message) and into the rows of the status table and the
`analysisRuns` list of `-o json|yaml`. Pure: objects in, views out.

Callers: `orchestrator.ops.view` (the RolloutView holds the runs), `orchestrator.ops.actions`,
`orchestrator.ops.tables`; tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis.run import CLUSTER_ANNOTATION, STAGE_ANNOTATION
from orchestrator.api.metadata import NAME_LABEL, ROLLOUT_ID_LABEL, label_value

RUN_COLUMNS = ("STAGE", "CLUSTER", "ANALYSISRUN", "PHASE", "METRIC", "METRIC PHASE", "LAST VALUE")
VALUE_WIDTH = 40


@dataclass(frozen=True)
class MetricView:
    """One metric of a run: its phase, its last measured value and what the controller said."""

    name: str
    phase: str
    value: str = ""
    message: str = ""


@dataclass(frozen=True)
class AnalysisRunView:
    """One AnalysisRun of the rollout."""

    name: str
    stage: str
    cluster: str
    phase: str
    message: str = ""
    metrics: tuple[MetricView, ...] = ()


def run_selector(ps_name: str, rollout_id: str) -> str:
    """The label selector of the rollout's AnalysisRuns (the labels `run_labels` gives them)."""
    return f"{NAME_LABEL}={label_value(ps_name)},{ROLLOUT_ID_LABEL}={rollout_id}"


def _last_value(result: Mapping[str, Any]) -> str:
    measurements = result.get("measurements") or []
    value = (measurements[-1] or {}).get("value") if measurements else None
    return "" if value in (None, "") else str(value)


def analysis_run_view(obj: Mapping[str, Any]) -> AnalysisRunView:
    """The view of one AnalysisRun object (a run the controller has not seen yet is Pending)."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    status = obj.get("status") or {}
    metrics = tuple(
        MetricView(
            name=str(result.get("name", "?")),
            phase=str(result.get("phase") or "Pending"),
            value=_last_value(result),
            message=str(result.get("message") or ""),
        )
        for result in status.get("metricResults") or []
    )
    if not metrics:  # before the first measurement: the metrics the run will measure
        metrics = tuple(
            MetricView(name=str(metric.get("name", "?")), phase="Pending")
            for metric in (obj.get("spec") or {}).get("metrics") or []
        )
    return AnalysisRunView(
        name=str(meta.get("name", "")),
        stage=str(annotations.get(STAGE_ANNOTATION, "")),
        cluster=str(annotations.get(CLUSTER_ANNOTATION, "")),
        phase=str(status.get("phase") or "Pending"),
        message=str(status.get("message") or ""),
        metrics=metrics,
    )


def analysis_run_views(
    objs: Iterable[Mapping[str, Any]], stage_order: Sequence[str]
) -> tuple[AnalysisRunView, ...]:
    """The views of the runs: stage by stage (in `stage_order`, then others by name), then by cluster."""
    views = [analysis_run_view(obj) for obj in objs]
    position = {name: index for index, name in enumerate(stage_order)}
    return tuple(
        sorted(
            views, key=lambda run: (position.get(run.stage, len(position)), run.stage, run.cluster, run.name)
        )
    )


def _short(text: str) -> str:
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 1] + "…"


def run_rows(runs: Sequence[AnalysisRunView]) -> list[tuple[str, ...]]:
    """One row per metric of each run under `RUN_COLUMNS` (a run without metrics: one row)."""
    rows: list[tuple[str, ...]] = []
    for run in runs:
        first = (run.stage or "-", run.cluster or "-", run.name, run.phase)
        for metric in run.metrics or (MetricView("-", "-"),):
            rows.append((*first, metric.name, metric.phase, _short(metric.value) or "-"))
    return rows


def runs_data(runs: Sequence[AnalysisRunView]) -> list[dict[str, Any]]:
    """The `analysisRuns` list of `status -o json|yaml`."""
    return [
        {
            "name": run.name,
            "stage": run.stage,
            "cluster": run.cluster or None,
            "phase": run.phase,
            "message": run.message,
            "metrics": [
                {"name": m.name, "phase": m.phase, "lastValue": m.value or None, "message": m.message}
                for m in run.metrics
            ],
        }
        for run in runs
    ]
