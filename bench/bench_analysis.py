"""Benchmark: what an analysis gate adds to a stage, on the real Argo Rollouts analysis controller
(run by `make bench`).

One real control plane (etcd + kube-apiserver from KUBEBUILDER_ASSETS) with Argo Rollouts' analysis
CRDs, the real analysis controller (`rollouts-controller --controllers=analysis`), a real
Prometheus scraping the metrics endpoint every second (`orchestrator.devenv.analysis_stack`). Each
run is the AnalysisRun the `analyze` step creates for one cluster (`build_analysis_run` over the
demo's `error-rate` template: a Prometheus error-rate query, `successCondition` < 5 %,
`consecutiveErrorLimit: 0`), created, then followed the way the step follows it
(`orchestrator.kube.follow.follow_objects`: list, then watch) until it ends:

- *created -> first measurement*: the create call -> the first snapshot with a measurement in
  `status.metricResults` (the controller picked the run up and asked Prometheus once);
- *first measurement -> phase*: -> the first snapshot with a final phase (Successful / Failed);
- *created -> phase seen*: the sum, what the gate costs the stage as the step sees it;
  **ratio** = that / (the metric's interval x count), the analysis' own length. A good cluster
  needs all `count` measurements (the last at (count - 1) x interval), a bad one fails at its first.

Good and bad clusters alternate; each configuration (`--config INTERVAL:COUNT`, repeatable) runs
`--runs` of each. Prints the figures and exits 0 whatever they are: timings on a shared machine are
reports, not verdicts.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.analysis.run import ArgContext, FetchedTemplate, build_analysis_run, duration_seconds
from orchestrator.api.analysis import AnalysisSpec, resolve_analysis
from orchestrator.devenv.analysis_stack import AnalysisStack
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.devenv.demo_analysis import BAD_ERROR_RATE, analysis_block, error_rate_template
from orchestrator.kube.client import ANALYSIS_RUNS, ANALYSIS_TEMPLATES, NAMESPACES, Kube
from orchestrator.kube.follow import follow_objects

NAMESPACE = "bench"
FINAL = {"Successful", "Failed", "Error", "Inconclusive"}


@dataclass(frozen=True)
class Timing:
    """One run: the seconds from its creation to its first measurement and to its final phase."""

    bad: bool
    phase: str
    first_measurement: float
    final: float


def run_once(kube: Kube, template: dict[str, Any], cluster: str, *, bad: bool, index: int) -> Timing:
    """Create one cluster's AnalysisRun as the `analyze` step does and time it until it ends."""
    stage_analysis = resolve_analysis(AnalysisSpec.model_validate(analysis_block()), None)
    assert stage_analysis is not None
    run = build_analysis_run(
        ps_name="bench",
        ps_uid="00000000-0000-0000-0000-000000000000",
        namespace=NAMESPACE,
        rollout_id=f"r{index:04d}",
        analysis=stage_analysis,
        templates=[FetchedTemplate(template["metadata"]["name"], False, template)],
        context=ArgContext(stage="canary", cluster=cluster),
    )
    run["metadata"].pop("ownerReferences", None)  # no ProgressiveSync here to own it
    started = time.monotonic()
    kube.create(ANALYSIS_RUNS, NAMESPACE, run)
    name = run["metadata"]["name"]
    first = math.nan
    deadline = started + 120
    snapshots = follow_objects(
        kube,
        ANALYSIS_RUNS,
        NAMESPACE,
        [name],
        window_seconds=lambda: max(1, math.ceil(deadline - time.monotonic())),
    )
    try:
        for snapshot in snapshots:
            status = (snapshot.objects.get(name) or {}).get("status") or {}
            now = time.monotonic() - started
            results = status.get("metricResults") or []
            if math.isnan(first) and any(r.get("measurements") for r in results):
                first = now
            if status.get("phase") in FINAL:
                return Timing(bad, str(status["phase"]), first if not math.isnan(first) else now, now)
            if time.monotonic() >= deadline:
                break
    finally:
        snapshots.close()
    raise SystemExit(f"AnalysisRun {name} did not end within 120 s")


def report(label: str, timings: list[Timing], own: float) -> None:
    """Median and worst of each figure, and the ratio over the analysis' own length."""

    def fig(values: list[float]) -> str:
        return f"median {statistics.median(values):5.2f} s, max {max(values):5.2f} s"

    total = [t.final for t in timings]
    phases = ", ".join(sorted({t.phase for t in timings}))
    print(f"  {label} ({len(timings)} runs, {phases}):")
    print(f"    created -> first measurement:  {fig([t.first_measurement for t in timings])}")
    print(f"    first measurement -> phase:    {fig([t.final - t.first_measurement for t in timings])}")
    print(f"    created -> phase seen:         {fig(total)}")
    print(
        f"    ratio over interval x count ({own:g} s): median {statistics.median(total) / own:.2f}, "
        f"max {max(total) / own:.2f}"
    )


def main() -> None:
    """Start the stack, run each configuration, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", help="INTERVAL:COUNT (default 1s:3 and 2s:3)")
    parser.add_argument("--runs", type=int, default=5, help="good and bad runs per configuration each")
    args = parser.parse_args()
    configs = [tuple(c.split(":")) for c in args.config or ["1s:3", "2s:3"]]
    clusters = [f"bench-{i}" for i in range(2 * args.runs * len(configs))]
    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as workdir:
        started = time.monotonic()
        cluster = DevCluster.start(None, workdir=Path(workdir))
        try:
            kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
            kube.create(
                NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            )
            # Applies the analysis CRDs first; returns once Prometheus answers the first cluster's query.
            analysis = AnalysisStack.start(cluster, folder=Path(workdir) / "analysis", clusters=clusters)
            try:
                print(
                    f"control plane + analysis CRDs + analysis stack up in {time.monotonic() - started:.1f} s"
                )
                for name in clusters[1::2]:
                    analysis.endpoint.set_error_rate(name, BAD_ERROR_RATE)
                time.sleep(5)  # the bad clusters' rate() windows (3 s) wholly after the change
                pool = iter(clusters)
                for index, (interval, count) in enumerate(configs):
                    template = error_rate_template(NAMESPACE, analysis.prometheus_url)
                    template["metadata"]["name"] = f"error-rate-{index}"
                    metric = template["spec"]["metrics"][0]
                    metric["interval"], metric["count"] = interval, int(count)
                    kube.create(ANALYSIS_TEMPLATES, NAMESPACE, template)
                    own = duration_seconds(interval) * int(count)
                    timings = [
                        run_once(
                            kube,
                            template,
                            next(pool),
                            bad=bool(i % 2),
                            index=index * 1000 + i,
                        )
                        for i in range(2 * args.runs)
                    ]
                    print(f"interval {interval} x count {count}:")
                    report("good clusters", [t for t in timings if not t.bad], own)
                    report("bad clusters", [t for t in timings if t.bad], own)
            finally:
                analysis.stop()
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
