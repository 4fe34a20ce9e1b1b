"""The demo's analysis gate: each cluster's error rate, asked of a real Prometheus by the real
Argo Rollouts analysis controller, before the rollout goes on.

With `demo --analysis` (or `--bad-metrics CLUSTER`, which implies it) the demo's ProgressiveSync
gets a `spec.analysis` block (`analysis_block`): the AnalysisTemplate `error-rate`
(`error_rate_template`, which the demo applies) runs once per cluster (`perCluster: true`) after
the cluster is Synced + Healthy, on the canary and on each wave, its `cluster` argument the
cluster's name (`valueFrom: {clusterName: true}`). Its one metric asks Prometheus for the share of
5xx responses of that cluster over the last 3 s, every second, 3 times, and passes only below 5 %
(`successCondition` alone, no `failureCondition`: a value between two conditions would be
Inconclusive). `consecutiveErrorLimit: 0`: a measurement that cannot be made ends the run Error at
once, instead of Argo Rollouts' 10 s retries (docs/analysis.md, "Traps").

`start_analysis` starts what answers the gate (`orchestrator.devenv.analysis_stack`: the metrics
endpoint serving every demo cluster, a real Prometheus scraping it, the analysis controller with
its CRDs), makes the bad cluster serve `BAD_ERROR_RATE` errors (Argo CD, the simulator, still says
Healthy) and applies the template. `failed_metrics` reads, after the rollout, which metric of
which run failed, with its last value and condition, for the demo's closing explanation
(`explain_failed_metrics`).

Caller: `orchestrator.devenv.demo`.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis.run import CLUSTER_LABEL
from orchestrator.api.metadata import NAME_LABEL, label_value
from orchestrator.devenv.analysis_stack import AnalysisStack
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.devenv.metrics_endpoint import error_rate_query
from orchestrator.kube.client import ANALYSIS_RUNS, ANALYSIS_TEMPLATES, Kube

TEMPLATE_NAME = "error-rate"
METRIC_NAME = "error-rate"
SUCCESS_BELOW = 0.05
# What the bad cluster serves: Healthy in Argo CD, a third of its requests failing.
BAD_ERROR_RATE = 0.35
MEASUREMENTS = 3
INTERVAL = "1s"


def analysis_block() -> dict[str, Any]:
    """The demo's `spec.analysis`: the error-rate template once per cluster, after it is Healthy."""
    return {
        "templates": [{"name": TEMPLATE_NAME}],
        "args": [{"name": "cluster", "valueFrom": {"clusterName": True}}],
        "perCluster": True,
    }


def error_rate_template(namespace: str, prometheus_url: str) -> dict[str, Any]:
    """The AnalysisTemplate the demo applies: the cluster's 5xx share, below 5 %, 3 times 1 s apart."""
    return {
        "apiVersion": ANALYSIS_TEMPLATES.api_version,
        "kind": ANALYSIS_TEMPLATES.kind,
        "metadata": {"name": TEMPLATE_NAME, "namespace": namespace},
        "spec": {
            "args": [{"name": "cluster"}],
            "metrics": [
                {
                    "name": METRIC_NAME,
                    "interval": INTERVAL,
                    "count": MEASUREMENTS,
                    "successCondition": f"result[0] < {SUCCESS_BELOW}",
                    "consecutiveErrorLimit": 0,
                    "provider": {
                        "prometheus": {
                            "address": prometheus_url,
                            "query": error_rate_query("{{args.cluster}}"),
                        }
                    },
                }
            ],
        },
    }


def start_analysis(
    stack: contextlib.ExitStack, cluster: DevCluster, clusters: Sequence[str], write: Callable[[str], None]
) -> AnalysisStack:
    """Start the analysis stack on `cluster` (stopped by `stack`; its CRDs already applied)."""
    write("Starting Prometheus, a metrics endpoint per cluster, the Argo Rollouts analysis controller...\n")
    analysis = AnalysisStack.start(
        cluster, folder=cluster.workdir / "analysis", clusters=tuple(clusters), apply_crds=False
    )
    stack.callback(analysis.stop)
    return analysis


def prepare_gate(analysis: AnalysisStack, kube: Kube, *, namespace: str, bad_cluster: str | None) -> None:
    """Make `bad_cluster` serve `BAD_ERROR_RATE` errors and apply the AnalysisTemplate."""
    if bad_cluster:
        analysis.endpoint.set_error_rate(bad_cluster, BAD_ERROR_RATE)
    kube.create(ANALYSIS_TEMPLATES, namespace, error_rate_template(namespace, analysis.prometheus_url))


def wait_until_bad(analysis: AnalysisStack, cluster: str, *, timeout: float = 30.0) -> float:
    """Wait until Prometheus answers the bad cluster's whole error rate (its `rate()` window after
    the change); the rate it answers."""
    assert analysis.prometheus is not None
    deadline = time.monotonic() + timeout
    query = error_rate_query(cluster)
    while True:
        answers = analysis.prometheus.query(query)
        rate = answers[0][1] if answers else 0.0
        if rate >= BAD_ERROR_RATE * 0.95 or time.monotonic() >= deadline:
            return rate
        time.sleep(0.25)


def describe(bad_cluster: str | None) -> list[str]:
    """What the gate does, for the demo's opening lines."""
    lines = [
        f"Analysis gate on every cluster of every stage: AnalysisTemplate {TEMPLATE_NAME} "
        f"(Prometheus: the cluster's 5xx share < {SUCCESS_BELOW:g}, {MEASUREMENTS} times {INTERVAL} apart)."
    ]
    if bad_cluster:
        lines.append(
            f"{bad_cluster} will be Healthy in Argo CD but serve {BAD_ERROR_RATE:.0%} errors: "
            "its gate must stop the rollout."
        )
    return lines


# --- after the rollout: which metric failed ------------------------------------------------------


@dataclass(frozen=True)
class FailedMetric:
    """A metric that failed (or could not be measured) in one of the rollout's AnalysisRuns."""

    run: str
    cluster: str
    metric: str
    phase: str
    value: str
    condition: str
    message: str = ""


def _value(raw: Any) -> str:
    """A Prometheus vector's first sample ("[0.35]" -> "0.35"), else the value as written."""
    with contextlib.suppress(ValueError, TypeError, IndexError, KeyError):
        parsed = json.loads(str(raw))
        if isinstance(parsed, list) and parsed:
            return f"{float(parsed[0]):.3g}"
    return str(raw) if raw not in (None, "") else "(no value)"


def failed_metrics(runs: Sequence[Mapping[str, Any]]) -> list[FailedMetric]:
    """The metrics that failed or errored in `runs`, in the runs' order (pure)."""
    found = []
    for run in runs:
        metadata = run.get("metadata") or {}
        specs = {m.get("name"): m for m in (run.get("spec") or {}).get("metrics") or []}
        for result in (run.get("status") or {}).get("metricResults") or []:
            if result.get("phase") not in ("Failed", "Error"):
                continue
            spec = specs.get(result.get("name"), {})
            measurements = result.get("measurements") or [{}]
            keys = ("successCondition", "failureCondition")
            conditions = [f"{key} {spec[key]}" for key in keys if spec.get(key)]
            found.append(
                FailedMetric(
                    run=str(metadata.get("name", "?")),
                    cluster=str((metadata.get("labels") or {}).get(CLUSTER_LABEL, "")),
                    metric=str(result.get("name", "?")),
                    phase=str(result["phase"]),
                    value=_value(measurements[-1].get("value")),
                    condition=", ".join(conditions) or "no condition",
                    message=str(result.get("message") or measurements[-1].get("message") or ""),
                )
            )
    return found


def read_failed_metrics(kube: Kube, namespace: str, name: str) -> list[FailedMetric]:
    """The failed metrics of the ProgressiveSync `name`'s AnalysisRuns."""
    runs, _ = kube.list(ANALYSIS_RUNS, namespace, label_selector=f"{NAME_LABEL}={label_value(name)}")
    return failed_metrics(runs)


def explain_failed_metrics(failed: Sequence[FailedMetric], *, namespace: str, name: str) -> list[str]:
    """What the demo says about the failed gates: the metric, its value, its condition, what to do."""
    if not failed:
        return []
    lines = []
    for one in failed:
        where = f" on {one.cluster}" if one.cluster else ""
        if one.phase == "Error":
            lines.append(
                f"Analysis gate{where}: metric {one.metric!r} could not be measured ({one.message}); "
                "a gate that cannot measure never passes."
            )
            continue
        lines.append(
            f"Analysis gate{where}: metric {one.metric!r} measured {one.value}, "
            f"which fails its {one.condition} (AnalysisRun {one.run})."
        )
    lines.append(
        "Argo CD says Healthy, but the service's own metrics say the release is bad, so no further "
        "cluster got it. Look at the measurements "
        f"(`kubectl get analysisrun -n {namespace} -l {NAME_LABEL}={label_value(name)} -o yaml`), "
        "fix the release and push a new revision; or, if the metric or its threshold is wrong, fix "
        f"the AnalysisTemplate and run `progressive-sync retry {name} -n {namespace}`."
    )
    return lines
