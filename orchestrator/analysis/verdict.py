"""What an AnalysisRun's status says about the stage: `assess_analysis_run(run) -> AnalysisVerdict`.

The Argo Rollouts controller measures and decides the run's phase (Pending, Running, Successful,
Failed, Error, Inconclusive); we never evaluate a metric ourselves. This reads that decision and
puts it in words a person can act on: a Failed run names the metric that failed, its last
measured value and the condition it was held to (from the run's own `spec.metrics`), an Error run
the metric that could not be measured and the provider's message, an Inconclusive one the metrics
no condition decided.

`metric_lines` summarizes every metric (phase, last value) for the stage status and logs.

Pure: dicts in, values out. Caller: steps/analyze.py; tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.api.reasons import Reason

VALUE_MAX_CHARS = 120


class RunPhase(StrEnum):
    """An AnalysisRun's `status.phase` (Argo Rollouts' AnalysisPhase)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCESSFUL = "Successful"
    FAILED = "Failed"
    ERROR = "Error"
    INCONCLUSIVE = "Inconclusive"


FINAL_PHASES = frozenset({RunPhase.SUCCESSFUL, RunPhase.FAILED, RunPhase.ERROR, RunPhase.INCONCLUSIVE})


class Outcome(StrEnum):
    """What the run means for the stage."""

    RUNNING = "Running"
    PASSED = "Passed"
    FAILED = "Failed"
    ERROR = "Error"
    INCONCLUSIVE = "Inconclusive"


@dataclass(frozen=True)
class AnalysisVerdict:
    """The run's outcome, its phase as the controller wrote it, the catalog reason and the words."""

    outcome: Outcome
    phase: str
    message: str
    reason: Reason | None = None

    @property
    def final(self) -> bool:
        """True once the controller ended the run."""
        return self.outcome is not Outcome.RUNNING


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= VALUE_MAX_CHARS else text[: VALUE_MAX_CHARS - 1] + "\u2026"


def _results(run: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((run.get("status") or {}).get("metricResults") or [])


def _metric_spec(run: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for metric in (run.get("spec") or {}).get("metrics") or []:
        if metric.get("name") == name:
            return metric  # type: ignore[no-any-return]
    return {}


def _last(result: Mapping[str, Any]) -> Mapping[str, Any]:
    measurements = result.get("measurements") or []
    return measurements[-1] if measurements else {}


def _condition(metric: Mapping[str, Any]) -> str:
    """The metric's conditions as written in its spec: what its values were held to."""
    parts = []
    if metric.get("failureCondition"):
        parts.append(f"failureCondition {metric['failureCondition']}")
    if metric.get("successCondition"):
        parts.append(f"successCondition {metric['successCondition']}")
    limit = metric.get("failureLimit")
    if limit is not None:
        parts.append(f"failureLimit {limit}")
    return ", ".join(parts) or "no condition in its spec"


def _failed_metric(run: Mapping[str, Any], result: Mapping[str, Any]) -> str:
    name = str(result.get("name", "?"))
    last = _last(result)
    value = last.get("value")
    tally = f"{result.get('failed', 0)} of {result.get('count', 0)} measurements failed"
    shown = _short(value) if value not in (None, "") else "(no value)"
    return f"metric {name} = {shown} ({_condition(_metric_spec(run, name))}; {tally})"


def _errored_metric(result: Mapping[str, Any]) -> str:
    name = str(result.get("name", "?"))
    message = result.get("message") or _last(result).get("message") or "no message"
    return f"metric {name} could not be measured: {_short(message)} ({result.get('error', 0)} error(s))"


def _named(results: Sequence[Mapping[str, Any]], phase: RunPhase) -> list[Mapping[str, Any]]:
    return [result for result in results if result.get("phase") == phase.value]


def assess_analysis_run(run: Mapping[str, Any]) -> AnalysisVerdict:
    """The verdict of the run as its status stands (see the module)."""
    status = run.get("status") or {}
    phase = str(status.get("phase") or "")
    name = str((run.get("metadata") or {}).get("name", "?"))
    results = _results(run)
    said = str(status.get("message") or "")
    if phase not in {p.value for p in FINAL_PHASES}:
        shown = phase or "Pending"
        return AnalysisVerdict(Outcome.RUNNING, shown, f"analysis {name} {shown}")
    if phase == RunPhase.SUCCESSFUL:
        return AnalysisVerdict(Outcome.PASSED, phase, f"analysis {name} Successful")
    if phase == RunPhase.FAILED:
        failed = _named(results, RunPhase.FAILED)
        if failed:
            details = "; ".join(_failed_metric(run, result) for result in failed)
        else:
            details = said or "no metric result says which metric"
        return AnalysisVerdict(
            Outcome.FAILED, phase, f"analysis {name} failed: {details}", Reason.ANALYSIS_FAILED
        )
    if phase == RunPhase.ERROR:
        errored = _named(results, RunPhase.ERROR)
        details = "; ".join(_errored_metric(result) for result in errored) or said or "no message"
        return AnalysisVerdict(
            Outcome.ERROR,
            phase,
            f"analysis {name} ended Error (the gate never passes on an error): {details}",
            Reason.ANALYSIS_ERROR,
        )
    undecided = _named(results, RunPhase.INCONCLUSIVE)
    details = "; ".join(
        f"metric {r.get('name', '?')} = {_short(_last(r).get('value', '(no value)'))} "
        f"({_condition(_metric_spec(run, str(r.get('name', ''))))})"
        for r in undecided
    )
    return AnalysisVerdict(
        Outcome.INCONCLUSIVE,
        phase,
        f"analysis {name} Inconclusive: {details or said or 'no condition decided'}",
        Reason.ANALYSIS_INCONCLUSIVE,
    )


def metric_lines(run: Mapping[str, Any]) -> list[str]:
    """One line per metric: `name Phase (last value)`, in the run's order."""
    lines = []
    for result in _results(run):
        value = _last(result).get("value")
        shown = f" ({_short(value)})" if value not in (None, "") else ""
        lines.append(f"{result.get('name', '?')} {result.get('phase', 'Pending')}{shown}")
    return lines
